//! The producer side of a broker run: one producer connection, SENDs with their metadata
//! (batch sections, chunks, deliver-at times), spread chunks sent later, the receipts that make
//! an entry published.

use cursor::Position;
use wire::proto::{base_command::Type, MessageMetadata};

use super::frames::{batch_body, frames_of, key_of, key_text};
use super::{Run, T0, TOPIC};
use crate::sim::check::ViolationKind;
use crate::sim::scenario::PublishSpec;

impl Run {
    pub(super) fn publish(&mut self, p: &PublishSpec) {
        for _ in 0..p.count {
            let seq = self.prod_seq.entry(p.producer).or_insert(0);
            *seq += 1;
            let mut m = MessageMetadata {
                producer_name: format!("producer-{}", p.producer),
                sequence_id: *seq,
                ordering_key: p.key.as_ref().map(|k| k.as_bytes().to_vec()),
                ..Default::default()
            };
            if p.chunks > 1 {
                m.uuid = Some(format!("producer-{}-{}", p.producer, m.sequence_id));
                m.num_chunks_from_msg = Some(p.chunks as i32);
                m.total_chunk_msg_size = Some(100 * p.chunks as i32);
                for i in 0..p.chunks {
                    let mut c = m.clone();
                    c.chunk_id = Some(i as i32);
                    if i == 0 || p.spread == 0 {
                        self.send(p.producer, c, 1);
                    } else {
                        let at = self.now + u64::from(i) * p.spread;
                        self.later_n += 1;
                        self.later.insert((at, self.later_n), (p.producer, c));
                    }
                }
            } else if p.delay > 0 {
                m.deliver_at_time = Some((T0 + self.now + p.delay) as i64);
                self.send(p.producer, m, 1);
            } else {
                if p.batch > 1 {
                    m.num_messages_in_batch = Some(p.batch as i32);
                }
                self.send(p.producer, m, p.batch.max(1));
            }
        }
    }

    pub(super) fn due_chunks(&mut self) {
        while let Some(e) = self.later.first_entry() {
            if e.key().0 > self.now {
                break;
            }
            let (producer, m) = e.remove();
            self.send(producer, m, 1);
        }
    }

    pub(super) fn connect_producer(&mut self) {
        let mut bytes = Vec::new();
        wire::encode_command(
            &wire::commands::connect("sim", broker::PROTOCOL_VERSION),
            &mut bytes,
        );
        if let Err(e) = self.producer.handle_bytes(&bytes) {
            self.simple(
                ViolationKind::Model,
                format!("the producer's CONNECT failed: {e:?}"),
            );
        }
        self.producer_frames();
    }

    /// One SEND (with PRODUCER first for a new producer) and its receipt. A message of a
    /// producer the broker closed waits until it is open again.
    pub(super) fn send(&mut self, producer: u32, mut m: MessageMetadata, n: u32) {
        m.publish_time = T0 + self.now;
        self.last_publish = self.now;
        let pid = u64::from(producer);
        if self.reopen.contains_key(&pid) {
            self.held_back.push_back((pid, m, n));
            return;
        }
        if self.cfg.store_faults && !self.producers_open.contains(&producer) {
            // The broker may refuse a new producer while the store refuses writes: open it
            // first, as a client does, and send once it is open (`reopen.rs`).
            self.held_back.push_back((pid, m, n));
            self.open_later(pid);
            return;
        }
        let mut bytes = Vec::new();
        if self.producers_open.insert(producer) {
            let cmd = wire::commands::producer(TOPIC, pid, pid + 1, Some(&m.producer_name));
            wire::encode_command(&cmd, &mut bytes);
        }
        let body = if n > 1 {
            batch_body(&m, n)
        } else {
            m.producer_name.clone().into_bytes()
        };
        let cmd = wire::commands::send(pid, m.sequence_id, n as i32);
        wire::encode_with_payload(&cmd, &m, &body, &mut bytes);
        self.unreceipted.push_back((pid, m, n));
        if let Err(e) = self.producer.handle_bytes(&bytes) {
            self.simple(
                ViolationKind::Model,
                format!("the producer's connection closed: {e:?}"),
            );
        }
        while self.write_due.len() < self.producer.held_writes() {
            let due = self.now + self.rng_time.range(1, 30);
            self.write_due.push(due);
        }
        self.producer_frames();
    }

    /// Completes the oldest held write once it is due, and so on (a ledger's adds complete in
    /// order, as BookKeeper's do: a later write that is due waits for the older one).
    pub(super) fn due_writes(&mut self) {
        if self.reads_fail_until.is_some_and(|t| t <= self.now) {
            self.reads_fail_until = None;
            self.b.store_faults().fail_reads(false);
            self.log("store: reads work again".into());
        }
        while self.write_due.first().is_some_and(|&due| due <= self.now) {
            self.write_due.remove(0);
            let faults = self.cfg.store_faults;
            let fail = faults && self.rng_time.range(0, 19) == 0;
            if fail {
                self.log("store: this write fails".into());
                self.b.store_faults().fail_writes(true);
            }
            let done = self.producer.complete_write(0);
            self.b.store_faults().fail_writes(false);
            // A failed write fails the held writes pushed before it failed too.
            let doomed = self.doomed > 0;
            self.doomed = self.doomed.saturating_sub(1);
            match done {
                Some(ok) if ok != (fail || doomed) => {}
                Some(false) => {
                    let d = "a write failed that the store did not refuse, and no earlier failure explains".to_string();
                    self.simple(ViolationKind::Loss, d);
                }
                _ => {
                    let d = format!("the oldest held write completed as {done:?}, fault {fail}");
                    self.simple(ViolationKind::Model, d);
                }
            }
            if fail && !doomed {
                self.doomed = self.producer.held_writes();
            }
            if faults && self.reads_fail_until.is_none() && self.rng_time.range(0, 49) == 0 {
                self.log("store: reads fail for 50 ms".into());
                self.b.store_faults().fail_reads(true);
                self.reads_fail_until = Some(self.now + 50);
            }
            self.closed_seen = false;
            self.producer_frames();
            if fail && !doomed && !std::mem::take(&mut self.closed_seen) {
                let d = "a write the store refused closed no producer: its SENDs had been receipted before it completed (lost)".to_string();
                self.simple(ViolationKind::Loss, d);
            }
        }
    }

    /// The producer on a new connection after a broker restart (its held writes, and the old
    /// connection, gone), then every message not receipted sent again, in order per producer.
    pub(super) fn reconnect_producer(&mut self) {
        self.write_due.clear();
        self.doomed = 0;
        self.reopen.clear();
        self.reopening.clear();
        self.reopened.clear();
        let mut resend = std::mem::take(&mut self.held_back);
        resend.extend(std::mem::take(&mut self.unreceipted));
        self.producer = self.b.connect("producer");
        self.producer.hold_writes(self.hold_writes);
        self.producers_open.clear();
        self.connect_producer();
        for (pid, m, n) in resend {
            self.send(pid as u32, m, n);
        }
    }

    /// A receipt: its entry is published.
    fn receipted(&mut self, r: &wire::proto::CommandSendReceipt) {
        let Some(id) = r.message_id.as_ref() else {
            return;
        };
        match self.unreceipted.pop_front() {
            Some((pid, m, n)) if (pid, m.sequence_id) == (r.producer_id, r.sequence_id) => {
                self.published_entry(Position::new(id.ledger_id, id.entry_id), &m, n);
            }
            other => {
                let d = format!(
                    "a receipt for {}:{} out of send order (expected {:?})",
                    r.producer_id,
                    r.sequence_id,
                    other.map(|o| (o.0, o.1.sequence_id))
                );
                self.simple(ViolationKind::Model, d);
            }
        }
    }

    /// The producer connection's frames, in order: receipts publish their entries, PINGs are
    /// answered, a CLOSE_PRODUCER and the answers to reopening PRODUCERs go to
    /// [`reopen`](super::reopen); any other error is a violation.
    pub(super) fn producer_frames(&mut self) {
        let mut out = Vec::new();
        while let Some(buf) = self.producer.poll_transmit() {
            match frames_of(&buf) {
                Ok(fs) => out.extend(fs),
                Err(e) => self.simple(
                    ViolationKind::Model,
                    format!("unreadable frame to the producer: {e}"),
                ),
            }
        }
        for f in &out {
            let c = &f.command;
            match c.r#type() {
                Type::Ping => {
                    let mut pong = Vec::new();
                    wire::encode_command(&wire::commands::pong(), &mut pong);
                    let _ = self.producer.handle_bytes(&pong);
                }
                Type::SendReceipt => {
                    if let Some(r) = &c.send_receipt {
                        self.receipted(r);
                    }
                }
                Type::CloseProducer => {
                    if let Some(cp) = &c.close_producer {
                        self.producer_closed(cp.producer_id);
                    }
                }
                Type::ProducerSuccess => {
                    if let Some(ps) = &c.producer_success {
                        self.producer_reopened(ps.request_id);
                    }
                }
                Type::Error if self.reopen_refused(c) => {}
                Type::Error | Type::SendError => {
                    let d = format!("the broker refused a publish: {c:?}");
                    self.simple(ViolationKind::Model, d);
                }
                _ => {}
            }
        }
    }

    pub(super) fn published_entry(&mut self, pos: Position, m: &MessageMetadata, n: u32) {
        let key = key_of(m);
        if m.chunk_id.unwrap_or(0) == 0 {
            self.messages += u64::from(n);
        }
        if m.deliver_at_time.is_some() {
            self.order.mark_delayed(pos);
        }
        if let Some(u) = &m.uuid {
            self.chunks.insert(pos, u.clone());
        }
        if m.uuid.is_some() && m.chunk_id.unwrap_or(0) + 1 < m.num_chunks_from_msg.unwrap_or(1) {
            self.inner_chunks.insert(pos);
        }
        if let Some(k) = &key {
            self.keys.insert(k.clone());
        }
        let what = match (&m.uuid, m.deliver_at_time) {
            (Some(u), _) => format!(
                " chunk {u}#{}/{}",
                m.chunk_id.unwrap_or(0),
                m.num_chunks_from_msg.unwrap_or(1)
            ),
            (None, _) if n > 1 => format!(" batch {n}"),
            (None, Some(at)) => format!(" deliver_at={}", (at as u64).saturating_sub(T0)),
            (None, None) => String::new(),
        };
        self.log(format!(
            "publish {pos} key={}{what}",
            key_text(key.as_deref())
        ));
        self.published.insert(pos, key);
        if n > 1 {
            self.batches.insert(pos, n);
        }
    }
}
