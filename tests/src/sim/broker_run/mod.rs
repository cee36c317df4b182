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
//! an admin operation: the cursor's mark-delete move read from `internalStats`), no mark-delete
//! past an entry neither acked nor dropped (after every round of steps), no stall (a
//! dispatcher idle on a replay entry nothing holds back, after every round of steps; a backlog
//! that stops moving or does not drain), no
//! acked message sent again unmarked (checked on the MESSAGE frames as they leave the broker,
//! against the ACKs it answered with success), no delayed message sent early, every frame
//! readable by a strict client, the scenario's `expect` lines, no dispatcher livelock, and,
//! after every round of steps, the reference model of who holds what ([`model`]) against the
//! dispatcher's [`dispatcher::Holdings`]. A REDELIVER or NEGATIVE_ACK is handled alone (the
//! broker stepped before and after it), so the model knows which send it takes back.
//!
//! A broker restart is real (not approximated) when the scenario can restart (scripted `restart`
//! steps or random restart faults) or asks for `store=file`: that run's broker stores its topics
//! and cursors in a temporary data directory of its own (removed when the run ends, also when it
//! fails; `--sync interval`: entries reach the OS before their receipt, as with `always`, so a
//! killed broker leaves the same files, without an fsync per SEND), and a `restart` kills it
//! ([`SteppedBroker::crash`]: no dispatcher runs again, no shutdown persist), loses every
//! connection (crashed consumers' too) and opens the same directory again ([`SteppedBroker::open`])
//! at the virtual time. The connected consumers reconnect with fresh clients after 10-100 ms, as
//! the world's do; leaving and crashed ones are gone. The producer reconnects at once and goes on
//! publishing (its SENDs are answered at once, so no send is ever without its receipt at a crash:
//! every published entry must survive). Acks the crash lost (accepted after the cursor's last
//! persist: neither in the cursor's store nor at or below the recovered mark-delete) come back and
//! no longer count as accepted; a message the client had discarded whose ack was lost may then come
//! after later ones of its key (exempt from the first-start order rule, reported). An admin
//! operation's drop the crash undid is logged. Scenarios without restarts run on the in-memory
//! broker.
//!
//! Backlog-quota eviction is a namespace quota with `consumer_backlog_eviction`, enforced by one
//! housekeeping pass (see [`admin`]). `reads=` delays every dispatcher read by the runtime's
//! [`dispatcher::ReadDelay`]; `persist=` sets the cursors' persist cadence (the broker's
//! default, one second, otherwise); `max_unacked`, `max_unacked_sub`, `look_ahead` and
//! `interval` set the broker's dispatch settings (`broker::DispatchLimits`), and
//! `type=key_shared_autosplit` its `--subscription-key-shared-use-consistent-hashing false`.
//! Expiry works in whole seconds there: a scenario's age in ms is
//! rounded up (never expires a younger message). As the world's adapter does, the runner tells
//! the client that nacked an entry an admin operation dropped (Pulsar's protocol has no such
//! notice).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use broker::stepped::{Connection, SteppedBroker};
use client::{Consumer, MessageId};
use cursor::Position;
use wire::proto::MessageMetadata;

use crate::sim::check::{MsgRef, OrderChecker, Violation};
use crate::sim::rng::{Purpose, Rng};
use crate::sim::scenario::{ConsumerOpts, Scenario, SubKind, WorldConfig};
use crate::sim::threads::Skipped;
use crate::sim::world::{CState, Legacy, RunOptions, RunResult, World};

mod admin;
mod checks;
mod consumer_wire;
mod consumers;
mod frames;
mod model;
mod producer;
mod reads;
mod reopen;
mod restart;
mod run;
mod setup;

use restart::DataDir;
use setup::{broker_config, runtime_options};

/// Virtual time 0 on the broker's (wall-clock ms) clock.
const T0: u64 = 1_764_000_000_000;
const TOPIC: &str = "persistent://public/default/sim";
const SUB_PATH: &str = "/admin/v2/persistent/public/default/sim/subscription/sim";
const TAIL: usize = 60;
const HOUSEKEEPING_MS: u64 = 100;

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
    /// Bytes on their way to the broker.
    up: VecDeque<Up>,
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

/// Bytes on their way from a client to the broker.
struct Up {
    /// When they arrive.
    at: u64,
    bytes: Vec<u8>,
    /// A CLOSE_CONSUMER: the connection ends after its reply.
    close: bool,
    /// The entries a REDELIVER or NEGATIVE_ACK in them hands back.
    returns: Vec<Position>,
}

/// The run's state (see the module doc).
struct Run {
    b: SteppedBroker,
    /// The broker's settings (with the data directory of a run that restarts).
    bcfg: broker::BrokerConfig,
    /// The dispatcher runtimes' options (read delays, persist cadence).
    ropts: dispatcher::RuntimeOptions,
    cfg: WorldConfig,
    key_shared: bool,
    ordered_nack: bool,
    now: u64,
    rng_fault: Rng,
    rng_net: Rng,
    rng_time: Rng,
    producer: Connection,
    /// Whether the producer's writes complete later (one seed in four, in scenarios without
    /// expect lines): each takes 1 to
    /// 30 ms, completing in order (a write that is due waits for the older ones), as a store
    /// on other machines answers.
    hold_writes: bool,
    /// When each held write is due, in the order the producer connection holds them.
    write_due: Vec<u64>,
    /// Producers the broker closed after a failed write (`store_faults=on`), by id: when their
    /// next PRODUCER goes and the wait after a refusal (see `reopen.rs`).
    reopen: BTreeMap<u64, (u64, u64)>,
    /// Reopening PRODUCERs sent: request id → producer id.
    reopening: BTreeMap<u64, u64>,
    /// Producers whose reopen succeeded, their held-back messages still to send.
    reopened: Vec<u64>,
    /// Messages of closed producers, in the order sent, sent again once open.
    held_back: VecDeque<(u64, MessageMetadata, u32)>,
    next_request: u64,
    /// Held writes that fail with the one the store refused (pushed before it failed).
    doomed: usize,
    /// A CLOSE_PRODUCER came in the producer's frames (checked after a refused write).
    closed_seen: bool,
    /// Until when reads fail (`store_faults=on`): deliveries wait meanwhile.
    reads_fail_until: Option<u64>,
    /// Whether the store is cold and its reads complete later (see `reads.rs`).
    hold_reads: bool,
    /// When each held read is due, in the order the store holds them.
    read_due: Vec<u64>,
    rng_reads: Rng,
    /// SENDs not yet receipted, in the order sent (receipts come in that order; the chunks of
    /// a message share its sequence id): (producer id, metadata, messages).
    unreceipted: VecDeque<(u64, MessageMetadata, u32)>,
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
    /// Chunks of chunked messages other than the last (a message is known by its last chunk).
    inner_chunks: BTreeSet<Position>,
    /// Every chunk of every chunked message, with its message's uuid (the idle-replay check
    /// leaves them to their own rules; a REDELIVER of one chunk returns them all).
    chunks: BTreeMap<Position, String>,
    /// Who holds what, from the wire (see [`model`]).
    model: model::Model,
    /// A mark-delete move drops the pending entries it passes (Shared; Key_Shared with
    /// `--legacy mark-delete-cleanup`).
    cleans_on_move: bool,
    /// Entries whose every message the broker accepted an ack for (less those a crash lost).
    acked: BTreeSet<Position>,
    /// Acks the broker accepted, by (position, batch index; `None` = the whole entry), less
    /// those a broker crash lost: none of these may reach an application again unmarked.
    broker_acked: BTreeSet<(Position, Option<u32>)>,
    dropped: BTreeSet<Position>,
    /// The mark-delete position up to which every entry was found acked or dropped.
    checked_md: Option<Position>,
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

/// Runs `scenario`'s workload through the broker's stepped core for `opts.seed` (see the
/// module doc) and checks it. Returns the result and what was skipped or approximated, by
/// name. Errors for a legacy switch the broker cannot provide, and for a scenario with `expect`
/// lines whose script needs a skipped step.
pub fn run_broker(scenario: &Scenario, opts: &RunOptions) -> Result<(RunResult, Skipped), String> {
    let mut bcfg = broker_config(&scenario.config, opts.legacy);
    let world = World::new(
        scenario,
        &RunOptions {
            seed: opts.seed,
            ..RunOptions::default()
        },
    )?;
    let steps = crate::sim::threads::concrete_joins(scenario, world.expanded_steps());
    drop(world);
    // Declared before the run, so it is removed after the broker is gone (also on a panic).
    let dir = match DataDir::wanted(&scenario.config, &steps) {
        true => Some(DataDir::create(&scenario.name, opts.seed)?),
        false => None,
    };
    bcfg.data_dir = dir.as_ref().map(|d| d.path().to_path_buf());
    // Written to the OS before the receipt, as with `always`: a killed process leaves the same
    // files (the same event log per seed either way), without an fsync per SEND.
    bcfg.sync = broker::SyncPolicy::Interval;
    let mut r = Run::new(scenario, opts, bcfg)?;
    let legacy = opts.legacy.map(Legacy::as_str).unwrap_or("none");
    r.log(format!(
        "broker scenario={} seed={} legacy={legacy}",
        scenario.name, opts.seed
    ));
    if dir.is_some() {
        r.log("broker storage: a data directory (a restart crashes and reopens it)".into());
    }
    r.connect_producer();
    r.run(&steps);
    if r.violations.is_empty() {
        r.check_expectations(&scenario.expects);
    }
    let out = r.result(scenario, opts.seed);
    drop(dir);
    Ok(out)
}

impl Run {
    /// The run's state for `scenario` and `opts.seed`, with a broker over `bcfg` (opened over
    /// its data directory, or in memory).
    fn new(
        scenario: &Scenario,
        opts: &RunOptions,
        bcfg: broker::BrokerConfig,
    ) -> Result<Run, String> {
        let key_shared = scenario.config.sub != SubKind::Shared;
        let ropts = runtime_options(&scenario.config, opts.seed);
        let mut b = SteppedBroker::open_with(bcfg.clone(), T0, ropts)
            .map_err(|e| format!("the broker did not open its data directory: {e}"))?;
        let mut producer = b.connect("producer");
        // Not where the scenario's expect lines time deliveries to the millisecond.
        let hold_writes =
            scenario.config.store_faults || (opts.seed % 4 == 1 && scenario.expects.is_empty());
        producer.hold_writes(hold_writes);
        let hold_reads =
            scenario.config.store_faults || (opts.seed % 4 == 2 && scenario.expects.is_empty());
        let mut r = Run {
            b,
            bcfg,
            ropts,
            cfg: scenario.config.clone(),
            key_shared,
            ordered_nack: key_shared && opts.legacy != Some(Legacy::UnorderedNack),
            now: 0,
            rng_fault: Rng::new(opts.seed, Purpose::Faults),
            rng_net: Rng::new(opts.seed, Purpose::Network),
            rng_time: Rng::new(opts.seed, Purpose::Timing),
            producer,
            hold_writes,
            write_due: Vec::new(),
            reopen: BTreeMap::new(),
            reopening: BTreeMap::new(),
            reopened: Vec::new(),
            held_back: VecDeque::new(),
            next_request: 0,
            doomed: 0,
            closed_seen: false,
            reads_fail_until: None,
            hold_reads,
            read_due: Vec::new(),
            rng_reads: Rng::new(opts.seed, Purpose::Reads),
            unreceipted: VecDeque::new(),
            producers_open: BTreeSet::new(),
            prod_seq: BTreeMap::new(),
            later: BTreeMap::new(),
            later_n: 0,
            last_publish: 0,
            cons: BTreeMap::new(),
            dying: Vec::new(),
            published: BTreeMap::new(),
            batches: BTreeMap::new(),
            inner_chunks: BTreeSet::new(),
            chunks: BTreeMap::new(),
            model: model::Model::default(),
            cleans_on_move: !key_shared || opts.legacy == Some(Legacy::MarkDeleteCleanup),
            acked: BTreeSet::new(),
            broker_acked: BTreeSet::new(),
            dropped: BTreeSet::new(),
            checked_md: None,
            nacked_by: BTreeMap::new(),
            order: OrderChecker::new(key_shared),
            violations: Vec::new(),
            messages: 0,
            keys: BTreeSet::new(),
            faults: 0,
            events: 0,
            skipped: Skipped::new(),
            last_progress: 0,
            hash: 0xCBF2_9CE4_8422_2325,
            lines: 0,
            tail: VecDeque::new(),
            full: opts.keep_log.then(Vec::new),
        };
        r.apply_read_mode();
        Ok(r)
    }
}
