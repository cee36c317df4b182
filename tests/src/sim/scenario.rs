//! Scenario files (`tests/scenarios/*.sim`): a line format for scripted and randomised runs.
//!
//! The format is documented with examples in `docs/SIMULATOR.md`. In short:
//!
//! ```text
//! # comment
//! config type=key_shared net=1-5
//! at 0 join c1 manual
//! at 0 publish key=K count=3
//! at 10 join c2
//! at 20 skip 1
//! at 30 ack c1 1:0
//! expect order 1:0 1:3
//! ```

use std::collections::BTreeMap;
use std::fmt;

use cursor::Position;

/// Subscription type of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubKind {
    /// Shared (round robin, chunks through the assignor).
    Shared,
    /// Key_Shared with the consistent-hashing ring.
    KeySharedRing,
    /// Key_Shared with the auto-split selector.
    KeySharedAutoSplit,
}

/// Where the cursor persists its state across broker restarts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    /// `cursor::MemoryStore`, kept by the simulator across restarts.
    Memory,
    /// `cursor::FileStore` in a per-run temporary directory.
    File,
}

/// World settings (`config` line).
#[derive(Clone, Debug, PartialEq)]
pub struct WorldConfig {
    /// Subscription type.
    pub sub: SubKind,
    /// Cursor store.
    pub store: StoreKind,
    /// One-way network delay range, ms.
    pub net: (u64, u64),
    /// How long the broker takes to notice a crashed consumer, ms.
    pub notice: u64,
    /// After the last scripted step, the backlog must drain within this many ms.
    pub drain_bound: u64,
    /// After the last scripted step, some entry must be acked or dropped at least this often
    /// (ms) while a backlog is left; otherwise the run stalled.
    pub stall_window: u64,
    /// Dispatcher unblocking interval, ms.
    pub unblocking_interval: u64,
    /// The cursor persists its state at most this often, ms (admin operations persist at once).
    pub persist_interval: u64,
    /// Dispatcher: block a consumer at this many unacked messages (`None`: the default).
    pub max_unacked_consumer: Option<u32>,
    /// Dispatcher: block the subscription's reads at this many unacked messages.
    pub max_unacked_sub: Option<u64>,
    /// Dispatcher (Key_Shared): look-ahead replay entries per consumer.
    pub look_ahead: Option<i64>,
    /// How long a read or replay read takes to complete, ms (`reads=MIN-MAX`). (0, 0): reads
    /// complete at once, inside the broker step that issued them; otherwise the broker's input
    /// (flows, acks, redeliveries, joins) keeps arriving while a read is in flight.
    pub read_delay: (u64, u64),
    /// The broker run's store refuses some writes and reads (`store_faults=on`): every write
    /// of the producer is held (1–30 ms), one in 20 fails (its SENDs get SEND_ERROR, the
    /// producer reconnects and sends again what was not receipted), and one completion in 50
    /// starts 50 ms of failing reads.
    pub store_faults: bool,
}

impl Default for WorldConfig {
    fn default() -> Self {
        WorldConfig {
            sub: SubKind::KeySharedRing,
            store: StoreKind::Memory,
            net: (1, 5),
            notice: 200,
            drain_bound: 600_000,
            stall_window: 30_000,
            unblocking_interval: 10,
            persist_interval: 50,
            max_unacked_consumer: None,
            max_unacked_sub: None,
            look_ahead: None,
            read_delay: (0, 0),
            store_faults: false,
        }
    }
}

/// Per-consumer settings (`join` options; `mix` draws them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerOpts {
    /// Receive queue size (0 = a zero-permit consumer: one permit per empty receive).
    pub queue: u32,
    /// Application processing time range, ms.
    pub proc: (u64, u64),
    /// Per mille of messages the application nacks instead of acking.
    pub nack: u32,
    /// The script acks (`ack NAME`), not a timer.
    pub manual: bool,
    /// Priority level (Shared).
    pub prio: i32,
    /// Client: drop (and ack) incomplete chunked messages after this many ms.
    pub chunk_expiry: Option<u64>,
    /// Client: ack (drop) the oldest incomplete chunked message when too many are pending,
    /// instead of redelivering it.
    pub chunk_auto_ack: bool,
}

impl Default for ConsumerOpts {
    fn default() -> Self {
        ConsumerOpts {
            queue: 20,
            proc: (1, 10),
            nack: 0,
            manual: false,
            prio: 0,
            chunk_expiry: Some(60_000),
            chunk_auto_ack: false,
        }
    }
}

/// What a `publish` step appends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PublishSpec {
    /// Ordering key (`None`: keyless).
    pub key: Option<String>,
    /// How many messages (entries).
    pub count: u32,
    /// Messages per entry (> 1: batch entries).
    pub batch: u32,
    /// Chunks per message (> 1: chunked messages).
    pub chunks: u32,
    /// Time between consecutive chunks of one message, ms.
    pub spread: u64,
    /// Producer index (uuid `producer-<p>-<seq>`).
    pub producer: u32,
    /// Deliver-at = publish time + this, ms (0: not delayed).
    pub delay: u64,
}

/// Backlog-quota eviction policy of an `evict` step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Evict {
    /// Down to this many messages.
    Count(u64),
    /// Down to this many bytes.
    Size(u64),
    /// Entries older than this many ms.
    Age(u64),
}

/// One scripted action.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// A consumer joins (or rejoins under the same name).
    Join(String, ConsumerOpts),
    /// Graceful leave: the application finishes its message, then the consumer closes.
    Leave(String),
    /// Crash: no acks, in-flight messages lost, the broker notices later.
    Crash(String),
    /// Broker restart.
    Restart,
    /// Producer appends.
    Publish(PublishSpec),
    /// Admin skip of n entries.
    Skip(u64),
    /// Admin clear-backlog.
    Clear,
    /// Expire entries published more than this many ms ago.
    Expire(u64),
    /// Backlog-quota eviction.
    Evict(Evict),
    /// A manual consumer finishes its current message with an ack (optionally asserting which).
    Ack(String, Option<Position>),
    /// A manual consumer nacks its current message.
    Nack(String, Option<Position>),
    /// A manual consumer switches to timed processing.
    Auto(String),
    /// Random fault of the given kind (from `mix`); the target is drawn when it runs.
    RandomFault(FaultKind),
}

impl Action {
    /// Whether this is a fault (counted in the summary; a join after time 0 counts too).
    pub fn is_fault(&self) -> bool {
        matches!(
            self,
            Action::Leave(_)
                | Action::Crash(_)
                | Action::Restart
                | Action::Skip(_)
                | Action::Clear
                | Action::Expire(_)
                | Action::Evict(_)
                | Action::RandomFault(_)
        )
    }
}

/// Fault kinds a `mix` draws from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum FaultKind {
    /// A new consumer joins.
    Join,
    /// A consumer leaves gracefully.
    Leave,
    /// A consumer crashes.
    Crash,
    /// The broker restarts.
    Restart,
    /// Admin skip.
    Skip,
    /// Admin clear-backlog.
    Clear,
    /// Expiry.
    Expire,
    /// Backlog-quota eviction.
    Evict,
}

impl FaultKind {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "join" => FaultKind::Join,
            "leave" => FaultKind::Leave,
            "crash" => FaultKind::Crash,
            "restart" => FaultKind::Restart,
            "skip" => FaultKind::Skip,
            "clear" => FaultKind::Clear,
            "expire" => FaultKind::Expire,
            "evict" => FaultKind::Evict,
            _ => return None,
        })
    }
}

/// A scripted step: at simulated time `at`, do `action`.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// Simulated time, ms.
    pub at: u64,
    /// What happens.
    pub action: Action,
}

/// A check at the end of a scripted run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expect {
    /// Consumer NAME's application started the message at POS (at some point).
    Start(String, Position),
    /// Consumer NAME's application never started the message at POS.
    NoStart(String, Position),
    /// The message at the first position was finished before the one at the second was first
    /// started.
    Order(Position, Position),
}

/// The randomised workload of a `mix` line.
#[derive(Clone, Debug, PartialEq)]
pub struct Mix {
    /// Messages to publish.
    pub messages: u32,
    /// Distinct keys.
    pub keys: u32,
    /// Zipf exponent of the key distribution.
    pub zipf: f64,
    /// Per mille keyless messages.
    pub keyless: u32,
    /// Per mille batch entries (2–5 messages).
    pub batched: u32,
    /// Per mille chunked messages (2–4 chunks).
    pub chunked: u32,
    /// Largest gap between chunks of one message, ms.
    pub chunk_spread: u64,
    /// Per mille nacks by the application.
    pub nack: u32,
    /// Per mille delayed messages (plain, unbatched: a stock client does not batch them).
    pub delayed: u32,
    /// Delay range of a delayed message, ms after its publish time.
    pub delay: (u64, u64),
    /// Consumers at the start.
    pub consumers: u32,
    /// Receive queue size range.
    pub queue: (u32, u32),
    /// Processing time range of a normal consumer, ms.
    pub proc: (u64, u64),
    /// Per mille slow consumers (processing ×10).
    pub slow: u32,
    /// Per mille zero-permit consumers (queue size 0).
    pub zero: u32,
    /// Client chunk expiry, ms.
    pub chunk_expiry: u64,
    /// Client: ack the oldest incomplete chunked message on overflow (see [`ConsumerOpts`]).
    pub chunk_auto_ack: bool,
    /// Publishing lasts this long, ms.
    pub duration: u64,
    /// Number of faults.
    pub faults: u32,
    /// Fault kinds to draw from.
    pub kinds: Vec<FaultKind>,
}

impl Default for Mix {
    fn default() -> Self {
        Mix {
            messages: 1000,
            keys: 50,
            zipf: 1.1,
            keyless: 20,
            batched: 100,
            chunked: 50,
            chunk_spread: 20,
            nack: 0,
            delayed: 0,
            delay: (50, 2_000),
            consumers: 3,
            queue: (5, 50),
            proc: (1, 8),
            slow: 200,
            zero: 100,
            chunk_expiry: 60_000,
            chunk_auto_ack: false,
            duration: 10_000,
            faults: 10,
            kinds: vec![
                FaultKind::Join,
                FaultKind::Leave,
                FaultKind::Crash,
                FaultKind::Restart,
                FaultKind::Skip,
                FaultKind::Clear,
                FaultKind::Expire,
                FaultKind::Evict,
            ],
        }
    }
}

/// A parsed scenario.
#[derive(Clone, Debug, PartialEq)]
pub struct Scenario {
    /// Name: a shipped scenario's name, or the path of a file (what `--scenario` takes, so a
    /// repro line works).
    pub name: String,
    /// World settings.
    pub config: WorldConfig,
    /// The randomised workload, if any (expanded per seed).
    pub mix: Option<Mix>,
    /// Scripted steps, in file order (the world orders them by time, stable).
    pub steps: Vec<Step>,
    /// End-of-run checks.
    pub expects: Vec<Expect>,
    /// For each of [`expects`](Self::expects): its 1-based line number and its text, so a
    /// failed expectation can be traced to the line that asked for it.
    pub expect_lines: Vec<(usize, String)>,
}

/// A scenario file that could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            // A whole-file problem (nothing published), not one line's.
            f.write_str(&self.message)
        } else {
            write!(f, "line {}: {}", self.line, self.message)
        }
    }
}

impl std::error::Error for ParseError {}

fn num<T: std::str::FromStr>(s: &str, what: &str) -> Result<T, String> {
    s.parse()
        .map_err(|_| format!("{what}: `{s}` is not a number"))
}

fn range(s: &str, what: &str) -> Result<(u64, u64), String> {
    match s.split_once('-') {
        Some((a, b)) => {
            let (a, b) = (num(a, what)?, num(b, what)?);
            if a > b {
                return Err(format!("{what}: range `{s}` is reversed"));
            }
            Ok((a, b))
        }
        None => {
            let v = num(s, what)?;
            Ok((v, v))
        }
    }
}

/// Parses `l:e`.
pub fn parse_position(s: &str) -> Result<Position, String> {
    let (l, e) = s
        .split_once(':')
        .ok_or_else(|| format!("`{s}` is not a position (ledger:entry)"))?;
    Ok(Position::new(num(l, "ledger")?, num(e, "entry")?))
}

fn kv(word: &str) -> Result<(&str, &str), String> {
    word.split_once('=')
        .ok_or_else(|| format!("expected key=value, found `{word}`"))
}

fn parse_config(words: &[&str], c: &mut WorldConfig) -> Result<(), String> {
    for w in words {
        let (k, v) = kv(w)?;
        match k {
            "type" => {
                c.sub = match v {
                    "shared" => SubKind::Shared,
                    "key_shared" | "key_shared_ring" => SubKind::KeySharedRing,
                    "key_shared_autosplit" => SubKind::KeySharedAutoSplit,
                    _ => return Err(format!("unknown type `{v}`")),
                }
            }
            "store" => {
                c.store = match v {
                    "memory" => StoreKind::Memory,
                    "file" => StoreKind::File,
                    _ => return Err(format!("unknown store `{v}`")),
                }
            }
            "net" => c.net = range(v, "net")?,
            "notice" => c.notice = num(v, "notice")?,
            "drain" => c.drain_bound = num(v, "drain")?,
            "stall" => c.stall_window = num(v, "stall")?,
            "interval" => c.unblocking_interval = num(v, "interval")?,
            "persist" => c.persist_interval = num(v, "persist")?,
            "max_unacked" => c.max_unacked_consumer = Some(num(v, k)?),
            "max_unacked_sub" => c.max_unacked_sub = Some(num(v, k)?),
            "look_ahead" => c.look_ahead = Some(num(v, k)?),
            "reads" => c.read_delay = range(v, "reads")?,
            "store_faults" => {
                c.store_faults = match v {
                    "on" => true,
                    "off" => false,
                    _ => return Err(format!("store_faults is on or off, not `{v}`")),
                }
            }
            _ => return Err(format!("unknown config key `{k}`")),
        }
    }
    Ok(())
}

fn parse_mix(words: &[&str]) -> Result<Mix, String> {
    let mut m = Mix::default();
    for w in words {
        let (k, v) = kv(w)?;
        match k {
            "messages" => m.messages = num(v, k)?,
            "keys" => m.keys = num(v, k)?,
            "zipf" => m.zipf = num(v, k)?,
            "keyless" => m.keyless = num(v, k)?,
            "batched" => m.batched = num(v, k)?,
            "chunked" => m.chunked = num(v, k)?,
            "chunk_spread" => m.chunk_spread = num(v, k)?,
            "nack" => m.nack = num(v, k)?,
            "delayed" => m.delayed = num(v, k)?,
            "delay" => m.delay = range(v, k)?,
            "consumers" => m.consumers = num(v, k)?,
            "queue" => {
                let (a, b) = range(v, k)?;
                m.queue = (a as u32, b as u32);
            }
            "proc" => m.proc = range(v, k)?,
            "slow" => m.slow = num(v, k)?,
            "zero" => m.zero = num(v, k)?,
            "chunk_expiry" => m.chunk_expiry = num(v, k)?,
            "chunk_auto_ack" => m.chunk_auto_ack = num::<u8>(v, k)? != 0,
            "duration" => m.duration = num(v, k)?,
            "faults" => m.faults = num(v, k)?,
            "kinds" => {
                m.kinds = v
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(|s| FaultKind::parse(s).ok_or_else(|| format!("unknown fault `{s}`")))
                    .collect::<Result<_, _>>()?;
            }
            _ => return Err(format!("unknown mix key `{k}`")),
        }
    }
    if m.consumers == 0 {
        return Err("mix needs at least one consumer".into());
    }
    Ok(m)
}

fn parse_join(words: &[&str]) -> Result<Action, String> {
    let name = words.first().ok_or("join needs a consumer name")?;
    let mut o = ConsumerOpts::default();
    for w in &words[1..] {
        if *w == "manual" {
            o.manual = true;
            continue;
        }
        let (k, v) = kv(w)?;
        match k {
            "queue" => o.queue = num(v, k)?,
            "proc" => o.proc = range(v, k)?,
            "nack" => o.nack = num(v, k)?,
            "prio" => o.prio = num(v, k)?,
            "chunk_expiry" => o.chunk_expiry = Some(num(v, k)?),
            "chunk_auto_ack" => o.chunk_auto_ack = num::<u8>(v, k)? != 0,
            _ => return Err(format!("unknown join option `{k}`")),
        }
    }
    Ok(Action::Join((*name).to_string(), o))
}

fn parse_publish(words: &[&str]) -> Result<Action, String> {
    let mut p = PublishSpec {
        key: None,
        count: 1,
        batch: 1,
        chunks: 1,
        spread: 0,
        producer: 0,
        delay: 0,
    };
    for w in words {
        if *w == "keyless" {
            p.key = None;
            continue;
        }
        let (k, v) = kv(w)?;
        match k {
            "key" => p.key = Some(v.to_string()),
            "count" => p.count = num(v, k)?,
            "batch" => p.batch = num::<u32>(v, k)?.max(1),
            "chunks" => p.chunks = num::<u32>(v, k)?.max(1),
            "spread" => p.spread = num(v, k)?,
            "producer" => p.producer = num(v, k)?,
            "delay" => p.delay = num(v, k)?,
            _ => return Err(format!("unknown publish option `{k}`")),
        }
    }
    if p.batch > 1 && p.chunks > 1 {
        return Err("a message is either batched or chunked, not both".into());
    }
    Ok(Action::Publish(p))
}

fn parse_action(words: &[&str]) -> Result<Action, String> {
    let (&verb, rest) = words.split_first().ok_or("missing action after `at T`")?;
    let name = || -> Result<String, String> {
        rest.first()
            .map(|s| s.to_string())
            .ok_or_else(|| format!("`{verb}` needs a consumer name"))
    };
    let opt_pos = || -> Result<Option<Position>, String> {
        rest.get(1).map(|s| parse_position(s)).transpose()
    };
    Ok(match verb {
        "join" => parse_join(rest)?,
        "leave" => Action::Leave(name()?),
        "crash" => Action::Crash(name()?),
        "restart" => Action::Restart,
        "publish" => parse_publish(rest)?,
        "skip" => Action::Skip(num(rest.first().ok_or("skip needs a count")?, "skip")?),
        "clear" => Action::Clear,
        "expire" => Action::Expire(num(rest.first().ok_or("expire needs an age")?, "expire")?),
        "evict" => {
            let (k, v) = kv(rest
                .first()
                .ok_or("evict needs count=N, size=B or age=MS")?)?;
            Action::Evict(match k {
                "count" => Evict::Count(num(v, k)?),
                "size" => Evict::Size(num(v, k)?),
                "age" => Evict::Age(num(v, k)?),
                _ => return Err(format!("unknown evict policy `{k}`")),
            })
        }
        "ack" => Action::Ack(name()?, opt_pos()?),
        "nack" => Action::Nack(name()?, opt_pos()?),
        "auto" => Action::Auto(name()?),
        _ => return Err(format!("unknown action `{verb}`")),
    })
}

fn parse_expect(words: &[&str]) -> Result<Expect, String> {
    let arg = |i: usize| -> Result<&str, String> {
        words
            .get(i)
            .copied()
            .ok_or_else(|| "expect: missing argument".to_string())
    };
    Ok(match arg(0)? {
        "start" => Expect::Start(arg(1)?.to_string(), parse_position(arg(2)?)?),
        "nostart" => Expect::NoStart(arg(1)?.to_string(), parse_position(arg(2)?)?),
        "order" => Expect::Order(parse_position(arg(1)?)?, parse_position(arg(2)?)?),
        other => return Err(format!("unknown expectation `{other}`")),
    })
}

impl Expect {
    /// Whether a violation's `detail` is this expectation failing (the world words a failed
    /// expectation as `expected …`; see `docs/SIMULATOR.md`).
    pub fn matches_failure(&self, detail: &str) -> bool {
        match self {
            Expect::Start(n, p) => detail.starts_with(&format!("expected {n} to start {p};")),
            Expect::NoStart(n, p) => {
                detail.starts_with(&format!("expected {n} never to start {p};"))
            }
            Expect::Order(a, b) => {
                detail.starts_with(&format!("expected {a} finished "))
                    && detail.contains(&format!(" before {b} first started "))
            }
        }
    }
}

impl Scenario {
    /// The `expect` line (1-based number and text) a failed expectation's `detail` comes from,
    /// if any.
    pub fn expect_line_of(&self, detail: &str) -> Option<&(usize, String)> {
        self.expects
            .iter()
            .position(|e| e.matches_failure(detail))
            .and_then(|i| self.expect_lines.get(i))
    }

    /// Whether the scenario publishes anything (a `publish` step, or a `mix` with messages).
    pub fn publishes(&self) -> bool {
        self.mix.as_ref().is_some_and(|m| m.messages > 0)
            || self
                .steps
                .iter()
                .any(|s| matches!(&s.action, Action::Publish(p) if p.count > 0))
    }

    /// Whether the scenario publishes delayed messages (a `publish … delay=` step, or a `mix`
    /// with `delayed=`).
    pub fn has_delayed(&self) -> bool {
        self.mix.as_ref().is_some_and(|m| m.delayed > 0)
            || self
                .steps
                .iter()
                .any(|s| matches!(&s.action, Action::Publish(p) if p.delay > 0))
    }

    /// Parses a scenario named `name`. Besides a line that does not parse, a scenario that
    /// publishes nothing (line 0 in the error: the whole file) and a scripted `join` of a
    /// consumer that is still connected at that time are errors.
    pub fn parse(name: &str, text: &str) -> Result<Scenario, ParseError> {
        let mut s = Scenario {
            name: name.to_string(),
            config: WorldConfig::default(),
            mix: None,
            steps: Vec::new(),
            expects: Vec::new(),
            expect_lines: Vec::new(),
        };
        // The line of each step, for the duplicate-join check.
        let mut step_lines: Vec<usize> = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let words: Vec<&str> = line.split_whitespace().collect();
            let err = |message: String| ParseError {
                line: i + 1,
                message,
            };
            match words[0] {
                "config" => parse_config(&words[1..], &mut s.config).map_err(err)?,
                "mix" => s.mix = Some(parse_mix(&words[1..]).map_err(err)?),
                "at" => {
                    let t = words
                        .get(1)
                        .ok_or_else(|| err("`at` needs a time".into()))?;
                    let at = num(t, "time").map_err(err)?;
                    let action = parse_action(&words[2..]).map_err(err)?;
                    s.steps.push(Step { at, action });
                    step_lines.push(i + 1);
                }
                "expect" => {
                    s.expects.push(parse_expect(&words[1..]).map_err(err)?);
                    s.expect_lines.push((i + 1, line.to_string()));
                }
                other => return Err(err(format!("unknown directive `{other}`"))),
            }
        }
        check_joins(&s.steps, &step_lines)?;
        if !s.publishes() {
            return Err(ParseError {
                line: 0,
                message: "the scenario publishes nothing (no `at T publish` step and no `mix` \
                          with messages), so there is nothing to check"
                    .into(),
            });
        }
        Ok(s)
    }
}

/// A scripted `join` of a name that already joined and has not left or crashed since (in time
/// order, as the world runs the steps) is a scenario error: the world would refuse it.
fn check_joins(steps: &[Step], lines: &[usize]) -> Result<(), ParseError> {
    let mut order: Vec<usize> = (0..steps.len()).collect();
    order.sort_by_key(|&i| steps[i].at); // stable: file order within one time
    let mut joined: BTreeMap<&str, usize> = BTreeMap::new();
    for i in order {
        let line = lines.get(i).copied().unwrap_or(0);
        match &steps[i].action {
            Action::Join(n, _) => {
                if let Some(first) = joined.insert(n.as_str(), line) {
                    return Err(ParseError {
                        line,
                        message: format!(
                            "`join {n}`: {n} already joined on line {first} and has not left or \
                             crashed by then (leave or crash it first, or use another name)"
                        ),
                    });
                }
            }
            Action::Leave(n) | Action::Crash(n) => {
                joined.remove(n.as_str());
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_directive() {
        let s = Scenario::parse(
            "t",
            "# c\nconfig type=shared store=file net=2-4 notice=50 drain=1000 interval=5\n\
             mix messages=10 keys=2 kinds=skip,crash\n\
             at 0 join c1 queue=0 proc=1-2 nack=10 manual prio=1 chunk_expiry=500\n\
             at 1 publish key=K count=3 chunks=2 spread=5\nat 2 publish keyless batch=4\n\
             at 3 skip 2\nat 4 evict count=1\nat 5 ack c1 1:0\nat 6 nack c1\nat 7 restart\n\
             expect order 1:0 1:3\nexpect start c1 1:0\n",
        )
        .unwrap();
        assert_eq!(s.config.sub, SubKind::Shared);
        assert_eq!(s.config.store, StoreKind::File);
        assert_eq!(s.config.net, (2, 4));
        assert_eq!(
            s.mix.as_ref().unwrap().kinds,
            vec![FaultKind::Skip, FaultKind::Crash]
        );
        assert_eq!(s.steps.len(), 8);
        assert!(
            matches!(&s.steps[0].action, Action::Join(n, o) if n == "c1" && o.manual && o.queue == 0)
        );
        assert_eq!(
            s.steps[5].action,
            Action::Ack("c1".into(), Some(Position::new(1, 0)))
        );
        assert_eq!(s.expects.len(), 2);
    }

    #[test]
    fn reports_the_line_of_an_error() {
        let e = Scenario::parse("t", "config type=shared\n\nat x join c1\n").unwrap_err();
        assert_eq!(e.line, 3);
        let e = Scenario::parse("t", "at 1 publish batch=2 chunks=2").unwrap_err();
        assert!(e.message.contains("batched or chunked"), "{e}");
        let e = Scenario::parse("t", "frobnicate").unwrap_err();
        assert!(e.message.contains("unknown directive"));
    }

    #[test]
    fn an_empty_scenario_is_an_error() {
        let e = Scenario::parse("t", "# nothing\nconfig type=shared\nat 0 join c1\n").unwrap_err();
        assert_eq!(e.line, 0);
        assert!(
            e.to_string().starts_with("the scenario publishes nothing"),
            "{e}"
        );
        assert!(Scenario::parse("t", "mix messages=0").is_err());
        assert!(Scenario::parse("t", "at 0 publish count=0").is_err());
    }

    #[test]
    fn a_duplicate_join_is_a_scenario_error() {
        let e = Scenario::parse("t", "at 0 join c1\nat 1 publish\nat 5 join c1\n").unwrap_err();
        assert_eq!(e.line, 3);
        assert!(e.message.contains("already joined on line 1"), "{e}");
        // Rejoining after a leave or a crash is fine; time order, not file order, decides.
        Scenario::parse(
            "t",
            "at 0 join c1\nat 1 publish\nat 5 leave c1\nat 9 join c1\n",
        )
        .unwrap();
        Scenario::parse(
            "t",
            "at 9 join c1\nat 0 join c1\nat 5 crash c1\nat 1 publish\n",
        )
        .unwrap();
    }

    #[test]
    fn an_expectation_knows_its_line() {
        let s = Scenario::parse(
            "t",
            "at 0 join c1\nat 1 publish\nexpect start c1 1:0\n\nexpect order 1:0 1:1\n",
        )
        .unwrap();
        let l =
            s.expect_line_of("expected 1:0 finished (t=Some(3)) before 1:1 first started (t=None)");
        assert_eq!(l, Some(&(5, "expect order 1:0 1:1".to_string())));
        let l = s.expect_line_of("expected c1 to start 1:0; it never did");
        assert_eq!(l.map(|l| l.0), Some(3));
        assert_eq!(
            s.expect_line_of("script: c1 holds no message to finish"),
            None
        );
    }
}
