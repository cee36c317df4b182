//! B1–B3: the broker binary end to end over loopback (127.0.0.1), driven by the load generator
//! in [`crate::loadgen`] (written on the `wire` codec, so no client library sits in the path).
//!
//! Where the time went in earlier profiles (dated, with their figures) is in `CHANGELOG.md`;
//! the figures themselves come from `cargo xtask bench`.
//!
//! Rows (each round a fresh topic on the workload's own broker, started on first use; the
//! in-memory rows use `Broker::start` in process, B3 execs `target/release/broker`):
//! * `B1`: batched produce→consume, 10 messages of 100 bytes per entry, msg/s.
//! * `B2`: unbatched 100-byte messages, msg/s.
//! * `B2-p99` / `B2-p50`: publish→deliver latency (ms) with the producers rate-limited to half
//!   of B2's measured median (B2's rounds of this run; a calibration round when B2 was filtered
//!   out). `B2-p50` reads the figure its B2-p99 round measured (same round, no extra run) and
//!   measures itself only when B2-p99 did not run.
//!   `B2_TIMELINE=FILE` writes the last round's entries there, one `publish-ns latency-ns` line
//!   each (publish time since the round's start, in arrival order per consumer), to find when
//!   the slow ones were published. `BENCH_BROKER_ARGS="--flag value …"` adds broker flags to
//!   every broker the rows start (an experiment: `--entries-per-ledger 100000000` for no
//!   rollover). `B2_RATE=N` runs B2-p99 at N msg/s instead (to compare two builds at one load).
//! * `B3-start`: exec of the release binary to its first stdout line (the service URL), ms.
//! * `B3-rss`: its VmRSS shortly (200 ms) after start, MB (read in B3-start's round, the same
//!   way B2-p50 reads B2-p99's).
//! * `B4-sub-kb`, `B4-threads`, `B4-subscribe`: the release binary (with `BENCH_BROKER_ARGS`)
//!   given 2,000 topics with one Key_Shared consumer each, subscribed one after the other over
//!   one connection: the RSS (KiB) and the threads each idle subscription added, and the ms
//!   subscribing them took (the last two read in B4-sub-kb's round when it ran).
//! * `B1-disk-*`, `B2-disk-*`: B1/B2 with `--data-dir <tmp>` and `--sync always|interval`
//!   (300,000 and 100,000 messages a round).
//!
//! Check in every round: each published entry is received exactly once (a bitmap per
//! producer), message counts match, receipts come in sequence order; a mismatch is an error.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use broker::{Broker, BrokerConfig};

use super::Workload;
use crate::loadgen::{self, LoadConfig};

/// Messages per B1 round (50,000 entries of 10).
const B1_MESSAGES: u64 = 500_000;
/// Messages per B2 round.
const B2_MESSAGES: u64 = 200_000;
/// Messages per round of the disk rows (fewer: `--sync always` runs at a third of the speed,
/// and the default 15 + 3 rounds of every row must fit in about two minutes).
const B1_DISK_MESSAGES: u64 = 300_000;
const B2_DISK_MESSAGES: u64 = 100_000;
/// How long a rate-limited latency round lasts.
const LATENCY_ROUND: Duration = Duration::from_secs(1);
/// Producer and consumer connections.
const PRODUCERS: usize = 2;
const CONSUMERS: usize = 2;

static ROUND: AtomicU64 = AtomicU64::new(0);

fn topic() -> String {
    format!(
        "persistent://public/default/bench-{}-{}",
        std::process::id(),
        ROUND.fetch_add(1, Ordering::Relaxed)
    )
}

/// A broker started on first use and shut down (its data directory removed) when dropped.
struct Host {
    extra: Vec<String>,
    dir: Option<PathBuf>,
    broker: Option<Broker>,
}

impl Host {
    fn memory() -> Host {
        Host {
            extra: Vec::new(),
            dir: None,
            broker: None,
        }
    }

    fn disk(sync: &str) -> Host {
        let dir = std::env::temp_dir().join(format!(
            "broker-bench-{}-{sync}-{}",
            std::process::id(),
            ROUND.fetch_add(1, Ordering::Relaxed)
        ));
        Host {
            extra: vec![
                "--data-dir".into(),
                dir.display().to_string(),
                "--sync".into(),
                sync.into(),
            ],
            dir: Some(dir),
            broker: None,
        }
    }

    fn url(&mut self) -> Result<String, String> {
        if self.broker.is_none() {
            let mut args: Vec<String> = ["--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"]
                .iter()
                .map(|s| s.to_string())
                .collect();
            args.extend(self.extra.iter().cloned());
            if let Ok(x) = std::env::var("BENCH_BROKER_ARGS") {
                args.extend(x.split_whitespace().map(String::from));
            }
            let cfg = BrokerConfig::parse_args(&args).map_err(|e| e.to_string())?;
            self.broker = Some(Broker::start(cfg).map_err(|e| format!("broker start: {e}"))?);
        }
        Ok(self
            .broker
            .as_ref()
            .map(Broker::service_url)
            .unwrap_or_default())
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if let Some(b) = self.broker.take() {
            b.shutdown(Duration::from_secs(5));
        }
        if let Some(d) = &self.dir {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

fn load(messages: u64, batch: u32, rate: Option<f64>) -> LoadConfig {
    let per = messages / PRODUCERS as u64 / u64::from(batch);
    LoadConfig {
        producers: PRODUCERS,
        consumers: CONSUMERS,
        entries_per_producer: per.max(1),
        batch,
        msg_size: 100,
        window_msgs: 1000,
        permits: 1000,
        rate,
        pace: Duration::from_micros(200),
        timeout: Duration::from_secs(60),
        ..LoadConfig::default()
    }
}

/// B5's offered rate, msg/s (the Key_Shared row `cargo xtask versus-pulsar` runs on both brokers).
const B5_RATE: f64 = 20_000.0;
/// B5's consumers on the Key_Shared subscription.
const B5_CONSUMERS: usize = 4;

/// One B5 round: one producer at [`B5_RATE`] for [`LATENCY_ROUND`], `keys` keys, four
/// Key_Shared consumers; (p50, p99) in ms. The load generator checks each key's order.
fn key_shared_latency(host: &mut Host, keys: loadgen::Keys) -> Result<(f64, f64), String> {
    let url = host.url()?;
    let cfg = LoadConfig {
        producers: 1,
        consumers: B5_CONSUMERS,
        entries_per_producer: (B5_RATE * LATENCY_ROUND.as_secs_f64()) as u64,
        rate: Some(B5_RATE),
        sub_type: wire::proto::command_subscribe::SubType::KeyShared,
        keys,
        ..LoadConfig::default()
    };
    let r = loadgen::run(&url, &topic(), &cfg)?;
    write_timeline("B5_TIMELINE", &r);
    Ok((r.latency_ms(0.50), r.latency_ms(0.99)))
}

fn throughput(host: &mut Host, messages: u64, batch: u32) -> Result<f64, String> {
    let url = host.url()?;
    let r = loadgen::run(&url, &topic(), &load(messages, batch, None))?;
    Ok(r.msg_per_sec())
}

/// One rate-limited round: (p50, p99) in ms.
fn latency(host: &mut Host, rate: f64) -> Result<(f64, f64), String> {
    let url = host.url()?;
    let messages = (rate * LATENCY_ROUND.as_secs_f64()) as u64;
    let r = loadgen::run(&url, &topic(), &load(messages.max(1000), 1, Some(rate)))?;
    write_timeline("B2_TIMELINE", &r);
    Ok((r.latency_ms(0.50), r.latency_ms(0.99)))
}

/// With the environment variable `var` set to a file: writes the round's entries there, one
/// `publish-ns latency-ns` line each.
fn write_timeline(var: &str, r: &loadgen::LoadResult) {
    if let Ok(path) = std::env::var(var) {
        let lines: String = r
            .timeline
            .iter()
            .map(|(at, lat)| format!("{at} {lat}\n"))
            .collect();
        let _ = std::fs::write(path, lines);
    }
}

fn release_binary() -> Result<PathBuf, String> {
    let sibling = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("broker")));
    let candidates = sibling
        .into_iter()
        .chain([PathBuf::from("target/release/broker")]);
    for c in candidates {
        if c.is_file() {
            return Ok(c);
        }
    }
    Err("target/release/broker not found: `cargo build --release -p broker` first".into())
}

/// Execs the release binary with `extra` flags: the child, its service URL, and the ms to
/// its first stdout line.
fn spawn_broker(extra: &[String]) -> Result<(Child, String, f64), String> {
    let bin = release_binary()?;
    let start = Instant::now();
    let mut child = Command::new(&bin)
        .args(["--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"])
        .args(extra)
        .env("RUST_LOG", "warn")
        // The broker's memory with malloc's defaults, not the harness's settings.
        .env_remove("GLIBC_TUNABLES")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("exec {}: {e}", bin.display()))?;
    let mut line = String::new();
    let read = child
        .stdout
        .take()
        .map(|o| BufReader::new(o).read_line(&mut line));
    let ms = start.elapsed().as_secs_f64() * 1e3;
    match read {
        Some(Ok(_)) if line.starts_with("pulsar://127.0.0.1:") => {
            Ok((child, line.trim().to_owned(), ms))
        }
        _ => {
            let _ = child.kill();
            let _ = child.wait();
            Err(format!("first stdout line {line:?}, want the service URL"))
        }
    }
}

/// A process's VmRSS (KiB) and thread count, from `/proc/<pid>/status`.
fn rss_and_threads(pid: u32) -> Result<(f64, f64), String> {
    let status =
        std::fs::read_to_string(format!("/proc/{pid}/status")).map_err(|e| e.to_string())?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .ok_or_else(|| format!("no {name} in /proc/{pid}/status"))
    };
    Ok((field("VmRSS:")?, field("Threads:")?))
}

/// Execs the binary: (ms to the first stdout line, VmRSS in MB 200 ms after it).
fn exec_broker() -> Result<(f64, f64), String> {
    let (mut child, _, ms) = spawn_broker(&[])?;
    std::thread::sleep(Duration::from_millis(200));
    let result = rss_and_threads(child.id()).map(|(kib, _)| (ms, kib / 1024.0));
    let _ = child.kill();
    let _ = child.wait();
    result
}

/// Topics B4 subscribes, one Key_Shared consumer each.
const B4_SUBSCRIPTIONS: u64 = 2_000;

/// B4: execs the release binary (with `BENCH_BROKER_ARGS`), subscribes [`B4_SUBSCRIPTIONS`]
/// topics over one connection, and returns the KiB of RSS and the threads each idle
/// subscription added, and the ms subscribing them took.
fn subscriptions_cost() -> Result<(f64, f64, f64), String> {
    let extra: Vec<String> = std::env::var("BENCH_BROKER_ARGS")
        .map(|a| a.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default();
    let (mut child, url, _) = spawn_broker(&extra)?;
    let pid = child.id();
    let result = (|| {
        std::thread::sleep(Duration::from_millis(200));
        let (rss0, threads0) = rss_and_threads(pid)?;
        let (held, took) = loadgen::subscribe_many(&url, "b4", B4_SUBSCRIPTIONS)?;
        std::thread::sleep(Duration::from_millis(500));
        let (rss1, threads1) = rss_and_threads(pid)?;
        drop(held);
        let n = B4_SUBSCRIPTIONS as f64;
        Ok((
            (rss1 - rss0) / n,
            (threads1 - threads0) / n,
            took.as_secs_f64() * 1e3,
        ))
    })();
    let _ = child.kill();
    let _ = child.wait();
    result
}

/// The B1/B2 throughput rows for one broker setup.
fn throughput_rows(
    b1: &'static str,
    b2: &'static str,
    (m1, m2): (u64, u64),
    host: fn() -> Host,
    b2_rounds: Option<Rc<RefCell<Vec<f64>>>>,
) -> Vec<Workload> {
    let mut h1 = None::<Host>;
    let mut h2 = None::<Host>;
    vec![
        Workload::higher(b1, "msg/s", None, Some(1_000_000.0), move || {
            throughput(h1.get_or_insert_with(host), m1, 10)
        }),
        Workload::higher(b2, "msg/s", None, Some(200_000.0), move || {
            let x = throughput(h2.get_or_insert_with(host), m2, 1)?;
            if let Some(r) = &b2_rounds {
                r.borrow_mut().push(x);
            }
            Ok(x)
        }),
    ]
}

/// Every broker row, in table order.
pub fn workloads() -> Vec<Workload> {
    let b2_rounds = Rc::new(RefCell::new(Vec::<f64>::new()));
    let p50s = Rc::new(RefCell::new(VecDeque::<f64>::new()));
    let mut w = throughput_rows(
        "B1",
        "B2",
        (B1_MESSAGES, B2_MESSAGES),
        Host::memory,
        Some(b2_rounds.clone()),
    );

    let mut lat_host = None::<Host>;
    let mut rate = None::<f64>;
    let p50_out = p50s.clone();
    w.push(Workload::lower(
        "B2-p99",
        "ms",
        None,
        Some(5.0),
        move || {
            let host = lat_host.get_or_insert_with(Host::memory);
            let fixed = std::env::var("B2_RATE").ok().and_then(|r| r.parse().ok());
            let r = match rate.or(fixed) {
                Some(r) => r,
                None => {
                    let mut xs = b2_rounds.borrow().clone();
                    if xs.is_empty() {
                        xs.push(throughput(host, B2_MESSAGES, 1)?);
                    }
                    let r = super::median(&mut xs) / 2.0;
                    *rate.insert(r)
                }
            };
            let (p50, p99) = latency(host, r)?;
            p50_out.borrow_mut().push_back(p50);
            Ok(p99)
        },
    ));
    let mut own = None::<Host>;
    w.push(Workload::lower("B2-p50", "ms", None, None, move || {
        if let Some(x) = p50s.borrow_mut().pop_front() {
            return Ok(x);
        }
        let host = own.get_or_insert_with(Host::memory);
        let r = throughput(host, B2_MESSAGES, 1)? / 2.0;
        Ok(latency(host, r)?.0)
    }));

    for (id, keys) in [
        ("B5-ks-p99", loadgen::Keys::Random),
        ("B5-ks1k-p99", loadgen::Keys::Fixed(1000)),
    ] {
        let mut host = None::<Host>;
        w.push(Workload::lower(id, "ms", None, None, move || {
            let (p50, p99) = key_shared_latency(host.get_or_insert_with(Host::memory), keys)?;
            eprintln!("{id}: p50 {p50:.2} ms, p99 {p99:.2} ms");
            Ok(p99)
        }));
    }

    let rss = Rc::new(RefCell::new(VecDeque::<f64>::new()));
    let rss_out = rss.clone();
    w.push(Workload::lower(
        "B3-start",
        "ms",
        None,
        Some(100.0),
        move || {
            let (ms, mb) = exec_broker()?;
            rss_out.borrow_mut().push_back(mb);
            Ok(ms)
        },
    ));
    w.push(Workload::lower(
        "B3-rss",
        "MB",
        None,
        Some(30.0),
        move || match rss.borrow_mut().pop_front() {
            Some(mb) => Ok(mb),
            None => Ok(exec_broker()?.1),
        },
    ));

    let b4 = Rc::new(RefCell::new(VecDeque::<(f64, f64)>::new()));
    let b4_out = b4.clone();
    w.push(Workload::lower(
        "B4-sub-kb",
        "KiB/sub",
        Some(72.0),
        Some(7.2),
        move || {
            let (kib, threads, ms) = subscriptions_cost()?;
            b4_out.borrow_mut().push_back((threads, ms));
            Ok(kib)
        },
    ));
    let b4_ms = Rc::new(RefCell::new(VecDeque::<f64>::new()));
    let b4_ms_out = b4_ms.clone();
    w.push(Workload::lower(
        "B4-threads",
        "threads/sub",
        None,
        Some(0.01),
        move || {
            let (threads, ms) = match b4.borrow_mut().pop_front() {
                Some(x) => x,
                None => {
                    let (_, threads, ms) = subscriptions_cost()?;
                    (threads, ms)
                }
            };
            b4_ms_out.borrow_mut().push_back(ms);
            Ok(threads)
        },
    ));
    w.push(Workload::lower(
        "B4-subscribe",
        "ms",
        Some(12_800.0),
        Some(1_500.0),
        move || match b4_ms.borrow_mut().pop_front() {
            Some(ms) => Ok(ms),
            None => Ok(subscriptions_cost()?.2),
        },
    ));

    w.extend(throughput_rows(
        "B1-disk-always",
        "B2-disk-always",
        (B1_DISK_MESSAGES, B2_DISK_MESSAGES),
        || Host::disk("always"),
        None,
    ));
    w.extend(throughput_rows(
        "B1-disk-interval",
        "B2-disk-interval",
        (B1_DISK_MESSAGES, B2_DISK_MESSAGES),
        || Host::disk("interval"),
        None,
    ));
    w
}
