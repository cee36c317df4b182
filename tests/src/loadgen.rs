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
    /// The whole run fails after this long.
    pub timeout: Duration,
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
            timeout: Duration::from_secs(60),
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
                    _ => return Err(format!("expected {t:?}, got {:?}", f.command)),
                }
            }
            if Instant::now() >= until {
                return Err(format!("no {t:?} within 5 s"));
            }
            self.fill()?;
        }
    }
}

/// Runs one load: sets every connection up, releases them together, waits for every entry.
pub fn run(service_url: &str, topic: &str, cfg: &LoadConfig) -> Result<LoadResult, String> {
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
    if dups > 0 || marked != shared.expected || entries != shared.expected || messages != want_msgs
    {
        return Err(format!(
            "delivery mismatch: {entries} entries received, {marked} distinct of {} published, {dups} duplicates, {messages} messages (want {want_msgs})",
            shared.expected
        ));
    }
    latencies.sort_unstable();
    let done = shared.done_ns.load(Ordering::Relaxed).max(start_ns + 1);
    Ok(LoadResult {
        messages,
        entries,
        elapsed: Duration::from_nanos(done - start_ns),
        latencies_ns: latencies,
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
    let Conn {
        mut stream,
        reader,
        buf,
    } = conn;
    let read_half = stream.try_clone().map_err(|e| e.to_string())?;
    let receipts = {
        let (receipted, shared) = (receipted.clone(), shared.clone());
        std::thread::Builder::new()
            .name(format!("lg-receipts-{index}"))
            .spawn(move || {
                let mut c = Conn {
                    stream: read_half,
                    reader,
                    buf,
                };
                let mut next_seq = 0u64;
                while next_seq < entries {
                    if shared.over() {
                        return Err(format!("{next_seq} of {entries} receipts before the end"));
                    }
                    if !c.fill()? {
                        continue;
                    }
                    while let Some(f) = c.next()? {
                        match f.command.r#type() {
                            Type::SendReceipt => {
                                let seq = f.command.send_receipt.map_or(u64::MAX, |r| r.sequence_id);
                                if seq != next_seq {
                                    return Err(format!("receipt for {seq}, want {next_seq}"));
                                }
                                next_seq += 1;
                            }
                            Type::Ping => {}
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
                std::thread::sleep(wait.min(Duration::from_millis(1)));
                continue;
            }
        }
        for _ in 0..due {
            let now = shared.now_ns();
            payload[0..8].copy_from_slice(&now.to_le_bytes());
            payload[12..20].copy_from_slice(&sent.to_le_bytes());
            meta.sequence_id = sent;
            meta.publish_time = now / 1_000_000;
            let cmd = wire::commands::send(1, sent, batch as i32);
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

struct ConsumerStats {
    latencies_ns: Vec<u64>,
    messages: u64,
    ack_commands: u64,
    flow_commands: u64,
}

fn consumer_setup(addr: &str, topic: &str, id: u64, cfg: &LoadConfig) -> Result<Conn, String> {
    let mut c = Conn::open(addr, Duration::from_millis(1))?;
    c.send(&wire::commands::subscribe(
        topic,
        "bench",
        id,
        1,
        command_subscribe::SubType::Shared,
        None,
        command_subscribe::InitialPosition::Earliest,
    ))?;
    c.expect(Type::Success)?;
    c.send(&wire::commands::flow(id, cfg.permits))?;
    Ok(c)
}

fn consumer_loop(
    mut c: Conn,
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
        c.fill()?;
        while let Some(f) = c.next()? {
            match f.command.r#type() {
                Type::Message => {
                    let now = shared.now_ns();
                    let Some(msg) = f.command.message else {
                        return Err("MESSAGE without its body".into());
                    };
                    let Some(p) = f.payload else {
                        return Err("MESSAGE without a payload".into());
                    };
                    let n = u32::try_from(p.metadata.num_messages_in_batch()).unwrap_or(1);
                    let body = p.body();
                    if body.len() < STAMP {
                        return Err(format!("payload of {} bytes", body.len()));
                    }
                    let word = |r: std::ops::Range<usize>| {
                        let mut b = [0u8; 8];
                        b[..r.len()].copy_from_slice(&body[r]);
                        u64::from_le_bytes(b)
                    };
                    let (ts, producer, seq) = (word(0..8), word(8..12), word(12..20));
                    stats.latencies_ns.push(now.saturating_sub(ts));
                    let slot = shared
                        .seen
                        .get(producer as usize)
                        .and_then(|v| v.get((seq / 64) as usize))
                        .ok_or_else(|| format!("entry ({producer}, {seq}) was never sent"))?;
                    let bit = 1u64 << (seq % 64);
                    if slot.fetch_or(bit, Ordering::Relaxed) & bit != 0 {
                        shared.duplicates.fetch_add(1, Ordering::Relaxed);
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
                Type::Ping => {
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
            c.stream.write_all(&out).map_err(|e| format!("write: {e}"))?;
            out.clear();
        }
    }
    if !acks.is_empty() {
        let _ = c.send(&wire::commands::ack_ids(consumer_id, acks));
        stats.ack_commands += 1;
    }
    Ok(stats)
}
