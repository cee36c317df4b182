//! Seed 001: on Shared, a chunked message whose first chunk was acknowledged before a broker
//! restart. Its later chunks have no message start any more; Pulsar replays them forever and the
//! subscription stalls (`--legacy orphan-chunk-replay` shows that). Ours dispatches them once,
//! with a WARN, counts them (`orphanChunksDispatched`,
//! `keyordered_subscription_orphan_chunks_total`) and keeps delivering.
//!
//! The crate's Producer cannot chunk, so the chunked message (25,600 B in 3 chunks of at most
//! 8,600 B; broker `--max-message-size 10240`) is written with the crate's own codec
//! (`pulsar_rs_interop::chunks`). Then, as in the Python scenario:
//! 1. a Shared consumer subscribes (creating the durable subscription) and closes, then the 3
//!    chunks are sent: entries 0, 1, 2; nobody receives them;
//! 2. `POST …/subscription/sh/skip/1` moves mark-delete past entry 0 exactly as an ack of chunk
//!    0 would (checked in internalStats);
//! 3. the broker is stopped (SIGTERM: cursors persisted) and started again on the same data
//!    dir and ports;
//! 4. a Shared consumer subscribes and 5 plain messages are produced.
//!
//! Ours: the 5 plain messages arrive; stats and metrics count at least one orphan chunk. The
//! crate has no chunk reassembly, so it hands the orphan chunks to the application as plain
//! messages (counted and reported). Legacy: none of the 5 arrives within 4 s.

use std::time::{Duration, Instant};

use pulsar::SubType;
use pulsar_rs_interop::{
    admin,
    broker::Broker,
    chunks,
    client::{self, ack, close, recv, text, Sub},
    ensure, scenario, Result,
};

const CHUNKED: usize = 25_600;
const CHUNK: usize = 8_600;
const PLAIN: usize = 5;

struct Case {
    plain: usize,
    chunk_deliveries: usize,
    other: usize,
    orphans: i64,
    metric: Option<f64>,
    mark_delete: String,
}

async fn run_case(ctx: &scenario::Ctx, legacy: bool) -> Result<Case> {
    let tag = if legacy { "legacy" } else { "ours" };
    let data = ctx.log_dir.join(format!("data-{tag}"));
    let mut flags = vec!["--max-message-size", "10240"];
    if legacy {
        flags.extend(["--legacy", "orphan-chunk-replay"]);
    }
    let mut b = Broker::restartable(&ctx.log_dir, &format!("broker-{tag}"), &data, &flags)?;
    let topic = client::unique_topic(&format!("seed001-{tag}"));
    let tp = admin::topic_path(&b.admin_url, &topic);
    {
        let cl = client::client(&b.service_url).await?;
        close(
            Sub::new(SubType::Shared, "c")
                .subscribe(&cl, &topic, "sh")
                .await?,
        )
        .await?;
    }
    let ids =
        chunks::send_chunked(b.service_addr(), &topic, &chunks::body(CHUNKED, 7), CHUNK).await?;
    ensure!(
        ids.len() == 3,
        "{tag}: {} chunks sent, expected 3",
        ids.len()
    );
    let st = admin::get(&format!("{tp}/internalStats")).await?;
    ensure!(
        st["entriesAddedCounter"].as_i64() == Some(3),
        "{tag}: expected 3 chunk entries, internalStats says {}",
        st["entriesAddedCounter"]
    );
    admin::post(&format!("{tp}/subscription/sh/skip/1"), None).await?;
    let st = admin::get(&format!("{tp}/internalStats")).await?;
    let mark_delete = st["cursors"]["sh"]["markDeletePosition"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    let want = format!("{}:{}", ids[0].0, ids[0].1);
    ensure!(
        mark_delete == want,
        "{tag}: mark-delete {mark_delete:?} after skip/1, expected the first chunk {want}"
    );

    b.restart()?;
    let cl = client::client(&b.service_url).await?;
    let mut c = Sub::new(SubType::Shared, "c")
        .subscribe(&cl, &topic, "sh")
        .await?;
    let mut p = client::producer(&cl, &topic).await?;
    for i in 0..PLAIN {
        client::send(&mut p, format!("m{i}"), None).await?;
    }
    let (mut plain, mut chunk_deliveries, mut other) = (0, 0, 0);
    let end = Instant::now()
        + if legacy {
            Duration::from_secs(4)
        } else {
            Duration::from_secs(8)
        };
    while plain < PLAIN && Instant::now() < end {
        let Some(m) = recv(&mut c, Duration::from_millis(200)).await? else {
            continue;
        };
        ctx.count(1);
        if m.metadata().chunk_id.is_some() {
            chunk_deliveries += 1;
        } else if text(&m).starts_with('m') && m.payload.data.len() < 10 {
            plain += 1;
        } else {
            other += 1;
        }
        ack(&mut c, &m).await?;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stats = admin::get(&format!("{tp}/stats")).await?;
    let orphans = stats["subscriptions"]["sh"]["orphanChunksDispatched"]
        .as_i64()
        .unwrap_or(0);
    let metric = admin::metric(
        &b.admin_url,
        "keyordered_subscription_orphan_chunks_total",
        "subscription=\"sh\"",
    )
    .await?
    .into_iter()
    .reduce(f64::max);
    close(c).await?;
    p.close().await?;
    b.stop()?;
    let _ = std::fs::remove_dir_all(&data);
    Ok(Case {
        plain,
        chunk_deliveries,
        other,
        orphans,
        metric,
        mark_delete,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_001_orphan_chunk_delivers() {
    scenario::run("seed_001_orphan_chunk_delivers", |ctx| async move {
        let c = run_case(&ctx, false).await?;
        ensure!(c.plain == PLAIN, "{} of {PLAIN} plain messages arrived after the restart (the subscription stalled?)", c.plain);
        ensure!(c.other == 0, "the client surfaced {} unexpected messages", c.other);
        ensure!(c.orphans >= 1, "stats orphanChunksDispatched={}", c.orphans);
        ensure!(c.metric.is_some_and(|m| m >= 1.0), "/metrics keyordered_subscription_orphan_chunks_total={:?}", c.metric);
        Ok(format!(
            "chunked {CHUNKED} B in 3 chunks, chunk 0 skipped (mark-delete {}), restart: {}/{PLAIN} plain delivered; \
             orphanChunksDispatched={}, metric={}; the crate handed {} orphan chunk(s) to the application as messages",
            c.mark_delete,
            c.plain,
            c.orphans,
            c.metric.unwrap_or(0.0),
            c.chunk_deliveries
        ))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_001_orphan_chunk_legacy_stalls() {
    scenario::run("seed_001_orphan_chunk_legacy_stalls", |ctx| async move {
        let c = run_case(&ctx, true).await?;
        ensure!(
            c.plain == 0,
            "{} plain messages arrived: --legacy orphan-chunk-replay should stall the subscription",
            c.plain
        );
        Ok(format!(
            "--legacy orphan-chunk-replay: 0/{PLAIN} plain delivered in 4 s (stalled; {} chunk deliveries)",
            c.chunk_deliveries
        ))
    })
    .await;
}
