//! The load rows of `cargo xtask versus-pulsar`: Pulsar's own load generator, pulsar-perf
//! (`tests/versus/perf/pom.xml`), against each broker in turn, one run on one machine.
//!
//! Per broker: the publish rate at full speed, unbatched and batched (100-byte messages, the
//! producer's rate cap far above what either reaches); publish and end-to-end latency at 20,000
//! msg/s on both brokers, with a consumer; Key_Shared with 4 consumers and random
//! keys at a fixed offered rate; broker CPU seconds per million messages (from `/proc`); resident
//! memory idle, right after the batched run, and with a backlog of a million messages; and the
//! unbatched row with two producer processes at once, to see whether one client was the bound.
//! Each broker first gets an 8 s unbatched warm-up run that is not a row (Pulsar's JIT). Each
//! pulsar-perf run is timed by `/usr/bin/time`, so the client's own CPU is in the results: on a
//! 2-core machine the client is often the bottleneck, and broker CPU per message is the figure
//! the client does not bound.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::Context;
use serde_json::{json, Value};

use super::procs::{self, Group};

/// Where pulsar-perf runs and what it connects to.
pub(crate) struct Perf {
    pub(crate) java: PathBuf,
    pub(crate) cp: String,
    pub(crate) dir: PathBuf,
}

/// One broker under load: its URLs' ports and its process (for CPU and memory).
pub(crate) struct Subject<'a> {
    pub(crate) name: &'a str,
    pub(crate) broker_port: u16,
    pub(crate) admin_port: u16,
    pub(crate) pid: u32,
}

/// How long each producer runs (pulsar-perf `-time`), and so the window rates are taken over.
const SECS: f64 = 12.0;

/// What one pulsar-perf run printed, and the CPU it and the broker used.
#[derive(Debug, Default)]
struct Run {
    /// The aggregated latency line: median and 99th percentile, ms.
    med_ms: f64,
    p99_ms: f64,
    records: f64,
    client_cpu_s: f64,
    wall_s: f64,
}

impl Run {
    /// Messages per second over the producer's window: pulsar-perf's own aggregate rate divides
    /// by the time to its shutdown too, which is seconds longer.
    fn rate(&self) -> f64 {
        self.records / SECS
    }
}

/// Utime + stime of `pid` in seconds (clock ticks of 100 Hz, Linux's `USER_HZ`).
pub(crate) fn cpu_s(pid: u32) -> f64 {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<f64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    // utime and stime are fields 14 and 15 of the line; 12 and 13 after the name.
    (f.get(11).unwrap_or(&0.0) + f.get(12).unwrap_or(&0.0)) / 100.0
}

impl Perf {
    /// Starts `pulsar-perf <sub> <args…>` against `s`, timed by /usr/bin/time, output in `log`;
    /// a process group of its own, so the JVM under `time` goes when the group is dropped.
    fn spawn(
        &self,
        s: &Subject<'_>,
        sub: &str,
        args: &[String],
        log: &Path,
    ) -> anyhow::Result<Group> {
        let conf = self.dir.join(format!("perf-{}.conf", s.name));
        fs::write(
            &conf,
            format!(
                "webServiceUrl=http://127.0.0.1:{}/\nbrokerServiceUrl=pulsar://127.0.0.1:{}/\n",
                s.admin_port, s.broker_port
            ),
        )?;
        let mut c = Command::new("/usr/bin/time");
        c.args(["-f", "versus-cpu %U %S %e"])
            .arg(&self.java)
            .args([
                "-Xmx1g",
                "-cp",
                &self.cp,
                "org.apache.pulsar.testclient.PulsarPerfTestTool",
            ])
            .arg(&conf)
            .arg(sub)
            .args(args);
        let _ = fs::remove_file(log);
        Group::spawn(c, "pulsar-perf", log)
            .context("starting pulsar-perf (is /usr/bin/time installed?)")
    }

    /// Runs pulsar-perf to its end (at most `limit`) and parses its output.
    fn run(
        &self,
        s: &Subject<'_>,
        sub: &str,
        args: &[String],
        tag: &str,
        limit: Duration,
    ) -> anyhow::Result<Run> {
        let log = self.dir.join(format!("perf-{}-{tag}.log", s.name));
        let group = self.spawn(s, sub, args, &log)?;
        finish(group, &log, limit)
    }
}

/// Waits for a pulsar-perf run and parses its log; the group is killed when this returns.
fn finish(mut group: Group, log: &Path, limit: Duration) -> anyhow::Result<Run> {
    anyhow::ensure!(
        group.wait(limit),
        "pulsar-perf did not end in {limit:?}; see {}",
        log.display()
    );
    let text = fs::read_to_string(log)?;
    let run = parse(&text);
    anyhow::ensure!(
        run.records > 0.0,
        "pulsar-perf moved no message; see {}",
        log.display()
    );
    Ok(run)
}

/// The number right after `key` in `line` (`"--- 123.4 msg/s"`: key `"---"`, …).
fn number_after(line: &str, key: &str) -> Option<f64> {
    let rest = &line[line.find(key)? + key.len()..];
    rest.split_whitespace()
        .next()?
        .trim_end_matches(',')
        .parse()
        .ok()
}

/// The figures of one pulsar-perf log: the aggregated records and latency lines (pulsar-perf
/// 4.0.8's wording) and the `versus-cpu` line that `/usr/bin/time` appends.
fn parse(text: &str) -> Run {
    let mut run = Run::default();
    for line in text.lines() {
        if line.contains("Aggregated throughput stats") {
            // "Aggregated throughput stats --- 835814 records sent --- 41201.450 msg/s …"
            run.records = number_after(line, "stats ---").unwrap_or(0.0);
        } else if line.contains("Aggregated latency stats") {
            run.med_ms = number_after(line, "med:").unwrap_or(f64::NAN);
            run.p99_ms = number_after(line, "99pct:").unwrap_or(f64::NAN);
        } else if let Some(t) = line.strip_prefix("versus-cpu ") {
            let v: Vec<f64> = t
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            if v.len() == 3 {
                run.client_cpu_s = v[0] + v[1];
                run.wall_s = v[2];
            }
        }
    }
    run
}

/// The share of the `sent` messages that were `received` (0 when nothing was sent).
pub(crate) fn share(received: f64, sent: f64) -> f64 {
    if sent > 0.0 {
        received / sent
    } else {
        0.0
    }
}

fn topic(tag: &str) -> String {
    format!(
        "persistent://public/default/versus-{tag}-{}",
        std::process::id()
    )
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

/// How a producer row runs: for `secs` seconds, or until `messages` are sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Length {
    Secs(u32),
    Messages(u64),
}

/// pulsar-perf's `produce` arguments for a flat-out producer of 100-byte messages on `topic`
/// (`batched`: the client's default batching, else `-db`). At most 50,000 messages in flight:
/// without a bound the client once held 600,000 unreceipted messages, lost its connection and
/// ran out of heap re-sending them.
fn producer_args(length: Length, batched: bool, topic: String) -> Vec<String> {
    let mut a = strings(&["-s", "100"]);
    match length {
        Length::Secs(s) => a.extend(["-time".to_owned(), s.to_string()]),
        Length::Messages(m) => a.extend(["-m".to_owned(), m.to_string()]),
    }
    a.extend(strings(&["-r", "2000000", "-o", "50000"]));
    if !batched {
        a.push("-db".to_owned());
    }
    a.push(topic);
    a
}

/// The load rows for one broker, as JSON.
pub(crate) fn rows(p: &Perf, s: &Subject<'_>) -> anyhow::Result<Value> {
    let secs = Duration::from_secs(120);
    let idle_rss = procs::rss_mib(s.pid);
    let row = |tag: &str, batched: bool| -> anyhow::Result<(Run, f64)> {
        let args = producer_args(Length::Secs(12), batched, topic(tag));
        let before = cpu_s(s.pid);
        let r = p.run(s, "produce", &args, tag, secs)?;
        let per_million = (cpu_s(s.pid) - before) / (r.records / 1e6);
        println!(
            "versus: {} {tag}: {:.0} msg/s, client CPU {:.1} s in {:.1} s, broker CPU {:.2} s per million",
            s.name,
            r.rate(),
            r.client_cpu_s,
            r.wall_s,
            per_million
        );
        Ok((r, per_million))
    };
    // A warm-up, not measured: in Pulsar's first run under load its JIT compiles the hot paths
    // (its broker took about 115 s of CPU per million messages in a first unbatched run, 30-40 s
    // in a later one), so without it the first row would measure the compiler.
    let warm = producer_args(Length::Secs(8), false, topic("warmup"));
    let w = p.run(s, "produce", &warm, "warmup", secs)?;
    println!(
        "versus: {} warm-up: {:.0} msg/s (not a row)",
        s.name,
        w.rate()
    );
    let (unbatched, unbatched_cpu) = row("unbatched", false)?;
    let (batched, batched_cpu) = row("batched", true)?;
    let two = two_producers(p, s)?;
    let load_rss = procs::rss_mib(s.pid);
    let latency = consumed(p, s, "latency", &[], &["-db", "-r", "20000"])?;
    let key_shared = consumed(
        p,
        s,
        "keyshared",
        &["-st", "Key_Shared", "-n", "4"],
        &["-db", "-r", "20000", "-mk", "random"],
    )?;
    let backlog_rss = backlog(p, s)?;
    Ok(json!({
        "idle_rss_mib": idle_rss,
        "unbatched": { "msg_per_s": unbatched.rate(), "broker_cpu_s_per_million": unbatched_cpu,
                       "client_cpu_s": unbatched.client_cpu_s, "wall_s": unbatched.wall_s },
        "batched": { "msg_per_s": batched.rate(), "broker_cpu_s_per_million": batched_cpu,
                     "client_cpu_s": batched.client_cpu_s, "wall_s": batched.wall_s },
        "unbatched_two_producers": two,
        "rss_after_load_mib": load_rss,
        "latency_at_rate": { "offered_msg_per_s": 20000, "publish_p50_ms": latency.0.med_ms,
                             "publish_p99_ms": latency.0.p99_ms, "e2e_p50_ms": latency.1.med_ms,
                             "e2e_p99_ms": latency.1.p99_ms, "sent": latency.0.records,
                             "received": latency.1.records,
                             "received_fraction": share(latency.1.records, latency.0.records), "producer_cpu_s": latency.0.client_cpu_s,
                             "consumer_cpu_s": latency.1.client_cpu_s },
        "key_shared_4_consumers": { "offered_msg_per_s": 20000, "sent": key_shared.0.records,
                                    "received": key_shared.1.records,
                                    "received_fraction": share(key_shared.1.records, key_shared.0.records), "e2e_p50_ms": key_shared.1.med_ms,
                                    "e2e_p99_ms": key_shared.1.p99_ms, "consumer_cpu_s": key_shared.1.client_cpu_s },
        "rss_with_backlog_mib": backlog_rss,
    }))
}

/// The client-bottleneck check: the unbatched row again with two pulsar-perf processes at once,
/// each on a topic of its own, both started together. If their summed rate is well above one
/// process's, one client process was the bound, not the broker (on 2 cores the two JVMs also
/// take CPU from the broker, so a sum no higher does not prove the broker is the bound).
fn two_producers(p: &Perf, s: &Subject<'_>) -> anyhow::Result<Value> {
    let args = |tag: &str| producer_args(Length::Secs(12), false, topic(tag));
    let before = cpu_s(s.pid);
    let logs: Vec<PathBuf> = ["two-a", "two-b"]
        .iter()
        .map(|t| p.dir.join(format!("perf-{}-{t}.log", s.name)))
        .collect();
    let a = p.spawn(s, "produce", &args("two-a"), &logs[0])?;
    let b = p.spawn(s, "produce", &args("two-b"), &logs[1])?;
    let limit = Duration::from_secs(120);
    let (ra, rb) = (finish(a, &logs[0], limit)?, finish(b, &logs[1], limit)?);
    let records = ra.records + rb.records;
    let per_million = (cpu_s(s.pid) - before) / (records / 1e6);
    println!(
        "versus: {} two unbatched producers: {:.0} + {:.0} msg/s, client CPU {:.1} s + {:.1} s, broker CPU {:.2} s per million",
        s.name,
        ra.rate(),
        rb.rate(),
        ra.client_cpu_s,
        rb.client_cpu_s,
        per_million
    );
    Ok(json!({
        "msg_per_s": ra.rate() + rb.rate(), "each_msg_per_s": [ra.rate(), rb.rate()],
        "broker_cpu_s_per_million": per_million,
        "client_cpu_s": [ra.client_cpu_s, rb.client_cpu_s],
    }))
}

/// A consumer (pulsar-perf consume) started first, then a producer at a fixed rate for 12 s:
/// (producer run, consumer run).
fn consumed(
    p: &Perf,
    s: &Subject<'_>,
    tag: &str,
    consumer: &[&str],
    producer: &[&str],
) -> anyhow::Result<(Run, Run)> {
    let t = topic(tag);
    let mut cargs = strings(&["-ss", "versus", "-time", "22"]);
    cargs.extend(strings(consumer));
    cargs.push(t.clone());
    let clog = p.dir.join(format!("perf-{}-{tag}-consume.log", s.name));
    let cons = p.spawn(s, "consume", &cargs, &clog)?;
    std::thread::sleep(Duration::from_secs(6)); // the consumer's JVM starts and subscribes
    let mut pargs = strings(&["-s", "100", "-time", "12"]);
    pargs.extend(strings(producer));
    pargs.push(t);
    let prod = p.run(
        s,
        "produce",
        &pargs,
        &format!("{tag}-produce"),
        Duration::from_secs(120),
    )?;
    let cons = finish(cons, &clog, Duration::from_secs(120))?;
    println!(
        "versus: {} {tag}: produced {:.0} msg/s (publish p50 {:.2} ms, p99 {:.2} ms), received {} of {} (end to end p50 {:.2} ms, p99 {:.2} ms); client CPU {:.1} s + {:.1} s",
        s.name,
        prod.rate(),
        prod.med_ms,
        prod.p99_ms,
        cons.records,
        prod.records,
        cons.med_ms,
        cons.p99_ms,
        prod.client_cpu_s,
        cons.client_cpu_s
    );
    Ok((prod, cons))
}

/// Resident memory after a million batched messages wait for a subscription nobody reads.
fn backlog(p: &Perf, s: &Subject<'_>) -> anyhow::Result<Option<f64>> {
    let t = topic("backlog");
    let sub = strings(&["-ss", "backlog", "-time", "3", &t]);
    let clog = p.dir.join(format!("perf-{}-backlog-subscribe.log", s.name));
    let c = p.spawn(s, "consume", &sub, &clog)?;
    // The subscription exists once the consumer ran; it received nothing, so that is fine.
    let _ = finish(c, &clog, Duration::from_secs(60));
    let args = producer_args(Length::Messages(1_000_000), true, t);
    p.run(s, "produce", &args, "backlog", Duration::from_secs(180))?;
    std::thread::sleep(Duration::from_secs(2));
    let rss = procs::rss_mib(s.pid);
    println!(
        "versus: {} with a backlog of 1,000,000 messages: RSS {:?} MiB",
        s.name, rss
    );
    Ok(rss)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines as pulsar-perf 4.0.8 printed them in a run against the broker (the interval lines
    /// are ignored: pulsar-perf prints them every 10 s, whatever `-i` says).
    const PRODUCE: &str = "\
2026-12-03T11:41:42,755 - INFO  - [main:PerformanceProducer@392] - Throughput produced:  534249 msg ---  53419.9 msg/s ---     40.8 Mbit/s  --- failure      0.0 msg/s --- Latency: mean: 874.084 ms - med: 1168.023 - 95pct: 1587.023 - 99pct: 1620.199 - 99.9pct: 1633.871 - 99.99pct: 1637.199 - Max: 1637.199
2026-12-03T11:41:52,790 - INFO  - [perf-client-shutdown:PerformanceProducer@774] - Aggregated throughput stats --- 835814 records sent --- 41201.450 msg/s --- 31.434 Mbit/s
2026-12-03T11:41:52,824 - INFO  - [perf-client-shutdown:PerformanceProducer@784] - Aggregated latency stats --- Latency: mean: 860.787 ms - med: 967.727 - 95pct: 1572.207 - 99pct: 1619.023 - 99.9pct: 1630.359 - 99.99pct: 1637.191 - 99.999pct: 1637.199 - Max: 1637.199
versus-cpu 15.01 1.51 22.30
";

    const CONSUME: &str = "\
2026-12-03T11:42:21,073 - INFO  - [main:PerformanceConsumer@484] - Throughput received:  240239 msg --- 13724.216  msg/s --- 10.471 Mbit/s  --- Latency: mean: 2.011 ms - med: 1 - 95pct: 8 - 99pct: 17 - 99.9pct: 27 - 99.99pct: 32 - Max: 33
2026-12-03T11:42:31,107 - INFO  - [perf-client-shutdown:PerformanceConsumer@562] - Aggregated throughput stats --- 240239 records received --- 7981.227 msg/s --- 6.089 Mbit/s --- AckRate: 7981.227259414586  msg/s --- ack failed 0 msg
2026-12-03T11:42:31,118 - INFO  - [perf-client-shutdown:PerformanceConsumer@575] - Aggregated latency stats --- Latency: mean: 16.752 ms - med: 3 - 95pct: 90 - 99pct: 130 - 99.9pct: 149 - 99.99pct: 159 - 99.999pct: 161 - Max: 161
versus-cpu 9.96 1.76 33.46
";

    #[test]
    fn a_producer_log_gives_records_latency_and_cpu() {
        let r = parse(PRODUCE);
        assert_eq!(r.records, 835_814.0, "the aggregate, not the interval line");
        assert_eq!((r.med_ms, r.p99_ms), (967.727, 1619.023));
        assert!((r.client_cpu_s - 16.52).abs() < 1e-9);
        assert_eq!(r.wall_s, 22.30);
        assert!((r.rate() - 835_814.0 / SECS).abs() < 1e-9);
    }

    #[test]
    fn a_consumer_log_gives_records_and_end_to_end_latency() {
        let r = parse(CONSUME);
        assert_eq!(r.records, 240_239.0);
        assert_eq!((r.med_ms, r.p99_ms), (3.0, 130.0));
    }

    #[test]
    fn a_log_without_the_aggregates_gives_nothing_and_no_panic() {
        let r = parse("Throughput produced:  12 msg --- 1.0 msg/s\nversus-cpu 1 2\n");
        assert_eq!(r.records, 0.0);
        assert!(r.med_ms.is_nan() || r.med_ms == 0.0);
        assert_eq!(r.client_cpu_s, 0.0, "a short cpu line is not read");
        assert_eq!(number_after("med: x", "med:"), None);
        assert_eq!(number_after("nothing", "med:"), None);
        assert_eq!(number_after("a --- 1,5", "---"), None);
        assert_eq!(number_after("99pct: 17, ", "99pct:"), Some(17.0));
    }

    #[test]
    fn producer_rows_differ_only_in_length_batching_and_topic() {
        let unbatched = producer_args(Length::Secs(12), false, "t1".into());
        assert_eq!(
            unbatched.join(" "),
            "-s 100 -time 12 -r 2000000 -o 50000 -db t1"
        );
        let backlog = producer_args(Length::Messages(1_000_000), true, "t2".into());
        assert_eq!(
            backlog.join(" "),
            "-s 100 -m 1000000 -r 2000000 -o 50000 t2"
        );
        // pulsar-perf takes the topic last, after every flag.
        assert_eq!(unbatched.last().map(String::as_str), Some("t1"));
    }

    #[test]
    fn the_share_received_of_nothing_sent_is_zero() {
        assert_eq!(share(5.0, 10.0), 0.5);
        assert_eq!(share(0.0, 0.0), 0.0);
    }
}
