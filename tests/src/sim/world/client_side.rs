//! The client side of the world: deliveries, the client's commands and timers, the
//! application taking, finishing and (for manual consumers) being told to finish messages.

use super::*;

impl World {
    // ------------------------------------------------------------------ client side

    pub(super) fn client_receives(
        &mut self,
        name: &str,
        conn: u64,
        entries: Vec<(Entry, u32, Vec<u32>)>,
    ) {
        let now = self.now;
        let mut errors = Vec::new();
        {
            let Some(c) = self.consumers.get_mut(name) else {
                return;
            };
            if c.conn != conn || conn == 0 {
                return;
            }
            for (e, redelivery_count, acked_indexes) in entries {
                let m = &e.meta;
                let (l, en) = (e.position.ledger_id, e.position.entry_id);
                let key = Self::key_of(m);
                let base = IncomingMessage {
                    epoch: c.epoch,
                    id: MessageId::new(l, en),
                    key,
                    publish_time: m.publish_time,
                    redelivery_count,
                    batch: None,
                    chunk: m.chunk.as_ref().map(|ch| ChunkInfo {
                        uuid: ch.uuid.clone(),
                        chunk_id: ch.chunk_id,
                        num_chunks: ch.num_chunks,
                        total_size: ch.total_size,
                    }),
                    payload: Vec::new(),
                    already_acked: false,
                };
                let n = m.messages();
                if n > 1 && m.chunk.is_none() {
                    for i in 0..n {
                        let msg = IncomingMessage {
                            id: MessageId::batched(l, en, i),
                            batch: Some(BatchInfo { index: i, size: n }),
                            already_acked: acked_indexes.contains(&i),
                            ..base.clone()
                        };
                        if let Err(err) = c.client.on_message(now, msg) {
                            errors.push(err.to_string());
                        }
                    }
                } else if let Err(err) = c.client.on_message(now, base) {
                    errors.push(err.to_string());
                }
            }
        }
        for e in errors {
            self.log(format!("client {name}: message refused: {e}"));
        }
        self.pump_client(name);
        self.try_start(name);
    }

    pub(super) fn pump_client(&mut self, name: &str) {
        let mut cmds = Vec::new();
        let mut timer = None;
        if let Some(c) = self.consumers.get_mut(name) {
            if c.conn == 0 {
                return;
            }
            while let Some(cmd) = c.client.poll_command() {
                cmds.push(cmd);
            }
            if let Some(t) = c.client.next_timer() {
                if c.timer_at != Some(t) {
                    c.timer_at = Some(t);
                    timer = Some((t, c.conn));
                }
            }
        }
        for cmd in cmds {
            self.log(format!("client {name}: {}", describe(&cmd)));
            self.send_to_broker(name, Wire::Cmd(cmd));
        }
        if let Some((t, conn)) = timer {
            self.schedule(
                t,
                SimEvent::ClientTimer {
                    name: name.to_string(),
                    conn,
                },
            );
        }
    }

    pub(super) fn try_start(&mut self, name: &str) {
        let now = self.now;
        let delivered = {
            let Some(c) = self.consumers.get_mut(name) else {
                return;
            };
            if c.state != CState::Connected || c.busy.is_some() || c.conn == 0 {
                None
            } else {
                c.client.receive(now)
            }
        };
        if let Some(d) = delivered {
            // A chunked message spans its first..=last chunk (the client hands it out under its
            // last chunk's id); see OrderChecker::start_span for how spans are ordered.
            let msg: MsgRef = (
                Position::new(d.id.ledger_id, d.id.entry_id),
                d.id.batch_index,
            );
            let k = d.key.as_deref().map(key_str).unwrap_or_else(|| "-".into());
            self.log(format!(
                "app {name} starts {} key={k} redelivery={}",
                msg_str(msg),
                d.redelivery_count
            ));

            let first = d.chunk_ids.first().map_or(msg, |c| {
                (Position::new(c.ledger_id, c.entry_id), c.batch_index)
            });
            let vs = self
                .order
                .start_span(now, name, d.key.as_deref(), first, msg);
            for v in vs {
                self.violate(v);
            }
            let mut due = None;
            if let Some(c) = self.consumers.get_mut(name) {
                c.task_seq += 1;
                let task = Task {
                    seq: c.task_seq,
                    id: d.id,
                    msg,
                };
                c.busy = Some(task);
                if !c.opts.manual {
                    due = Some((c.conn, task.seq, c.opts.proc));
                }
            }
            if let Some((conn, task, (a, b))) = due {
                let at = now + self.rng_time.range(a, b);
                self.schedule(
                    at,
                    SimEvent::AppDone {
                        name: name.to_string(),
                        conn,
                        task,
                    },
                );
            }
        }
        self.pump_client(name);
    }

    pub(super) fn finish_task(&mut self, name: &str, nack: bool) {
        let now = self.now;
        let Some(c) = self.consumers.get_mut(name) else {
            return;
        };
        let Some(t) = c.busy.take() else { return };
        let line = hand_back(
            &mut c.client,
            &mut self.order,
            now,
            name,
            (t.id, t.msg),
            nack,
        );
        self.log(line);
        self.pump_client(name);
        self.maybe_close(name);
        self.try_start(name);
    }

    pub(super) fn manual_finish(&mut self, name: &str, p: Option<Position>, nack: bool) {
        let holding = self.consumers.get(name).and_then(|c| c.busy);
        match (holding, p) {
            (None, _) => self.simple_violation(
                ViolationKind::Expectation,
                format!("script: {name} holds no message to finish"),
            ),
            (Some(t), Some(p)) if t.msg.0 != p => self.simple_violation(
                ViolationKind::Expectation,
                format!("script: {name} holds {}, not {p}", msg_str(t.msg)),
            ),
            _ => self.finish_task(name, nack),
        }
    }
}

/// The application `name` is done with message `id` (`msg` as the checker knows it): an ack,
/// or a nack, to its client and to the order checker. Returns the event-log line.
pub(crate) fn hand_back(
    client: &mut Consumer,
    order: &mut OrderChecker,
    now: u64,
    name: &str,
    (id, msg): (MessageId, MsgRef),
    nack: bool,
) -> String {
    let r = if nack {
        client.nack(now, id).map_err(|e| e.to_string())
    } else {
        client.ack(now, id).map_err(|e| e.to_string())
    };
    if nack {
        order.nack(now, name);
    } else {
        order.finish(now, name);
    }
    let verb = if nack { "nacks" } else { "acks" };
    match r {
        Ok(()) => format!("app {name} {verb} {}", msg_str(msg)),
        Err(e) => format!("app {name} {verb} {}: refused: {e}", msg_str(msg)),
    }
}

fn describe(cmd: &client::Command) -> String {
    let ids = |es: &[client::RedeliverEntry]| -> String {
        es.iter()
            .map(|e| e.entry.to_string())
            .collect::<Vec<_>>()
            .join(" ")
    };
    match cmd {
        client::Command::Flow(n) => format!("flow {n}"),
        client::Command::Ack(ids) => format!(
            "ack [{}]",
            ids.iter()
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        ),
        client::Command::RedeliverUnacked(es) => format!("redeliver [{}]", ids(es)),
        client::Command::Nack { entries, delay } => {
            format!("nack [{}] delay={delay}", ids(entries))
        }
        client::Command::Release(es) => format!("release [{}]", ids(es)),
    }
}
