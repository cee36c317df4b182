//! `loadgen`: the project's own load generator ([`tests::loadgen`], written on the `wire`
//! codec) as a program, so `cargo xtask versus-pulsar` drives both brokers with one client that
//! costs little CPU. One run, one JSON line on stdout:
//! `{"messages", "entries", "elapsed_s", "msg_per_s", "p50_ms", "p99_ms", "p999_ms", "max_ms"}`.
//! It fails (exit 2) on a lost, duplicated or (with `--keys N`) out-of-key-order entry.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use tests::loadgen::{self, Keys, LoadConfig};
use wire::proto::command_subscribe::SubType;

/// Drives a Pulsar-protocol broker with producers and consumers on one subscription.
#[derive(Parser, Debug)]
#[command(name = "loadgen")]
struct Args {
    /// The broker's service URL.
    #[arg(long, default_value = "pulsar://127.0.0.1:6650")]
    url: String,
    /// The topic (a new one per run: the consumers subscribe at the earliest position).
    #[arg(long)]
    topic: String,
    /// Producer connections, one producer each.
    #[arg(long, default_value_t = 1)]
    producers: usize,
    /// Consumer connections on the subscription.
    #[arg(long, default_value_t = 1)]
    consumers: usize,
    /// Messages in all (split over the producers; rounded to whole batches).
    #[arg(long, default_value_t = 200_000)]
    messages: u64,
    /// Messages per entry (1: unbatched).
    #[arg(long, default_value_t = 1)]
    batch: u32,
    /// Bytes per message.
    #[arg(long, default_value_t = 100)]
    size: usize,
    /// Total offered rate, messages per second (none: as fast as the window allows).
    #[arg(long)]
    rate: Option<f64>,
    /// The subscription's type.
    #[arg(long, value_enum, default_value_t = Sub::Shared)]
    sub_type: Sub,
    /// Message keys: `none`, `random` (a new key per message) or a number of keys (each key's
    /// order is then checked across consumers).
    #[arg(long, default_value = "none", value_parser = keys)]
    keys: Keys,
    /// Permits each consumer keeps.
    #[arg(long, default_value_t = 1000)]
    permits: u32,
    /// Outstanding messages per producer.
    #[arg(long, default_value_t = 1000)]
    window: u64,
    /// The run fails after this many seconds.
    #[arg(long, default_value_t = 120)]
    timeout_s: u64,
    /// Instead of a run: subscribe N topics named `<topic>-<i>`, one Key_Shared consumer each,
    /// over one connection, hold them for `--hold-s` seconds, and print how long subscribing
    /// took (to measure what idle subscriptions cost a broker).
    #[arg(long)]
    hold_subscriptions: Option<u64>,
    /// How long `--hold-subscriptions` holds them.
    #[arg(long, default_value_t = 10)]
    hold_s: u64,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Sub {
    Shared,
    KeyShared,
}

fn keys(s: &str) -> Result<Keys, String> {
    match s {
        "none" => Ok(Keys::None),
        "random" => Ok(Keys::Random),
        n => match n.parse::<u32>() {
            Ok(k) if k > 0 => Ok(Keys::Fixed(k)),
            _ => Err(format!(
                "{n:?}: none, random or a number of keys (at least 1)"
            )),
        },
    }
}

fn main() -> ExitCode {
    let a = Args::parse();
    if let Some(n) = a.hold_subscriptions {
        let prefix = a.topic.rsplit('/').next().unwrap_or(&a.topic);
        return match loadgen::subscribe_many(&a.url, prefix, n) {
            Ok((held, took)) => {
                println!(
                    "{}",
                    serde_json::json!({ "subscriptions": n, "subscribe_ms": took.as_secs_f64() * 1e3 })
                );
                std::thread::sleep(Duration::from_secs(a.hold_s));
                drop(held);
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("loadgen: {e}");
                ExitCode::from(2)
            }
        };
    }
    let producers = a.producers.max(1);
    let per_producer = (a.messages / producers as u64 / u64::from(a.batch.max(1))).max(1);
    let cfg = LoadConfig {
        producers,
        consumers: a.consumers.max(1),
        entries_per_producer: per_producer,
        batch: a.batch.max(1),
        msg_size: a.size,
        window_msgs: a.window,
        permits: a.permits,
        rate: a.rate,
        timeout: Duration::from_secs(a.timeout_s),
        sub_type: match a.sub_type {
            Sub::Shared => SubType::Shared,
            Sub::KeyShared => SubType::KeyShared,
        },
        keys: a.keys,
        ..LoadConfig::default()
    };
    match loadgen::run(&a.url, &a.topic, &cfg) {
        Ok(r) => {
            let line = serde_json::json!({
                "messages": r.messages,
                "entries": r.entries,
                "elapsed_s": r.elapsed.as_secs_f64(),
                "msg_per_s": r.msg_per_sec(),
                "p50_ms": r.latency_ms(0.50),
                "p99_ms": r.latency_ms(0.99),
                "p999_ms": r.latency_ms(0.999),
                "max_ms": r.latency_ms(1.0),
            });
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("loadgen: {e}");
            ExitCode::from(2)
        }
    }
}
