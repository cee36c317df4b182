//! Nack and the crate's ack timeout.
//!
//! The crate's `nack` sends REDELIVER_UNACKNOWLEDGED_MESSAGES at once (it has no nack delay and
//! no redelivery backoff) and it does not show the redelivery count to the application (the
//! dead-letter scenario checks the count through the crate's dead-letter policy, which reads
//! it).
//! 1. One message is nacked twice: it comes back each time with the same id, then it is
//!    acked and nothing more arrives. The nack-to-redelivery latency is reported.
//! 2. Ack timeout (`with_unacked_message_resend_delay(1 s)`): a message received and not acked
//!    comes back by itself, not before 1 s; acked, nothing more arrives.

use std::time::{Duration, Instant};

use pulsar::SubType;
use pulsar_rs_interop::{
    anyhow,
    broker::Broker,
    client::{self, ack, close, drain, id_of, nack, recv, text, Sub},
    ensure, scenario,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nack_and_ack_timeout_redelivery() {
    scenario::run("nack_and_ack_timeout_redelivery", |ctx| async move {
        let mut b = Broker::start(&ctx.log_dir, "broker", &[])?;
        let cl = client::client(&b.service_url).await?;

        let topic = client::unique_topic("nack");
        let mut c = Sub::new(SubType::Shared, "c").prefetch(10).subscribe(&cl, &topic, "sub").await?;
        let mut p = client::producer(&cl, &topic).await?;
        let sent = client::send(&mut p, "nack-me", None).await?;
        let mut m = recv(&mut c, Duration::from_secs(3)).await?.ok_or_else(|| anyhow!("not delivered within 3 s"))?;
        ctx.count(1);
        let first_id = id_of(&m);
        ensure!(
            (first_id.0, first_id.1) == (sent.ledger_id, sent.entry_id),
            "received id {first_id:?}, the receipt said {}:{}",
            sent.ledger_id,
            sent.entry_id
        );
        let mut latencies = Vec::new();
        for round in 1..=2 {
            let t0 = Instant::now();
            nack(&mut c, &m).await?;
            m = recv(&mut c, Duration::from_secs(5))
                .await?
                .ok_or_else(|| anyhow!("no redelivery within 5 s of nack #{round}"))?;
            ctx.count(1);
            latencies.push(t0.elapsed().as_millis());
            ensure!(text(&m) == "nack-me", "redelivery #{round}: payload {:?}", text(&m));
            ensure!(id_of(&m) == first_id, "redelivery #{round}: id {:?}, was {first_id:?}", id_of(&m));
        }
        ack(&mut c, &m).await?;
        let extra = drain(&mut c, Duration::from_millis(500), Duration::from_secs(2), 10).await?;
        ensure!(extra.is_empty(), "{} more deliveries after the ack", extra.len());
        close(c).await?;

        let topic2 = client::unique_topic("ack-timeout");
        let mut sub = Sub::new(SubType::Shared, "c").prefetch(10);
        sub.ack_timeout = Some(Duration::from_secs(1));
        let mut c = sub.subscribe(&cl, &topic2, "sub").await?;
        let mut p2 = client::producer(&cl, &topic2).await?;
        client::send(&mut p2, "forgotten", None).await?;
        let m = recv(&mut c, Duration::from_secs(3)).await?.ok_or_else(|| anyhow!("not delivered within 3 s"))?;
        ctx.count(1);
        let t0 = Instant::now();
        let again = recv(&mut c, Duration::from_secs(5))
            .await?
            .ok_or_else(|| anyhow!("the unacked message did not come back within 5 s (ack timeout 1 s)"))?;
        ctx.count(1);
        let back_ms = t0.elapsed().as_millis();
        ensure!(id_of(&again) == id_of(&m), "a different message came back: {:?}", id_of(&again));
        ensure!(back_ms >= 900, "it came back after {back_ms} ms, before the 1 s ack timeout");
        ack(&mut c, &again).await?;
        let extra = drain(&mut c, Duration::from_millis(1500), Duration::from_secs(3), 10).await?;
        ensure!(extra.is_empty(), "{} more deliveries after the ack", extra.len());
        close(c).await?;
        p.close().await?;
        p2.close().await?;
        b.stop()?;
        Ok(format!(
            "nacked twice, redelivered with the same id after {} ms (immediate nack), acked, 0 extra; \
             ack timeout 1 s: back after {back_ms} ms, acked, 0 extra",
            latencies.iter().map(ToString::to_string).collect::<Vec<_>>().join(" / ")
        ))
    })
    .await;
}
