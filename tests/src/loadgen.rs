//! A load generator for the broker, written on the `wire` codec with blocking `std::net` and
//! threads (this harness package may own threads and the clock).
//!
//! * **Producers**: N connections, one producer each. A writer thread pipelines SEND frames
//!   with a bounded window of outstanding messages (a stock producer's `maxPendingMessages`,
//!   counted in messages: a batch entry of 10 takes 10), several frames per `write`; a reader
//!   thread counts the SEND_RECEIPTs (in sequence order, as Pulsar promises) and reopens the
//!   window. Optional batching: `num_messages_in_batch` in the metadata and `num_messages` in
//!   CommandSend; the payload is opaque bytes of the batch's total size (the broker never
//!   opens it). Optional rate limit (messages per second, spread over the producers).
//! * **Consumers**: M connections on one Shared subscription. Each FLOWs its permits (1,000 by
//!   default), refills once half are used (as the stock client does), and acks in groups
//!   (several message ids per ACK, flushed every 1 ms or 100 ids, like the client's ack
//!   grouping).
//! * **Payload**: bytes 0..8 the publish time (ns since the run's shared `Instant`), 8..12 the
//!   producer index, 12..20 the entry's sequence id. The consumer computes publish→deliver
//!   latency per entry from it, and marks `(producer, sequence)` in a bitmap, so the run knows
//!   every entry arrived exactly once.
//!
//! **Cost.** The codec's `BaseCommand` holds every sub-command inline (about 5.7 KB), so
//! decoding a frame into a [`wire::Frame`] moves kilobytes per 40-byte receipt. Setup uses
//! the codec's [`FrameReader`]; the hot loops split frames themselves and decode only the
//! fields they read ([`LiteCommand`], the `wire::proto` sub-messages under their
//! `BaseCommand` tags, which prost reads from the same bytes), and encode SEND from one reused
//! `BaseCommand`, so the generator spends less of the shared cores than the broker does.
//!
//! [`run`] sets every connection up (CONNECT, PRODUCER, SUBSCRIBE, FLOW), releases them
//! together, and returns the end-to-end rate (published → received messages per second) and
//! the latency samples; it fails on a lost or duplicated entry, a SEND_ERROR, or a timeout.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use wire::proto::{base_command::Type, command_subscribe, BaseCommand, MessageMetadata};
use wire::{Frame, FrameReader};

/// What one run does.
#[derive(Clone, Debug)]
pub struct LoadConfig {
    /// Producer connections.
    pub producers: usize,
    /// Consumer connections (one Shared subscription).
    pub consumers: usize,
    /// Entries each producer sends (a batch entry holds `batch` messages).
    pub entries_per_producer: u64,
    /// Messages per entry: 1 = unbatched.
    pub batch: u32,
    /// Bytes per message (the entry's payload is `batch * msg_size` bytes, at least 20).
    pub msg_size: usize,
    /// Outstanding (sent, not yet receipted) messages per producer.
    pub window_msgs: u64,
    /// Permits each consumer keeps (refilled at half).
    pub permits: u32,
    /// Total rate limit in messages per second (spread evenly over the producers).
    pub rate: Option<f64>,
    /// With a rate limit: the shortest sleep between writes; what fell due meanwhile goes out
    /// in one write (each entry stamped when it is encoded). Zero paces every entry alone.
    pub pace: Duration,
    /// The whole run fails after this long.
    pub timeout: Duration,
    /// The subscription's type: `Shared` (the default) or `Key_Shared`.
    pub sub_type: command_subscribe::SubType,
    /// Each message's key (`partition_key`). Unbatched runs only.
    pub keys: Keys,
}

/// How the producers key their messages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Keys {
    /// No key.
    #[default]
    None,
    /// One of `n` keys per producer (entry `s` has key `s % n`); the consumers check that each
    /// key's entries arrive in the order they were sent, across consumers.
    Fixed(u32),
    /// A new key per message (pulsar-perf's `-mk random`); no order to check.
    Random,
}

impl Default for LoadConfig {
    fn default() -> Self {
        LoadConfig {
            producers: 1,
            consumers: 1,
            entries_per_producer: 10_000,
            batch: 1,
            msg_size: 100,
            window_msgs: 1000,
            permits: 1000,
            rate: None,
            pace: Duration::from_micros(200),
            timeout: Duration::from_secs(60),
            sub_type: command_subscribe::SubType::Shared,
            keys: Keys::None,
        }
    }
}

/// What one run measured.
#[derive(Clone, Debug)]
pub struct LoadResult {
    /// Messages received (= published; checked).
    pub messages: u64,
    /// Entries received.
    pub entries: u64,
    /// From the release of every connection to the last entry received.
    pub elapsed: Duration,
    /// Publish→deliver latency per entry in ns, sorted.
    pub latencies_ns: Vec<u64>,
    /// Per entry: (publish time in ns since the release, latency in ns), in arrival order per
    /// consumer (to see when the slow ones were published).
    pub timeline: Vec<(u64, u64)>,
    /// ACK commands the consumers sent.
    pub ack_commands: u64,
    /// FLOW commands the consumers sent (after the first).
    pub flow_commands: u64,
}

impl LoadResult {
    /// Published → received messages per second.
    pub fn msg_per_sec(&self) -> f64 {
        self.messages as f64 / self.elapsed.as_secs_f64()
    }

    /// The `q`-quantile (0..=1) of the latency in ms.
    pub fn latency_ms(&self, q: f64) -> f64 {
        if self.latencies_ns.is_empty() {
            return f64::NAN;
        }
        let i = ((self.latencies_ns.len() - 1) as f64 * q).round() as usize;
        self.latencies_ns[i.min(self.latencies_ns.len() - 1)] as f64 / 1e6
    }
}

/// Bytes at the front of each payload: publish ns, producer index, sequence id.
const STAMP: usize = 20;

/// The few `BaseCommand` fields the hot loops read (same tags, so the same bytes decode).
#[derive(Clone, PartialEq, prost::Message)]
pub struct LiteCommand {
    /// `BaseCommand.type`.
    #[prost(int32, optional, tag = "1")]
    pub r#type: Option<i32>,
    /// `BaseCommand.send_receipt`.
    #[prost(message, optional, tag = "7")]
    pub send_receipt: Option<wire::proto::CommandSendReceipt>,
    /// `BaseCommand.send_error`.
    #[prost(message, optional, tag = "8")]
    pub send_error: Option<wire::proto::CommandSendError>,
    /// `BaseCommand.message`.
    #[prost(message, optional, tag = "9")]
    pub message: Option<wire::proto::CommandMessage>,
}

/// `MessageMetadata.num_messages_in_batch` alone.
#[derive(Clone, PartialEq, prost::Message)]
struct LiteMeta {
    #[prost(int32, optional, tag = "11")]
    num_messages_in_batch: Option<i32>,
}

fn be_u32(b: &[u8], at: usize) -> Option<usize> {
    let s = b.get(at..at + 4)?;
    Some(u32::from_be_bytes([s[0], s[1], s[2], s[3]]) as usize)
}

/// One frame as the hot loops see it: the lite command and, for MESSAGE, the number of
/// messages in the entry and its payload bytes.
struct LiteFrame<'a> {
    command: LiteCommand,
    messages: u32,
    body: &'a [u8],
}

/// Splits frames out of a socket's bytes in place (no copy per frame).
struct Splitter {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl Splitter {
    fn new() -> Splitter {
        Splitter {
            buf: vec![0; 256 * 1024],
            start: 0,
            end: 0,
        }
    }

    /// Reads once into the free space; false on timeout.
    fn fill(&mut self, stream: &mut TcpStream) -> Result<bool, String> {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            let n = self.buf.len();
            self.buf.resize(n * 2, 0);
        }
        match stream.read(&mut self.buf[self.end..]) {
            Ok(0) => Err("connection closed by the broker".into()),
            Ok(n) => {
                self.end += n;
                Ok(true)
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => Ok(false),
            Err(e) if e.kind() == ErrorKind::Interrupted => Ok(false),
            Err(e) => Err(e.to_string()),
        }
    }

    /// The next whole frame, if buffered.
    fn next(&mut self) -> Result<Option<LiteFrame<'_>>, String> {
        use prost::Message as _;
        let avail = &self.buf[self.start..self.end];
        let Some(total) = be_u32(avail, 0) else {
            return Ok(None);
        };
        if total > wire::DEFAULT_MAX_FRAME_SIZE {
            return Err(format!("frame of {total} bytes"));
        }
        if avail.len() < total + 4 {
            return Ok(None);
        }
        let frame = &avail[4..total + 4];
        self.start += total + 4;
        let cmd_size = be_u32(frame, 0).ok_or("short frame")?;
        let cmd_bytes = frame.get(4..4 + cmd_size).ok_or("command beyond frame")?;
        let command = LiteCommand::decode(cmd_bytes).map_err(|e| e.to_string())?;
        let mut rest = &frame[4 + cmd_size..];
        if rest.is_empty() {
            return Ok(Some(LiteFrame {
                command,
                messages: 0,
                body: &[],
            }));
        }
        if rest.starts_with(&wire::MAGIC_BROKER_ENTRY_METADATA.to_be_bytes()) {
            let n = be_u32(rest, 2).ok_or("short 0e02 section")?;
            rest = rest.get(6 + n..).ok_or("0e02 section beyond frame")?;
        }
        if !rest.starts_with(&wire::MAGIC_CRC32C.to_be_bytes()) {
            return Err("payload section without 0e01".into());
        }
        let meta_size = be_u32(rest, 6).ok_or("short section")?;
        let meta = rest
            .get(10..10 + meta_size)
            .ok_or("metadata beyond frame")?;
        let meta = LiteMeta::decode(meta).map_err(|e| e.to_string())?;
        Ok(Some(LiteFrame {
            command,
            messages: u32::try_from(meta.num_messages_in_batch.unwrap_or(1))
                .unwrap_or(1)
                .max(1),
            body: &rest[10 + meta_size..],
        }))
    }
}

struct Shared {
    clock: Instant,
    deadline: Instant,
    /// Entries received across consumers.
    received: AtomicU64,
    expected: u64,
    /// ns since `clock` when the last entry arrived.
    done_ns: AtomicU64,
    /// One bit per (producer, entry).
    seen: Vec<Vec<AtomicU64>>,
    duplicates: AtomicU64,
    /// With [`Keys::Fixed`]: per (producer, key), one past the highest sequence id received.
    key_next: Vec<AtomicU64>,
    /// Entries that arrived after a later entry of their key.
    out_of_order: AtomicU64,
    failed: AtomicBool,
}

impl Shared {
    fn now_ns(&self) -> u64 {
        self.clock.elapsed().as_nanos() as u64
    }

    fn over(&self) -> bool {
        self.failed.load(Ordering::Relaxed) || Instant::now() >= self.deadline
    }
}

/// A connection with a frame reader.
struct Conn {
    stream: TcpStream,
    reader: FrameReader,
    buf: Vec<u8>,
}

impl Conn {
    fn open(addr: &str, read_timeout: Duration) -> Result<Conn, String> {
        let stream = TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
        let _ = stream.set_nodelay(true);
        stream
            .set_read_timeout(Some(read_timeout))
            .map_err(|e| e.to_string())?;
        let mut c = Conn {
            stream,
            reader: FrameReader::new(wire::DEFAULT_MAX_FRAME_SIZE),
            buf: vec![0; 256 * 1024],
        };
        c.send(&wire::commands::connect("loadgen", 21))?;
        c.expect(Type::Connected)?;
        Ok(c)
    }

    /// The socket, once setup left nothing buffered (the hot loops read it themselves).
    fn into_stream(self) -> Result<TcpStream, String> {
        if self.reader.buffered() > 0 {
            return Err(format!(
                "{} unexpected bytes after setup",
                self.reader.buffered()
            ));
        }
        Ok(self.stream)
    }

    fn send(&mut self, cmd: &BaseCommand) -> Result<(), String> {
        let mut out = Vec::with_capacity(64);
        wire::encode_command(cmd, &mut out);
        self.stream.write_all(&out).map_err(|e| e.to_string())
    }

    /// Reads once (at most the read timeout) and feeds the reader; false on timeout.
    fn fill(&mut self) -> Result<bool, String> {
        match self.stream.read(&mut self.buf) {
            Ok(0) => Err("connection closed by the broker".into()),
            Ok(n) => {
                self.reader.feed(&self.buf[..n]);
                Ok(true)
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => Ok(false),
            Err(e) if e.kind() == ErrorKind::Interrupted => Ok(false),
            Err(e) => Err(e.to_string()),
        }
    }

    fn next(&mut self) -> Result<Option<Frame>, String> {
        self.reader
            .next_frame()
            .map_err(|e| format!("undecodable frame from the broker: {e}"))
    }

    /// The next frame of type `t` within 5 s (PINGs answered, anything else is an error).
    fn expect(&mut self, t: Type) -> Result<Frame, String> {
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            while let Some(f) = self.next()? {
                match f.command.r#type() {
                    x if x == t => return Ok(f),
                    Type::Ping => self.send(&wire::commands::pong())?,
                    other => {
                        let c = &f.command;
                        let why = c
                            .error
                            .as_ref()
                            .map(|e| format!("{:?}: {}", e.error(), e.message))
                            .or_else(|| {
                                c.lookup_topic_response.as_ref().map(|l| {
                                    format!("{:?} {:?}: {}", l.response(), l.error(), l.message())
                                })
                            })
                            .unwrap_or_default();
                        return Err(format!("expected {t:?}, got {other:?} {why}"));
                    }
                }
            }
            if Instant::now() >= until {
                return Err(format!("no {t:?} within 5 s"));
            }
            self.fill()?;
        }
    }

    /// LOOKUP `topic` as a stock client does before PRODUCER or SUBSCRIBE (Apache Pulsar
    /// serves a topic only once a lookup made its broker own the namespace bundle). A
    /// redirect to another broker is an error: the generator talks to one broker.
    fn lookup(&mut self, topic: &str) -> Result<(), String> {
        use wire::proto::command_lookup_topic_response::LookupType;
        self.send(&wire::commands::lookup(topic, 90))?;
        let f = self.expect(Type::LookupResponse)?;
        match f.command.lookup_topic_response.map(|l| l.response()) {
            Some(LookupType::Connect) => Ok(()),
            other => Err(format!("lookup of {topic}: {other:?}")),
        }
    }
}

/// Runs one load: sets every connection up, releases them together, waits for every entry.
pub fn run(service_url: &str, topic: &str, cfg: &LoadConfig) -> Result<LoadResult, String> {
    if cfg.keys != Keys::None && cfg.batch > 1 {
        return Err("keyed runs are unbatched (a batch would need key-based batching)".into());
    }
    if cfg.keys == Keys::Fixed(0) {
        return Err("Keys::Fixed(0): at least one key".into());
    }
    let addr = service_url.trim_start_matches("pulsar://").to_owned();
    let n = cfg.producers.max(1);
    let m = cfg.consumers.max(1);
    let words = cfg.entries_per_producer.div_ceil(64) as usize;
    let shared = Arc::new(Shared {
        clock: Instant::now(),
        deadline: Instant::now() + cfg.timeout,
        received: AtomicU64::new(0),
        expected: n as u64 * cfg.entries_per_producer,
        done_ns: AtomicU64::new(0),
        seen: (0..n)
            .map(|_| (0..words).map(|_| AtomicU64::new(0)).collect())
            .collect(),
        duplicates: AtomicU64::new(0),
        key_next: match cfg.keys {
            Keys::Fixed(k) => (0..n * k as usize).map(|_| AtomicU64::new(0)).collect(),
            _ => Vec::new(),
        },
        out_of_order: AtomicU64::new(0),
        failed: AtomicBool::new(false),
    });
    let barrier = Arc::new(Barrier::new(n + m + 1));
    let mut consumers = Vec::new();
    for c in 0..m {
        let (addr, topic, cfg) = (addr.clone(), topic.to_owned(), cfg.clone());
        let (shared, barrier) = (shared.clone(), barrier.clone());
        consumers.push(
            std::thread::Builder::new()
                .name(format!("lg-consumer-{c}"))
                .spawn(move || {
                    let setup = consumer_setup(&addr, &topic, c as u64 + 1, &cfg);
                    barrier.wait();
                    let r = setup.and_then(|conn| consumer_loop(conn, c as u64 + 1, &cfg, &shared));
                    if r.is_err() {
                        shared.failed.store(true, Ordering::Relaxed);
                    }
                    r
                })
                .map_err(|e| e.to_string())?,
        );
    }
    let mut producers = Vec::new();
    for p in 0..n {
        let (addr, topic, cfg) = (addr.clone(), topic.to_owned(), cfg.clone());
        let (shared, barrier) = (shared.clone(), barrier.clone());
        producers.push(
            std::thread::Builder::new()
                .name(format!("lg-producer-{p}"))
                .spawn(move || {
                    let setup = Conn::open(&addr, Duration::from_millis(5)).and_then(|mut c| {
                        c.lookup(&topic)?;
                        c.send(&wire::commands::producer(&topic, 1, 1, None))?;
                        let ps = c.expect(Type::ProducerSuccess)?;
                        let name = ps
                            .command
                            .producer_success
                            .map(|s| s.producer_name)
                            .unwrap_or_default();
                        Ok((c, name))
                    });
                    barrier.wait();
                    let r = setup.and_then(|(c, name)| producer_run(c, name, p, n, &cfg, &shared));
                    if r.is_err() {
                        shared.failed.store(true, Ordering::Relaxed);
                    }
                    r
                })
                .map_err(|e| e.to_string())?,
        );
    }
    barrier.wait();
    let start_ns = shared.now_ns();
    let mut errors = Vec::new();
    for h in producers {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => errors.push(format!("producer: {e}")),
            Err(_) => errors.push("producer thread panicked".into()),
        }
    }
    let mut latencies = Vec::new();
    let (mut acks, mut flows, mut messages) = (0, 0, 0);
    for h in consumers {
        match h.join() {
            Ok(Ok(s)) => {
                latencies.extend(s.latencies_ns);
                acks += s.ack_commands;
                flows += s.flow_commands;
                messages += s.messages;
            }
            Ok(Err(e)) => errors.push(format!("consumer: {e}")),
            Err(_) => errors.push("consumer thread panicked".into()),
        }
    }
    if !errors.is_empty() {
        return Err(errors.join("; "));
    }
    // Exactly once: every (producer, entry) bit set, none twice, message counts match.
    let dups = shared.duplicates.load(Ordering::Relaxed);
    let entries = shared.received.load(Ordering::Relaxed);
    let marked: u64 = shared
        .seen
        .iter()
        .flatten()
        .map(|w| u64::from(w.load(Ordering::Relaxed).count_ones()))
        .sum();
    let want_msgs = shared.expected * u64::from(cfg.batch.max(1));
    let disordered = shared.out_of_order.load(Ordering::Relaxed);
    if disordered > 0 {
        return Err(format!(
            "{disordered} entries arrived after a later entry of their key"
        ));
    }
    if dups > 0 || marked != shared.expected || entries != shared.expected || messages != want_msgs
    {
        return Err(format!(
            "delivery mismatch: {entries} entries received, {marked} distinct of {} published, {dups} duplicates, {messages} messages (want {want_msgs})",
            shared.expected
        ));
    }
    let timeline: Vec<(u64, u64)> = latencies
        .iter()
        .map(|&(ts, l)| (ts.saturating_sub(start_ns), l))
        .collect();
    let mut latencies: Vec<u64> = latencies.into_iter().map(|(_, l)| l).collect();
    latencies.sort_unstable();
    let done = shared.done_ns.load(Ordering::Relaxed).max(start_ns + 1);
    Ok(LoadResult {
        messages,
        entries,
        elapsed: Duration::from_nanos(done - start_ns),
        latencies_ns: latencies,
        timeline,
        ack_commands: acks,
        flow_commands: flows,
    })
}

fn producer_run(
    conn: Conn,
    name: String,
    index: usize,
    producers: usize,
    cfg: &LoadConfig,
    shared: &Arc<Shared>,
) -> Result<(), String> {
    let entries = cfg.entries_per_producer;
    let batch = u64::from(cfg.batch.max(1));
    let window = (cfg.window_msgs / batch).max(1);
    let receipted = Arc::new(AtomicU64::new(0));
    let writer = std::thread::current();
    let mut stream = conn.into_stream()?;
    let mut read_half = stream.try_clone().map_err(|e| e.to_string())?;
    let receipts = {
        let (receipted, shared) = (receipted.clone(), shared.clone());
        std::thread::Builder::new()
            .name(format!("lg-receipts-{index}"))
            .spawn(move || {
                let mut split = Splitter::new();
                let mut next_seq = 0u64;
                while next_seq < entries {
                    if shared.over() {
                        return Err(format!("{next_seq} of {entries} receipts before the end"));
                    }
                    if !split.fill(&mut read_half)? {
                        continue;
                    }
                    while let Some(f) = split.next()? {
                        match f.command.r#type.and_then(|t| Type::try_from(t).ok()) {
                            Some(Type::SendReceipt) => {
                                let seq =
                                    f.command.send_receipt.map_or(u64::MAX, |r| r.sequence_id);
                                if seq != next_seq {
                                    return Err(format!("receipt for {seq}, want {next_seq}"));
                                }
                                next_seq += 1;
                            }
                            Some(Type::Ping) => {}
                            _ => return Err(format!("producer got {:?}", f.command)),
                        }
                    }
                    receipted.store(next_seq, Ordering::Release);
                    writer.unpark();
                }
                Ok(())
            })
            .map_err(|e| e.to_string())?
    };
    let per_producer_rate = cfg.rate.map(|r| r / producers as f64 / batch as f64);
    let mut meta = MessageMetadata {
        producer_name: name,
        num_messages_in_batch: (batch > 1).then_some(batch as i32),
        ..Default::default()
    };
    let mut payload = vec![0xabu8; (cfg.msg_size * batch as usize).max(STAMP)];
    payload[8..12].copy_from_slice(&(index as u32).to_le_bytes());
    let mut out: Vec<u8> = Vec::with_capacity(256 * 1024);
    // One command, its sequence id updated per entry (building a BaseCommand per SEND costs
    // more than encoding it).
    let mut cmd = wire::commands::send(1, 0, batch as i32);
    let run_start = Instant::now();
    let mut sent = 0u64;
    let mut result = Ok(());
    while sent < entries {
        if shared.over() {
            result = Err(format!("{sent} of {entries} sent before the end"));
            break;
        }
        let inflight = sent - receipted.load(Ordering::Acquire);
        let room = window.saturating_sub(inflight);
        if room == 0 {
            std::thread::park_timeout(Duration::from_millis(1));
            continue;
        }
        let mut due = room.min(entries - sent).min(64);
        if let Some(r) = per_producer_rate {
            let allowed = (run_start.elapsed().as_secs_f64() * r) as u64 + 1;
            due = due.min(allowed.saturating_sub(sent));
            if due == 0 {
                let next_at = Duration::from_secs_f64((sent as f64) / r);
                let wait = next_at.saturating_sub(run_start.elapsed());
                std::thread::sleep(wait.clamp(cfg.pace, cfg.pace.max(Duration::from_millis(1))));
                continue;
            }
        }
        for _ in 0..due {
            let now = shared.now_ns();
            payload[0..8].copy_from_slice(&now.to_le_bytes());
            payload[12..20].copy_from_slice(&sent.to_le_bytes());
            meta.sequence_id = sent;
            meta.publish_time = now / 1_000_000;
            meta.partition_key = key_of(cfg.keys, index, sent);
            if let Some(send) = cmd.send.as_mut() {
                send.sequence_id = sent;
            }
            wire::encode_with_payload(&cmd, &meta, &payload, &mut out);
            sent += 1;
        }
        if let Err(e) = stream.write_all(&out) {
            result = Err(format!("write: {e}"));
            break;
        }
        out.clear();
    }
    let r = receipts
        .join()
        .unwrap_or_else(|_| Err("receipt thread panicked".into()));
    result.and(r)
}

/// The key of producer `index`'s entry `seq`.
fn key_of(keys: Keys, index: usize, seq: u64) -> Option<String> {
    match keys {
        Keys::None => None,
        Keys::Fixed(n) => Some(format!("k{}", seq % u64::from(n))),
        Keys::Random => {
            // A 64-bit mix of (producer, sequence): distinct keys, spread over the hash range.
            let mut x = (index as u64) << 48 ^ seq;
            x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            Some(format!("{:x}", x ^ (x >> 31)))
        }
    }
}

/// Records entry `seq` of a key whose next expected sequence id is in `next`: false when a
/// later entry of the key came first.
fn in_key_order(next: &AtomicU64, seq: u64) -> bool {
    next.fetch_max(seq + 1, Ordering::AcqRel) <= seq
}

struct ConsumerStats {
    /// (publish ns, latency ns) per entry.
    latencies_ns: Vec<(u64, u64)>,
    messages: u64,
    ack_commands: u64,
    flow_commands: u64,
}

fn consumer_setup(addr: &str, topic: &str, id: u64, cfg: &LoadConfig) -> Result<Conn, String> {
    let mut c = Conn::open(addr, Duration::from_millis(1))?;
    c.lookup(topic)?;
    c.send(&wire::commands::subscribe(
        topic,
        "bench",
        id,
        1,
        cfg.sub_type,
        None,
        command_subscribe::InitialPosition::Earliest,
    ))?;
    c.expect(Type::Success)?;
    c.send(&wire::commands::flow(id, cfg.permits))?;
    Ok(c)
}

fn consumer_loop(
    c: Conn,
    consumer_id: u64,
    cfg: &LoadConfig,
    shared: &Arc<Shared>,
) -> Result<ConsumerStats, String> {
    let mut stats = ConsumerStats {
        latencies_ns: Vec::with_capacity(shared.expected as usize / cfg.consumers.max(1) + 1024),
        messages: 0,
        ack_commands: 0,
        flow_commands: 0,
    };
    let mut used = 0u32;
    let mut acks: Vec<wire::proto::MessageIdData> = Vec::with_capacity(128);
    let mut last_ack = Instant::now();
    let mut out = Vec::with_capacity(4096);
    let mut stream = c.into_stream()?;
    let mut split = Splitter::new();
    loop {
        if shared.received.load(Ordering::Acquire) >= shared.expected {
            break;
        }
        if shared.over() {
            return Err(format!(
                "{} of {} entries received before the end",
                shared.received.load(Ordering::Relaxed),
                shared.expected
            ));
        }
        split.fill(&mut stream)?;
        while let Some(f) = split.next()? {
            match f.command.r#type.and_then(|t| Type::try_from(t).ok()) {
                Some(Type::Message) => {
                    let now = shared.now_ns();
                    let Some(msg) = f.command.message else {
                        return Err("MESSAGE without its body".into());
                    };
                    let (n, body) = (f.messages, f.body);
                    if body.len() < STAMP {
                        return Err(format!("payload of {} bytes", body.len()));
                    }
                    let word = |r: std::ops::Range<usize>| {
                        let mut b = [0u8; 8];
                        b[..r.len()].copy_from_slice(&body[r]);
                        u64::from_le_bytes(b)
                    };
                    let (ts, producer, seq) = (word(0..8), word(8..12), word(12..20));
                    stats.latencies_ns.push((ts, now.saturating_sub(ts)));
                    let slot = shared
                        .seen
                        .get(producer as usize)
                        .and_then(|v| v.get((seq / 64) as usize))
                        .ok_or_else(|| format!("entry ({producer}, {seq}) was never sent"))?;
                    let bit = 1u64 << (seq % 64);
                    if slot.fetch_or(bit, Ordering::Relaxed) & bit != 0 {
                        shared.duplicates.fetch_add(1, Ordering::Relaxed);
                    }
                    if let Keys::Fixed(k) = cfg.keys {
                        let at = producer as usize * k as usize + (seq % u64::from(k)) as usize;
                        if shared
                            .key_next
                            .get(at)
                            .is_some_and(|n| !in_key_order(n, seq))
                        {
                            shared.out_of_order.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    stats.messages += u64::from(n);
                    used += n;
                    let mut id = msg.message_id;
                    id.ack_set.clear();
                    id.batch_index = None;
                    id.batch_size = None;
                    acks.push(id);
                    let total = shared.received.fetch_add(1, Ordering::AcqRel) + 1;
                    if total == shared.expected {
                        shared.done_ns.store(shared.now_ns(), Ordering::Relaxed);
                    }
                }
                Some(Type::Ping) => {
                    wire::encode_command(&wire::commands::pong(), &mut out);
                }
                _ => return Err(format!("consumer got {:?}", f.command)),
            }
        }
        if used >= cfg.permits / 2 {
            wire::encode_command(&wire::commands::flow(consumer_id, used), &mut out);
            stats.flow_commands += 1;
            used = 0;
        }
        if acks.len() >= 100 || (!acks.is_empty() && last_ack.elapsed() >= Duration::from_millis(1))
        {
            let ids = std::mem::replace(&mut acks, Vec::with_capacity(128));
            wire::encode_command(&wire::commands::ack_ids(consumer_id, ids), &mut out);
            stats.ack_commands += 1;
            last_ack = Instant::now();
        }
        if !out.is_empty() {
            stream.write_all(&out).map_err(|e| format!("write: {e}"))?;
            out.clear();
        }
    }
    if !acks.is_empty() {
        out.clear();
        wire::encode_command(&wire::commands::ack_ids(consumer_id, acks), &mut out);
        let _ = stream.write_all(&out);
        stats.ack_commands += 1;
    }
    Ok(stats)
}

/// One connection holding subscriptions open (B4 measures what they cost the broker); they
/// end when it is dropped.
pub struct HeldSubscriptions {
    _conn: Conn,
}

/// Subscribes the topics `persistent://public/default/{prefix}-{i}`, `i < n`, with one
/// Key_Shared consumer each (subscription `s`, at the latest position), one after the other
/// over one connection; returns them held open and how long subscribing took.
pub fn subscribe_many(
    service_url: &str,
    prefix: &str,
    n: u64,
) -> Result<(HeldSubscriptions, Duration), String> {
    let addr = service_url.trim_start_matches("pulsar://");
    let mut c = Conn::open(addr, Duration::from_millis(100))?;
    let start = Instant::now();
    for i in 0..n {
        let topic = format!("persistent://public/default/{prefix}-{i}");
        c.send(&wire::commands::subscribe(
            &topic,
            "s",
            i,
            i + 1,
            command_subscribe::SubType::KeyShared,
            None,
            command_subscribe::InitialPosition::Latest,
        ))?;
        c.expect(Type::Success)?;
    }
    Ok((HeldSubscriptions { _conn: c }, start.elapsed()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn broker() -> broker::Broker {
        let cfg =
            broker::BrokerConfig::parse_args(["--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"])
                .unwrap();
        broker::Broker::start(cfg).unwrap()
    }

    /// Counts only (never times): every entry arrives once, batched or not, rate-limited or not.
    #[test]
    fn every_entry_arrives_exactly_once() {
        let b = broker();
        for (i, (batch, rate)) in [(1, None), (10, None), (1, Some(20_000.0))]
            .into_iter()
            .enumerate()
        {
            let cfg = LoadConfig {
                producers: 2,
                consumers: 2,
                entries_per_producer: 2_000,
                batch,
                rate,
                timeout: Duration::from_secs(30),
                ..LoadConfig::default()
            };
            let r = run(
                &b.service_url(),
                &format!("persistent://public/default/lg-{i}"),
                &cfg,
            )
            .unwrap();
            assert_eq!(r.entries, 4_000);
            assert_eq!(r.messages, 4_000 * u64::from(batch));
            assert_eq!(r.latencies_ns.len(), 4_000);
            assert_eq!(r.timeline.len(), 4_000);
            assert!(r.ack_commands > 0);
        }
        b.shutdown(Duration::from_secs(5));
    }

    /// Key_Shared over 3 consumers: every entry once, each key's entries in the order sent.
    #[test]
    fn key_shared_keeps_each_keys_order() {
        let b = broker();
        for (i, keys) in [Keys::Fixed(7), Keys::Random].into_iter().enumerate() {
            let cfg = LoadConfig {
                producers: 2,
                consumers: 3,
                entries_per_producer: 2_000,
                permits: 50,
                sub_type: command_subscribe::SubType::KeyShared,
                keys,
                timeout: Duration::from_secs(30),
                ..LoadConfig::default()
            };
            let url = b.service_url();
            let r = run(
                &url,
                &format!("persistent://public/default/lg-ks-{i}"),
                &cfg,
            )
            .unwrap();
            assert_eq!(r.entries, 4_000);
        }
        b.shutdown(Duration::from_secs(5));
    }

    #[test]
    fn an_entry_after_a_later_one_of_its_key_is_out_of_order() {
        let next = AtomicU64::new(0);
        assert!(in_key_order(&next, 3));
        assert!(in_key_order(&next, 10));
        assert!(!in_key_order(&next, 5));
        assert!(in_key_order(&next, 17));
        assert!(!in_key_order(&next, 17));
    }
}
