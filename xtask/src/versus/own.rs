//! The load rows of `cargo xtask versus-pulsar` driven by the project's own load generator
//! (`target/release/loadgen`, written on the `wire` codec: no client library and no JVM in the
//! path), against each broker in turn. pulsar-perf's Java producer uses most of a core on its
//! own, so its rows show how far one JVM client gets; these show the brokers' capacity.
//!
//! Per broker, 100-byte messages, each run checking that every message arrived exactly once:
//! * the maximum sustained end-to-end rate (published → received), unbatched and batched (10 a
//!   batch), two producers and two consumers on a Shared subscription, with the broker's CPU
//!   seconds per million messages (from `/proc`);
//! * publish → receive latency at the same offered rate on both brokers, 20,000 msg/s for 12 s:
//!   Shared with one consumer, Key_Shared with 4 consumers and a new key per message, and
//!   Key_Shared with 1,000 keys (each key's order checked across the consumers).

use std::path::Path;
use std::process::Command;

use anyhow::Context;
use serde_json::{json, Value};

use super::load::{self, Subject};

/// The offered rate of the latency rows, msg/s.
const RATE: u32 = 20_000;
/// Seconds each latency row runs.
const SECS: u32 = 12;

/// Runs the generator once against `s`; its JSON line, with the broker's CPU seconds per
/// million messages added.
fn run(bin: &Path, s: &Subject<'_>, tag: &str, args: &[String]) -> anyhow::Result<Value> {
    let topic = format!(
        "persistent://public/default/own-{tag}-{}",
        std::process::id()
    );
    let before = load::cpu_s(s.pid);
    let out = Command::new(bin)
        .args(["--url", &format!("pulsar://127.0.0.1:{}", s.broker_port)])
        .args(["--topic", &topic])
        .args(args)
        .output()
        .with_context(|| format!("running {}", bin.display()))?;
    let cpu = load::cpu_s(s.pid) - before;
    if !out.status.success() {
        anyhow::bail!(
            "loadgen {tag} against {}: {}",
            s.name,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let mut v: Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("loadgen {tag}: not one JSON line"))?;
    let messages = v["messages"].as_f64().unwrap_or(0.0);
    if messages > 0.0 {
        v["broker_cpu_s_per_million"] = json!(cpu / (messages / 1e6));
    }
    println!(
        "versus: {} own {tag}: {:.0} msg/s, p50 {:.2} ms, p99 {:.2} ms, broker CPU {:.2} s per million",
        s.name,
        v["msg_per_s"].as_f64().unwrap_or(0.0),
        v["p50_ms"].as_f64().unwrap_or(0.0),
        v["p99_ms"].as_f64().unwrap_or(0.0),
        v["broker_cpu_s_per_million"].as_f64().unwrap_or(0.0),
    );
    Ok(v)
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// Every own-generator row against `s` (after pulsar-perf's rows, so Pulsar's JIT is warm).
pub(crate) fn rows(bin: &Path, s: &Subject<'_>) -> anyhow::Result<Value> {
    let max = |batch: &str, messages: &str| {
        strings(&[
            "--producers",
            "2",
            "--consumers",
            "2",
            "--batch",
            batch,
            "--messages",
            messages,
        ])
    };
    let messages = (RATE * SECS).to_string();
    let rate = RATE.to_string();
    let at_rate = |consumers: &str, keys: &str| {
        let sub = if keys == "none" {
            "shared"
        } else {
            "key-shared"
        };
        strings(&[
            "--rate",
            &rate,
            "--messages",
            &messages,
            "--consumers",
            consumers,
            "--sub-type",
            sub,
            "--keys",
            keys,
        ])
    };
    Ok(json!({
        "unbatched_max": run(bin, s, "unbatched", &max("1", "600000"))?,
        "batched_max": run(bin, s, "batched", &max("10", "3000000"))?,
        "shared_at_rate": run(bin, s, "shared-20k", &at_rate("1", "none"))?,
        "key_shared_at_rate": run(bin, s, "keyshared-20k", &at_rate("4", "random"))?,
        "key_shared_1000_keys_at_rate": run(bin, s, "keyshared-1k-20k", &at_rate("4", "1000"))?,
    }))
}

/// The table rows these figures fill: (label, path under each broker's `own` object).
pub(crate) const TABLE: &[(&str, &[&str])] = &[
    (
        "own generator: unbatched, max sustained msg/s (2 producers, 2 consumers)",
        &["own", "unbatched_max", "msg_per_s"],
    ),
    (
        "own generator: unbatched, broker CPU s per million",
        &["own", "unbatched_max", "broker_cpu_s_per_million"],
    ),
    (
        "own generator: batched, max sustained msg/s",
        &["own", "batched_max", "msg_per_s"],
    ),
    (
        "own generator: batched, broker CPU s per million",
        &["own", "batched_max", "broker_cpu_s_per_million"],
    ),
    (
        "own generator: Shared at 20k msg/s, end-to-end p50, ms",
        &["own", "shared_at_rate", "p50_ms"],
    ),
    (
        "own generator: Shared at 20k msg/s, end-to-end p99, ms",
        &["own", "shared_at_rate", "p99_ms"],
    ),
    (
        "own generator: Key_Shared 4 consumers at 20k msg/s, p50, ms",
        &["own", "key_shared_at_rate", "p50_ms"],
    ),
    (
        "own generator: Key_Shared 4 consumers at 20k msg/s, p99, ms",
        &["own", "key_shared_at_rate", "p99_ms"],
    ),
    (
        "own generator: Key_Shared 1,000 keys at 20k msg/s, p50, ms",
        &["own", "key_shared_1000_keys_at_rate", "p50_ms"],
    ),
    (
        "own generator: Key_Shared 1,000 keys at 20k msg/s, p99, ms",
        &["own", "key_shared_1000_keys_at_rate", "p99_ms"],
    ),
];
