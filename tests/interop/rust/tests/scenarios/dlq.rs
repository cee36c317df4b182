//! The crate's dead-letter policy (`DeadLetterPolicy { max_redeliver_count: 2, .. }`).
//!
//! The policy reads the broker's redelivery count on each MESSAGE: a delivery whose count is at
//! least 2 is not given to the application but published to the dead-letter topic (with the
//! `REAL_TOPIC` and `ORIGIN_MESSAGE_ID` properties) and acked. So the application must see the
//! nacked message exactly twice (counts 0 and 1) and the dead-letter consumer must get it once:
//! that checks that the broker counts redeliveries. A second message, acked at once, stays out
//! of the dead-letter topic. The crate has no retry-letter topic.

use std::time::{Duration, Instant};

use pulsar::{consumer::DeadLetterPolicy, SubType};
use pulsar_rs_interop::{
    admin,
    broker::Broker,
    client::{self, ack, close, drain, id_of, nack, recv, text, Sub},
    ensure, scenario,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letter_policy() {
    scenario::run("dead_letter_policy", |ctx| async move {
        let mut b = Broker::start(&ctx.log_dir, "broker", &[])?;
        let cl = client::client(&b.service_url).await?;
        let topic = client::unique_topic("dlq-src");
        let dlq_topic = format!("{topic}-DLQ");
        let mut dead = Sub::new(SubType::Shared, "dead").subscribe(&cl, &dlq_topic, "dlq-sub").await?;
        let b_ = cl
            .consumer()
            .with_topic(&topic)
            .with_subscription("sub")
            .with_subscription_type(SubType::Shared)
            .with_consumer_name("app")
            .with_batch_size(10)
            .with_dead_letter_policy(DeadLetterPolicy {
                max_redeliver_count: 2,
                dead_letter_topic: dlq_topic.clone(),
            })
            .with_options(
                pulsar::ConsumerOptions::default().with_initial_position(pulsar::consumer::InitialPosition::Earliest),
            );
        let mut app: client::Consumer = client::bounded("subscribe with a dead-letter policy", b_.build()).await?;
        let mut p = client::producer(&cl, &topic).await?;
        let poison_id = client::send(&mut p, "poison", None).await?;
        client::send(&mut p, "fine", None).await?;

        let mut poison_seen = 0;
        let mut fine_seen = 0;
        let end = Instant::now() + Duration::from_secs(8);
        while Instant::now() < end {
            let Some(m) = recv(&mut app, Duration::from_millis(1500)).await? else {
                break;
            };
            ctx.count(1);
            match text(&m).as_str() {
                "poison" => {
                    poison_seen += 1;
                    nack(&mut app, &m).await?;
                }
                "fine" => {
                    fine_seen += 1;
                    ack(&mut app, &m).await?;
                }
                other => anyhow::bail!("unexpected payload {other:?}"),
            }
        }
        ensure!(fine_seen == 1, "the acked message was delivered {fine_seen} times");
        ensure!(
            poison_seen == 2,
            "the nacked message reached the application {poison_seen} times, expected 2 (redelivery counts 0 \
             and 1; the delivery with count 2 goes to the dead-letter topic)"
        );
        let dl = drain(&mut dead, Duration::from_millis(1500), Duration::from_secs(5), 10).await?;
        ctx.count(dl.len() as u64);
        let payloads: Vec<String> = dl.iter().map(text).collect();
        ensure!(payloads == ["poison"], "the dead-letter topic got {payloads:?}, expected [\"poison\"]");
        let props: std::collections::HashMap<String, String> =
            dl[0].metadata().properties.iter().map(|kv| (kv.key.clone(), kv.value.clone())).collect();
        ensure!(props.get("REAL_TOPIC") == Some(&topic), "REAL_TOPIC {:?}, expected {topic}", props.get("REAL_TOPIC"));
        let origin = format!("{}:{}:-1", poison_id.ledger_id, poison_id.entry_id);
        ensure!(
            props.get("ORIGIN_MESSAGE_ID") == Some(&origin),
            "ORIGIN_MESSAGE_ID {:?}, expected {origin}",
            props.get("ORIGIN_MESSAGE_ID")
        );
        ack(&mut dead, &dl[0]).await?;
        let dead_id = id_of(&dl[0]);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let st = admin::get(&format!("{}/stats", admin::topic_path(&b.admin_url, &topic))).await?;
        let backlog = st["subscriptions"]["sub"]["msgBacklog"].as_i64();
        ensure!(backlog == Some(0), "the source subscription's backlog is {backlog:?} after the dead-lettering, expected 0");
        close(app).await?;
        close(dead).await?;
        p.close().await?;
        b.stop()?;
        Ok(format!(
            "nacked message seen {poison_seen} times by the application, then dead-lettered to {dead_id:?} with \
             REAL_TOPIC and ORIGIN_MESSAGE_ID={origin}; source backlog 0"
        ))
    })
    .await;
}
