//! `--runtime threads`: the same workload through the dispatcher's threaded [`Runtime`], each
//! consumer on its own thread acking through its `ConsumerHandle`, checked afterwards from an
//! event log ordered by a global sequence number.
//!
//! Unlike the deterministic world this reads the wall clock (the client's `now`) and is not
//! reproducible by seed: the seed fixes the workload, the threads decide the interleaving.
//! Faults: joins, graceful leaves and the admin operations (skip, clear-backlog, expiry,
//! backlog-quota eviction, through `Runtime::admin`, whose mark-delete moves list what they
//! dropped); crashes, broker restarts, manual consumers with their scripted acks, and
//! `evict age=` need the deterministic world: they are skipped and returned by name. The
//! scenario's `expect` lines are checked from the event log; a scenario with `expect` lines
//! that needs a skipped step is refused.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use client::{BatchInfo, ChunkInfo, Consumer, IncomingMessage, MessageId};
use cursor::{ChunkMeta, EntryMeta, InMemoryLedger, ManagedCursor, MemoryStore, Position};
use dispatcher::{AdminOp, ConsumerHandle, ConsumerSpec, Runtime};

use crate::sim::check::{MsgRef, OrderChecker, Violation, ViolationKind};
use crate::sim::scenario::{Action, ConsumerOpts, Evict, Expect, FaultKind, Scenario, Step};
use crate::sim::world::{
    apply_legacy, client_config, dispatcher_config, Legacy, RunOptions, RunResult, World,
};

/// What a consumer thread records.
#[derive(Clone, Debug)]
enum Rec {
    Start {
        consumer: String,
        key: Option<Vec<u8>>,
        first: MsgRef,
        msg: MsgRef,
    },
    Finish {
        consumer: String,
    },
}

struct Shared {
    seq: AtomicU64,
    /// (sequence number, wall ms since the start, record).
    log: Mutex<Vec<(u64, u64, Rec)>>,
    acked: Mutex<BTreeSet<Position>>,
    stop: AtomicBool,
    started: Instant,
}

impl Shared {
    fn record(&self, r: Rec) {
        let ms = self.now();
        let s = self.seq.fetch_add(1, Ordering::SeqCst);
        if let Ok(mut g) = self.log.lock() {
            g.push((s, ms, r));
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

/// Milliseconds since the Unix epoch: the clock of the runtime's `now` and of deliver-at times.
fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

struct Worker {
    leave: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

/// The messages a client decodes from one delivery; batch indexes the broker says are acked
/// (its `ack_set`) are marked so the client skips them.
fn incoming(epoch: u64, e: &dispatcher::Delivery) -> Vec<IncomingMessage> {
    let m = &e.meta;
    let (l, en) = (e.position.ledger_id, e.position.entry_id);
    let base = IncomingMessage {
        epoch,
        id: MessageId::new(l, en),
        key: m.ordering_key.clone(),
        publish_time: m.publish_time,
        redelivery_count: 0,
        batch: None,
        chunk: m.chunk.as_ref().map(|c| ChunkInfo {
            uuid: c.uuid.clone(),
            chunk_id: c.chunk_id,
            num_chunks: c.num_chunks,
            total_size: c.total_size,
        }),
        payload: Vec::new(),
        already_acked: false,
    };
    let n = m.messages();
    if n > 1 && m.chunk.is_none() {
        (0..n)
            .map(|i| IncomingMessage {
                id: MessageId::batched(l, en, i),
                batch: Some(BatchInfo { index: i, size: n }),
                already_acked: e.acked_indexes.contains(&i),
                ..base.clone()
            })
            .collect()
    } else {
        vec![base]
    }
}

fn consumer_loop(
    name: String,
    handle: ConsumerHandle,
    mut client: Consumer,
    proc: (u64, u64),
    shared: Arc<Shared>,
    leave: Arc<AtomicBool>,
    seed: u64,
) {
    let mut rng = crate::sim::rng::Rng::new(seed ^ handle.id.0, crate::sim::rng::Purpose::Timing);
    let epoch = client.connect(shared.now());
    // Batch sizes of the batch entries received (for batch-index acks).
    let mut sizes: BTreeMap<Position, u32> = BTreeMap::new();
    loop {
        let now = shared.now();
        while let Ok(entries) = handle.deliveries.try_recv() {
            for e in &entries {
                if e.meta.messages() > 1 {
                    sizes.insert(e.position, e.meta.messages());
                }
                for m in incoming(epoch, e) {
                    let _ = client.on_message(now, m);
                }
            }
        }
        client.on_timer(now);
        while let Some(cmd) = client.poll_command() {
            match cmd {
                client::Command::Flow(n) => handle.flow(n),
                client::Command::Ack(ids) => {
                    for id in ids {
                        let p = Position::new(id.ledger_id, id.entry_id);
                        let ok = match id.batch_index {
                            // A batch-index ack; the entry's last index comes as a whole-entry
                            // ack from the client.
                            Some(i) => {
                                let size = sizes.get(&p).copied().unwrap_or(1);
                                let _ = handle.ack_batch_index(p, size, &[i]);
                                false
                            }
                            None => handle.ack(p).is_ok(),
                        };
                        if ok {
                            sizes.remove(&p);
                            if let Ok(mut g) = shared.acked.lock() {
                                g.insert(p);
                            }
                        }
                    }
                }
                client::Command::RedeliverUnacked(es)
                | client::Command::Release(es)
                | client::Command::Nack { entries: es, .. } => handle.redeliver(
                    es.iter()
                        .map(|e| Position::new(e.entry.ledger_id, e.entry.entry_id))
                        .collect(),
                ),
            }
        }
        if leave.load(Ordering::SeqCst) || shared.stop.load(Ordering::SeqCst) {
            handle.close();
            return;
        }
        match client.receive(now) {
            Some(d) => {
                let msg: MsgRef = (
                    Position::new(d.id.ledger_id, d.id.entry_id),
                    d.id.batch_index,
                );
                let first = d.chunk_ids.first().map_or(msg, |c| {
                    (Position::new(c.ledger_id, c.entry_id), c.batch_index)
                });
                shared.record(Rec::Start {
                    consumer: name.clone(),
                    key: d.key.clone(),
                    first,
                    msg,
                });
                // Processing: the scenario's ms become µs, so runs stay short.
                std::thread::sleep(Duration::from_micros(rng.range(proc.0, proc.1)));
                shared.record(Rec::Finish {
                    consumer: name.clone(),
                });
                let _ = client.ack(shared.now(), d.id);
            }
            None => std::thread::sleep(Duration::from_micros(200)),
        }
    }
}

/// The mix's random joins (`RandomFault(Join)`) made concrete: consumers `c<N>` numbered after
/// the scripted joins, with the mix's options. Other steps are unchanged.
pub(crate) fn concrete_joins(scenario: &Scenario, steps: Vec<Step>) -> Vec<Step> {
    let mix = scenario.mix.clone().unwrap_or_default();
    let mut next_join = steps
        .iter()
        .filter(|s| matches!(s.action, Action::Join(..)))
        .count()
        + 1;
    steps
        .into_iter()
        .map(|s| match s.action {
            Action::RandomFault(FaultKind::Join) => {
                let name = format!("c{next_join}");
                next_join += 1;
                let o = ConsumerOpts {
                    queue: mix.queue.0.max(1),
                    proc: mix.proc,
                    nack: 0,
                    manual: false,
                    prio: 0,
                    chunk_expiry: Some(mix.chunk_expiry),
                    chunk_auto_ack: mix.chunk_auto_ack,
                };
                Step {
                    at: s.at,
                    action: Action::Join(name, o),
                }
            }
            _ => s,
        })
        .collect()
}

/// Script steps a threaded run could not apply, by name (`crash`, `restart`, `ack`, …) with
/// how many of each.
pub type Skipped = BTreeMap<&'static str, u64>;

/// The steps of `s` that need the deterministic world (a threaded run skips them): crashes,
/// broker restarts, the scripted `ack` / `nack` / `auto` of a manual consumer, `manual` itself
/// (a threaded consumer always processes on its own) and `evict age=`.
pub fn threads_cannot_run(s: &Scenario) -> Skipped {
    let mut out = Skipped::new();
    for st in &s.steps {
        if let Some(n) = unsupported(&st.action) {
            *out.entry(n).or_insert(0) += 1;
        }
        if matches!(&st.action, Action::Join(_, o) if o.manual) {
            *out.entry("manual").or_insert(0) += 1;
        }
    }
    out
}

/// The name of a step a threaded run skips, `None` for one it applies.
fn unsupported(a: &Action) -> Option<&'static str> {
    Some(match a {
        Action::Crash(_) | Action::RandomFault(FaultKind::Crash) => "crash",
        Action::Restart | Action::RandomFault(FaultKind::Restart) => "restart",
        Action::Ack(..) => "ack",
        Action::Nack(..) => "nack",
        Action::Auto(_) => "auto",
        Action::Evict(Evict::Age(_)) => "evict age",
        _ => return None,
    })
}

/// Runs `scenario`'s workload (consumers, publishes, joins, graceful leaves and admin
/// operations) on the threaded runtime and checks per-key order and no loss from the event log.
/// Steps it cannot apply are skipped and returned by name (the CLI prints them). Shorthand for
/// [`run_threaded_with`] without the event log.
pub fn run_threaded(
    scenario: &Scenario,
    seed: u64,
    legacy: Option<Legacy>,
) -> Result<(RunResult, Skipped), String> {
    run_threaded_with(
        scenario,
        &RunOptions {
            seed,
            legacy,
            keep_log: false,
        },
    )
}

/// Like [`run_threaded`], keeping the whole event log in the result with `opts.keep_log`.
///
/// A scenario's `expect` lines are checked from the event log (in its sequence order). A
/// scenario with `expect` lines whose script needs steps a threaded run skips (see
/// [`threads_cannot_run`]) is refused with an error: its expectations could not mean what
/// they say.
pub fn run_threaded_with(
    scenario: &Scenario,
    opts: &RunOptions,
) -> Result<(RunResult, Skipped), String> {
    let (seed, legacy, keep_log) = (opts.seed, opts.legacy, opts.keep_log);
    let cannot = threads_cannot_run(scenario);
    if !scenario.expects.is_empty() && !cannot.is_empty() {
        let first = scenario
            .expect_lines
            .first()
            .map(|(l, t)| format!(" (line {l}: `{t}`)"))
            .unwrap_or_default();
        return Err(format!(
            "--runtime threads cannot honour the `expect` lines of this scenario{first}: its \
             script uses {}, which need the deterministic world; run it without --runtime threads",
            describe_skipped(&cannot)
        ));
    }
    let opts = RunOptions {
        seed,
        ..RunOptions::default()
    };
    let world = World::new(scenario, &opts)?;
    let steps = world.expanded_steps();
    let mut cfg = dispatcher_config(&scenario.config);
    apply_legacy(&mut cfg, legacy)?;
    let ordered = !matches!(cfg.subscription, dispatcher::SubscriptionType::Shared);
    let ledger = InMemoryLedger::new(1_000_000);
    let cursor = ManagedCursor::new("sim-threads", &ledger, MemoryStore::new());
    let rt = Runtime::start(cfg, cursor, ledger);
    let shared = Arc::new(Shared {
        seq: AtomicU64::new(0),
        log: Mutex::new(Vec::new()),
        acked: Mutex::new(BTreeSet::new()),
        stop: AtomicBool::new(false),
        started: Instant::now(),
    });
    let mut workers: BTreeMap<String, Worker> = BTreeMap::new();
    let mut next_id = 1u64;
    let mut published: u64 = 0;
    let mut messages = 0u64;
    let mut keys = BTreeSet::new();
    let mut skipped = Skipped::new();
    let mut faults = 0u64;
    let mut producer_seq: BTreeMap<u32, u64> = BTreeMap::new();
    // Positions of delayed entries (exempt from the first-start order rule).
    let mut delayed: Vec<Position> = Vec::new();
    let mut dropped: BTreeSet<Position> = BTreeSet::new();
    let mut rng = crate::sim::rng::Rng::new(seed, crate::sim::rng::Purpose::Faults);
    let steps: Vec<Step> = concrete_joins(scenario, steps)
        .into_iter()
        .map(|s| match s.action {
            Action::RandomFault(FaultKind::Leave) => Step {
                at: s.at,
                action: Action::Leave(String::new()),
            },
            _ => s,
        })
        .collect();
    for step in &steps {
        match &step.action {
            Action::Join(name, o) => {
                if step.at > 0 {
                    faults += 1;
                }
                let client = Consumer::new(client_config(o, false)).map_err(|e| e.to_string())?;
                let id = next_id;
                next_id += 1;
                let handle = rt
                    .add_consumer(ConsumerSpec::new(id, name.clone()).with_priority(o.prio))
                    .map_err(|e| format!("join {name}: {e}"))?;
                let leave = Arc::new(AtomicBool::new(false));
                let (sh, lv, n, proc) = (shared.clone(), leave.clone(), name.clone(), o.proc);
                let thread = std::thread::Builder::new()
                    .name(format!("consumer-{name}"))
                    .spawn(move || consumer_loop(n, handle, client, proc, sh, lv, seed))
                    .map_err(|e| e.to_string())?;
                if let Some(old) = workers.insert(name.clone(), Worker { leave, thread }) {
                    old.leave.store(true, Ordering::SeqCst);
                    let _ = old.thread.join();
                }
            }
            Action::Leave(name) => {
                // An empty name (a random leave from a mix): a drawn consumer, if two are left.
                let name = if name.is_empty() {
                    if workers.len() < 2 {
                        *skipped.entry("leave (one consumer left)").or_insert(0) += 1;
                        continue;
                    }
                    let i = rng.below(workers.len() as u64) as usize;
                    workers.keys().nth(i).cloned().unwrap_or_default()
                } else {
                    name.clone()
                };
                if let Some(w) = workers.remove(&name) {
                    faults += 1;
                    w.leave.store(true, Ordering::SeqCst);
                    let _ = w.thread.join();
                }
            }
            Action::Publish(p) => {
                let mut batch = Vec::new();
                for _ in 0..p.count {
                    let mut meta = EntryMeta::simple(shared.now(), 100);
                    meta.ordering_key = p.key.as_ref().map(|k| k.as_bytes().to_vec());
                    if let Some(k) = &p.key {
                        keys.insert(k.clone());
                    }
                    let seq = producer_seq.entry(p.producer).or_insert(0);
                    *seq += 1;
                    messages += u64::from(p.batch.max(1));
                    if p.chunks > 1 {
                        for i in 0..p.chunks {
                            let mut m = meta.clone();
                            m.chunk = Some(ChunkMeta {
                                uuid: format!("producer-{}-{seq}", p.producer),
                                chunk_id: i,
                                num_chunks: p.chunks,
                                total_size: 100 * p.chunks,
                            });
                            batch.push(m);
                        }
                    } else if p.delay > 0 {
                        // The runtime's clock is the wall clock.
                        batch.push(meta.with_deliver_at(wall_ms() + p.delay));
                    } else {
                        batch.push(meta.with_messages(p.batch));
                    }
                }
                published += batch.len() as u64;
                if p.delay > 0 {
                    delayed.extend(rt.publish_wait(batch));
                } else {
                    rt.publish(batch);
                }
                if published.is_multiple_of(16) {
                    std::thread::sleep(Duration::from_micros(300));
                }
            }
            Action::RandomFault(
                kind @ (FaultKind::Skip | FaultKind::Clear | FaultKind::Expire | FaultKind::Evict),
            ) => {
                let op = match kind {
                    FaultKind::Skip => AdminOp::Skip(rng.range(1, 10)),
                    FaultKind::Clear => AdminOp::ClearBacklog,
                    FaultKind::Expire => {
                        AdminOp::Expire(shared.now().saturating_sub(rng.range(1, 20)))
                    }
                    _ => AdminOp::EvictToCount(rng.range(0, 50)),
                };
                faults += 1;
                if let Some(mv) = rt.admin(op) {
                    dropped.extend(mv.dropped);
                }
            }
            Action::Skip(_) | Action::Clear | Action::Expire(_) | Action::Evict(_)
                if unsupported(&step.action).is_none() =>
            {
                let op = match &step.action {
                    Action::Skip(n) => AdminOp::Skip(*n),
                    Action::Clear => AdminOp::ClearBacklog,
                    Action::Expire(age) => AdminOp::Expire(shared.now().saturating_sub(*age)),
                    Action::Evict(Evict::Size(b)) => AdminOp::EvictToSize(*b),
                    Action::Evict(Evict::Count(n)) => AdminOp::EvictToCount(*n),
                    _ => continue,
                };
                faults += 1;
                if let Some(mv) = rt.admin(op) {
                    dropped.extend(mv.dropped);
                }
            }
            other => {
                let name = unsupported(other).unwrap_or("step");
                *skipped.entry(name).or_insert(0) += 1;
            }
        }
    }
    for (name, n) in threads_cannot_run(scenario) {
        if name == "manual" {
            skipped.insert(name, n);
        }
    }
    // Wait for every published entry to be acked.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut stalled = false;
    loop {
        let done = shared
            .acked
            .lock()
            .map(|g| g.union(&dropped).count() as u64)
            .unwrap_or(0);
        if done >= published {
            break;
        }
        if Instant::now() > deadline {
            stalled = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let stats = rt.stats();
    shared.stop.store(true, Ordering::SeqCst);
    for (_, w) in std::mem::take(&mut workers) {
        let _ = w.thread.join();
    }
    rt.shutdown();

    // Check the event log in sequence order.
    let mut log = shared.log.lock().map(|g| g.clone()).unwrap_or_default();
    log.sort_by_key(|(s, _, _)| *s);
    let mut order = OrderChecker::new(ordered);
    for p in &delayed {
        order.mark_delayed(*p);
    }
    let mut violations: Vec<Violation> = Vec::new();
    let mut hash = 0xCBF2_9CE4_8422_2325u64;
    let mut full = opts_keep_log(scenario, seed, legacy, keep_log);
    // For the `expect` lines: sequence numbers of first starts and last finishes per entry.
    let mut first_start: BTreeMap<Position, u64> = BTreeMap::new();
    let mut last_finish: BTreeMap<Position, u64> = BTreeMap::new();
    let mut held: BTreeMap<String, Position> = BTreeMap::new();
    let mut started_by: BTreeSet<(String, Position)> = BTreeSet::new();
    // Checked in sequence order; the times in a report are wall ms since the start.
    for (s, ms, r) in &log {
        let line = format!("{s} {r:?}");
        for b in line.bytes() {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0000_0100_0000_01B3);
        }
        if let Some(full) = &mut full {
            full.push(format!("seq={s} wall_ms={ms} {}", rec_line(r)));
        }
        match r {
            Rec::Start {
                consumer,
                key,
                first,
                msg,
            } => {
                first_start.entry(msg.0).or_insert(*s);
                held.insert(consumer.clone(), msg.0);
                started_by.insert((consumer.clone(), msg.0));
                violations.extend(order.start_span(*ms, consumer, key.as_deref(), *first, *msg));
            }
            Rec::Finish { consumer } => {
                if let Some(p) = held.remove(consumer) {
                    last_finish.insert(p, *s);
                }
                order.finish(*ms, consumer);
            }
        }
    }
    let acked = shared.acked.lock().map(|g| g.clone()).unwrap_or_default();
    if stalled {
        let detail = format!(
            "{} of {published} entries acked after 60 s; dispatcher stats: {:?}",
            acked.len(),
            stats.as_ref().map(|(d, _)| d)
        );
        violations.push(Violation {
            kind: ViolationKind::Stall,
            at: shared.now(),
            key: None,
            positions: Vec::new(),
            consumers: Vec::new(),
            detail,
        });
    } else {
        // Entries are appended in order from 1:0, one ledger.
        let missing: Vec<String> = (0..published)
            .map(|e| Position::new(1, e))
            .filter(|p| !acked.contains(p) && !dropped.contains(p))
            .take(10)
            .map(|p| p.to_string())
            .collect();
        if !missing.is_empty() {
            violations.push(Violation {
                kind: ViolationKind::Loss,
                at: shared.now(),
                key: None,
                positions: missing,
                consumers: Vec::new(),
                detail: "published entries neither acked nor dropped by an admin operation".into(),
            });
        }
    }
    if violations.is_empty() {
        for e in &scenario.expects {
            let failed = match e {
                Expect::Start(n, p) => (!started_by.contains(&(n.clone(), *p)))
                    .then(|| format!("expected {n} to start {p}; it never did")),
                Expect::NoStart(n, p) => started_by
                    .contains(&(n.clone(), *p))
                    .then(|| format!("expected {n} never to start {p}; it did")),
                Expect::Order(a, b) => match (last_finish.get(a), first_start.get(b)) {
                    (Some(fa), Some(sb)) if fa < sb => None,
                    (fa, sb) => Some(format!(
                        "expected {a} finished (t={fa:?}) before {b} first started (t={sb:?}) \
                         (t = event-log sequence numbers on threads)"
                    )),
                },
            };
            if let Some(detail) = failed {
                violations.push(Violation {
                    kind: ViolationKind::Expectation,
                    at: shared.now(),
                    key: None,
                    positions: Vec::new(),
                    consumers: Vec::new(),
                    detail,
                });
            }
        }
    }
    if let Some(full) = &mut full {
        for v in &violations {
            full.push(format!("VIOLATION {v}"));
        }
    }
    let log_tail: Vec<String> = full
        .as_ref()
        .map(|f| f[f.len().saturating_sub(15)..].to_vec())
        .unwrap_or_default();
    Ok((
        RunResult {
            scenario: scenario.name.clone(),
            seed,
            messages,
            entries: published,
            keys: keys.len() as u64,
            faults,
            violations,
            log_hash: hash,
            log_lines: log.len() as u64,
            sim_time: shared.now(),
            events: log.len() as u64,
            starts: order.starts,
            log_tail,
            log: full,
        },
        skipped,
    ))
}

/// The first line of a kept threaded event log (`None`: no log asked for).
fn opts_keep_log(
    scenario: &Scenario,
    seed: u64,
    legacy: Option<Legacy>,
    keep: bool,
) -> Option<Vec<String>> {
    keep.then(|| {
        vec![format!(
            "threads scenario={} seed={seed} legacy={}",
            scenario.name,
            legacy.map(Legacy::as_str).unwrap_or("none")
        )]
    })
}

fn rec_line(r: &Rec) -> String {
    match r {
        Rec::Start {
            consumer, key, msg, ..
        } => format!(
            "app {consumer} starts {} key={}",
            crate::sim::check::msg_str(*msg),
            key.as_deref()
                .map(crate::sim::check::key_str)
                .unwrap_or_else(|| "-".into())
        ),
        Rec::Finish { consumer } => format!("app {consumer} finishes"),
    }
}

/// `2 crash, 1 restart`: skipped steps as a reader wants them.
pub fn describe_skipped(s: &Skipped) -> String {
    s.iter()
        .map(|(n, c)| format!("{c} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}
