//! Scripted steps and faults: joins, leaves, crashes, broker restarts, publishes and the admin
//! operations on the cursor (skip, clear-backlog, expiry, backlog-quota eviction).

use super::*;

impl World {
    // ------------------------------------------------------------------ steps and faults

    pub(super) fn run_step(&mut self, step: Step) {
        if step.action.is_fault() || (matches!(step.action, Action::Join(..)) && step.at > 0) {
            self.faults += 1;
        }
        match step.action {
            Action::Join(name, o) => self.join(&name, o),
            Action::Leave(name) => self.leave(&name),
            Action::Crash(name) => self.crash(&name),
            Action::Restart => self.restart(),
            Action::Publish(p) => self.publish(p),
            Action::Skip(n) => {
                self.log(format!("admin skip {n}"));
                self.admin(|c, l| c.skip(l, n));
            }
            Action::Clear => {
                self.log("admin clear-backlog".into());
                self.admin(|c, l| c.clear_backlog(l));
            }
            Action::Expire(age) => {
                let before = self.now.saturating_sub(age);
                self.log(format!("expire published before {before}"));
                self.admin(|c, l| c.expire(l, before));
            }
            Action::Evict(e) => {
                self.log(format!("backlog-quota eviction {e:?}"));
                let now = self.now;
                self.admin(|c, l| match e {
                    Evict::Count(n) => c.evict_to_count(l, n),
                    Evict::Size(b) => c.evict_to_size(l, b),
                    Evict::Age(a) => c.evict_older_than(l, now, a),
                });
            }
            Action::Ack(name, p) => self.manual_finish(&name, p, false),
            Action::Nack(name, p) => self.manual_finish(&name, p, true),
            Action::Auto(name) => {
                let now = self.now;
                let mut due = None;
                if let Some(c) = self.consumers.get_mut(&name) {
                    c.opts.manual = false;
                    if let Some(t) = c.busy {
                        due = Some((c.conn, t.seq, c.opts.proc));
                    }
                }
                if let Some((conn, task, (a, b))) = due {
                    let at = now + self.rng_time.range(a, b);
                    self.schedule(at, SimEvent::AppDone { name, conn, task });
                } else {
                    self.try_start(&name);
                }
            }
            Action::RandomFault(kind) => self.random_fault(kind),
        }
    }

    pub(super) fn connected(&self) -> Vec<String> {
        self.consumers
            .iter()
            .filter(|(_, c)| c.state == CState::Connected)
            .map(|(n, _)| n.clone())
            .collect()
    }

    pub(super) fn random_fault(&mut self, kind: FaultKind) {
        match kind {
            FaultKind::Join => {
                let name = format!("c{}", self.next_join);
                self.next_join += 1;
                let mix = self.mix.clone().unwrap_or_default();
                let o = self.mix_consumer_opts(&mix);
                self.join(&name, o);
            }
            FaultKind::Leave | FaultKind::Crash => {
                let live = self.connected();
                if live.len() < 2 {
                    self.faults -= 1; // not executed, not counted
                    self.log(format!(
                        "{kind:?} skipped: only {} consumer(s) left",
                        live.len()
                    ));
                    return;
                }
                let i = self.rng_fault.below(live.len() as u64) as usize;
                if kind == FaultKind::Leave {
                    self.leave(&live[i]);
                } else {
                    self.crash(&live[i]);
                }
            }
            FaultKind::Restart => self.restart(),
            FaultKind::Skip => {
                let n = self.rng_fault.range(1, 10);
                self.log(format!("admin skip {n}"));
                self.admin(|c, l| c.skip(l, n));
            }
            FaultKind::Clear => {
                self.log("admin clear-backlog".into());
                self.admin(|c, l| c.clear_backlog(l));
            }
            FaultKind::Expire => {
                let age = self.rng_fault.range(200, 2000);
                let before = self.now.saturating_sub(age);
                self.log(format!("expire published before {before}"));
                self.admin(|c, l| c.expire(l, before));
            }
            FaultKind::Evict => {
                let which = self.rng_fault.below(3);
                let age = self.rng_fault.range(200, 2000);
                let now = self.now;
                self.log(format!("backlog-quota eviction policy={which}"));
                self.admin(|c, l| {
                    let b = c.backlog(l);
                    match which {
                        0 => c.evict_to_count(l, b.messages / 2),
                        1 => c.evict_to_size(l, b.bytes / 2),
                        _ => c.evict_older_than(l, now, age),
                    }
                });
            }
        }
    }

    pub(super) fn join(&mut self, name: &str, opts: ConsumerOpts) {
        if let Some(c) = self.consumers.get(name) {
            if matches!(c.state, CState::Connected | CState::Leaving) {
                self.simple_violation(
                    ViolationKind::Expectation,
                    format!("scenario joins {name}, which is already connected"),
                );
                return;
            }
        }
        let client = match Consumer::new(client_config(&opts, self.ordered_nack)) {
            Ok(c) => c,
            Err(e) => {
                self.simple_violation(
                    ViolationKind::Expectation,
                    format!("bad consumer options for {name}: {e}"),
                );
                return;
            }
        };
        self.log(format!(
            "join {name} queue={} proc={}-{} nack={} manual={}",
            opts.queue, opts.proc.0, opts.proc.1, opts.nack, opts.manual
        ));
        self.consumers.insert(
            name.to_string(),
            SimConsumer {
                opts,
                client,
                id: None,
                epoch: 0,
                conn: 0,
                state: CState::Connected,
                busy: None,
                task_seq: 0,
                to_client_last: 0,
                to_broker_last: 0,
                timer_at: None,
                close_sent: false,
            },
        );
        self.connect(name);
    }

    /// Opens a connection for `name`: a broker-side consumer and a client connect.
    pub(super) fn connect(&mut self, name: &str) {
        let id = ConsumerId(self.next_id);
        self.next_id += 1;
        let conn = self.next_conn;
        self.next_conn += 1;
        let prio = self.consumers.get(name).map_or(0, |c| c.opts.prio);
        let spec = ConsumerSpec::new(id.0, name).with_priority(prio);
        let now = self.now;
        match self.d.handle_consumer_added(now, spec) {
            Ok(()) => {
                self.by_id.insert(id, name.to_string());
                self.model.insert(id, BTreeSet::new());
            }
            Err(e) => {
                self.simple_violation(
                    ViolationKind::Model,
                    format!("the dispatcher refused {name}: {e}"),
                );
                return;
            }
        }
        if let Some(c) = self.consumers.get_mut(name) {
            c.id = Some(id);
            c.conn = conn;
            c.timer_at = None;
            c.epoch = c.client.connect(now);
        }
        self.log(format!("connect {name} as {id} conn={conn}"));
        self.pump_broker();
        self.pump_client(name);
        self.try_start(name);
    }

    pub(super) fn leave(&mut self, name: &str) {
        let Some(c) = self.consumers.get_mut(name) else {
            return;
        };
        if c.state != CState::Connected {
            return;
        }
        c.state = CState::Leaving;
        self.log(format!("leave {name} (graceful)"));
        self.maybe_close(name);
    }

    pub(super) fn maybe_close(&mut self, name: &str) {
        let Some(c) = self.consumers.get_mut(name) else {
            return;
        };
        if c.state != CState::Leaving || c.busy.is_some() || c.close_sent || c.conn == 0 {
            return;
        }
        c.close_sent = true;
        self.send_to_broker(name, Wire::Close);
    }

    pub(super) fn crash(&mut self, name: &str) {
        let epoch = self.broker_epoch;
        let Some(c) = self.consumers.get_mut(name) else {
            return;
        };
        if !matches!(c.state, CState::Connected | CState::Leaving) {
            return;
        }
        c.state = CState::Crashed;
        c.conn = 0;
        c.busy = None;
        let id = c.id.take();
        self.order.abandon(name);
        self.log(format!("crash {name}"));
        if let Some(id) = id {
            let at = self.now + self.cfg.notice;
            self.schedule(at, SimEvent::CrashNoticed { id, epoch });
        }
    }

    pub(super) fn remove_from_broker(&mut self, id: ConsumerId) {
        let now = self.now;
        if self.d.handle_consumer_removed(now, id) {
            self.model.remove(&id);
            self.pins.retain(|_, c| *c != id);
        }
        self.by_id.remove(&id);
        self.pump_broker();
    }

    pub(super) fn restart(&mut self) {
        self.log("broker restart".into());
        self.broker_epoch += 1;
        self.reads_in_flight = 0;
        {
            let mut g = lock(&self.cell);
            let (cursor, ledger) = g.parts();
            // A crash: what was not persisted yet is lost (and redelivered).
            let recovered = cursor
                .store()
                .reopen()
                .map_err(|e| e.to_string())
                .and_then(|s| ManagedCursor::recover(ledger, s).map_err(|e| e.to_string()));
            match recovered {
                Ok(c) => {
                    let (before, after) = (cursor.mark_delete_position(), c.mark_delete_position());
                    // Acks the crash lost may legitimately come back.
                    self.broker_acked.retain(|(p, i)| {
                        *p <= c.mark_delete_position()
                            || c.is_acked(*p)
                            || i.is_some_and(|i| {
                                c.batch_acked_indexes(*p).is_some_and(|v| v.contains(&i))
                            })
                    });
                    *cursor = c;
                    drop(g);
                    self.log(format!("cursor recovered: mark-delete {before} -> {after}"));
                }
                Err(e) => {
                    drop(g);
                    self.simple_violation(
                        ViolationKind::Model,
                        format!("cursor recovery failed: {e}"),
                    );
                    return;
                }
            }
        }
        let waker = Arc::new(FlagWaker::default());
        self.d = Dispatcher::new(self.dcfg.clone(), waker.clone());
        self.ack = self.d.ack_handle(self.cell.clone());
        self.driver.set_wake_flag(waker);
        self.model.clear();
        self.pins.clear();
        self.by_id.clear();
        self.nacked_by.clear();
        let ordered_nack = self.ordered_nack;
        let names: Vec<String> = self.consumers.keys().cloned().collect();
        let epoch = self.broker_epoch;
        for name in names {
            self.order.abandon(&name);
            let Some(c) = self.consumers.get_mut(&name) else {
                continue;
            };
            c.conn = 0;
            c.id = None;
            c.busy = None;
            match c.state {
                CState::Connected => {
                    // The application restarts with its connection: in-flight work is
                    // abandoned (unacked messages come back), the client starts afresh.
                    match Consumer::new(client_config(&c.opts, ordered_nack)) {
                        Ok(fresh) => c.client = fresh,
                        Err(_) => continue,
                    }
                    let at = self.now + self.rng_net.range(10, 100);
                    self.schedule(at, SimEvent::Reconnect { name, epoch });
                }
                CState::Leaving | CState::Crashed => c.state = CState::Gone,
                CState::Gone => {}
            }
        }
    }

    pub(super) fn publish(&mut self, p: PublishSpec) {
        for _ in 0..p.count {
            let mut meta = EntryMeta::simple(self.now, 100);
            meta.ordering_key = p.key.as_ref().map(|k| k.as_bytes().to_vec());
            meta.producer_name = Some(format!("producer-{}", p.producer));
            let seq = self.producer_seq.entry(p.producer).or_insert(0);
            *seq += 1;
            meta.sequence_id = Some(*seq);
            let uuid = format!("producer-{}-{}", p.producer, *seq);
            if p.chunks > 1 {
                for i in 0..p.chunks {
                    let mut m = meta.clone();
                    m.chunk = Some(ChunkMeta {
                        uuid: uuid.clone(),
                        chunk_id: i,
                        num_chunks: p.chunks,
                        total_size: 100 * p.chunks,
                    });
                    if i == 0 || p.spread == 0 {
                        self.append(m);
                    } else {
                        let at = self.now + u64::from(i) * p.spread;
                        self.last_activity = self.last_activity.max(at);
                        self.schedule(at, SimEvent::Append(Box::new(m)));
                    }
                }
            } else if p.delay > 0 {
                let at = self.now + p.delay;
                self.append(meta.with_deliver_at(at));
            } else {
                self.append(meta.with_messages(p.batch));
            }
        }
    }

    pub(super) fn append(&mut self, mut meta: EntryMeta) {
        meta.publish_time = self.now;
        let key = Self::key_of(&meta);
        let chunk = meta.chunk.clone();
        let n = meta.messages();
        let deliver_at = meta.deliver_at;
        let pos = lock(&self.cell).ledger.append(meta);
        if deliver_at.is_some() {
            self.order.mark_delayed(pos);
        }
        if chunk.as_ref().is_none_or(|c| c.chunk_id == 0) {
            self.messages += u64::from(n);
        }
        self.entries += 1;
        if let Some(k) = &key {
            self.keys.insert(k.clone());
        }
        let k = key.as_deref().map(key_str).unwrap_or_else(|| "-".into());
        let what = match &chunk {
            Some(c) => format!(" chunk {}#{}/{}", c.uuid, c.chunk_id, c.num_chunks),
            None if n > 1 => format!(" batch {n}"),
            None => match deliver_at {
                Some(at) => format!(" deliver_at={at}"),
                None => String::new(),
            },
        };
        self.log(format!("publish {pos} key={k}{what}"));
        let now = self.now;
        self.d.handle_entries_appended(now);
        self.pump_broker();
    }

    /// Tells `name`'s client that the broker dropped the entry at `p` (it nacked it).
    pub(super) fn notify_dropped(&mut self, name: &str, p: Position) {
        let now = self.now;
        let known = self.consumers.get_mut(name).is_some_and(|c| {
            c.client
                .on_dropped_by_broker(now, client::EntryId::new(p.ledger_id, p.entry_id))
        });
        self.log(format!(
            "client {name}: nacked {p} dropped by the broker (known={known})"
        ));
        self.pump_client(name);
        self.try_start(name);
    }

    pub(super) fn admin(
        &mut self,
        op: impl FnOnce(&mut ManagedCursor<SimStore>, &InMemoryLedger) -> Option<MarkDeleteMove>,
    ) {
        let mv = {
            let mut g = lock(&self.cell);
            let (cursor, ledger) = g.parts();
            let mv = op(cursor, ledger);
            if mv.is_some() {
                let _ = cursor.persist();
            }
            mv
        };
        let Some(mv) = mv else {
            self.log("mark-delete unchanged".into());
            return;
        };
        let dropped: Vec<String> = mv.dropped.iter().map(|p| p.to_string()).collect();
        self.log(format!(
            "mark-delete {:?} {} -> {} dropped [{}]",
            mv.reason,
            mv.from,
            mv.to,
            dropped.join(" ")
        ));
        for p in &mv.dropped {
            if self.dropped.insert(*p) {
                self.last_progress = self.now;
            }
            self.order.dropped(*p);
        }
        // A nacked entry the broker dropped will never come back: its hold ends on the broker
        // (the hook) and the adapter tells the client that nacked it, so its key gate opens.
        let released: Vec<(Position, String)> = mv
            .dropped
            .iter()
            .filter_map(|p| self.nacked_by.remove(p).map(|n| (*p, n)))
            .collect();
        for (p, name) in released {
            self.notify_dropped(&name, p);
        }
        let cleans =
            matches!(self.cfg.sub, SubKind::Shared) || self.dcfg.legacy_mark_delete_cleanup;
        if cleans {
            for set in self.model.values_mut() {
                let keep = set.split_off(&mv.to.next());
                *set = keep;
            }
        }
        let now = self.now;
        self.d.handle_mark_delete_moved(now, &mv);
        self.pump_broker();
    }
}
