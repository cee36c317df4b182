//! The simulated world: virtual clock, event queue, producers, ledger, cursor and store, the
//! dispatcher core (driven through its commands), the network and the clients.

use std::cmp::Ordering as CmpOrdering;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use client::{BatchInfo, ChunkInfo, Consumer, ConsumerConfig, IncomingMessage, MessageId};
use cursor::{
    ChunkMeta, CursorStore, Entry, EntryMeta, FileStore, InMemoryLedger, Ledger, ManagedCursor,
    MarkDeleteMove, MemoryStore, PersistedState, Position, StoreError,
};
use dispatcher::{
    AckHandle, Command, ConsumerId, ConsumerSpec, CursorCell, Dispatcher, DispatcherConfig,
    KeySharedConfig, KeySharedMode, SubscriptionType, Waker,
};

use crate::sim::check::{key_str, msg_str, MsgRef, OrderChecker, Violation, ViolationKind};
use crate::sim::rng::{Purpose, Rng, Zipf};
use crate::sim::scenario::{
    Action, ConsumerOpts, Evict, Expect, FaultKind, Mix, PublishSpec, Scenario, Step, StoreKind,
    SubKind, WorldConfig,
};

/// A legacy switch that restores one of Pulsar's known bugs, so the checker can show it fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Legacy {
    /// Key_Shared removes pending acks on a mark-delete move by skip/clear/expiry/quota
    /// (`DispatcherConfig::legacy_mark_delete_cleanup`): expect an order violation.
    MarkDeleteCleanup,
    /// Orphan chunks are replayed instead of dispatched (`OrphanPolicy::Replay`): expect a stall.
    OrphanChunkReplay,
    /// Nack without the broker-side key hold: expect an order violation. Needs the
    /// dispatcher's nack hold (issue 8), which has not landed; runs refuse it.
    UnorderedNack,
}

impl Legacy {
    /// Parses the CLI name.
    pub fn parse(s: &str) -> Option<Legacy> {
        Some(match s {
            "mark-delete-cleanup" => Legacy::MarkDeleteCleanup,
            "orphan-chunk-replay" => Legacy::OrphanChunkReplay,
            "unordered-nack" => Legacy::UnorderedNack,
            _ => return None,
        })
    }

    /// The CLI name.
    pub fn as_str(self) -> &'static str {
        match self {
            Legacy::MarkDeleteCleanup => "mark-delete-cleanup",
            Legacy::OrphanChunkReplay => "orphan-chunk-replay",
            Legacy::UnorderedNack => "unordered-nack",
        }
    }

    /// The violation kind this switch is expected to produce.
    pub fn expected_kind(self) -> ViolationKind {
        match self {
            Legacy::MarkDeleteCleanup | Legacy::UnorderedNack => ViolationKind::Order,
            Legacy::OrphanChunkReplay => ViolationKind::Stall,
        }
    }
}

/// How to run one scenario.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// The seed: one seed, one run, byte-identical.
    pub seed: u64,
    /// A legacy switch, if any.
    pub legacy: Option<Legacy>,
    /// Keep the whole event log in the result (otherwise only its hash and the last lines).
    pub keep_log: bool,
}

/// What one run produced.
#[derive(Clone, Debug)]
pub struct RunResult {
    /// Scenario name.
    pub scenario: String,
    /// Seed.
    pub seed: u64,
    /// Messages published (batch entries count their messages).
    pub messages: u64,
    /// Entries appended to the ledger.
    pub entries: u64,
    /// Distinct keys published.
    pub keys: u64,
    /// Faults executed (joins after time 0, leaves, crashes, restarts, admin operations).
    pub faults: u64,
    /// Violations found (the run stops at the first one found during the run).
    pub violations: Vec<Violation>,
    /// FNV-1a 64 of the event log.
    pub log_hash: u64,
    /// Event-log lines.
    pub log_lines: u64,
    /// Simulated time at the end, ms.
    pub sim_time: u64,
    /// Events processed.
    pub events: u64,
    /// Messages started by applications (redeliveries included).
    pub starts: u64,
    /// The last lines of the event log (context for a violation).
    pub log_tail: Vec<String>,
    /// The whole event log, when asked for.
    pub log: Option<Vec<String>>,
}

/// The cursor store of a run: in memory, or a file in a per-run temp dir.
#[derive(Debug)]
enum SimStore {
    Mem(MemoryStore),
    File(FileStore),
}

impl CursorStore for SimStore {
    fn save(&mut self, state: &PersistedState) -> Result<(), StoreError> {
        match self {
            SimStore::Mem(s) => s.save(state),
            SimStore::File(s) => s.save(state),
        }
    }

    fn load(&mut self) -> Result<Option<PersistedState>, StoreError> {
        match self {
            SimStore::Mem(s) => s.load(),
            SimStore::File(s) => s.load(),
        }
    }
}

impl SimStore {
    /// The same durable state, as a restarted broker opens it.
    fn reopen(&self) -> Result<SimStore, StoreError> {
        Ok(match self {
            SimStore::Mem(s) => SimStore::Mem(s.clone()),
            SimStore::File(s) => SimStore::File(FileStore::open(s.path())?),
        })
    }
}

type Cell = Mutex<CursorCell<SimStore, InMemoryLedger>>;

/// The simulator's waker: a flag the driver checks after every call.
#[derive(Debug, Default)]
struct FlagWaker(AtomicBool);

impl Waker for FlagWaker {
    fn wake(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A client → broker message.
#[derive(Clone, Debug)]
enum Wire {
    Cmd(client::Command),
    Close,
}

#[derive(Debug)]
enum Ev {
    Step(usize),
    Append(Box<EntryMeta>),
    /// The persistence interval passed: the main loop persists a dirty cursor.
    Persist,
    ToClient {
        name: String,
        conn: u64,
        entries: Vec<(Entry, u32)>,
    },
    ToBroker {
        name: String,
        conn: u64,
        cmd: Wire,
    },
    AppDone {
        name: String,
        conn: u64,
        task: u64,
    },
    ClientTimer {
        name: String,
        conn: u64,
    },
    BrokerTimer {
        epoch: u64,
    },
    CrashNoticed {
        id: ConsumerId,
        epoch: u64,
    },
    Reconnect {
        name: String,
        epoch: u64,
    },
}

struct Queued {
    at: u64,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Queued {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Queued {}
impl PartialOrd for Queued {
    fn partial_cmp(&self, o: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(o))
    }
}
impl Ord for Queued {
    fn cmp(&self, o: &Self) -> CmpOrdering {
        // BinaryHeap is a max-heap: the earliest (time, seq) must compare greatest.
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CState {
    Connected,
    Leaving,
    Crashed,
    Gone,
}

#[derive(Clone, Copy, Debug)]
struct Task {
    seq: u64,
    id: MessageId,
    msg: MsgRef,
}

struct SimConsumer {
    opts: ConsumerOpts,
    client: Consumer,
    id: Option<ConsumerId>,
    epoch: u64,
    conn: u64,
    state: CState,
    busy: Option<Task>,
    task_seq: u64,
    to_client_last: u64,
    to_broker_last: u64,
    timer_at: Option<u64>,
    close_sent: bool,
}

pub(crate) fn client_config(o: &ConsumerOpts) -> ConsumerConfig {
    ConsumerConfig {
        receiver_queue_size: o.queue,
        expire_incomplete_chunked_after: o.chunk_expiry,
        auto_ack_oldest_chunked_on_queue_full: o.chunk_auto_ack,
        nack_delay: 200,
        ..ConsumerConfig::default()
    }
}

fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01B3);
    }
    h
}

const FNV_OFFSET: u64 = 0xCBF2_9CE4_8422_2325;
const TAIL: usize = 60;
const MAX_COMMANDS_PER_PUMP: u64 = 200_000;

/// The dispatcher configuration a world config asks for (no legacy switch).
pub(crate) fn dispatcher_config(cfg: &WorldConfig) -> DispatcherConfig {
    let mut d = match cfg.sub {
        SubKind::Shared => DispatcherConfig::shared(),
        SubKind::KeySharedRing => DispatcherConfig::key_shared(),
        SubKind::KeySharedAutoSplit => {
            DispatcherConfig::new(SubscriptionType::KeyShared(KeySharedConfig {
                mode: KeySharedMode::AutoSplit,
                allow_out_of_order: false,
            }))
        }
    };
    d.unblocking_interval = cfg.unblocking_interval;
    if let Some(n) = cfg.max_unacked_consumer {
        d.max_unacked_per_consumer = n;
    }
    if let Some(n) = cfg.max_unacked_sub {
        d.max_unacked_per_subscription = n;
    }
    if let Some(n) = cfg.look_ahead {
        d.look_ahead_per_consumer = n;
        d.look_ahead_per_subscription = n.saturating_mul(10);
    }
    d
}

/// One simulated world. Build it with [`World::new`], run it with [`World::run`].
pub struct World {
    name: String,
    cfg: WorldConfig,
    dcfg: DispatcherConfig,
    seed: u64,
    mix: Option<Mix>,
    now: u64,
    seq: u64,
    queue: BinaryHeap<Queued>,
    rng_work: Rng,
    rng_fault: Rng,
    rng_net: Rng,
    rng_time: Rng,
    cell: Arc<Cell>,
    d: Dispatcher,
    ack: AckHandle,
    waker: Arc<FlagWaker>,
    broker_epoch: u64,
    consumers: BTreeMap<String, SimConsumer>,
    by_id: BTreeMap<ConsumerId, String>,
    next_id: u64,
    next_conn: u64,
    next_join: u32,
    steps: Vec<Step>,
    steps_done: usize,
    expects: Vec<Expect>,
    acked: BTreeSet<Position>,
    dropped: BTreeSet<Position>,
    checked_md: Position,
    model: BTreeMap<ConsumerId, BTreeSet<Position>>,
    /// uuid → consumer its chunk 0 went to, until its last chunk is sent (the chunk assignor's
    /// pins on Shared, the dispatcher's uuid pins on Key_Shared).
    pins: BTreeMap<String, ConsumerId>,
    order: OrderChecker,
    violations: Vec<Violation>,
    messages: u64,
    entries: u64,
    keys: BTreeSet<Vec<u8>>,
    faults: u64,
    events: u64,
    producer_seq: BTreeMap<u32, u64>,
    last_activity: u64,
    last_persist: u64,
    /// When an entry was last acked or dropped for the first time.
    last_progress: u64,
    persist_scheduled: bool,
    log_hash: u64,
    log_lines: u64,
    tail: VecDeque<String>,
    full: Option<Vec<String>>,
    temp_dir: Option<PathBuf>,
}

fn lock(cell: &Cell) -> MutexGuard<'_, CursorCell<SimStore, InMemoryLedger>> {
    match cell.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl World {
    /// Builds the world of `scenario` for `opts.seed`: expands the `mix` (if any) into steps.
    /// Errors when the scenario asks for something this build cannot do.
    pub fn new(scenario: &Scenario, opts: &RunOptions) -> Result<World, String> {
        let cfg = scenario.config.clone();
        let mut dcfg = dispatcher_config(&cfg);
        match opts.legacy {
            Some(Legacy::MarkDeleteCleanup) => dcfg.legacy_mark_delete_cleanup = true,
            Some(Legacy::OrphanChunkReplay) => {
                dcfg.assignor.orphan_policy = chunk_assignor::OrphanPolicy::Replay
            }
            Some(Legacy::UnorderedNack) => {
                return Err(
                    "--legacy unordered-nack needs the dispatcher's ordered-nack hold \
                     (issue 8), which has not landed: the dispatcher has no nack/release input, \
                     so there is no ordered mode to switch off"
                        .into(),
                )
            }
            None => {}
        }
        let seed = opts.seed;
        let mut temp_dir = None;
        let ledger = InMemoryLedger::new(1_000_000);
        let store = match cfg.store {
            StoreKind::Memory => SimStore::Mem(MemoryStore::new()),
            StoreKind::File => {
                let dir = std::env::temp_dir().join(format!(
                    "kod-sim-{}-{}-{seed}",
                    std::process::id(),
                    scenario.name
                ));
                let _ = std::fs::remove_dir_all(&dir);
                std::fs::create_dir_all(&dir).map_err(|e| format!("temp dir: {e}"))?;
                let fs = FileStore::open(dir.join("cursor.log"))
                    .map_err(|e| format!("file store: {e}"))?;
                temp_dir = Some(dir);
                SimStore::File(fs)
            }
        };
        let cursor = ManagedCursor::new("sim", &ledger, store);
        let checked_md = cursor.mark_delete_position();
        let cell = Arc::new(Mutex::new(CursorCell { cursor, ledger }));
        let waker = Arc::new(FlagWaker::default());
        let d = Dispatcher::new(dcfg.clone(), waker.clone());
        let ack = d.ack_handle(cell.clone());
        let ordered = !matches!(cfg.sub, SubKind::Shared);
        let mut w = World {
            name: scenario.name.clone(),
            cfg,
            dcfg,
            seed,
            mix: scenario.mix.clone(),
            now: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            rng_work: Rng::new(seed, Purpose::Workload),
            rng_fault: Rng::new(seed, Purpose::Faults),
            rng_net: Rng::new(seed, Purpose::Network),
            rng_time: Rng::new(seed, Purpose::Timing),
            cell,
            d,
            ack,
            waker,
            broker_epoch: 1,
            consumers: BTreeMap::new(),
            by_id: BTreeMap::new(),
            next_id: 1,
            next_conn: 1,
            next_join: 1,
            steps: Vec::new(),
            steps_done: 0,
            expects: scenario.expects.clone(),
            acked: BTreeSet::new(),
            dropped: BTreeSet::new(),
            checked_md,
            model: BTreeMap::new(),
            pins: BTreeMap::new(),
            order: OrderChecker::new(ordered),
            violations: Vec::new(),
            messages: 0,
            entries: 0,
            keys: BTreeSet::new(),
            faults: 0,
            events: 0,
            producer_seq: BTreeMap::new(),
            last_activity: 0,
            last_persist: 0,
            last_progress: 0,
            persist_scheduled: false,
            log_hash: FNV_OFFSET,
            log_lines: 0,
            tail: VecDeque::new(),
            full: opts.keep_log.then(Vec::new),
            temp_dir,
        };
        let mut steps = scenario.steps.clone();
        if let Some(mix) = &scenario.mix {
            steps.extend(w.expand_mix(mix));
        }
        steps.sort_by_key(|s| s.at);
        w.last_activity = steps.iter().map(|s| s.at).max().unwrap_or(0);
        for (i, s) in steps.iter().enumerate() {
            let at = s.at;
            w.schedule(at, Ev::Step(i));
        }
        w.steps = steps;
        let legacy = opts.legacy.map(Legacy::as_str).unwrap_or("none");
        w.log(format!(
            "world scenario={} seed={seed} legacy={legacy}",
            w.name
        ));
        Ok(w)
    }

    /// The scripted steps with the mix expanded, in time order.
    pub(crate) fn expanded_steps(&self) -> Vec<Step> {
        self.steps.clone()
    }

    fn mix_consumer_opts(&mut self, mix: &Mix) -> ConsumerOpts {
        let r = &mut self.rng_fault;
        let zero = r.chance(mix.zero);
        let slow = r.chance(mix.slow);
        let queue = if zero {
            0
        } else {
            r.range(u64::from(mix.queue.0), u64::from(mix.queue.1)) as u32
        };
        let k = if slow { 10 } else { 1 };
        ConsumerOpts {
            queue,
            proc: (mix.proc.0 * k, mix.proc.1 * k),
            nack: mix.nack,
            manual: false,
            prio: 0,
            chunk_expiry: Some(mix.chunk_expiry),
            chunk_auto_ack: mix.chunk_auto_ack,
        }
    }

    fn expand_mix(&mut self, mix: &Mix) -> Vec<Step> {
        let mut steps = Vec::new();
        for _ in 0..mix.consumers {
            let name = format!("c{}", self.next_join);
            self.next_join += 1;
            let o = self.mix_consumer_opts(mix);
            steps.push(Step {
                at: 0,
                action: Action::Join(name, o),
            });
        }
        let zipf = Zipf::new(mix.keys.max(1) as usize, mix.zipf);
        let n = u64::from(mix.messages.max(1));
        for i in 0..u64::from(mix.messages) {
            let r = &mut self.rng_work;
            let at = 1 + mix.duration * i / n + r.below(mix.duration / n + 1);
            let key = if r.chance(mix.keyless) {
                None
            } else {
                Some(format!("k{}", zipf.sample(r)))
            };
            let producer = r.below(3) as u32;
            let (mut batch, mut chunks, mut spread) = (1, 1, 0);
            if r.chance(mix.chunked) {
                chunks = r.range(2, 4) as u32;
                spread = r.range(0, mix.chunk_spread);
            } else if r.chance(mix.batched) {
                batch = r.range(2, 5) as u32;
            }
            steps.push(Step {
                at,
                action: Action::Publish(PublishSpec {
                    key,
                    count: 1,
                    batch,
                    chunks,
                    spread,
                    producer,
                }),
            });
        }
        if !mix.kinds.is_empty() {
            for _ in 0..mix.faults {
                let r = &mut self.rng_fault;
                let at = r.range(mix.duration / 10, mix.duration * 9 / 10);
                let kind = mix.kinds[r.below(mix.kinds.len() as u64) as usize];
                steps.push(Step {
                    at,
                    action: Action::RandomFault(kind),
                });
            }
        }
        steps
    }

    // ------------------------------------------------------------------ plumbing

    fn schedule(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        self.queue.push(Queued {
            at: at.max(self.now),
            seq: self.seq,
            ev,
        });
    }

    fn log(&mut self, line: String) {
        let line = format!("t={} {line}", self.now);
        self.log_hash = fnv1a(self.log_hash, line.as_bytes());
        self.log_hash = fnv1a(self.log_hash, b"\n");
        self.log_lines += 1;
        if self.tail.len() == TAIL {
            self.tail.pop_front();
        }
        if let Some(full) = &mut self.full {
            full.push(line.clone());
        }
        self.tail.push_back(line);
    }

    fn violate(&mut self, v: Violation) {
        self.log(format!("VIOLATION {v}"));
        self.violations.push(v);
    }

    fn simple_violation(&mut self, kind: ViolationKind, detail: String) {
        let v = Violation {
            kind,
            at: self.now,
            key: None,
            positions: Vec::new(),
            consumers: Vec::new(),
            detail,
        };
        self.violate(v);
    }

    fn net_delay(&mut self) -> u64 {
        let (a, b) = self.cfg.net;
        self.rng_net.range(a, b)
    }

    fn name_of(&self, id: ConsumerId) -> String {
        self.by_id
            .get(&id)
            .cloned()
            .unwrap_or_else(|| id.to_string())
    }

    fn key_of(meta: &EntryMeta) -> Option<Vec<u8>> {
        meta.ordering_key
            .clone()
            .or_else(|| meta.partition_key.as_ref().map(|k| k.as_bytes().to_vec()))
    }

    // ------------------------------------------------------------------ the run

    /// Runs to the end: until the backlog is drained after the last step (or the drain bound
    /// passes: a stall), or the first violation. Consumes the world.
    pub fn run(mut self) -> RunResult {
        while let Some(q) = self.queue.pop() {
            self.now = q.at;
            self.events += 1;
            self.handle(q.ev);
            if !self.violations.is_empty() {
                break;
            }
            self.check_cursor();
            if !self.violations.is_empty() {
                break;
            }
            self.maybe_persist();
            if self.steps_done == self.steps.len() && self.now >= self.last_activity {
                let backlog = {
                    let g = lock(&self.cell);
                    g.cursor.backlog(&g.ledger).entries
                };
                if backlog == 0 {
                    self.log("backlog drained".into());
                    break;
                }
                if self.now > self.last_activity.saturating_add(self.cfg.drain_bound) {
                    self.stall("the backlog did not drain within the bound");
                    break;
                }
                let quiet_since = self.last_activity.max(self.last_progress);
                if self.now > quiet_since.saturating_add(self.cfg.stall_window) {
                    let why = format!(
                        "no entry was acked or dropped for {} ms",
                        self.now - quiet_since
                    );
                    self.stall(&why);
                    break;
                }
            }
        }
        if self.violations.is_empty() {
            let backlog = {
                let g = lock(&self.cell);
                g.cursor.backlog(&g.ledger).entries
            };
            if backlog > 0 {
                self.stall("nothing left to happen and the backlog is not empty");
            }
        }
        if self.violations.is_empty() {
            self.check_no_loss();
            self.check_expectations();
        }
        self.log(format!(
            "end violations={} messages={} entries={} faults={}",
            self.violations.len(),
            self.messages,
            self.entries,
            self.faults
        ));
        RunResult {
            scenario: self.name.clone(),
            seed: self.seed,
            messages: self.messages,
            entries: self.entries,
            keys: self.keys.len() as u64,
            faults: self.faults,
            violations: std::mem::take(&mut self.violations),
            log_hash: self.log_hash,
            log_lines: self.log_lines,
            sim_time: self.now,
            events: self.events,
            starts: self.order.starts,
            log_tail: self.tail.iter().cloned().collect(),
            log: self.full.take(),
        }
    }

    /// Persists the cursor when it changed and the persistence interval passed (Pulsar
    /// throttles mark-delete persistence the same way); a restart loses what was not persisted.
    fn maybe_persist(&mut self) {
        if !lock(&self.cell).cursor.is_dirty() {
            return;
        }
        let due = self.last_persist.saturating_add(self.cfg.persist_interval);
        if self.now < due {
            if !self.persist_scheduled {
                self.persist_scheduled = true;
                self.schedule(due, Ev::Persist);
            }
            return;
        }
        let r = lock(&self.cell).cursor.persist();
        self.last_persist = self.now;
        if let Err(e) = r {
            self.log(format!("cursor persist failed: {e}"));
        }
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Step(i) => {
                self.steps_done += 1;
                let step = self.steps[i].clone();
                self.run_step(step);
            }
            Ev::Append(meta) => self.append(*meta),
            Ev::Persist => self.persist_scheduled = false,
            Ev::ToClient {
                name,
                conn,
                entries,
            } => self.client_receives(&name, conn, entries),
            Ev::ToBroker { name, conn, cmd } => self.broker_receives(&name, conn, cmd),
            Ev::AppDone { name, conn, task } => {
                let ok = self
                    .consumers
                    .get(&name)
                    .is_some_and(|c| c.conn == conn && c.busy.is_some_and(|t| t.seq == task));
                if ok {
                    let nack = {
                        let p = self.consumers.get(&name).map_or(0, |c| c.opts.nack);
                        self.rng_time.chance(p)
                    };
                    self.finish_task(&name, nack);
                }
            }
            Ev::ClientTimer { name, conn } => {
                let now = self.now;
                let ok = match self.consumers.get_mut(&name) {
                    Some(c) if c.conn == conn && c.conn != 0 => {
                        c.timer_at = None;
                        c.client.on_timer(now);
                        true
                    }
                    _ => false,
                };
                if ok {
                    self.pump_client(&name);
                    self.try_start(&name);
                }
            }
            Ev::BrokerTimer { epoch } => {
                if epoch == self.broker_epoch
                    && self.d.poll_timeout().is_some_and(|t| t <= self.now)
                {
                    self.log("broker: timeout".into());
                    self.d.handle_timeout(self.now);
                    self.pump_broker();
                }
            }
            Ev::CrashNoticed { id, epoch } => {
                if epoch == self.broker_epoch {
                    let name = self.name_of(id);
                    self.log(format!("broker notices {name} ({id}) is gone"));
                    self.remove_from_broker(id);
                }
            }
            Ev::Reconnect { name, epoch } => {
                if epoch == self.broker_epoch
                    && self
                        .consumers
                        .get(&name)
                        .is_some_and(|c| c.state == CState::Connected && c.conn == 0)
                {
                    self.connect(&name);
                }
            }
        }
    }

    // ------------------------------------------------------------------ steps and faults

    fn run_step(&mut self, step: Step) {
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
                    self.schedule(at, Ev::AppDone { name, conn, task });
                } else {
                    self.try_start(&name);
                }
            }
            Action::RandomFault(kind) => self.random_fault(kind),
        }
    }

    fn connected(&self) -> Vec<String> {
        self.consumers
            .iter()
            .filter(|(_, c)| c.state == CState::Connected)
            .map(|(n, _)| n.clone())
            .collect()
    }

    fn random_fault(&mut self, kind: FaultKind) {
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

    fn join(&mut self, name: &str, opts: ConsumerOpts) {
        if let Some(c) = self.consumers.get(name) {
            if matches!(c.state, CState::Connected | CState::Leaving) {
                self.simple_violation(
                    ViolationKind::Expectation,
                    format!("scenario joins {name}, which is already connected"),
                );
                return;
            }
        }
        let client = match Consumer::new(client_config(&opts)) {
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
    fn connect(&mut self, name: &str) {
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

    fn leave(&mut self, name: &str) {
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

    fn maybe_close(&mut self, name: &str) {
        let Some(c) = self.consumers.get_mut(name) else {
            return;
        };
        if c.state != CState::Leaving || c.busy.is_some() || c.close_sent || c.conn == 0 {
            return;
        }
        c.close_sent = true;
        self.send_to_broker(name, Wire::Close);
    }

    fn crash(&mut self, name: &str) {
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
            self.schedule(at, Ev::CrashNoticed { id, epoch });
        }
    }

    fn remove_from_broker(&mut self, id: ConsumerId) {
        let now = self.now;
        if self.d.handle_consumer_removed(now, id) {
            self.model.remove(&id);
            self.pins.retain(|_, c| *c != id);
        }
        self.by_id.remove(&id);
        self.pump_broker();
    }

    fn restart(&mut self) {
        self.log("broker restart".into());
        self.broker_epoch += 1;
        {
            let mut g = lock(&self.cell);
            let CursorCell { cursor, ledger } = &mut *g;
            // A crash: what was not persisted yet is lost (and redelivered).
            let recovered = cursor
                .store()
                .reopen()
                .map_err(|e| e.to_string())
                .and_then(|s| ManagedCursor::recover(ledger, s).map_err(|e| e.to_string()));
            match recovered {
                Ok(c) => {
                    let (before, after) = (cursor.mark_delete_position(), c.mark_delete_position());
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
        self.waker = waker;
        self.model.clear();
        self.pins.clear();
        self.by_id.clear();
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
                    match Consumer::new(client_config(&c.opts)) {
                        Ok(fresh) => c.client = fresh,
                        Err(_) => continue,
                    }
                    let at = self.now + self.rng_net.range(10, 100);
                    self.schedule(at, Ev::Reconnect { name, epoch });
                }
                CState::Leaving | CState::Crashed => c.state = CState::Gone,
                CState::Gone => {}
            }
        }
    }

    fn publish(&mut self, p: PublishSpec) {
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
                        self.schedule(at, Ev::Append(Box::new(m)));
                    }
                }
            } else {
                self.append(meta.with_messages(p.batch));
            }
        }
    }

    fn append(&mut self, mut meta: EntryMeta) {
        meta.publish_time = self.now;
        let key = Self::key_of(&meta);
        let chunk = meta.chunk.clone();
        let n = meta.messages();
        let pos = lock(&self.cell).ledger.append(meta);
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
            None => String::new(),
        };
        self.log(format!("publish {pos} key={k}{what}"));
        let now = self.now;
        self.d.handle_entries_appended(now);
        self.pump_broker();
    }

    fn admin(
        &mut self,
        op: impl FnOnce(&mut ManagedCursor<SimStore>, &InMemoryLedger) -> Option<MarkDeleteMove>,
    ) {
        let mv = {
            let mut g = lock(&self.cell);
            let CursorCell { cursor, ledger } = &mut *g;
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

    // ------------------------------------------------------------------ broker side

    fn send_to_broker(&mut self, name: &str, cmd: Wire) {
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
            Ev::ToBroker {
                name: name.to_string(),
                conn,
                cmd,
            },
        );
    }

    fn broker_receives(&mut self, name: &str, conn: u64, cmd: Wire) {
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
            Wire::Cmd(client::Command::RedeliverUnacked(es))
            | Wire::Cmd(client::Command::Release(es))
            | Wire::Cmd(client::Command::Nack { entries: es, .. }) => {
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
                let n = self.d.handle_redeliver(now, id, &ps);
                let list: Vec<String> = ps.iter().map(|p| p.to_string()).collect();
                self.log(format!(
                    "broker: redeliver {name} [{}] requeued={n}",
                    list.join(" ")
                ));
                if n != expected {
                    self.simple_violation(
                        ViolationKind::Model,
                        format!(
                            "redelivery for {name} requeued {n}, the model expected {expected}"
                        ),
                    );
                }
            }
        }
        self.pump_broker();
    }

    fn model_owner(&self, p: Position) -> Option<ConsumerId> {
        self.model
            .iter()
            .find(|(_, s)| s.contains(&p))
            .map(|(id, _)| *id)
    }

    fn broker_ack(&mut self, name: &str, id: ConsumerId, mid: MessageId) {
        let p = Position::new(mid.ledger_id, mid.entry_id);
        if let Some(i) = mid.batch_index {
            let r = {
                let mut g = lock(&self.cell);
                let CursorCell { cursor, ledger } = &mut *g;
                let size = ledger.meta(p).map_or(1, EntryMeta::messages);
                let open = p > cursor.mark_delete_position() && !cursor.is_acked(p);
                cursor
                    .ack_batch_index(ledger, p, size, &[i])
                    .map(|o| (o, open && cursor.is_acked(p)))
            };
            match r {
                Ok((o, complete)) => {
                    self.log(format!("broker: ack {name} {mid} newly={}", o.newly_acked));
                    // Only when this index completed an entry still above mark-delete; a
                    // dropped entry's pending ack goes with the client's whole-entry ack.
                    if complete {
                        // The last batch index completed the entry: its pending ack goes too.
                        if self.acked.insert(p) {
                            self.last_progress = self.now;
                        }
                        let expected = self.model_owner(p);
                        let out = self.ack.clear_pending(id, p, o.newly_acked);
                        self.after_ack(name, p, out, expected);
                    }
                }
                Err(e) => self.log(format!("broker: ack {name} {mid} refused: {e}")),
            }
            return;
        }
        let expected = self.model_owner(p);
        match self.ack.ack(id, p) {
            Ok(o) => {
                if self.acked.insert(p) {
                    self.last_progress = self.now;
                }
                self.after_ack(name, p, o, expected);
            }
            Err(e) => self.log(format!("broker: ack {name} {p} refused: {e}")),
        }
    }

    fn after_ack(
        &mut self,
        name: &str,
        p: Position,
        o: dispatcher::AckOutcome,
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

    /// Executes the dispatcher's commands until it has none left.
    fn pump_broker(&mut self) {
        let mut n = 0u64;
        loop {
            if self.waker.0.swap(false, Ordering::SeqCst) {
                self.log("broker: wake".into());
                self.d.handle_wake(self.now);
            }
            let Some(cmd) = self.d.poll_command() else {
                if self.waker.0.load(Ordering::SeqCst) {
                    continue;
                }
                break;
            };
            n += 1;
            if n > MAX_COMMANDS_PER_PUMP {
                self.simple_violation(
                    ViolationKind::Livelock,
                    format!("the dispatcher issued more than {MAX_COMMANDS_PER_PUMP} commands without settling"),
                );
                return;
            }
            let now = self.now;
            match cmd {
                Command::Rewind => {
                    let mut g = lock(&self.cell);
                    let CursorCell { cursor, ledger } = &mut *g;
                    cursor.rewind(ledger);
                }
                Command::Read { max_entries } => {
                    let (entries, more) = {
                        let mut g = lock(&self.cell);
                        let CursorCell { cursor, ledger } = &mut *g;
                        let e = cursor.read(ledger, max_entries);
                        (e, cursor.has_more_entries(ledger))
                    };
                    self.d.handle_read_complete(now, entries, more);
                }
                Command::Replay { positions } => {
                    let r = {
                        let g = lock(&self.cell);
                        g.cursor.replay(&g.ledger, &positions)
                    };
                    self.d
                        .handle_replay_complete(now, r.entries, &r.already_acked);
                }
                Command::Send { consumer, entries } => self.on_send(consumer, entries),
                Command::SetTimer { at } => {
                    self.log(format!("broker: timer at {at}"));
                    let epoch = self.broker_epoch;
                    self.schedule(at, Ev::BrokerTimer { epoch });
                }
            }
        }
        self.check_model();
    }

    fn on_send(&mut self, id: ConsumerId, entries: Vec<Entry>) {
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
            // message (dropping copies of indexes it knows are acked). Filtering here would leak
            // permits.
            out.push((e, redeliveries));
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
            Ev::ToClient {
                name,
                conn,
                entries: out,
            },
        );
    }

    // ------------------------------------------------------------------ client side

    fn client_receives(&mut self, name: &str, conn: u64, entries: Vec<(Entry, u32)>) {
        let now = self.now;
        let mut errors = Vec::new();
        {
            let Some(c) = self.consumers.get_mut(name) else {
                return;
            };
            if c.conn != conn || conn == 0 {
                return;
            }
            for (e, redelivery_count) in entries {
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
                };
                let n = m.messages();
                if n > 1 && m.chunk.is_none() {
                    for i in 0..n {
                        let msg = IncomingMessage {
                            id: MessageId::batched(l, en, i),
                            batch: Some(BatchInfo { index: i, size: n }),
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

    fn pump_client(&mut self, name: &str) {
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
                Ev::ClientTimer {
                    name: name.to_string(),
                    conn,
                },
            );
        }
    }

    fn try_start(&mut self, name: &str) {
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
                    Ev::AppDone {
                        name: name.to_string(),
                        conn,
                        task,
                    },
                );
            }
        }
        self.pump_client(name);
    }

    fn finish_task(&mut self, name: &str, nack: bool) {
        let now = self.now;
        let result = {
            let Some(c) = self.consumers.get_mut(name) else {
                return;
            };
            let Some(t) = c.busy.take() else { return };
            let r = if nack {
                c.client.nack(now, t.id).map_err(|e| e.to_string())
            } else {
                c.client.ack(now, t.id).map_err(|e| e.to_string())
            };
            (t, r)
        };
        let (t, r) = result;
        self.order.finish(now, name);
        let verb = if nack { "nacks" } else { "acks" };
        match r {
            Ok(()) => self.log(format!("app {name} {verb} {}", msg_str(t.msg))),
            Err(e) => self.log(format!(
                "app {name} {verb} {}: refused: {e}",
                msg_str(t.msg)
            )),
        }
        self.pump_client(name);
        self.maybe_close(name);
        self.try_start(name);
    }

    fn manual_finish(&mut self, name: &str, p: Option<Position>, nack: bool) {
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

    // ------------------------------------------------------------------ invariants

    /// The cursor never passes a position that was neither acked nor dropped.
    fn check_cursor(&mut self) {
        let bad = {
            let g = lock(&self.cell);
            let md = g.cursor.mark_delete_position();
            let mut bad = None;
            let mut p = self.checked_md;
            while let Some(q) = g.ledger.next_position(p) {
                if q > md {
                    break;
                }
                if !self.acked.contains(&q) && !self.dropped.contains(&q) {
                    bad = Some((q, md));
                    break;
                }
                p = q;
            }
            if bad.is_none() && md > self.checked_md {
                self.checked_md = md;
            }
            bad
        };
        if let Some((q, md)) = bad {
            let v = Violation {
                kind: ViolationKind::CursorPassed,
                at: self.now,
                key: None,
                positions: vec![q.to_string(), md.to_string()],
                consumers: Vec::new(),
                detail: format!(
                    "mark-delete is {md}, past {q}, which was neither acked nor dropped by a recorded operation"
                ),
            };
            self.violate(v);
        }
    }

    /// Pending acks and draining refcounts against the reference model.
    fn check_model(&mut self) {
        if !self.violations.is_empty() {
            return;
        }
        let ids: BTreeSet<ConsumerId> = self.d.consumer_ids().into_iter().collect();
        let model_ids: BTreeSet<ConsumerId> = self.model.keys().copied().collect();
        if ids != model_ids {
            self.simple_violation(
                ViolationKind::Model,
                format!("connected consumers {ids:?}, the model has {model_ids:?}"),
            );
            return;
        }
        let mut per_hash: BTreeMap<(ConsumerId, u32), u32> = BTreeMap::new();
        let unacked: BTreeMap<ConsumerId, i64> = self
            .d
            .consumer_stats()
            .into_iter()
            .map(|c| (c.id, c.unacked))
            .collect();
        for id in ids {
            let expected_unacked: i64 = {
                let g = lock(&self.cell);
                self.model[&id]
                    .iter()
                    .map(|p| i64::from(g.ledger.meta(*p).map_or(1, EntryMeta::messages)))
                    .sum()
            };
            let real_unacked = unacked.get(&id).copied().unwrap_or(0);
            if real_unacked != expected_unacked {
                let name = self.name_of(id);
                self.simple_violation(
                    ViolationKind::Model,
                    format!("{name} is charged {real_unacked} unacked messages, its pending entries hold {expected_unacked}"),
                );
                return;
            }
            let real = self.d.pending_positions(id);
            let expected = &self.model[&id];
            let same = real.len() == expected.len()
                && real.iter().zip(expected.iter()).all(|((p, _), q)| p == q);
            if !same {
                let real_set: BTreeSet<Position> = real.iter().map(|(p, _)| *p).collect();
                let extra: Vec<String> = real_set
                    .difference(expected)
                    .take(5)
                    .map(|p| p.to_string())
                    .collect();
                let missing: Vec<String> = expected
                    .difference(&real_set)
                    .take(5)
                    .map(|p| p.to_string())
                    .collect();
                let name = self.name_of(id);
                let v = Violation {
                    kind: ViolationKind::Model,
                    at: self.now,
                    key: None,
                    positions: extra.iter().chain(missing.iter()).cloned().collect(),
                    consumers: vec![name.clone()],
                    detail: format!(
                        "pending acks of {name} differ from the model: unexpected [{}], missing [{}]",
                        extra.join(" "),
                        missing.join(" ")
                    ),
                };
                self.violate(v);
                return;
            }
            for (_, h) in real {
                *per_hash.entry((id, h)).or_insert(0) += 1;
            }
        }
        {
            let real = self.d.stats().chunk_pins;
            if real != self.pins.len() {
                let detail = format!(
                    "the chunk assignor holds {real} pins, the model {} ({:?})",
                    self.pins.len(),
                    self.pins.keys().take(5).collect::<Vec<_>>()
                );
                self.simple_violation(ViolationKind::Model, detail);
                return;
            }
        }
        for (hash, owner, refs) in self.d.draining_hashes() {
            let pending = per_hash.get(&(owner, hash)).copied().unwrap_or(0);
            if pending != refs {
                let name = self.name_of(owner);
                let v = Violation {
                    kind: ViolationKind::Model,
                    at: self.now,
                    key: None,
                    positions: Vec::new(),
                    consumers: vec![name.clone()],
                    detail: format!(
                        "hash {hash} drains on {name} with {refs} references, but {name} has {pending} pending entries of it"
                    ),
                };
                self.violate(v);
                return;
            }
        }
    }

    fn stall(&mut self, why: &str) {
        let (first, backlog, meta) = {
            let g = lock(&self.cell);
            let md = g.cursor.mark_delete_position();
            let mut p = md;
            let mut first = None;
            while let Some(q) = g.ledger.next_position(p) {
                if !g.cursor.is_acked(q) {
                    first = Some(q);
                    break;
                }
                p = q;
            }
            let meta = first.and_then(|q| g.ledger.meta(q).cloned());
            (first, g.cursor.backlog(&g.ledger).entries, meta)
        };
        let key = meta.as_ref().and_then(Self::key_of);
        let mut detail = format!("{why}: {backlog} entries left");
        if let Some(q) = first {
            let _ = write!(detail, "; the first unacked entry is {q}");
        }
        if let Some(c) = meta.as_ref().and_then(|m| m.chunk.as_ref()) {
            let _ = write!(
                detail,
                " (chunk {} of {} of {})",
                c.chunk_id, c.num_chunks, c.uuid
            );
        }
        if let Some(k) = &key {
            let _ = write!(detail, "; why blocked: {:?}", self.d.why_blocked_key(k));
        }
        if let Some(q) = first {
            let in_replay = self.d.replay_positions().iter().any(|(p, _)| *p == q);
            let owner = self.model_owner(q).map(|c| self.name_of(c));
            let _ = write!(
                detail,
                "; in replay: {in_replay}; pending on: {}",
                owner.as_deref().unwrap_or("nobody")
            );
        }
        let st = self.d.stats();
        let _ = write!(
            detail,
            "; replay={} orphan_chunks={} consumers={}",
            st.replay_size, st.orphan_chunks, st.consumers
        );
        let consumers: Vec<String> = self.connected();
        let v = Violation {
            kind: ViolationKind::Stall,
            at: self.now,
            key: key.map(|k| key_str(&k)),
            positions: first.map(|p| p.to_string()).into_iter().collect(),
            consumers,
            detail,
        };
        self.violate(v);
    }

    fn check_no_loss(&mut self) {
        let lost: Vec<Position> = {
            let g = lock(&self.cell);
            let mut p = g.ledger.before_first();
            let mut lost = Vec::new();
            while let Some(q) = g.ledger.next_position(p) {
                if !self.acked.contains(&q) && !self.dropped.contains(&q) {
                    lost.push(q);
                }
                p = q;
            }
            lost
        };
        if !lost.is_empty() {
            let v = Violation {
                kind: ViolationKind::Loss,
                at: self.now,
                key: None,
                positions: lost.iter().take(10).map(|p| p.to_string()).collect(),
                consumers: Vec::new(),
                detail: format!(
                    "{} published entries were neither acked nor dropped by a recorded operation",
                    lost.len()
                ),
            };
            self.violate(v);
        }
    }

    fn check_expectations(&mut self) {
        let expects = std::mem::take(&mut self.expects);
        for e in expects {
            let failed = match &e {
                Expect::Start(n, p) => (!self.order.started_by(n, *p))
                    .then(|| format!("expected {n} to start {p}; it never did")),
                Expect::NoStart(n, p) => self
                    .order
                    .started_by(n, *p)
                    .then(|| format!("expected {n} never to start {p}; it did")),
                Expect::Order(a, b) => {
                    match (self.order.last_finish(*a), self.order.first_start(*b)) {
                        (Some(fa), Some(sb)) if fa <= sb => None,
                        (fa, sb) => Some(format!(
                            "expected {a} finished (t={fa:?}) before {b} first started (t={sb:?})"
                        )),
                    }
                }
            };
            if let Some(detail) = failed {
                self.simple_violation(ViolationKind::Expectation, detail);
            }
        }
    }
}

impl Drop for World {
    fn drop(&mut self) {
        if let Some(dir) = self.temp_dir.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
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
