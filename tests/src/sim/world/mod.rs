//! The simulated world: virtual clock, event queue, producers, ledger, cursor and store, the
//! dispatcher core (driven through its commands), the network and the clients.

use std::cmp::Ordering as CmpOrdering;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use client::{BatchInfo, ChunkInfo, Consumer, ConsumerConfig, IncomingMessage, MessageId};
use cursor::{
    ChunkMeta, CursorStore, Entry, EntryMeta, FileStore, InMemoryLedger, Ledger, ManagedCursor,
    MarkDeleteMove, MemoryStore, PersistedState, Position, StoreError,
};
use dispatcher::{
    AckHandle, ConsumerId, ConsumerSpec, CursorCell, Dispatcher, DispatcherConfig, Driver,
    FlagWaker, KeySharedConfig, KeySharedMode, Output, Persist, SubscriptionType,
};

use crate::sim::check::{key_str, msg_str, MsgRef, OrderChecker, Violation, ViolationKind};
use crate::sim::rng::{Purpose, Rng, Zipf};
use crate::sim::scenario::{
    Action, ConsumerOpts, Evict, Expect, FaultKind, Mix, PublishSpec, Scenario, Step, StoreKind,
    SubKind, WorldConfig,
};

mod broker;
mod client_side;
pub(crate) use client_side::hand_back;
mod faults;
mod invariants;

/// A legacy switch that restores one of Pulsar's known bugs, so the checker can show it fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Legacy {
    /// Key_Shared removes pending acks on a mark-delete move by skip/clear/expiry/quota
    /// (`DispatcherConfig::legacy_mark_delete_cleanup`): expect an order violation.
    MarkDeleteCleanup,
    /// Orphan chunks are replayed instead of dispatched (`OrphanPolicy::Replay`): expect a stall.
    OrphanChunkReplay,
    /// Pulsar-mode nack on Key_Shared (the client redelivers after the delay, the broker does
    /// not hold the key): expect an order violation.
    UnorderedNack,
    /// Deliveries without the batch's acked indexes (no `ack_set` on a redelivered batch):
    /// expect an acked message handed to an application again.
    NoBatchAckSet,
    /// Deliver-at times ignored (`DelayedDelivery::enabled = false`): expect a delayed message
    /// dispatched before its time.
    NoDelayedDelivery,
    /// Not a Pulsar bug but a regression this project once had
    /// (`DispatcherConfig::legacy_replay_settle`): input during a Key_Shared replay read does
    /// not keep its completion from settling the replay loop: expect a stall in a scenario
    /// whose reads take time (`reads=`).
    ReplaySettle,
    /// Not a Pulsar bug: this broker before its writes were requests (`BrokerConfig`'s
    /// `legacy.early_receipt`): a receipt before the write completed. Broker runs only, with
    /// held writes (`store_faults=on`): expect a receipted message lost.
    EarlyReceipt,
}

impl Legacy {
    /// Parses the CLI name.
    pub fn parse(s: &str) -> Option<Legacy> {
        Some(match s {
            "mark-delete-cleanup" => Legacy::MarkDeleteCleanup,
            "orphan-chunk-replay" => Legacy::OrphanChunkReplay,
            "unordered-nack" => Legacy::UnorderedNack,
            "no-batch-ack-set" => Legacy::NoBatchAckSet,
            "no-delayed-delivery" => Legacy::NoDelayedDelivery,
            "replay-settle" => Legacy::ReplaySettle,
            "early-receipt" => Legacy::EarlyReceipt,
            _ => return None,
        })
    }

    /// The CLI name.
    pub fn as_str(self) -> &'static str {
        match self {
            Legacy::MarkDeleteCleanup => "mark-delete-cleanup",
            Legacy::OrphanChunkReplay => "orphan-chunk-replay",
            Legacy::UnorderedNack => "unordered-nack",
            Legacy::NoBatchAckSet => "no-batch-ack-set",
            Legacy::NoDelayedDelivery => "no-delayed-delivery",
            Legacy::ReplaySettle => "replay-settle",
            Legacy::EarlyReceipt => "early-receipt",
        }
    }

    /// The violation kind this switch is expected to produce.
    pub fn expected_kind(self) -> ViolationKind {
        match self {
            Legacy::MarkDeleteCleanup | Legacy::UnorderedNack => ViolationKind::Order,
            Legacy::OrphanChunkReplay | Legacy::ReplaySettle => ViolationKind::Stall,
            Legacy::NoBatchAckSet => ViolationKind::AckedRedelivered,
            Legacy::NoDelayedDelivery => ViolationKind::Early,
            Legacy::EarlyReceipt => ViolationKind::Loss,
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

/// A client → broker message.
#[derive(Clone, Debug)]
enum Wire {
    Cmd(client::Command),
    Close,
}

#[derive(Debug)]
enum SimEvent {
    Step(usize),
    Append(Box<EntryMeta>),
    /// The persistence interval passed: the main loop persists a dirty cursor.
    Persist,
    ToClient {
        name: String,
        conn: u64,
        /// Each entry with its redelivery count and the batch indexes already acked.
        entries: Vec<(Entry, u32, Vec<u32>)>,
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
    /// A deferred read (`reads=` in the scenario's config) completes.
    ReadDone {
        epoch: u64,
        read: DeferredRead,
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

/// A read the dispatcher issued that completes later.
#[derive(Debug)]
enum DeferredRead {
    Normal(usize),
    Replay(Vec<Position>),
}

struct Queued {
    at: u64,
    seq: u64,
    ev: SimEvent,
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

/// A simulated consumer's life: connected, leaving (its close on the way), crashed (its
/// connection not yet noticed gone), gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CState {
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

/// The client configuration of a consumer; `ordered_nack` turns on the client half of ordered
/// nack (Key_Shared, unless `--legacy unordered-nack`).
pub(crate) fn client_config(o: &ConsumerOpts, ordered_nack: bool) -> ConsumerConfig {
    ConsumerConfig {
        ordered_nack,
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
    // Delayed delivery: strict, 16 ms buckets (never early, at most 16 ms late).
    d.delayed_delivery = dispatcher::DelayedDelivery {
        enabled: true,
        tick: 16,
        strict: true,
    };
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

/// Switches `d` to the legacy behaviour `legacy` restores (no-op for `None`). Errors for a
/// switch this build cannot provide.
pub(crate) fn apply_legacy(d: &mut DispatcherConfig, legacy: Option<Legacy>) -> Result<(), String> {
    match legacy {
        Some(Legacy::MarkDeleteCleanup) => d.legacy_mark_delete_cleanup = true,
        Some(Legacy::ReplaySettle) => d.legacy_replay_settle = true,
        Some(Legacy::OrphanChunkReplay) => {
            d.assignor.orphan_policy = chunk_assignor::OrphanPolicy::Replay
        }
        // Pulsar-mode nack: the client sends RedeliverUnacked after the delay, which the
        // dispatcher replays without holding the key (see `World::ordered_nack`).
        Some(Legacy::UnorderedNack) => {}
        // Deliveries go out without the acked indexes (the world's send path; no dispatcher
        // setting).
        Some(Legacy::NoBatchAckSet) => {}
        Some(Legacy::NoDelayedDelivery) => d.delayed_delivery.enabled = false,
        // The world has no broker: nothing to switch.
        Some(Legacy::EarlyReceipt) => {}
        None => {}
    }
    Ok(())
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
    /// Executes the dispatcher's commands (the shared driver, with trace and the wake flag).
    driver: Driver,
    ack: AckHandle,
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
    /// Acks the broker accepted, by (position, batch index; `None` = the whole entry), less
    /// those a broker crash lost: none of these may reach an application again.
    broker_acked: BTreeSet<(Position, Option<u32>)>,
    dropped: BTreeSet<Position>,
    checked_md: Position,
    model: BTreeMap<ConsumerId, BTreeSet<Position>>,
    /// Nacked positions not re-sent yet → the consumer that nacked them (ordered nack).
    nacked_by: BTreeMap<Position, String>,
    /// Key_Shared with ordered nack (client and broker halves).
    ordered_nack: bool,
    /// Deliveries carry a batch's acked indexes (off under `--legacy no-batch-ack-set`).
    send_ack_set: bool,
    /// Pending position → messages not yet acked (batch-index acks reduce it).
    remaining: BTreeMap<Position, u32>,
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
    /// When an entry was last acked or dropped for the first time.
    last_progress: u64,
    persist_scheduled: bool,
    log_hash: u64,
    log_lines: u64,
    tail: VecDeque<String>,
    full: Option<Vec<String>>,
    temp_dir: Option<PathBuf>,
    /// Deferred reads (`reads=`) the current dispatcher waits for.
    reads_in_flight: u32,
}

fn lock(cell: &Cell) -> MutexGuard<'_, CursorCell<SimStore, InMemoryLedger>> {
    CursorCell::lock(cell)
}

impl World {
    /// Builds the world of `scenario` for `opts.seed`: expands the `mix` (if any) into steps.
    /// Errors when the scenario asks for something this build cannot do.
    pub fn new(scenario: &Scenario, opts: &RunOptions) -> Result<World, String> {
        let cfg = scenario.config.clone();
        let mut dcfg = dispatcher_config(&cfg);
        apply_legacy(&mut dcfg, opts.legacy)?;
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
        let persist_interval = cfg.persist_interval;
        let read_delay = cfg.read_delay;
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
            driver: Driver::new()
                .with_trace(true)
                .with_deferred_reads(read_delay.1 > 0)
                .with_wake_flag(waker)
                .with_persist_every(persist_interval),
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
            broker_acked: BTreeSet::new(),
            dropped: BTreeSet::new(),
            checked_md,
            model: BTreeMap::new(),
            nacked_by: BTreeMap::new(),
            ordered_nack: ordered && opts.legacy != Some(Legacy::UnorderedNack),
            send_ack_set: opts.legacy != Some(Legacy::NoBatchAckSet),
            remaining: BTreeMap::new(),
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
            last_progress: 0,
            persist_scheduled: false,
            log_hash: FNV_OFFSET,
            log_lines: 0,
            tail: VecDeque::new(),
            full: opts.keep_log.then(Vec::new),
            temp_dir,
            reads_in_flight: 0,
        };
        let mut steps = scenario.steps.clone();
        if let Some(mix) = &scenario.mix {
            steps.extend(w.expand_mix(mix));
        }
        steps.sort_by_key(|s| s.at);
        w.last_activity = steps.iter().map(|s| s.at).max().unwrap_or(0);
        for (i, s) in steps.iter().enumerate() {
            let at = s.at;
            w.schedule(at, SimEvent::Step(i));
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
            let (mut batch, mut chunks, mut spread, mut delay) = (1, 1, 0, 0);
            // Drawn only when the mix has delayed messages, so other mixes keep their streams.
            if mix.delayed > 0 && r.chance(mix.delayed) {
                delay = r.range(mix.delay.0, mix.delay.1).max(1);
            } else if r.chance(mix.chunked) {
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
                    delay,
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

    fn schedule(&mut self, at: u64, ev: SimEvent) {
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
        match self.driver.maybe_persist(self.now, &self.cell) {
            Persist::Clean | Persist::Persisted => {}
            Persist::NotBefore { due } => {
                if !self.persist_scheduled {
                    self.persist_scheduled = true;
                    self.schedule(due, SimEvent::Persist);
                }
            }
            Persist::Failed(e) => self.log(format!("cursor persist failed: {e}")),
        }
    }

    fn handle(&mut self, ev: SimEvent) {
        match ev {
            SimEvent::Step(i) => {
                self.steps_done += 1;
                let step = self.steps[i].clone();
                self.run_step(step);
            }
            SimEvent::Append(meta) => self.append(*meta),
            SimEvent::Persist => self.persist_scheduled = false,
            SimEvent::ToClient {
                name,
                conn,
                entries,
            } => self.client_receives(&name, conn, entries),
            SimEvent::ToBroker { name, conn, cmd } => self.broker_receives(&name, conn, cmd),
            SimEvent::AppDone { name, conn, task } => {
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
            SimEvent::ClientTimer { name, conn } => {
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
            SimEvent::BrokerTimer { epoch } => {
                if epoch == self.broker_epoch
                    && self.d.poll_timeout().is_some_and(|t| t <= self.now)
                {
                    self.log("broker: timeout".into());
                    self.d.handle_timeout(self.now);
                    self.pump_broker();
                }
            }
            SimEvent::ReadDone { epoch, read } => {
                // A read of a broker that restarted since is lost with it.
                if epoch == self.broker_epoch {
                    self.reads_in_flight -= 1;
                    self.complete_read(read);
                }
            }
            SimEvent::CrashNoticed { id, epoch } => {
                if epoch == self.broker_epoch {
                    let name = self.name_of(id);
                    self.log(format!("broker notices {name} ({id}) is gone"));
                    self.remove_from_broker(id);
                }
            }
            SimEvent::Reconnect { name, epoch } => {
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
}

impl Drop for World {
    fn drop(&mut self) {
        if let Some(dir) = self.temp_dir.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
