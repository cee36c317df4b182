//! The broker side of the world: commands from clients, the dispatcher's commands, acks.

use super::*;

impl World {
    // ------------------------------------------------------------------ broker side

    pub(super) fn send_to_broker(&mut self, name: &str, cmd: Wire) {
        let delay = self.net_delay();
        let now = self.now;
        let Some(c) = self.consumers.get_mut(name) else {
            return;
        };
        if c.conn == 0 {
            return;
        }
        let at = (now + delay).max(c.to_broker_last);
        c.to_broker_last = at;
        let conn = c.conn;
        self.schedule(
            at,
            SimEvent::ToBroker {
                name: name.to_string(),
                conn,
                cmd,
            },
        );
    }

    pub(super) fn broker_receives(&mut self, name: &str, conn: u64, cmd: Wire) {
        let Some(c) = self.consumers.get(name) else {
            return;
        };
        if c.conn != conn || conn == 0 {
            return; // the connection is gone: lost on the wire
        }
        let Some(id) = c.id else { return };
        let now = self.now;
        match cmd {
            Wire::Close => {
                self.log(format!("broker: {name} closes"));
                if let Some(c) = self.consumers.get_mut(name) {
                    c.state = CState::Gone;
                    c.conn = 0;
                    c.id = None;
                }
                self.remove_from_broker(id);
                return;
            }
            Wire::Cmd(client::Command::Flow(n)) => {
                self.log(format!("broker: flow {name} {n}"));
                self.d.handle_flow(now, id, n);
            }
            Wire::Cmd(client::Command::Ack(ids)) => {
                for mid in ids {
                    self.broker_ack(name, id, mid);
                }
            }
            Wire::Cmd(cmd @ client::Command::RedeliverUnacked(_))
            | Wire::Cmd(cmd @ client::Command::Release(_))
            | Wire::Cmd(cmd @ client::Command::Nack { .. }) => {
                let (verb, es, delay) = match cmd {
                    client::Command::Nack { entries, delay } => ("nack", entries, Some(delay)),
                    client::Command::Release(es) => ("release", es, None),
                    client::Command::RedeliverUnacked(es) => ("redeliver", es, None),
                    _ => ("redeliver", Vec::new(), None),
                };
                let ps: Vec<Position> = es
                    .iter()
                    .map(|e| Position::new(e.entry.ledger_id, e.entry.entry_id))
                    .collect();
                let mut expected = 0;
                if let Some(set) = self.model.get_mut(&id) {
                    for p in &ps {
                        if set.remove(p) {
                            expected += 1;
                        }
                    }
                }
                let n = match verb {
                    // Ordered nack: the broker holds the key until the entry is re-sent.
                    "nack" => {
                        let n = self.d.handle_nack(now, id, &ps, delay);
                        for p in &ps {
                            if self.dropped.contains(p) {
                                // Dropped before the nack: nothing will come back, the broker
                                // holds nothing; the adapter tells the client at once.
                                self.notify_dropped(name, *p);
                            } else {
                                self.nacked_by.insert(*p, name.to_string());
                            }
                        }
                        n
                    }
                    "release" => self.d.handle_release(now, id, &ps),
                    _ => self.d.handle_redeliver(now, id, &ps),
                };
                let list: Vec<String> = ps.iter().map(|p| p.to_string()).collect();
                let d = delay.map(|d| format!(" delay={d}")).unwrap_or_default();
                self.log(format!(
                    "broker: {verb} {name} [{}]{d} requeued={n}",
                    list.join(" ")
                ));
                if n != expected {
                    self.simple_violation(
                        ViolationKind::Model,
                        format!("{verb} for {name} requeued {n}, the model expected {expected}"),
                    );
                }
            }
        }
        self.pump_broker();
    }

    pub(super) fn model_owner(&self, p: Position) -> Option<ConsumerId> {
        self.model
            .iter()
            .find(|(_, s)| s.contains(&p))
            .map(|(id, _)| *id)
    }

    pub(super) fn broker_ack(&mut self, name: &str, id: ConsumerId, mid: MessageId) {
        let p = Position::new(mid.ledger_id, mid.entry_id);
        if let Some(i) = mid.batch_index {
            // Through the dispatcher's batch-index ack: the cursor records the index, the pending
            // ack's remaining count drops by the newly acked indexes, and the index that
            // completes an entry still above mark-delete removes it like a whole-entry ack.
            let (size, before) = {
                let g = lock(&self.cell);
                let size = g.ledger.meta(p).map_or(1, EntryMeta::messages);
                let open = p > g.cursor.mark_delete_position() && !g.cursor.is_acked(p);
                let acked = g
                    .cursor
                    .batch_acked_indexes(p)
                    .map_or(0, |v| v.len() as u32);
                (size, open.then_some(acked))
            };
            let expected = self.model_owner(p);
            match self.ack.ack_batch_index(id, p, size, &[i]) {
                Ok(o) => {
                    let (complete, newly) = {
                        let g = lock(&self.cell);
                        let after = g
                            .cursor
                            .batch_acked_indexes(p)
                            .map_or(0, |v| v.len() as u32);
                        match before {
                            Some(_) if g.cursor.is_acked(p) => (true, 0),
                            Some(b) => (false, after.saturating_sub(b)),
                            None => (false, 0),
                        }
                    };
                    self.log(format!(
                        "broker: ack {name} {mid} newly={newly} complete={complete} cleared_on={}",
                        o.cleared_on.map(|c| c.to_string()).unwrap_or("-".into())
                    ));
                    self.broker_acked.insert((p, Some(i)));
                    if complete {
                        self.broker_acked.insert((p, None));
                        if self.acked.insert(p) {
                            self.last_progress = self.now;
                        }
                        self.after_ack(name, p, o, expected);
                    } else if newly > 0 && expected.is_some() {
                        if let Some(r) = self.remaining.get_mut(&p) {
                            *r = r.saturating_sub(newly);
                        }
                        if o.cleared_on != expected {
                            let v = Violation {
                                kind: ViolationKind::Model,
                                at: self.now,
                                key: None,
                                positions: vec![mid.to_string()],
                                consumers: vec![name.to_string()],
                                detail: format!(
                                    "a batch-index ack reduced the pending ack on {:?}, the model has it pending on {:?}",
                                    o.cleared_on, expected
                                ),
                            };
                            self.violate(v);
                        }
                    }
                }
                Err(e) => self.log(format!("broker: ack {name} {mid} refused: {e}")),
            }
            return;
        }
        let expected = self.model_owner(p);
        match self.ack.ack(id, p) {
            Ok(o) => {
                self.broker_acked.insert((p, None));
                if self.acked.insert(p) {
                    self.last_progress = self.now;
                }
                self.after_ack(name, p, o, expected);
            }
            Err(e) => self.log(format!("broker: ack {name} {p} refused: {e}")),
        }
    }

    pub(super) fn after_ack(
        &mut self,
        name: &str,
        p: Position,
        o: dispatcher::AckEffect,
        expected: Option<ConsumerId>,
    ) {
        {
            {
                self.log(format!(
                    "broker: ack {name} {p} newly={} cleared_on={}",
                    o.newly_acked,
                    o.cleared_on.map(|c| c.to_string()).unwrap_or("-".into())
                ));
                if let Some(e) = expected {
                    if let Some(s) = self.model.get_mut(&e) {
                        s.remove(&p);
                    }
                    self.remaining.remove(&p);
                }
                if o.cleared_on != expected {
                    let v = Violation {
                        kind: ViolationKind::Model,
                        at: self.now,
                        key: None,
                        positions: vec![p.to_string()],
                        consumers: vec![name.to_string()],
                        detail: format!(
                            "ack cleared the pending ack on {:?}, the model has it pending on {:?}",
                            o.cleared_on, expected
                        ),
                    };
                    self.violate(v);
                }
            }
        }
    }

    /// Runs the shared driver until the dispatcher has nothing left.
    pub(super) fn pump_broker(&mut self) {
        let start = self.driver.commands_executed();
        while let Some(out) = self.driver.poll(self.now, &mut self.d, &self.cell) {
            if self.driver.commands_executed() - start > MAX_COMMANDS_PER_PUMP {
                self.simple_violation(
                    ViolationKind::Livelock,
                    format!("the dispatcher issued more than {MAX_COMMANDS_PER_PUMP} commands without settling"),
                );
                return;
            }
            match out {
                Output::Woke => self.log("broker: wake".into()),
                Output::Send { consumer, entries } => self.on_send(consumer, entries),
                Output::SetTimer { at } => {
                    self.log(format!("broker: timer at {at}"));
                    let epoch = self.broker_epoch;
                    self.schedule(at, SimEvent::BrokerTimer { epoch });
                }
                Output::ReadIssued { max_entries } => {
                    self.defer_read(DeferredRead::Normal(max_entries))
                }
                Output::ReplayIssued { positions } => {
                    self.defer_read(DeferredRead::Replay(positions))
                }
                Output::ActiveChanged { consumer, active } => {
                    self.log(format!("broker: {consumer} active={active}"))
                }
                Output::Rewound
                | Output::Read { .. }
                | Output::Replayed { .. }
                | Output::DeadLettered { .. } => {}
            }
        }
        self.check_model();
        if self.violations.is_empty() {
            self.check_replay_idle();
        }
    }

    /// Schedules the completion of a read the dispatcher issued (`reads=` scenarios).
    fn defer_read(&mut self, read: DeferredRead) {
        let (lo, hi) = self.cfg.read_delay;
        let at = self.now + self.rng_time.range(lo, hi);
        self.log(format!("broker: read in flight until {at}: {read:?}"));
        let epoch = self.broker_epoch;
        self.reads_in_flight += 1;
        self.schedule(at, SimEvent::ReadDone { epoch, read });
    }

    /// Runs a deferred read on the cursor as it is now and hands the result to the dispatcher.
    pub(super) fn complete_read(&mut self, read: DeferredRead) {
        let now = self.now;
        let out = match read {
            DeferredRead::Normal(n) => self.driver.complete_read(now, &mut self.d, &self.cell, n),
            DeferredRead::Replay(ps) => {
                self.driver
                    .complete_replay(now, &mut self.d, &self.cell, ps)
            }
        };
        if let Some(out) = out {
            self.log(format!("broker: read completes: {out:?}"));
        }
        self.pump_broker();
    }

    pub(super) fn on_send(&mut self, id: ConsumerId, entries: Vec<Entry>) {
        let Some(name) = self.by_id.get(&id).cloned() else {
            self.simple_violation(
                ViolationKind::Model,
                format!("the dispatcher sent to {id}, which is not connected"),
            );
            return;
        };
        let mut line = format!("send {name}:");
        let mut out = Vec::with_capacity(entries.len());
        for e in entries {
            let p = e.position;
            if let Some(at) = e.meta.deliver_at.filter(|at| *at > self.now) {
                let v = Violation {
                    kind: ViolationKind::Early,
                    at: self.now,
                    key: Self::key_of(&e.meta).map(|k| key_str(&k)),
                    positions: vec![p.to_string()],
                    consumers: vec![name.clone()],
                    detail: format!(
                        "{p} sent to {name} {} ms before its deliver-at time {at}",
                        at - self.now
                    ),
                };
                self.violate(v);
            }
            if let Some(other) = self.model_owner(p) {
                let v = Violation {
                    kind: ViolationKind::Model,
                    at: self.now,
                    key: Self::key_of(&e.meta).map(|k| key_str(&k)),
                    positions: vec![p.to_string()],
                    consumers: vec![self.name_of(other), name.clone()],
                    detail: format!(
                        "{p} sent to {name} while still pending on {}",
                        self.name_of(other)
                    ),
                };
                self.violate(v);
                return;
            }
            if let Some(s) = self.model.get_mut(&id) {
                s.insert(p);
            }
            self.remaining.insert(p, e.meta.messages());
            self.nacked_by.remove(&p);
            if let Some(c) = e.meta.chunk.as_ref().filter(|c| c.num_chunks > 1) {
                if c.chunk_id + 1 == c.num_chunks {
                    self.pins.remove(&c.uuid);
                } else if c.chunk_id == 0 {
                    self.pins.insert(c.uuid.clone(), id);
                }
            }
            let k = Self::key_of(&e.meta)
                .map(|k| key_str(&k))
                .unwrap_or_else(|| "-".into());
            let _ = write!(line, " {p}({k})");
            let redeliveries = self.d.redelivery_count(p);
            // Every index of a batch entry goes out, acked ones included: the dispatcher charges
            // the entry's whole message count in permits, and the client returns one permit per
            // message. The indexes the cursor holds as acked go with it (Pulsar's `ack_set`), so
            // the client skips them; `--legacy no-batch-ack-set` leaves them out.
            let acked_indexes = if e.meta.messages() > 1 && self.send_ack_set {
                lock(&self.cell)
                    .cursor
                    .batch_acked_indexes(p)
                    .unwrap_or_default()
            } else {
                Vec::new()
            };
            // No acked message goes out again unmarked: not a whole acked entry, and not a
            // batch index the broker accepted an ack for (unless a crash lost that ack).
            let unmarked: Vec<u32> = (0..e.meta.messages())
                .filter(|i| {
                    self.broker_acked.contains(&(p, None))
                        || (e.meta.messages() > 1
                            && self.broker_acked.contains(&(p, Some(*i)))
                            && !acked_indexes.contains(i))
                })
                .collect();
            if !unmarked.is_empty() {
                let v = Violation {
                    kind: ViolationKind::AckedRedelivered,
                    at: self.now,
                    key: Self::key_of(&e.meta).map(|k| key_str(&k)),
                    positions: vec![p.to_string()],
                    consumers: vec![name.clone()],
                    detail: format!(
                        "{p} sent to {name} with acked message(s) {unmarked:?} not marked acked: the application would process them again"
                    ),
                };
                self.violate(v);
                return;
            }
            out.push((e, redeliveries, acked_indexes));
        }
        self.log(line);
        let delay = self.net_delay();
        let now = self.now;
        let Some(c) = self.consumers.get_mut(&name) else {
            return;
        };
        if c.conn == 0 || !matches!(c.state, CState::Connected | CState::Leaving) {
            return; // crashed: lost on the wire
        }
        let at = (now + delay).max(c.to_client_last);
        c.to_client_last = at;
        let conn = c.conn;
        self.schedule(
            at,
            SimEvent::ToClient {
                name,
                conn,
                entries: out,
            },
        );
    }
}
