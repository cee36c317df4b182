//! Seed 002 with the crate: what per-key order a nack gives on Key_Shared.
//!
//! One key, messages m0..m(n-1), prefetch 10; the application nacks m0 the first time it sees
//! it and acks everything else right after processing it. The crate sends the nack at once
//! (REDELIVER_UNACKNOWLEDGED_MESSAGES, no delay) and its acks at once (no grouping).
//!
//! * `--key-shared-max-unacked-per-key 1` (key-serial): the broker sends the next message of
//!   the key only after the previous one is acked: m0, m0', m1, …, m29.
//! * Without it, and with `--legacy unordered-nack`: the messages already in the client's
//!   queue are processed before the redelivered m0', so m0' comes last.
//!
//! The crate does not show the redelivery count: a copy is marked `'` when its payload was
//! seen before.

use std::{
    collections::HashSet,
    time::{Duration, Instant},
};

use pulsar::SubType;
use pulsar_rs_interop::{
    broker::Broker,
    client::{self, ack, close, nack, recv, text, Sub},
    ensure, scenario, Result,
};

/// The application order and the gaps between consecutive deliveries (sorted).
async fn run_once(
    ctx: &scenario::Ctx,
    name: &str,
    flags: &[&str],
    n: usize,
) -> Result<(Vec<String>, Vec<Duration>)> {
    let mut b = Broker::start(&ctx.log_dir, name, flags)?;
    let cl = client::client(&b.service_url).await?;
    let topic = client::unique_topic("seed002");
    let mut c = Sub::new(SubType::KeyShared, "c")
        .prefetch(10)
        .subscribe(&cl, &topic, "ks")
        .await?;
    let mut p = client::producer(&cl, &topic).await?;
    for i in 0..n {
        client::send(&mut p, format!("m{i}"), Some("K")).await?;
    }
    let mut order = Vec::new();
    let mut seen = HashSet::new();
    let mut nacked = false;
    let mut gaps = Vec::new();
    let mut last = None;
    let end = Instant::now() + Duration::from_secs(20);
    while order.len() < n + 1 && Instant::now() < end {
        let Some(m) = recv(&mut c, Duration::from_millis(2000)).await? else {
            continue;
        };
        ctx.count(1);
        let now = Instant::now();
        if let Some(l) = last.replace(now) {
            gaps.push(now - l);
        }
        let t = text(&m);
        let label = if seen.insert(t.clone()) {
            t.clone()
        } else {
            format!("{t}'")
        };
        order.push(label);
        if !nacked && t == "m0" {
            nacked = true;
            nack(&mut c, &m).await?;
        } else {
            ack(&mut c, &m).await?;
        }
    }
    close(c).await?;
    p.close().await?;
    b.stop()?;
    gaps.sort();
    Ok((order, gaps))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_002_key_serial_nack_order() {
    scenario::run("seed_002_key_serial_nack_order", |ctx| async move {
        let n = 30;
        let (order, gaps) = run_once(&ctx, "broker-serial", &["--key-shared-max-unacked-per-key", "1"], n).await?;
        let want: Vec<String> = ["m0".to_owned(), "m0'".to_owned()].into_iter().chain((1..n).map(|i| format!("m{i}"))).collect();
        ensure!(order == want, "key-serial: application order {order:?}, expected {want:?}");
        Ok(format!(
            "key-serial order m0 m0' m1..m{} ({} deliveries; delivery to delivery with the crate's immediate \
             acks: median {:.1} ms, max {:.1} ms)",
            n - 1,
            order.len(),
            gaps.get(gaps.len() / 2).map_or(0.0, |d| d.as_secs_f64() * 1000.0),
            gaps.last().map_or(0.0, |d| d.as_secs_f64() * 1000.0)
        ))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_002_nack_order_without_key_serial() {
    scenario::run("seed_002_nack_order_without_key_serial", |ctx| async move {
        let (order, _) = run_once(&ctx, "broker-plain", &[], 10).await?;
        ensure!(
            order.first().map(String::as_str) == Some("m0")
                && order.last().map(String::as_str) == Some("m0'"),
            "without key-serial: expected m0 first and m0' last, got {order:?}"
        );
        Ok(format!("without key-serial: {}", order.join(" ")))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_002_legacy_unordered_nack() {
    scenario::run("seed_002_legacy_unordered_nack", |ctx| async move {
        let flags = [
            "--key-shared-max-unacked-per-key",
            "1",
            "--legacy",
            "unordered-nack",
        ];
        let (order, _) = run_once(&ctx, "broker-legacy", &flags, 10).await?;
        ensure!(
            order.last().map(String::as_str) == Some("m0'"),
            "with --legacy unordered-nack: expected m0' last, got {order:?}"
        );
        Ok(format!("--legacy unordered-nack: {}", order.join(" ")))
    })
    .await;
}
