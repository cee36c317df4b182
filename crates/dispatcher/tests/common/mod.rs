//! A scripted driver for the dispatcher core: owns an in-memory ledger and cursor, executes the
//! core's commands, and prints every read, replay and send. `check(script)` returns the log.
//!
//! Script (one command per line, `#` comments):
//! * config (before the first other command): `shared`, `key_shared [ring N|autosplit|exclusive]
//!   [ooo]`, `failover partition N|topic NAME`, `legacy`, `max_unacked_consumer N`, `max_unacked_sub N`, `look_ahead PER_C PER_SUB`,
//!   `interval N`, `draining_timeout N`, `orphan_replay`, `delay TICK [strict|lenient|off]`;
//! * `join A [prio=N] [ranges=a-b,c-d]`, `leave A`, `flow A N`;
//! * `pub k1 k2 …` (one entry per key, `k1*3` = three), `batch K N` (one entry of N messages),
//!   `chunk UUID K ID/N` (one chunk), `chunks UUID K N` (all N chunks), `pubat T k1 k2 …`
//!   (entries not to be dispatched before time T);
//! * `ack A POS…` (`POS` = `l:e`, or `A.all`), `nack A POS…` (a plain redelivery request),
//!   `redeliver_all A`;
//! * ordered nack: config `nack_backoff fixed D` / `nack_backoff exp BASE MAX`,
//!   `dead_letter N continue|park`; `onack A DELAY|- POS…` (`handle_nack`, `-` = the policy),
//!   `release A POS…`, `ackidx A POS SIZE IDX…` (batch-index ack), `release_parked KEY`, `dead_letter_parked KEY`, `nackstats`; dead letters
//!   are drained after every step (logged, then acked on the cursor);
//! * `skip N`, `clear`, `expire T`, `evict_count N`, `evict_size B`, `reset POS`;
//! * `advance T` (fires due timers), `restart` (dispatcher state lost, cursor recovered);
//! * `explain KEY`, `state`.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use cursor::{
    ChunkMeta, Entry, EntryMeta, InMemoryLedger, ManagedCursor, MarkDeleteMove, MemoryStore,
    Position,
};
pub use dispatcher::FlagWaker;
use dispatcher::{
    AckHandle, AdminOp, ConsumerId, ConsumerSpec, CursorCell, Dispatcher, DispatcherConfig, Driver,
    HashRange, KeySharedConfig, KeySharedMode, Output, SubscriptionType,
};

type Cell = Mutex<CursorCell<MemoryStore, InMemoryLedger>>;

/// The scripted world.
pub struct World {
    pub now: u64,
    pub cell: Arc<Cell>,
    pub d: Dispatcher,
    pub driver: Driver,
    pub ack: AckHandle,
    pub waker: Arc<FlagWaker>,
    pub cfg: DispatcherConfig,
    pub names: BTreeMap<String, ConsumerId>,
    pub next_id: u64,
    pub out: String,
    pub parked: bool,
    pub timer: Option<u64>,
    /// What each consumer received, in order (for order checks).
    pub received: BTreeMap<String, Vec<Position>>,
    /// Every send, in order: (consumer name, entry).
    pub sends: Vec<(String, Entry)>,
    pub quiet: bool,
}

fn parse_pos(s: &str) -> Option<Position> {
    let (l, e) = s.split_once(':')?;
    Some(Position::new(l.parse().ok()?, e.parse().ok()?))
}

fn key_of(meta: &EntryMeta) -> String {
    let k = meta
        .ordering_key
        .as_ref()
        .map(|k| String::from_utf8_lossy(k).into_owned())
        .unwrap_or_else(|| "-".into());
    match &meta.chunk {
        Some(c) => format!("{k}[{}#{}/{}]", c.uuid, c.chunk_id, c.num_chunks),
        None if meta.num_messages > 1 => format!("{k}x{}", meta.num_messages),
        None => k,
    }
}

impl World {
    pub fn new(cfg: DispatcherConfig) -> Self {
        let ledger = InMemoryLedger::new(1_000_000);
        let cursor = ManagedCursor::new("sub", &ledger, MemoryStore::new());
        let cell = Arc::new(Mutex::new(CursorCell { cursor, ledger }));
        let waker = Arc::new(FlagWaker::default());
        let d = Dispatcher::new(cfg.clone(), waker.clone());
        let ack = d.ack_handle(cell.clone());
        let driver = Driver::new().with_trace(true).with_wake_flag(waker.clone());
        World {
            now: 0,
            cell,
            d,
            driver,
            ack,
            waker,
            cfg,
            names: BTreeMap::new(),
            next_id: 1,
            out: String::new(),
            parked: false,
            timer: None,
            received: BTreeMap::new(),
            sends: Vec::new(),
            quiet: false,
        }
    }

    pub fn name(&self, id: ConsumerId) -> String {
        self.names
            .iter()
            .find(|(_, v)| **v == id)
            .map(|(k, _)| k.clone())
            .unwrap_or_else(|| id.to_string())
    }

    pub fn id(&self, name: &str) -> ConsumerId {
        self.names.get(name).copied().unwrap_or(ConsumerId(9_999))
    }

    fn log(&mut self, s: String) {
        if !self.quiet {
            self.out.push_str(&s);
            self.out.push('\n');
        }
    }

    /// Runs the driver until the core has nothing left, logging every step.
    pub fn pump(&mut self) {
        let start = self.driver.commands_executed();
        while let Some(out) = self.driver.poll(self.now, &mut self.d, &self.cell) {
            assert!(
                self.driver.commands_executed() - start <= 10_000,
                "driver did not settle after 10,000 commands"
            );
            self.on_output(out);
        }
    }

    fn on_output(&mut self, out: Output) {
        match out {
            Output::Rewound => self.log("  rewind".into()),
            Output::Read {
                max_entries,
                positions,
            } => {
                if positions.is_empty() {
                    self.parked = true;
                } else {
                    let ps: Vec<String> = positions.iter().map(|p| p.to_string()).collect();
                    self.log(format!("  read {max_entries}: {}", ps.join(" ")));
                }
            }
            Output::Replayed {
                positions,
                already_acked,
            } => {
                let ps: Vec<String> = positions.iter().map(|p| p.to_string()).collect();
                let mut line = format!("  replay {}", ps.join(" "));
                if !already_acked.is_empty() {
                    let a: Vec<String> = already_acked.iter().map(|p| p.to_string()).collect();
                    let _ = write!(line, " (acked: {})", a.join(" "));
                }
                self.log(line);
            }
            Output::Send { consumer, entries } => {
                let n = self.name(consumer);
                let items: Vec<String> = entries
                    .iter()
                    .map(|e| format!("{}({})", e.position, key_of(&e.meta)))
                    .collect();
                self.sends
                    .extend(entries.iter().map(|e| (n.clone(), e.clone())));
                self.received
                    .entry(n.clone())
                    .or_default()
                    .extend(entries.iter().map(|e| e.position));
                self.log(format!("  send {n}: {}", items.join(" ")));
            }
            Output::SetTimer { at } => self.timer = Some(at),
            Output::ActiveChanged { consumer, active } => {
                let n = self.name(consumer);
                self.log(format!(
                    "  {n} {}",
                    if active { "active" } else { "standby" }
                ));
            }
            Output::DeadLettered { position, acked } => {
                acked.unwrap();
                self.log(format!("  dead letter {position} (acked on the cursor)"));
            }
            Output::Woke => {}
            Output::ReadIssued { .. } | Output::ReplayIssued { .. } => {
                panic!("the scripted tests' driver runs reads at once")
            }
        }
    }

    fn publish(&mut self, metas: Vec<EntryMeta>) -> Vec<Position> {
        self.driver
            .publish(self.now, &mut self.d, &self.cell, metas)
    }

    fn keyed(&self, key: &str) -> EntryMeta {
        let mut m = EntryMeta::simple(self.now, 100);
        m.ordering_key = Some(key.as_bytes().to_vec());
        m
    }

    fn log_move(&mut self, mv: Option<&MarkDeleteMove>) {
        match mv {
            Some(mv) => {
                let dropped: Vec<String> = mv.dropped.iter().map(|p| p.to_string()).collect();
                self.log(format!(
                    "  md {:?} {} -> {} dropped [{}]",
                    mv.reason,
                    mv.from,
                    mv.to,
                    dropped.join(" ")
                ));
            }
            None => self.log("  md unchanged".into()),
        }
    }

    fn positions(&self, consumer: &str, args: &[&str]) -> Vec<Position> {
        let mut v = Vec::new();
        for a in args {
            if *a == "all" {
                v.extend(
                    self.d
                        .pending_positions(self.id(consumer))
                        .into_iter()
                        .map(|(p, _)| p),
                );
            } else if let Some(p) = parse_pos(a) {
                v.push(p);
            }
        }
        v
    }

    /// Runs one script line.
    pub fn step(&mut self, line: &str) {
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some((&cmd, args)) = words.split_first() else {
            return;
        };
        self.log(format!("> {line}"));
        match cmd {
            "join" => {
                let name = args[0];
                let id = ConsumerId(self.next_id);
                self.next_id += 1;
                let mut spec = ConsumerSpec::new(id.0, name);
                for a in &args[1..] {
                    if let Some(p) = a.strip_prefix("prio=") {
                        spec.priority = p.parse().unwrap();
                    }
                    if let Some(r) = a.strip_prefix("ranges=") {
                        spec.ranges = r
                            .split(',')
                            .map(|x| {
                                let (a, b) = x.split_once('-').unwrap();
                                HashRange::new(a.parse().unwrap(), b.parse().unwrap())
                            })
                            .collect();
                    }
                }
                match self.d.handle_consumer_added(self.now, spec) {
                    Ok(()) => {
                        self.names.insert(name.to_string(), id);
                    }
                    Err(e) => self.log(format!("  join refused: {e}")),
                }
            }
            "leave" => {
                let id = self.id(args[0]);
                self.d.handle_consumer_removed(self.now, id);
                self.names.remove(args[0]);
            }
            "flow" => {
                let id = self.id(args[0]);
                self.d.handle_flow(self.now, id, args[1].parse().unwrap());
            }
            "pub" => {
                let mut metas = Vec::new();
                for a in args {
                    let (k, n) = match a.split_once('*') {
                        Some((k, n)) => (k, n.parse().unwrap()),
                        None => (*a, 1),
                    };
                    for _ in 0..n {
                        metas.push(self.keyed(k));
                    }
                }
                self.publish(metas);
            }
            "pubat" => {
                // `pubat T k1 k2 …`: entries not to be dispatched before time T.
                let at: u64 = args[0].parse().unwrap();
                let metas = args[1..]
                    .iter()
                    .map(|k| self.keyed(k).with_deliver_at(at))
                    .collect();
                self.publish(metas);
            }
            "batch" => {
                let m = self.keyed(args[0]).with_messages(args[1].parse().unwrap());
                self.publish(vec![m]);
            }
            "chunk" | "chunks" => {
                let uuid = args[0];
                let key = args[1];
                let ids: Vec<(u32, u32)> = if cmd == "chunk" {
                    let (i, n) = args[2].split_once('/').unwrap();
                    vec![(i.parse().unwrap(), n.parse().unwrap())]
                } else {
                    let n: u32 = args[2].parse().unwrap();
                    (0..n).map(|i| (i, n)).collect()
                };
                let mut metas = Vec::new();
                for (i, n) in ids {
                    let mut m = self.keyed(key);
                    m.chunk = Some(ChunkMeta {
                        uuid: uuid.to_string(),
                        chunk_id: i,
                        num_chunks: n,
                        total_size: 100 * n,
                    });
                    metas.push(m);
                }
                self.publish(metas);
            }
            "ack" => {
                let id = self.id(args[0]);
                for p in self.positions(args[0], &args[1..]) {
                    match self.ack.ack(id, p) {
                        Ok(o) => {
                            if !o.newly_acked || o.cleared_on != Some(id) {
                                let owner = o.cleared_on.map(|c| self.name(c));
                                self.log(format!(
                                    "  ack {p}: newly_acked={} cleared_on={owner:?}",
                                    o.newly_acked
                                ));
                            }
                        }
                        Err(e) => self.log(format!("  ack {p} failed: {e}")),
                    }
                }
                if self.waker.take() {
                    self.d.handle_wake(self.now);
                }
            }
            "nack" => {
                let id = self.id(args[0]);
                let ps = self.positions(args[0], &args[1..]);
                let n = self.d.handle_redeliver(self.now, id, &ps);
                self.log(format!("  requeued {n}"));
            }
            "ackidx" => {
                // ackidx A POS SIZE IDX…: batch-index ack.
                let id = self.id(args[0]);
                let p = parse_pos(args[1]).unwrap();
                let size: u32 = args[2].parse().unwrap();
                let idx: Vec<u32> = args[3..].iter().map(|x| x.parse().unwrap()).collect();
                match self.ack.ack_batch_index(id, p, size, &idx) {
                    Ok(o) => self.log(format!("  ack {p} {idx:?}: messages={}", o.messages)),
                    Err(e) => self.log(format!("  ack {p} failed: {e}")),
                }
                if self.waker.take() {
                    self.d.handle_wake(self.now);
                }
            }
            "onack" => {
                let id = self.id(args[0]);
                let delay = args[1].parse().ok();
                let ps = self.positions(args[0], &args[2..]);
                let n = self.d.handle_nack(self.now, id, &ps, delay);
                self.log(format!("  nacked {n}"));
            }
            "release" => {
                let id = self.id(args[0]);
                let ps = self.positions(args[0], &args[1..]);
                let n = self.d.handle_release(self.now, id, &ps);
                self.log(format!("  released {n}"));
            }
            "release_parked" | "dead_letter_parked" => {
                let h = self.hash_of(args[0]);
                let n = if cmd == "release_parked" {
                    self.d.release_parked(self.now, h)
                } else {
                    self.d.dead_letter_parked(self.now, h)
                };
                self.log(format!("  {n} parked entries"));
            }
            "nackstats" => {
                let st = self.d.stats();
                self.log(format!(
                    "  nacks={} releases={} redeliveries={} held_hashes={} parked_keys={} parked_entries={} dead_letters={} holds_ended_by_mark_delete={}",
                    st.nacks,
                    st.releases,
                    st.redeliveries,
                    st.held_hashes,
                    st.parked_keys,
                    st.parked_entries,
                    st.dead_letters,
                    st.holds_ended_by_mark_delete
                ));
            }
            "redeliver_all" => {
                let id = self.id(args[0]);
                let n = self.d.handle_redeliver_all(self.now, id);
                self.log(format!("  requeued {n}"));
            }
            "skip" | "clear" | "expire" | "evict_count" | "evict_size" | "reset" => {
                let op = match cmd {
                    "skip" => AdminOp::Skip(args[0].parse().unwrap()),
                    "clear" => AdminOp::ClearBacklog,
                    "expire" => AdminOp::Expire(args[0].parse().unwrap()),
                    "evict_count" => AdminOp::EvictToCount(args[0].parse().unwrap()),
                    "evict_size" => AdminOp::EvictToSize(args[0].parse().unwrap()),
                    _ => AdminOp::ResetTo(parse_pos(args[0]).unwrap()),
                };
                let mv = self.driver.admin(self.now, &mut self.d, &self.cell, op);
                self.log_move(mv.as_ref());
            }
            "advance" => {
                // Fire due timers one at a time, at their own time, up to the target.
                let target = self.now + args[0].parse::<u64>().unwrap();
                while let Some(t) = self.d.poll_timeout().filter(|t| *t <= target) {
                    self.now = self.now.max(t);
                    self.d.handle_timeout(self.now);
                    self.pump();
                }
                self.now = target;
            }
            "restart" => {
                let waker = Arc::new(FlagWaker::default());
                {
                    let mut g = CursorCell::lock(&self.cell);
                    let (cursor, ledger) = g.parts();
                    cursor.persist().unwrap();
                    let store = cursor.store().clone();
                    *cursor = ManagedCursor::recover(ledger, store).unwrap();
                }
                self.d = Dispatcher::new(self.cfg.clone(), waker.clone());
                self.driver.set_wake_flag(waker.clone());
                self.ack = self.d.ack_handle(self.cell.clone());
                self.waker = waker;
                self.names.clear();
                self.parked = false;
            }
            "explain" => {
                let r = self.d.why_blocked_key(args[0].as_bytes());
                let s = match r {
                    dispatcher::BlockReason::DrainingOn { consumer, pending } => {
                        format!("draining on {} ({pending} pending)", self.name(consumer))
                    }
                    dispatcher::BlockReason::NoPermits { consumer } => {
                        format!("no permits on {}", self.name(consumer))
                    }
                    dispatcher::BlockReason::BehindReplay { position } => {
                        format!("behind replay at {position}")
                    }
                    dispatcher::BlockReason::HeldByNack { position, until } => {
                        format!("held by nack of {position} until {until}")
                    }
                    dispatcher::BlockReason::Parked { position } => {
                        format!("parked at {position}")
                    }
                    other => format!("{other:?}"),
                };
                self.log(format!("  {}: {s}", args[0]));
            }
            "state" => {
                let s = self.state();
                self.log(s);
            }
            other => panic!("unknown script command {other}"),
        }
        self.pump();
    }

    /// The Key_Shared hash of a key under the current selector.
    pub fn hash_of(&self, key: &str) -> u32 {
        let mut m = EntryMeta::simple(0, 1);
        m.ordering_key = Some(key.as_bytes().to_vec());
        let e = Entry {
            position: Position::new(0, 0),
            meta: Arc::new(m),
        };
        self.d.entry_hash(&e)
    }

    /// Dead letters: the driver acks them on the cursor at the end of every pump and they
    /// are logged there; this only pumps.
    pub fn drain_dead_letters(&mut self) {
        self.pump();
    }

    /// Pending acks, unacked, permits, replay and draining, one block.
    pub fn state(&self) -> String {
        let mut s = String::new();
        for c in self.d.consumer_stats() {
            let pend: Vec<String> = self
                .d
                .pending_positions(c.id)
                .iter()
                .map(|(p, _)| p.to_string())
                .collect();
            let _ = writeln!(
                s,
                "  {}: permits={} unacked={} pending=[{}]{}",
                self.name(c.id),
                c.permits,
                c.unacked,
                pend.join(" "),
                if c.blocked_on_unacked { " BLOCKED" } else { "" }
            );
        }
        let replay: Vec<String> = self
            .d
            .replay_positions()
            .iter()
            .map(|(p, _)| p.to_string())
            .collect();
        let st = self.d.stats();
        let _ = write!(
            s,
            "  replay=[{}] unacked={} draining={}",
            replay.join(" "),
            st.unacked,
            self.d
                .draining_hashes()
                .iter()
                .map(|(_, o, n)| format!("{}x{n}", self.name(*o)))
                .collect::<Vec<_>>()
                .join(",")
        );
        if st.delayed > 0 {
            let _ = write!(s, " delayed={}", st.delayed);
        }
        s
    }
}

/// Parses the config header of a script.
pub fn config_from(lines: &[&str]) -> (DispatcherConfig, usize) {
    let mut cfg = DispatcherConfig::shared();
    let mut used = 0;
    for l in lines {
        let w: Vec<&str> = l.split_whitespace().collect();
        let Some(&first) = w.first() else {
            used += 1;
            continue;
        };
        match first {
            "shared" => cfg.subscription = SubscriptionType::Shared,
            "failover" => {
                let f = match w[1] {
                    "partition" => dispatcher::FailoverConfig::partition(w[2].parse().unwrap()),
                    _ => dispatcher::FailoverConfig::topic(w[2]),
                };
                cfg = DispatcherConfig::failover(f);
            }
            "key_shared" => {
                let mut k = KeySharedConfig::default();
                let mut i = 1;
                while i < w.len() {
                    match w[i] {
                        "ring" => {
                            k.mode = KeySharedMode::ConsistentHashing {
                                points: w[i + 1].parse().unwrap(),
                            };
                            i += 1;
                        }
                        "autosplit" => k.mode = KeySharedMode::AutoSplit,
                        "exclusive" => k.mode = KeySharedMode::Sticky,
                        "ooo" => k.allow_out_of_order = true,
                        x => panic!("bad key_shared option {x}"),
                    }
                    i += 1;
                }
                cfg.subscription = SubscriptionType::KeyShared(k);
            }
            "legacy" => cfg.legacy_mark_delete_cleanup = true,
            "legacy_replay_settle" => cfg.legacy_replay_settle = true,
            "max_unacked_consumer" => cfg.max_unacked_per_consumer = w[1].parse().unwrap(),
            "max_unacked_sub" => cfg.max_unacked_per_subscription = w[1].parse().unwrap(),
            "look_ahead" => {
                cfg.look_ahead_per_consumer = w[1].parse().unwrap();
                cfg.look_ahead_per_subscription = w[2].parse().unwrap();
            }
            "interval" => cfg.unblocking_interval = w[1].parse().unwrap(),
            "draining_timeout" => cfg.draining_timeout = Some(w[1].parse().unwrap()),
            "nack_backoff" => {
                cfg.nack_backoff = match w[1] {
                    "fixed" => dispatcher::NackBackoff::Fixed {
                        delay: w[2].parse().unwrap(),
                    },
                    _ => dispatcher::NackBackoff::Exponential {
                        base: w[2].parse().unwrap(),
                        max: w[3].parse().unwrap(),
                    },
                }
            }
            "dead_letter" => {
                cfg.dead_letter = Some(dispatcher::DeadLetterPolicy {
                    max_deliveries: w[1].parse().unwrap(),
                    action: match w[2] {
                        "park" => dispatcher::DeadLetterAction::Park,
                        _ => dispatcher::DeadLetterAction::Continue,
                    },
                })
            }
            "delay" => {
                // `delay TICK strict|lenient|off`
                cfg.delayed_delivery = dispatcher::DelayedDelivery {
                    enabled: w.get(2) != Some(&"off"),
                    tick: w[1].parse().unwrap(),
                    strict: w.get(2) != Some(&"lenient"),
                };
            }
            "orphan_replay" => {
                cfg.assignor.orphan_policy = chunk_assignor::OrphanPolicy::Replay;
            }
            _ => break,
        }
        used += 1;
    }
    (cfg, used)
}

/// Runs a script and returns the log.
pub fn check(script: &str) -> String {
    run(script).out
}

/// Runs a script and returns the world (for assertions).
pub fn run(script: &str) -> World {
    let lines: Vec<&str> = script
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .collect();
    let (cfg, used) = config_from(&lines);
    let mut w = World::new(cfg);
    for l in &lines[used..] {
        if !l.is_empty() {
            w.step(l);
        }
    }
    w
}
