//! `--runtime broker`: the scenario workloads of the deterministic world driven through the
//! broker's real sans-IO core ([`broker::stepped`]) in Pulsar's binary protocol.
//!
//! One producer connection SENDs every entry (batch entries as real batch sections, chunked
//! messages chunk by chunk, delayed ones with `deliver_at_time`); every consumer has its own
//! connection (CONNECT, SUBSCRIBE earliest, then FLOW / ACK with request ids / REDELIVER /
//! PIP-493 NEGATIVE_ACK as its `client::Consumer` asks) and an application that takes a seeded
//! random time per message. Frames cross a network with the scenario's per-connection FIFO delay
//! (`net=`). The clock is virtual (ms, advanced event by event), maps are ordered and every
//! random draw comes from the seed: one seed, one byte-identical event log.
//!
//! Checked: per-key order on Key_Shared, no loss (every published entry acked, or dropped by
//! an admin operation: the cursor's mark-delete move read from `internalStats`), no stall, no
//! acked message sent again unmarked (checked on the MESSAGE frames as they leave the broker,
//! against the ACKs it answered with success), no delayed message sent early, every frame
//! readable by a strict client, and the scenario's `expect` lines.
//!
//! Does not: restart the broker (its storage is in memory): a `restart` drops every consumer
//! connection instead (the broker keeps its state) and is reported as approximated. Backlog
//! quota eviction (`evict`) has no REST operation and is skipped. Settings the broker has no
//! equivalent for (`max_unacked`, `max_unacked_sub`, `look_ahead`, `reads`, `interval`,
//! `persist`, `store=file`, the hash-range auto-split selector: the broker's AUTO_SPLIT is its
//! consistent-hashing ring) are reported and left at the broker's defaults. Expiry works in
//! whole seconds there: a scenario's age in ms is rounded up (never expires a younger message).
//! As the world's adapter does, the runner tells the client that nacked an entry an admin
//! operation dropped (Pulsar's protocol has no such notice).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::Bound::{Excluded, Included};

use broker::stepped::{Connection, SteppedBroker};
use client::{BatchInfo, ChunkInfo, Command, Consumer, EntryId, IncomingMessage, MessageId};
use cursor::Position;
use prost::Message as _;
use wire::proto::{base_command::Type, MessageIdData, MessageMetadata, SingleMessageMetadata};

use crate::sim::check::{key_str, msg_str, MsgRef, OrderChecker, Violation, ViolationKind};
use crate::sim::rng::{Purpose, Rng};
use crate::sim::scenario::{
    Action, ConsumerOpts, Expect, FaultKind, PublishSpec, Scenario, Step, StoreKind, SubKind,
    WorldConfig,
};
use crate::sim::threads::{describe_skipped, Skipped};
use crate::sim::world::{client_config, Legacy, RunOptions, RunResult, World};

/// Virtual time 0 on the broker's (wall-clock ms) clock.
const T0: u64 = 1_764_000_000_000;
const TOPIC: &str = "persistent://public/default/sim";
const SUB_PATH: &str = "/admin/v2/persistent/public/default/sim/subscription/sim";
const TAIL: usize = 60;
const HOUSEKEEPING_MS: u64 = 100;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CState {
    Connected,
    Leaving,
    Crashed,
    Gone,
}

/// What an application holds: the message and when it finishes (`None`: a manual consumer).
#[derive(Clone, Copy, Debug)]
struct Task {
    id: MessageId,
    msg: MsgRef,
    done_at: Option<u64>,
}

/// One consumer: its client model, connection, application and the wire in both directions.
struct Cons {
    opts: ConsumerOpts,
    client: Consumer,
    conn: Option<Connection>,
    state: CState,
    epoch: u64,
    busy: Option<Task>,
    /// Bytes on their way to the broker: (arrival, bytes, a CLOSE_CONSUMER).
    up: VecDeque<(u64, Vec<u8>, bool)>,
    /// Frames on their way to the client.
    down: VecDeque<(u64, wire::Frame)>,
    up_last: u64,
    down_last: u64,
    next_rid: u64,
    /// ACK request id → what it acks (whole entry: `None`).
    acks: BTreeMap<u64, Vec<(Position, Option<u32>)>>,
    /// Batch sizes of the batch entries received.
    sizes: BTreeMap<Position, u32>,
    close_sent: bool,
    reconnect_at: Option<u64>,
}

/// The run's state (see the module doc).
struct Run {
    b: SteppedBroker,
    cfg: WorldConfig,
    key_shared: bool,
    ordered_nack: bool,
    now: u64,
    rng_fault: Rng,
    rng_net: Rng,
    rng_time: Rng,
    producer: Connection,
    producers_open: BTreeSet<u32>,
    prod_seq: BTreeMap<u32, u64>,
    /// Later chunks of spread chunked messages: (due, n) → (producer, metadata).
    later: BTreeMap<(u64, u64), (u32, MessageMetadata)>,
    later_n: u64,
    /// When the producer last sent (the last chunk of a spread message may come after the last
    /// step).
    last_publish: u64,
    cons: BTreeMap<String, Cons>,
    /// Crashed consumers' connections until the broker notices (`notice=`).
    dying: Vec<(u64, String, Connection)>,
    /// Published entries and their keys.
    published: BTreeMap<Position, Option<Vec<u8>>>,
    /// Messages per published batch entry.
    batches: BTreeMap<Position, u32>,
    acked: BTreeSet<Position>,
    broker_acked: BTreeSet<(Position, Option<u32>)>,
    dropped: BTreeSet<Position>,
    nacked_by: BTreeMap<Position, String>,
    order: OrderChecker,
    violations: Vec<Violation>,
    messages: u64,
    keys: BTreeSet<Vec<u8>>,
    faults: u64,
    events: u64,
    skipped: Skipped,
    last_progress: u64,
    hash: u64,
    lines: u64,
    tail: VecDeque<String>,
    full: Option<Vec<String>>,
}

/// The steps of `s` a broker run cannot apply (skipped): backlog-quota eviction, which has no
/// REST operation. A `restart` runs, approximated (see the module doc).
pub fn broker_cannot_run(s: &Scenario) -> Skipped {
    let mut out = Skipped::new();
    for st in &s.steps {
        if matches!(
            st.action,
            Action::Evict(_) | Action::RandomFault(FaultKind::Evict)
        ) {
            *out.entry("evict").or_insert(0) += 1;
        }
    }
    out
}

/// Runs `scenario`'s workload through the broker's stepped core for `opts.seed` (see the
/// module doc) and checks it. Returns the result and what was skipped or approximated, by
/// name. Errors for a legacy switch the broker cannot provide, and for a scenario with `expect`
/// lines whose script needs a skipped step.
pub fn run_broker(scenario: &Scenario, opts: &RunOptions) -> Result<(RunResult, Skipped), String> {
    let cannot = broker_cannot_run(scenario);
    if !scenario.expects.is_empty() && !cannot.is_empty() {
        return Err(format!(
            "--runtime broker cannot honour the `expect` lines of this scenario: its script \
             uses {}, which the broker cannot do",
            describe_skipped(&cannot)
        ));
    }
    let bcfg = broker_config(opts.legacy)?;
    let world = World::new(
        scenario,
        &RunOptions {
            seed: opts.seed,
            ..RunOptions::default()
        },
    )?;
    let steps = concrete_steps(scenario, world.expanded_steps());
    drop(world);
    let key_shared = scenario.config.sub != SubKind::Shared;
    let mut b = SteppedBroker::new(bcfg, T0);
    let producer = b.connect("producer");
    let mut r = Run {
        b,
        cfg: scenario.config.clone(),
        key_shared,
        ordered_nack: key_shared && opts.legacy != Some(Legacy::UnorderedNack),
        now: 0,
        rng_fault: Rng::new(opts.seed, Purpose::Faults),
        rng_net: Rng::new(opts.seed, Purpose::Network),
        rng_time: Rng::new(opts.seed, Purpose::Timing),
        producer,
        producers_open: BTreeSet::new(),
        prod_seq: BTreeMap::new(),
        later: BTreeMap::new(),
        later_n: 0,
        last_publish: 0,
        cons: BTreeMap::new(),
        dying: Vec::new(),
        published: BTreeMap::new(),
        batches: BTreeMap::new(),
        acked: BTreeSet::new(),
        broker_acked: BTreeSet::new(),
        dropped: BTreeSet::new(),
        nacked_by: BTreeMap::new(),
        order: OrderChecker::new(key_shared),
        violations: Vec::new(),
        messages: 0,
        keys: BTreeSet::new(),
        faults: 0,
        events: 0,
        skipped: config_notes(&scenario.config),
        last_progress: 0,
        hash: 0xCBF2_9CE4_8422_2325,
        lines: 0,
        tail: VecDeque::new(),
        full: opts.keep_log.then(Vec::new),
    };
    let legacy = opts.legacy.map(Legacy::as_str).unwrap_or("none");
    r.log(format!(
        "broker scenario={} seed={} legacy={legacy}",
        scenario.name, opts.seed
    ));
    r.connect_producer();
    r.run(&steps);
    if r.violations.is_empty() {
        r.check_expectations(&scenario.expects);
    }
    Ok(r.result(scenario, opts.seed))
}

/// The broker's settings for a run: delayed delivery as the world has it (strict, 16 ms
/// buckets) and the legacy switch, if the broker has it.
fn broker_config(legacy: Option<Legacy>) -> Result<broker::BrokerConfig, String> {
    let mut cfg = broker::BrokerConfig {
        delayed_delivery: dispatcher::DelayedDelivery {
            enabled: true,
            tick: 16,
            strict: true,
        },
        ..broker::BrokerConfig::default()
    };
    let no = |l: Legacy, why: &str| {
        Err(format!(
            "--legacy {} is not available with --runtime broker: {why}",
            l.as_str()
        ))
    };
    match legacy {
        None => {}
        Some(Legacy::MarkDeleteCleanup) => cfg.legacy.mark_delete_cleanup = true,
        Some(Legacy::OrphanChunkReplay) => cfg.legacy.orphan_chunk_replay = true,
        Some(Legacy::UnorderedNack) => cfg.legacy.unordered_nack = true,
        // The broker's `--delayed-delivery-enabled false`.
        Some(Legacy::NoDelayedDelivery) => cfg.delayed_delivery.enabled = false,
        Some(l @ Legacy::NoBatchAckSet) => {
            return no(l, "the broker always sends a redelivered batch's ack_set and has no switch to leave it out")
        }
        Some(l @ Legacy::ReplaySettle) => {
            return no(l, "it restores a dispatcher regression under deferred reads (`reads=`); the broker's in-memory reads complete at once and it has no such switch")
        }
    }
    Ok(cfg)
}

/// Settings of `c` the broker has no equivalent for (left at its defaults), for the report.
fn config_notes(c: &WorldConfig) -> Skipped {
    let d = WorldConfig::default();
    let mut out = Skipped::new();
    let notes: [(bool, &'static str); 8] = [
        (c.max_unacked_consumer.is_some(), "config max_unacked"),
        (c.max_unacked_sub.is_some(), "config max_unacked_sub"),
        (c.look_ahead.is_some(), "config look_ahead"),
        (c.read_delay != (0, 0), "config reads"),
        (
            c.unblocking_interval != d.unblocking_interval,
            "config interval",
        ),
        (c.persist_interval != d.persist_interval, "config persist"),
        (c.store == StoreKind::File, "config store=file"),
        (
            c.sub == SubKind::KeySharedAutoSplit,
            "config key_shared_autosplit (the broker's AUTO_SPLIT is its ring)",
        ),
    ];
    for (on, name) in notes {
        if on {
            out.insert(name, 1);
        }
    }
    out
}

/// The mix's random joins and leaves made concrete, as the threaded run does.
fn concrete_steps(s: &Scenario, steps: Vec<Step>) -> Vec<Step> {
    let mix = s.mix.clone().unwrap_or_default();
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

/// Every frame in `buf`, each checked as the strictest client reads it.
fn frames_of(buf: &[u8]) -> Result<Vec<wire::Frame>, String> {
    wire::strict::frames(buf)
        .map(|f| {
            let f = f.map_err(|e| e.to_string())?;
            wire::strict::check_frame(f).map_err(|e| e.to_string())?;
            wire::decode_frame(f).map_err(|e| e.to_string())
        })
        .collect()
}

/// A batch section: per message `[u32 size][SingleMessageMetadata][payload]`.
fn batch_body(m: &MessageMetadata, n: u32) -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..n {
        let body = format!("{}-{}#{i}", m.producer_name, m.sequence_id).into_bytes();
        let single = SingleMessageMetadata {
            payload_size: body.len() as i32,
            ordering_key: m.ordering_key.clone(),
            ..Default::default()
        }
        .encode_to_vec();
        out.extend_from_slice(&(single.len() as u32).to_be_bytes());
        out.extend_from_slice(&single);
        out.extend_from_slice(&body);
    }
    out
}

/// Reads a batch section as a client does; the number of messages found.
fn read_batch(mut body: &[u8]) -> Result<u32, String> {
    let mut n = 0;
    while !body.is_empty() {
        let size = body
            .get(..4)
            .map(|s| u32::from_be_bytes([s[0], s[1], s[2], s[3]]) as usize)
            .ok_or("truncated size")?;
        let meta = body.get(4..4 + size).ok_or("truncated metadata")?;
        let single = SingleMessageMetadata::decode(meta).map_err(|e| e.to_string())?;
        let end = 4 + size + usize::try_from(single.payload_size).map_err(|e| e.to_string())?;
        body = body.get(end..).ok_or("truncated payload")?;
        n += 1;
    }
    Ok(n)
}

/// `L:E` of `internalStats` (`L:-1`: before the ledger's first entry).
fn parse_position(s: &str) -> Option<Position> {
    let (l, e) = s.split_once(':')?;
    let e = if e == "-1" { u64::MAX } else { e.parse().ok()? };
    Some(Position::new(l.parse().ok()?, e))
}

/// The text value of `"field": …` in a JSON body (a number or a string, not nested).
fn json_field<'a>(body: &'a str, field: &str) -> Option<&'a str> {
    let at = body.find(&format!("\"{field}\""))? + field.len() + 2;
    let rest = body[at..].trim_start().strip_prefix(':')?.trim_start();
    let rest = rest.trim_start_matches('"');
    let end = rest.find(['"', ',', '}', '\n'])?;
    Some(rest[..end].trim())
}

fn key_of(m: &MessageMetadata) -> Option<Vec<u8>> {
    m.ordering_key
        .clone()
        .or_else(|| m.partition_key.clone().map(String::into_bytes))
}

fn key_text(k: Option<&[u8]>) -> String {
    k.map(key_str).unwrap_or_else(|| "-".into())
}

/// The messages a client decodes from one MESSAGE frame (batch indexes its `ack_set` marks
/// as acked flagged so the client skips them).
fn incoming(epoch: u64, f: &wire::Frame) -> Result<Vec<IncomingMessage>, String> {
    let m = f.command.message.as_ref().ok_or("not a MESSAGE")?;
    let p = f.payload.as_ref().ok_or("a MESSAGE without its payload")?;
    let md = &p.metadata;
    let (l, e) = (m.message_id.ledger_id, m.message_id.entry_id);
    let chunk = md.uuid.as_ref().map(|u| ChunkInfo {
        uuid: u.clone(),
        chunk_id: md.chunk_id.unwrap_or(0) as u32,
        num_chunks: md.num_chunks_from_msg.unwrap_or(1) as u32,
        total_size: md.total_chunk_msg_size.unwrap_or(0) as u32,
    });
    let n = md.num_messages_in_batch.unwrap_or(1).max(1) as u32;
    let base = IncomingMessage {
        epoch,
        id: MessageId::new(l, e),
        key: key_of(md),
        publish_time: md.publish_time,
        redelivery_count: m.redelivery_count.unwrap_or(0),
        batch: None,
        chunk,
        payload: Vec::new(),
        already_acked: false,
    };
    if n <= 1 || base.chunk.is_some() {
        return Ok(vec![base]);
    }
    let found = read_batch(p.body()).map_err(|e| format!("unreadable batch: {e}"))?;
    if found != n {
        return Err(format!("batch of {n} holds {found} messages"));
    }
    let acked = if m.ack_set.is_empty() {
        Vec::new()
    } else {
        wire::convert::acked_indexes_from_ack_set(&m.ack_set, n)
    };
    Ok((0..n)
        .map(|i| IncomingMessage {
            id: MessageId::batched(l, e, i),
            batch: Some(BatchInfo { index: i, size: n }),
            already_acked: acked.contains(&i),
            ..base.clone()
        })
        .collect())
}

impl Run {
    fn log(&mut self, line: String) {
        let line = format!("t={} {line}", self.now);
        for b in line.bytes().chain(std::iter::once(b'\n')) {
            self.hash ^= u64::from(b);
            self.hash = self.hash.wrapping_mul(0x0000_0100_0000_01B3);
        }
        self.lines += 1;
        if self.tail.len() == TAIL {
            self.tail.pop_front();
        }
        if let Some(full) = &mut self.full {
            full.push(line.clone());
        }
        self.tail.push_back(line);
    }

    fn violate(
        &mut self,
        kind: ViolationKind,
        key: Option<String>,
        positions: Vec<String>,
        consumers: Vec<String>,
        detail: String,
    ) {
        let v = Violation {
            kind,
            at: self.now,
            key,
            positions,
            consumers,
            detail,
        };
        self.log(format!("VIOLATION {v}"));
        self.violations.push(v);
    }

    fn simple(&mut self, kind: ViolationKind, detail: String) {
        self.violate(kind, None, Vec::new(), Vec::new(), detail);
    }

    fn net(&mut self) -> u64 {
        let (a, b) = self.cfg.net;
        self.rng_net.range(a, b).max(1)
    }

    // ------------------------------------------------------------------ the time loop

    /// Runs the steps, then until every published entry is acked or dropped, a loss is seen,
    /// a stall bound passes, or the first violation.
    fn run(&mut self, steps: &[Step]) {
        let mut i = 0;
        let mut house = 0;
        loop {
            self.events += 1;
            self.b.set_time(T0 + self.now);
            while i < steps.len() && steps[i].at <= self.now && self.violations.is_empty() {
                self.step(steps[i].clone());
                i += 1;
            }
            self.due_chunks();
            self.due_connections();
            self.poll_all();
            self.deliver_up();
            while self.b.step() {}
            self.poll_all();
            self.deliver_down();
            let housekeeping = self.now >= house;
            if housekeeping {
                self.housekeeping();
                house = self.now + HOUSEKEEPING_MS;
            }
            if !self.violations.is_empty() {
                return;
            }
            let quiet = i == steps.len() && self.later.is_empty();
            let last = steps.last().map_or(0, |s| s.at).max(self.last_publish);
            if quiet && self.drained(housekeeping, last) {
                return;
            }
            self.now = self.next_time(steps.get(i).map(|s| s.at), house);
        }
    }

    /// The next time anything is due (at least 1 ms on).
    fn next_time(&self, step: Option<u64>, house: u64) -> u64 {
        let mut t = vec![step, Some(house), self.later.keys().next().map(|k| k.0)];
        t.push(self.b.next_deadline().map(|d| d.saturating_sub(T0)));
        t.extend(self.dying.iter().map(|d| Some(d.0)));
        for c in self.cons.values() {
            t.push(c.up.front().map(|u| u.0));
            t.push(c.down.front().map(|d| d.0));
            t.push(c.busy.and_then(|b| b.done_at));
            t.push(c.reconnect_at);
            if c.conn.is_some() {
                t.push(c.client.next_timer());
            }
        }
        let next = t.into_iter().flatten().min().unwrap_or(house);
        next.max(self.now + 1)
    }

    /// Retention, TTLs, quotas and keep-alives every 100 ms.
    fn housekeeping(&mut self) {
        self.b.housekeeping();
        let _ = self.producer.handle_timeout();
        self.producer_frames();
        let names: Vec<String> = self.cons.keys().cloned().collect();
        for n in names {
            if let Some(conn) = self.cons.get_mut(&n).and_then(|c| c.conn.as_mut()) {
                if let Err(e) = conn.handle_timeout() {
                    self.log(format!("broker closes {n}'s connection: {e:?}"));
                }
            }
        }
        self.poll_all();
    }

    /// After the last step: whether the run is over (drained, lost, or stalled).
    fn drained(&mut self, housekeeping: bool, last: u64) -> bool {
        let done = self
            .published
            .keys()
            .all(|p| self.acked.contains(p) || self.dropped.contains(p));
        if !done && !housekeeping {
            return self.stalled(last);
        }
        let Some((_, backlog)) = self.cursor() else {
            return self.stalled(last);
        };
        match (done, backlog) {
            (true, 0) => {
                self.log("backlog drained".into());
                true
            }
            (false, 0) => {
                let lost: Vec<String> = self
                    .published
                    .keys()
                    .filter(|p| !self.acked.contains(p) && !self.dropped.contains(p))
                    .map(Position::to_string)
                    .collect();
                let detail = format!("{} published entries are neither acked nor dropped by a recorded operation, and the broker's backlog is empty", lost.len());
                self.violate(
                    ViolationKind::Loss,
                    None,
                    lost.into_iter().take(10).collect(),
                    Vec::new(),
                    detail,
                );
                true
            }
            _ => self.stalled(last),
        }
    }

    fn stalled(&mut self, last: u64) -> bool {
        let quiet_since = last.max(self.last_progress);
        let why = if self.now > last.saturating_add(self.cfg.drain_bound) {
            "the backlog did not drain within the bound".to_string()
        } else if self.now > quiet_since.saturating_add(self.cfg.stall_window) {
            format!(
                "no entry was acked or dropped for {} ms",
                self.now - quiet_since
            )
        } else {
            return false;
        };
        let first = self
            .published
            .iter()
            .find(|(p, _)| !self.acked.contains(p) && !self.dropped.contains(p))
            .map(|(p, k)| (*p, k.clone()));
        let backlog = self.cursor().map_or(0, |c| c.1);
        let mut detail = format!("{why}: the broker's backlog is {backlog} entries");
        let mut key = None;
        if let Some((p, k)) = first {
            detail.push_str(&format!(
                "; the first entry neither acked nor dropped is {p}"
            ));
            if let (true, Some(k)) = (self.key_shared, k) {
                let q = format!(
                    "GET {SUB_PATH}/whyBlocked?key={} HTTP/1.1\r\nHost: sim\r\n\r\n",
                    key_str(&k)
                );
                let (_, body) = self.b.admin(q.as_bytes());
                let why = String::from_utf8_lossy(&body);
                let why = why.split_whitespace().collect::<Vec<_>>().join(" ");
                detail.push_str(&format!("; whyBlocked: {why}"));
                key = Some(key_str(&k));
            }
        }
        self.violate(ViolationKind::Stall, key, Vec::new(), Vec::new(), detail);
        true
    }

    /// The subscription's mark-delete position and backlog (entries), from `internalStats`.
    fn cursor(&self) -> Option<(Position, u64)> {
        let q = "GET /admin/v2/persistent/public/default/sim/internalStats HTTP/1.1\r\nHost: sim\r\n\r\n";
        let (status, body) = self.b.admin(q.as_bytes());
        let body = String::from_utf8_lossy(&body);
        if status != 200 {
            return None;
        }
        let md = parse_position(json_field(&body, "markDeletePosition")?)?;
        let backlog = json_field(&body, "numberOfEntriesSinceFirstNotAckedMessage")?;
        Some((md, backlog.parse().ok()?))
    }

    // ------------------------------------------------------------------ steps

    fn step(&mut self, s: Step) {
        if s.action.is_fault() || (matches!(s.action, Action::Join(..)) && s.at > 0) {
            self.faults += 1;
        }
        match s.action {
            Action::Join(name, o) => self.join(&name, o),
            Action::Leave(name) => self.leave(&name),
            Action::Crash(name) => self.crash(&name),
            Action::Restart | Action::RandomFault(FaultKind::Restart) => self.restart(),
            Action::Publish(p) => self.publish(&p),
            Action::Skip(n) => self.admin(&format!("skip {n}"), &format!("skip/{n}")),
            Action::Clear => self.admin("clear-backlog", "skip_all"),
            Action::Expire(age) => self.expire(age),
            Action::Ack(name, p) => self.manual_finish(&name, p, false),
            Action::Nack(name, p) => self.manual_finish(&name, p, true),
            Action::Auto(name) => self.auto(&name),
            Action::Evict(_) | Action::RandomFault(FaultKind::Evict) => {
                self.faults -= 1;
                self.log("evict skipped: no REST operation".into());
                *self.skipped.entry("evict").or_insert(0) += 1;
            }
            Action::RandomFault(k @ (FaultKind::Leave | FaultKind::Crash)) => {
                let live: Vec<String> = self
                    .cons
                    .iter()
                    .filter(|(_, c)| c.state == CState::Connected)
                    .map(|(n, _)| n.clone())
                    .collect();
                if live.len() < 2 {
                    self.faults -= 1;
                    self.log(format!(
                        "{k:?} skipped: only {} consumer(s) left",
                        live.len()
                    ));
                    let what = if k == FaultKind::Leave {
                        "leave (one consumer left)"
                    } else {
                        "crash (one consumer left)"
                    };
                    *self.skipped.entry(what).or_insert(0) += 1;
                    return;
                }
                let n = &live[self.rng_fault.below(live.len() as u64) as usize];
                if k == FaultKind::Leave {
                    self.leave(n);
                } else {
                    self.crash(n);
                }
            }
            Action::RandomFault(FaultKind::Skip) => {
                let n = self.rng_fault.range(1, 10);
                self.admin(&format!("skip {n}"), &format!("skip/{n}"));
            }
            Action::RandomFault(FaultKind::Clear) => self.admin("clear-backlog", "skip_all"),
            Action::RandomFault(FaultKind::Expire) => {
                let age = self.rng_fault.range(200, 2000);
                self.expire(age);
            }
            // Made concrete by `concrete_steps`.
            Action::RandomFault(FaultKind::Join) => {}
        }
    }

    /// Expiry of messages older than `age` ms, in the REST operation's whole seconds (rounded
    /// up: never a message younger than asked).
    fn expire(&mut self, age: u64) {
        let secs = age.div_ceil(1000);
        self.admin(
            &format!("expire age={age}ms as {secs}s"),
            &format!("expireMessages/{secs}"),
        );
    }

    /// One admin REST operation on the subscription; what its mark-delete move passed over
    /// without an ack is recorded as dropped.
    fn admin(&mut self, what: &str, op: &str) {
        let before = self.cursor();
        let req =
            format!("POST {SUB_PATH}/{op} HTTP/1.1\r\nHost: sim\r\nContent-Length: 0\r\n\r\n");
        let (status, body) = self.b.admin(req.as_bytes());
        let after = self.cursor();
        let moved = matches!((before, after), (Some(a), Some(b)) if b.0 > a.0);
        let (Some((from, _)), Some((to, _)), 200..=299, true) = (before, after, status, moved)
        else {
            let body = String::from_utf8_lossy(&body).into_owned();
            self.log(format!(
                "admin {what}: status {status}, mark-delete unchanged {body}"
            ));
            return;
        };
        let dropped: Vec<Position> = self
            .published
            .range((Excluded(from), Included(to)))
            .map(|(p, _)| *p)
            .filter(|p| !self.acked.contains(p))
            .collect();
        let list: Vec<String> = dropped.iter().map(Position::to_string).collect();
        self.log(format!(
            "admin {what}: mark-delete {from} -> {to} dropped [{}]",
            list.join(" ")
        ));
        for p in dropped {
            if self.dropped.insert(p) {
                self.last_progress = self.now;
            }
            self.order.dropped(p);
            if let Some(name) = self.nacked_by.remove(&p) {
                let now = self.now;
                let known = self.cons.get_mut(&name).is_some_and(|c| {
                    c.client
                        .on_dropped_by_broker(now, EntryId::new(p.ledger_id, p.entry_id))
                });
                self.log(format!(
                    "client {name}: nacked {p} dropped by the broker (known={known})"
                ));
                self.pump(&name);
                self.try_start(&name);
            }
        }
        self.poll_all();
    }

    fn publish(&mut self, p: &PublishSpec) {
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

    fn due_chunks(&mut self) {
        while let Some(e) = self.later.first_entry() {
            if e.key().0 > self.now {
                break;
            }
            let (producer, m) = e.remove();
            self.send(producer, m, 1);
        }
    }

    fn connect_producer(&mut self) {
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

    /// One SEND (with PRODUCER first for a new producer) and its receipt.
    fn send(&mut self, producer: u32, mut m: MessageMetadata, n: u32) {
        m.publish_time = T0 + self.now;
        self.last_publish = self.now;
        let pid = u64::from(producer);
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
        if let Err(e) = self.producer.handle_bytes(&bytes) {
            self.simple(
                ViolationKind::Model,
                format!("the producer's connection closed: {e:?}"),
            );
        }
        for f in self.producer_frames() {
            let Some(r) = f.command.send_receipt.as_ref() else {
                continue;
            };
            let Some(id) = r.message_id.as_ref() else {
                continue;
            };
            self.published_entry(Position::new(id.ledger_id, id.entry_id), &m, n);
        }
    }

    /// The producer connection's frames (PING answered); errors are violations.
    fn producer_frames(&mut self) -> Vec<wire::Frame> {
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
            match f.command.r#type() {
                Type::Ping => {
                    let mut pong = Vec::new();
                    wire::encode_command(&wire::commands::pong(), &mut pong);
                    let _ = self.producer.handle_bytes(&pong);
                }
                Type::Error | Type::SendError => {
                    let d = format!("the broker refused a publish: {:?}", f.command);
                    self.simple(ViolationKind::Model, d);
                }
                _ => {}
            }
        }
        out
    }

    fn published_entry(&mut self, pos: Position, m: &MessageMetadata, n: u32) {
        let key = key_of(m);
        if m.chunk_id.unwrap_or(0) == 0 {
            self.messages += u64::from(n);
        }
        if m.deliver_at_time.is_some() {
            self.order.mark_delayed(pos);
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

// ---------------------------------------------------------------------- consumers

impl Run {
    fn join(&mut self, name: &str, o: ConsumerOpts) {
        let live = |c: &Cons| matches!(c.state, CState::Connected | CState::Leaving);
        if self.cons.get(name).is_some_and(live) {
            let d = format!("scenario joins {name}, which is already connected");
            return self.simple(ViolationKind::Expectation, d);
        }
        let client = match Consumer::new(client_config(&o, self.ordered_nack)) {
            Ok(c) => c,
            Err(e) => {
                let d = format!("bad consumer options for {name}: {e}");
                return self.simple(ViolationKind::Expectation, d);
            }
        };
        self.log(format!(
            "join {name} queue={} proc={}-{} nack={} manual={}",
            o.queue, o.proc.0, o.proc.1, o.nack, o.manual
        ));
        let c = Cons {
            opts: o,
            client,
            conn: None,
            state: CState::Connected,
            epoch: 0,
            busy: None,
            up: VecDeque::new(),
            down: VecDeque::new(),
            up_last: 0,
            down_last: 0,
            next_rid: 1,
            acks: BTreeMap::new(),
            sizes: BTreeMap::new(),
            close_sent: false,
            reconnect_at: None,
        };
        self.cons.insert(name.to_string(), c);
        self.connect(name);
    }

    /// A new connection for `name`: CONNECT and SUBSCRIBE at once, then the client connects.
    fn connect(&mut self, name: &str) {
        use wire::proto::command_subscribe::{InitialPosition, SubType};
        let mut conn = self.b.connect(name);
        let mut bytes = Vec::new();
        let hello = wire::commands::connect("sim", broker::PROTOCOL_VERSION);
        if self.ordered_nack {
            wire::pip493::encode_connect_with_flag(hello, &mut bytes);
        } else {
            wire::encode_command(&hello, &mut bytes);
        }
        let (t, meta) = if self.key_shared {
            let m = wire::proto::KeySharedMeta {
                key_shared_mode: wire::proto::KeySharedMode::AutoSplit as i32,
                ..Default::default()
            };
            (SubType::KeyShared, Some(m))
        } else {
            (SubType::Shared, None)
        };
        let mut sub =
            wire::commands::subscribe(TOPIC, "sim", 1, 1, t, meta, InitialPosition::Earliest);
        if let (Some(s), Some(c)) = (sub.subscribe.as_mut(), self.cons.get(name)) {
            s.consumer_name = Some(name.to_string());
            s.priority_level = Some(c.opts.prio);
        }
        wire::encode_command(&sub, &mut bytes);
        let r = conn.handle_bytes(&bytes);
        let (now, id) = (self.now, conn.id());
        let Some(c) = self.cons.get_mut(name) else {
            return;
        };
        c.conn = Some(conn);
        c.next_rid = 2;
        c.up.clear();
        c.down.clear();
        c.acks.clear();
        c.reconnect_at = None;
        c.epoch = c.client.connect(now);
        self.log(format!("connect {name} conn={id}"));
        if let Err(e) = r {
            self.simple(
                ViolationKind::Model,
                format!("the broker closed {name}'s new connection: {e:?}"),
            );
        }
        self.poll_one(name);
        self.pump(name);
        self.try_start(name);
        self.maybe_close(name);
    }

    fn leave(&mut self, name: &str) {
        match self.cons.get_mut(name) {
            Some(c) if c.state == CState::Connected => c.state = CState::Leaving,
            _ => return,
        }
        self.log(format!("leave {name} (graceful)"));
        self.maybe_close(name);
    }

    /// A leaving consumer whose application is idle sends CLOSE_CONSUMER (then disconnects).
    fn maybe_close(&mut self, name: &str) {
        let Some(c) = self.cons.get_mut(name) else {
            return;
        };
        if c.state != CState::Leaving || c.busy.is_some() || c.close_sent || c.conn.is_none() {
            return;
        }
        c.close_sent = true;
        let mut bytes = Vec::new();
        wire::encode_command(&wire::commands::close_consumer(1, c.next_rid), &mut bytes);
        c.next_rid += 1;
        self.push_up(name, bytes, true);
    }

    fn crash(&mut self, name: &str) {
        let conn = match self.cons.get_mut(name) {
            Some(c) if matches!(c.state, CState::Connected | CState::Leaving) => {
                c.state = CState::Crashed;
                c.reconnect_at = None;
                c.busy = None;
                c.up.clear();
                c.down.clear();
                c.conn.take()
            }
            _ => return,
        };
        self.order.abandon(name);
        self.log(format!("crash {name}"));
        if let Some(conn) = conn {
            self.dying
                .push((self.now + self.cfg.notice, name.to_string(), conn));
        }
    }

    /// The broker's storage is in memory: a restart drops every consumer connection (the
    /// applications lose their work, the clients start afresh and reconnect) and keeps the
    /// broker's state.
    fn restart(&mut self) {
        self.log(
            "broker restart (approximated: consumer connections drop, broker state kept)".into(),
        );
        let note = "restart (approximated: consumer connections dropped, broker state kept)";
        *self.skipped.entry(note).or_insert(0) += 1;
        self.dying.clear();
        let names: Vec<String> = self.cons.keys().cloned().collect();
        for name in names {
            self.order.abandon(&name);
            let at = self.now + self.rng_net.range(10, 100);
            let ordered = self.ordered_nack;
            let Some(c) = self.cons.get_mut(&name) else {
                continue;
            };
            c.conn = None;
            c.busy = None;
            c.up.clear();
            c.down.clear();
            if c.state != CState::Connected {
                c.state = CState::Gone;
            } else if let Ok(fresh) = Consumer::new(client_config(&c.opts, ordered)) {
                c.client = fresh;
                c.reconnect_at = Some(at);
            }
        }
    }

    /// Crashed connections the broker now notices, and reconnections due.
    fn due_connections(&mut self) {
        let now = self.now;
        let (gone, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.dying)
            .into_iter()
            .partition(|d| d.0 <= now);
        self.dying = keep;
        for (_, name, conn) in gone {
            drop(conn);
            self.log(format!("broker notices {name} is gone"));
        }
        let due: Vec<String> = self
            .cons
            .iter()
            .filter(|(_, c)| c.reconnect_at.is_some_and(|t| t <= now))
            .map(|(n, _)| n.clone())
            .collect();
        for n in due {
            self.connect(&n);
        }
    }

    fn push_up(&mut self, name: &str, bytes: Vec<u8>, close: bool) {
        let at = self.now + self.net();
        if let Some(c) = self.cons.get_mut(name) {
            c.up_last = at.max(c.up_last);
            c.up.push_back((c.up_last, bytes, close));
        }
    }

    // ------------------------------------------------------------------ the wire

    /// Takes every connection's frames (a crashed one's are lost).
    fn poll_all(&mut self) {
        for (_, _, conn) in &mut self.dying {
            while conn.poll_transmit().is_some() {}
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

    fn poll_one(&mut self, name: &str) {
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
    fn on_frame(&mut self, name: &str, f: wire::Frame, sent: &mut String) {
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
    fn check_message(&mut self, name: &str, f: &wire::Frame, sent: &mut String) -> bool {
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

    /// An ACK_RESPONSE: a success makes its acks accepted.
    fn ack_response(&mut self, name: &str, f: &wire::Frame) {
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
            self.broker_acked.insert((p, i));
            // Batch-index acks complete an entry, from whichever consumers they came.
            let n = self.batches.get(&p).copied().unwrap_or(1);
            let complete = i.is_none() || (0..n).all(|j| self.broker_acked.contains(&(p, Some(j))));
            if complete {
                self.broker_acked.insert((p, None));
                if self.acked.insert(p) {
                    self.last_progress = self.now;
                }
            }
        }
    }

    /// Client → broker bytes due now; a CLOSE_CONSUMER ends the connection after its reply.
    fn deliver_up(&mut self) {
        let names: Vec<String> = self.cons.keys().cloned().collect();
        for name in names {
            loop {
                let now = self.now;
                let Some(c) = self.cons.get_mut(&name) else {
                    break;
                };
                let Some(conn) = c.conn.as_mut() else { break };
                if c.up.front().is_none_or(|u| u.0 > now) {
                    break;
                }
                let Some((_, bytes, close)) = c.up.pop_front() else {
                    break;
                };
                let r = conn.handle_bytes(&bytes);
                self.poll_one(&name);
                if let Err(e) = r {
                    self.simple(
                        ViolationKind::Model,
                        format!("the broker closed {name}'s connection: {e:?}"),
                    );
                }
                if close {
                    if let Some(c) = self.cons.get_mut(&name) {
                        c.conn = None;
                        c.state = CState::Gone;
                        c.up.clear();
                        c.down.clear();
                    }
                    self.log(format!("{name} closed"));
                    break;
                }
            }
        }
    }

    /// Broker → client frames due now, client timers, applications finishing and starting.
    fn deliver_down(&mut self) {
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
    fn pump(&mut self, name: &str) {
        let mut cmds = Vec::new();
        if let Some(c) = self.cons.get_mut(name).filter(|c| c.conn.is_some()) {
            while let Some(cmd) = c.client.poll_command() {
                cmds.push(cmd);
            }
        }
        for cmd in cmds {
            let mut bytes = Vec::new();
            let line = self.encode(name, cmd, &mut bytes);
            self.log(format!("client {name}: {line}"));
            self.push_up(name, bytes, false);
        }
    }

    /// One client command as Pulsar frames: FLOW, ACK (batch indexes with an `ack_set`, a
    /// request id), REDELIVER_UNACKNOWLEDGED_MESSAGES, PIP-493 NEGATIVE_ACK.
    fn encode(&mut self, name: &str, cmd: Command, out: &mut Vec<u8>) -> String {
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

    fn encode_ack(&mut self, name: &str, ids: &[MessageId], out: &mut Vec<u8>) -> String {
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

    // ------------------------------------------------------------------ applications

    fn try_start(&mut self, name: &str) {
        let now = self.now;
        let d = match self.cons.get_mut(name) {
            Some(c) if c.state == CState::Connected && c.busy.is_none() && c.conn.is_some() => {
                c.client.receive(now)
            }
            _ => None,
        };
        if let Some(d) = d {
            let msg: MsgRef = (
                Position::new(d.id.ledger_id, d.id.entry_id),
                d.id.batch_index,
            );
            let first = d.chunk_ids.first().map_or(msg, |c| {
                (Position::new(c.ledger_id, c.entry_id), c.batch_index)
            });
            self.log(format!(
                "app {name} starts {} key={} redelivery={}",
                msg_str(msg),
                key_text(d.key.as_deref()),
                d.redelivery_count
            ));
            for v in self
                .order
                .start_span(now, name, d.key.as_deref(), first, msg)
            {
                self.log(format!("VIOLATION {v}"));
                self.violations.push(v);
            }
            let (manual, (a, b)) = self
                .cons
                .get(name)
                .map_or((true, (0, 0)), |c| (c.opts.manual, c.opts.proc));
            let done_at = (!manual).then(|| now + self.rng_time.range(a, b));
            if let Some(c) = self.cons.get_mut(name) {
                c.busy = Some(Task {
                    id: d.id,
                    msg,
                    done_at,
                });
            }
        }
        self.pump(name);
    }

    /// The application finishes what it holds: an ack, or a nack.
    fn finish(&mut self, name: &str, nack: bool) {
        let now = self.now;
        let Some(c) = self.cons.get_mut(name) else {
            return;
        };
        let Some(t) = c.busy.take() else { return };
        let r = if nack {
            c.client.nack(now, t.id).map_err(|e| e.to_string())
        } else {
            c.client.ack(now, t.id).map_err(|e| e.to_string())
        };
        if nack {
            self.order.nack(now, name);
        } else {
            self.order.finish(now, name);
        }
        let verb = if nack { "nacks" } else { "acks" };
        match r {
            Ok(()) => self.log(format!("app {name} {verb} {}", msg_str(t.msg))),
            Err(e) => self.log(format!(
                "app {name} {verb} {}: refused: {e}",
                msg_str(t.msg)
            )),
        }
        self.pump(name);
        self.maybe_close(name);
        self.try_start(name);
    }

    fn manual_finish(&mut self, name: &str, p: Option<Position>, nack: bool) {
        match (self.cons.get(name).and_then(|c| c.busy), p) {
            (None, _) => {
                let d = format!("script: {name} holds no message to finish");
                self.simple(ViolationKind::Expectation, d);
            }
            (Some(t), Some(p)) if t.msg.0 != p => {
                let d = format!("script: {name} holds {}, not {p}", msg_str(t.msg));
                self.simple(ViolationKind::Expectation, d);
            }
            _ => self.finish(name, nack),
        }
    }

    fn auto(&mut self, name: &str) {
        let now = self.now;
        let Some(c) = self.cons.get_mut(name) else {
            return;
        };
        c.opts.manual = false;
        let (a, b) = c.opts.proc;
        if c.busy.is_some() {
            let at = now + self.rng_time.range(a, b);
            if let Some(t) = self.cons.get_mut(name).and_then(|c| c.busy.as_mut()) {
                t.done_at = Some(at);
            }
        } else {
            self.try_start(name);
        }
    }

    // ------------------------------------------------------------------ the end

    fn check_expectations(&mut self, expects: &[Expect]) {
        for e in expects {
            let failed = match e {
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
            if let Some(d) = failed {
                self.simple(ViolationKind::Expectation, d);
            }
        }
    }

    fn result(mut self, scenario: &Scenario, seed: u64) -> (RunResult, Skipped) {
        self.log(format!(
            "end violations={} messages={} entries={} faults={}",
            self.violations.len(),
            self.messages,
            self.published.len(),
            self.faults
        ));
        let r = RunResult {
            scenario: scenario.name.clone(),
            seed,
            messages: self.messages,
            entries: self.published.len() as u64,
            keys: self.keys.len() as u64,
            faults: self.faults,
            violations: std::mem::take(&mut self.violations),
            log_hash: self.hash,
            log_lines: self.lines,
            sim_time: self.now,
            events: self.events,
            starts: self.order.starts,
            log_tail: self.tail.iter().cloned().collect(),
            log: self.full.take(),
        };
        (r, std::mem::take(&mut self.skipped))
    }
}
