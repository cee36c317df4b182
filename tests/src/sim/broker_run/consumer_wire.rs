//! The consumer connections' wire: frames leaving the broker checked (strict framing, early
//! delivery, acked messages sent again unmarked) and delivered after the network delay, ACK
//! responses, client to broker bytes, and the client model's commands encoded as Pulsar frames.

use broker::stepped::Closed;
use client::{Command, MessageId};
use cursor::Position;
use wire::proto::{base_command::Type, MessageIdData};

use super::frames::{frames_of, incoming, key_of};
use super::model::Holder;
use super::{CState, Run, T0, TOPIC};
use crate::sim::check::{key_str, ViolationKind};

impl Run {
    /// Takes every connection's frames (a crashed one's are lost, but what they gave it is
    /// pending on it all the same).
    pub(super) fn poll_all(&mut self) {
        let mut lost = Vec::new();
        for (_, name, conn) in &mut self.dying {
            while let Some(buf) = conn.poll_transmit() {
                lost.push(((name.clone(), conn.id()), buf));
            }
        }
        for (holder, buf) in lost {
            for f in frames_of(&buf).unwrap_or_default() {
                if f.command.r#type() == Type::Message {
                    self.model_sent(&holder, &f);
                }
            }
        }
        let names: Vec<String> = self
            .cons
            .iter()
            .filter(|(_, c)| c.conn.is_some())
            .map(|(n, _)| n.clone())
            .collect();
        for n in names {
            self.poll_one(&n);
        }
    }

    pub(super) fn poll_one(&mut self, name: &str) {
        let mut bufs = Vec::new();
        if let Some(conn) = self.cons.get_mut(name).and_then(|c| c.conn.as_mut()) {
            while let Some(b) = conn.poll_transmit() {
                bufs.push(b);
            }
        }
        let mut sent = String::new();
        for buf in bufs {
            match frames_of(&buf) {
                Ok(fs) => fs
                    .into_iter()
                    .for_each(|f| self.on_frame(name, f, &mut sent)),
                Err(e) => self.simple(
                    ViolationKind::Model,
                    format!("unreadable frame to {name}: {e}"),
                ),
            }
        }
        if !sent.is_empty() {
            self.log(format!("send {name}:{sent}"));
        }
    }

    /// One frame as it leaves the broker: checked, and sent on to the client if it needs it.
    pub(super) fn on_frame(&mut self, name: &str, f: wire::Frame, sent: &mut String) {
        match f.command.r#type() {
            Type::Message if self.check_message(name, &f, sent) => {}
            Type::AckResponse => return self.ack_response(name, &f),
            Type::Ping => {
                let mut pong = Vec::new();
                wire::encode_command(&wire::commands::pong(), &mut pong);
                return self.push_up(name, pong, false);
            }
            Type::Error => {
                let d = format!("the broker answered {name} with {:?}", f.command.error);
                return self.simple(ViolationKind::Model, d);
            }
            Type::CloseConsumer => return self.log(format!("broker closes {name}'s consumer")),
            _ => return,
        }
        let at = self.now + self.net();
        if let Some(c) = self.cons.get_mut(name) {
            c.down_last = at.max(c.down_last);
            c.down.push_back((c.down_last, f));
        }
    }

    /// A MESSAGE as the broker sends it: not before its deliver-at time, and no message whose
    /// ack the broker accepted unless its `ack_set` marks it acked.
    pub(super) fn check_message(&mut self, name: &str, f: &wire::Frame, sent: &mut String) -> bool {
        let (Some(m), Some(p)) = (f.command.message.as_ref(), f.payload.as_ref()) else {
            self.simple(
                ViolationKind::Model,
                format!("a MESSAGE to {name} without its payload"),
            );
            return false;
        };
        let pos = Position::new(m.message_id.ledger_id, m.message_id.entry_id);
        let md = &p.metadata;
        let key = key_of(md).map(|k| key_str(&k));
        sent.push_str(&format!(" {pos}({})", key.as_deref().unwrap_or("-")));
        if let Some(id) = self
            .cons
            .get(name)
            .and_then(|c| c.conn.as_ref())
            .map(|c| c.id())
        {
            if !self.model_sent(&(name.to_string(), id), f) {
                return false;
            }
        }
        self.nacked_by.remove(&pos);
        let early = md
            .deliver_at_time
            .map(|t| t as u64)
            .filter(|t| *t > T0 + self.now);
        if let Some(at) = early {
            let d = format!(
                "{pos} sent to {name} {} ms before its deliver-at time {}",
                at - T0 - self.now,
                at - T0
            );
            self.violate(
                ViolationKind::Early,
                key,
                vec![pos.to_string()],
                vec![name.into()],
                d,
            );
            return false;
        }
        let n = md.num_messages_in_batch.unwrap_or(1).max(1) as u32;
        let marked = if m.ack_set.is_empty() {
            Vec::new()
        } else {
            wire::convert::acked_indexes_from_ack_set(&m.ack_set, n)
        };
        let acked = |i: &u32| {
            self.broker_acked.contains(&(pos, None))
                || (n > 1 && self.broker_acked.contains(&(pos, Some(*i))) && !marked.contains(i))
        };
        let unmarked: Vec<u32> = (0..n).filter(acked).collect();
        if unmarked.is_empty() {
            return true;
        }
        let d = format!("{pos} sent to {name} with acked message(s) {unmarked:?} not marked acked: the application would process them again");
        self.violate(
            ViolationKind::AckedRedelivered,
            key,
            vec![pos.to_string()],
            vec![name.into()],
            d,
        );
        false
    }

    /// A MESSAGE (to `h`) in the model; `false` (a violation) if its entry was still held.
    fn model_sent(&mut self, h: &Holder, f: &wire::Frame) -> bool {
        let (Some(m), Some(p)) = (f.command.message.as_ref(), f.payload.as_ref()) else {
            return true;
        };
        let pos = Position::new(m.message_id.ledger_id, m.message_id.entry_id);
        let md = &p.metadata;
        let n = md.num_messages_in_batch.unwrap_or(1).max(1) as u32;
        let chunk = md.uuid.as_deref().map(|u| {
            let id = md.chunk_id.unwrap_or(0) as u32;
            (u, id, md.num_chunks_from_msg.unwrap_or(1) as u32)
        });
        let Err(other) = self.model.sent(h, pos, n, chunk) else {
            return true;
        };
        let d = format!(
            "{pos} sent to {} (connection {}) while still pending on {} (connection {})",
            h.0, h.1, other.0, other.1
        );
        let key = key_of(md).map(|k| key_str(&k));
        self.violate(
            ViolationKind::Model,
            key,
            vec![pos.to_string()],
            vec![other.0, h.0.clone()],
            d,
        );
        false
    }

    /// An ACK_RESPONSE: a success makes its acks accepted.
    pub(super) fn ack_response(&mut self, name: &str, f: &wire::Frame) {
        let Some(r) = f.command.ack_response.as_ref() else {
            return;
        };
        let ids = self
            .cons
            .get_mut(name)
            .and_then(|c| c.acks.remove(&r.request_id?))
            .unwrap_or_default();
        if let Some(e) = r.error {
            let m = r.message.clone().unwrap_or_default();
            return self.log(format!("broker: ack from {name} refused: {e} {m}"));
        }
        for (p, i) in ids {
            let newly = self.broker_acked.insert((p, i));
            // Batch-index acks complete an entry, from whichever consumers they came.
            let n = self.batches.get(&p).copied().unwrap_or(1);
            let complete = i.is_none() || (0..n).all(|j| self.broker_acked.contains(&(p, Some(j))));
            // An index ack counts only on an open entry: not acked before, and not passed by
            // the mark-delete (an entry neither acked nor dropped is above it).
            let passed = self.dropped.contains(&p)
                && self.b.mark_delete(TOPIC, "sim").is_some_and(|md| md >= p);
            let open = !self.acked.contains(&p) && !passed;
            if complete {
                self.broker_acked.insert((p, None));
                if self.acked.insert(p) {
                    self.last_progress = self.now;
                }
            }
            match i {
                None => self.model.acked(p),
                Some(_) if open && complete => self.model.acked(p),
                Some(_) if open && newly => self.model.index_acked(p),
                Some(_) => {}
            }
        }
    }

    /// Client → broker bytes due now; a CLOSE_CONSUMER ends the connection after its reply.
    pub(super) fn deliver_up(&mut self) {
        let names: Vec<String> = self.cons.keys().cloned().collect();
        for name in names {
            loop {
                let now = self.now;
                let Some(c) = self.cons.get_mut(&name) else {
                    break;
                };
                let Some(conn) = c.conn.as_mut() else { break };
                if c.up.front().is_none_or(|u| u.at > now) {
                    break;
                }
                let Some(up) = c.up.pop_front() else {
                    break;
                };
                let holder = (name.clone(), conn.id());
                if up.returns.is_empty() {
                    let r = conn.handle_bytes(&up.bytes);
                    self.after_up(&name, &holder, r, up.close);
                    continue;
                }
                // A return is handled alone: the dispatcher first handles what came before
                // it, then the return, and what it sends leaves before the next command is
                // read. So the model knows which send a return takes back, and no MESSAGE is
                // judged against an ack read after it was sent.
                while self.b.step() {}
                self.poll_all();
                let Some(conn) = self.cons.get_mut(&name).and_then(|c| c.conn.as_mut()) else {
                    break;
                };
                let r = conn.handle_bytes(&up.bytes);
                let returns = self.whole_messages(up.returns);
                self.model.returned(&holder, &returns);
                while self.b.step() {}
                self.poll_all();
                self.after_up(&name, &holder, r, up.close);
            }
        }
    }

    /// After the broker read `name`'s bytes: its replies; a CLOSE_CONSUMER ends the connection
    /// (the caller's loop then stops at the missing connection).
    fn after_up(&mut self, name: &str, holder: &Holder, r: Result<(), Closed>, close: bool) {
        self.poll_one(name);
        if let Err(e) = r {
            self.simple(
                ViolationKind::Model,
                format!("the broker closed {name}'s connection: {e:?}"),
            );
        }
        if close {
            self.model.gone(holder);
            if let Some(c) = self.cons.get_mut(name) {
                c.conn = None;
                c.state = CState::Gone;
                c.up.clear();
                c.down.clear();
            }
            self.log(format!("{name} closed"));
        }
    }

    /// Broker → client frames due now, client timers, applications finishing and starting.
    pub(super) fn deliver_down(&mut self) {
        let names: Vec<String> = self.cons.keys().cloned().collect();
        for name in names {
            let now = self.now;
            let mut errors = Vec::new();
            let (done, nack) = {
                let Some(c) = self.cons.get_mut(&name) else {
                    continue;
                };
                if c.conn.is_none() {
                    continue;
                }
                while c.down.front().is_some_and(|d| d.0 <= now) {
                    let Some((_, f)) = c.down.pop_front() else {
                        break;
                    };
                    match incoming(c.epoch, &f) {
                        Ok(ms) => {
                            for m in ms {
                                if let Some(b) = m.batch {
                                    c.sizes.insert(
                                        Position::new(m.id.ledger_id, m.id.entry_id),
                                        b.size,
                                    );
                                }
                                if let Err(e) = c.client.on_message(now, m) {
                                    errors.push((false, format!("message refused: {e}")));
                                }
                            }
                        }
                        Err(e) => errors.push((true, e)),
                    }
                }
                if c.client.next_timer().is_some_and(|t| t <= now) {
                    c.client.on_timer(now);
                }
                let done = c.busy.and_then(|b| b.done_at).is_some_and(|t| t <= now);
                (done, c.opts.nack)
            };
            for (bad, e) in errors {
                if bad {
                    self.simple(
                        ViolationKind::Model,
                        format!("{name} cannot read a MESSAGE: {e}"),
                    );
                } else {
                    self.log(format!("client {name}: {e}"));
                }
            }
            if done {
                let nack = self.rng_time.chance(nack);
                self.finish(&name, nack);
            }
            self.pump(&name);
            self.try_start(&name);
        }
    }

    /// The client's commands, encoded and on their way.
    pub(super) fn pump(&mut self, name: &str) {
        let mut cmds = Vec::new();
        if let Some(c) = self.cons.get_mut(name).filter(|c| c.conn.is_some()) {
            while let Some(cmd) = c.client.poll_command() {
                cmds.push(cmd);
            }
        }
        for cmd in cmds {
            let returns: Vec<Position> = match &cmd {
                Command::RedeliverUnacked(es)
                | Command::Release(es)
                | Command::Nack { entries: es, .. } => es
                    .iter()
                    .map(|e| Position::new(e.entry.ledger_id, e.entry.entry_id))
                    .collect(),
                Command::Flow(_) | Command::Ack(_) => Vec::new(),
            };
            let mut bytes = Vec::new();
            let line = self.encode(name, cmd, &mut bytes);
            self.log(format!("client {name}: {line}"));
            self.push_up_returning(name, bytes, false, returns);
        }
    }

    /// `ps` with each chunk standing for every chunk of its message, as the broker reads a
    /// REDELIVER or NEGATIVE_ACK (sorted, each once).
    fn whole_messages(&self, ps: Vec<Position>) -> Vec<Position> {
        let mut out = Vec::with_capacity(ps.len());
        for p in ps {
            match self.chunks.get(&p) {
                Some(u) => out.extend(self.chunks.iter().filter(|(_, v)| *v == u).map(|(q, _)| *q)),
                None => out.push(p),
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// One client command as Pulsar frames: FLOW, ACK (batch indexes with an `ack_set`, a
    /// request id), REDELIVER_UNACKNOWLEDGED_MESSAGES, PIP-493 NEGATIVE_ACK.
    pub(super) fn encode(&mut self, name: &str, cmd: Command, out: &mut Vec<u8>) -> String {
        let pos = |e: &client::RedeliverEntry| Position::new(e.entry.ledger_id, e.entry.entry_id);
        let ids = |es: &[client::RedeliverEntry]| -> Vec<MessageIdData> {
            es.iter()
                .map(|e| wire::convert::message_id(pos(e)))
                .collect()
        };
        let text = |es: &[client::RedeliverEntry]| {
            es.iter()
                .map(|e| e.entry.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        };
        let nack = |consumer_id, negative_acked, returned| wire::pip493::CommandNegativeAck {
            consumer_id,
            negative_acked,
            returned,
        };
        match cmd {
            Command::Flow(n) => {
                wire::encode_command(&wire::commands::flow(1, n), out);
                format!("flow {n}")
            }
            Command::Ack(ids) => self.encode_ack(name, &ids, out),
            Command::RedeliverUnacked(es) => {
                wire::encode_command(&wire::commands::redeliver_unacknowledged(1, ids(&es)), out);
                format!("redeliver [{}]", text(&es))
            }
            Command::Nack { entries, delay } => {
                for e in &entries {
                    self.nacked_by.insert(pos(e), name.to_string());
                }
                wire::pip493::encode_negative_ack(&nack(1, ids(&entries), Vec::new()), out);
                format!("nack [{}] delay={delay}", text(&entries))
            }
            Command::Release(es) => {
                wire::pip493::encode_negative_ack(&nack(1, Vec::new(), ids(&es)), out);
                format!("release [{}]", text(&es))
            }
        }
    }

    pub(super) fn encode_ack(
        &mut self,
        name: &str,
        ids: &[MessageId],
        out: &mut Vec<u8>,
    ) -> String {
        let Some(c) = self.cons.get_mut(name) else {
            return String::new();
        };
        let rid = c.next_rid;
        c.next_rid += 1;
        let mut wire_ids = Vec::new();
        let mut rec = Vec::new();
        for id in ids {
            let p = Position::new(id.ledger_id, id.entry_id);
            let mut w = wire::convert::message_id(p);
            match id.batch_index {
                Some(i) => {
                    let n = c.sizes.get(&p).copied().unwrap_or(i + 2).max(i + 1);
                    w.batch_index = Some(i as i32);
                    w.batch_size = Some(n as i32);
                    w.ack_set = wire::convert::ack_set_from_acked(&[i], n);
                }
                None => {
                    c.sizes.remove(&p);
                }
            }
            rec.push((p, id.batch_index));
            wire_ids.push(w);
        }
        c.acks.insert(rid, rec);
        let mut cmd = wire::commands::ack_ids(1, wire_ids);
        if let Some(a) = cmd.ack.as_mut() {
            a.request_id = Some(rid);
        }
        wire::encode_command(&cmd, out);
        let list: Vec<String> = ids.iter().map(MessageId::to_string).collect();
        format!("ack [{}]", list.join(" "))
    }
}
