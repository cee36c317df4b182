//! CONSUMER_STATS over the binary protocol: the crate's `Consumer::get_stats()` asks the broker
//! for one consumer's figures (CONSUMER_STATS_RESPONSE). A Shared consumer holding 3 unacked
//! messages must see itself named, its type, a backlog of 3 and 3 unacked; after it acks them
//! (and the subscription's backlog, read from the admin API, is 0) it sees a backlog of 0 and
//! nothing unacked. The broker leaves the rates out (not tracked per consumer).

use std::time::{Duration, Instant};

use pulsar::{proto::CommandConsumerStatsResponse, SubType};
use pulsar_rs_interop::{
    admin,
    broker::Broker,
    client::{self, ack, close, recv_n, Consumer, Sub},
    ensure, scenario, Result,
};

/// The one CONSUMER_STATS_RESPONSE of a single-topic consumer, which must carry no error.
async fn stats(c: &mut Consumer) -> Result<CommandConsumerStatsResponse> {
    let mut all = client::bounded("get_stats", c.get_stats()).await?;
    ensure!(
        all.len() == 1,
        "get_stats returned {} responses, expected 1",
        all.len()
    );
    let s = all.remove(0);
    ensure!(
        s.error_code.is_none(),
        "CONSUMER_STATS_RESPONSE with error {:?}: {:?}",
        s.error_code,
        s.error_message
    );
    Ok(s)
}

/// A field of the response as text, `-` when the broker left it out.
fn shown<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref().map_or_else(|| "-".to_owned(), |x| x.to_string())
}

/// The subscription's `msgBacklog` from the admin API's topic stats.
async fn backlog(admin_url: &str, topic: &str, sub: &str) -> Result<Option<i64>> {
    let st = admin::get(&format!("{}/stats", admin::topic_path(admin_url, topic))).await?;
    Ok(st["subscriptions"][sub]["msgBacklog"].as_i64())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_stats() {
    scenario::run("consumer_stats", |ctx| async move {
        let mut b = Broker::start(&ctx.log_dir, "broker", &[])?;
        let cl = client::client(&b.service_url).await?;
        let topic = client::unique_topic("consumer-stats");
        let mut c = Sub::new(SubType::Shared, "stats-c")
            .subscribe(&cl, &topic, "sub")
            .await?;
        let mut p = client::producer(&cl, &topic).await?;
        for i in 0..3 {
            client::send(&mut p, format!("m{i}"), None).await?;
        }
        let got = recv_n(
            &mut c,
            3,
            Duration::from_secs(5),
            Duration::from_millis(300),
        )
        .await?;
        ctx.count(got.len() as u64);
        ensure!(got.len() == 3, "the consumer got {} of 3", got.len());

        let s = stats(&mut c).await?;
        ensure!(
            s.consumer_name.as_deref() == Some("stats-c"),
            "consumer_name {:?}, expected \"stats-c\"",
            s.consumer_name
        );
        ensure!(
            s.r#type.as_deref() == Some("Shared"),
            "type {:?}, expected \"Shared\"",
            s.r#type
        );
        ensure!(
            s.msg_backlog == Some(3),
            "msg_backlog {:?} with 3 unacked messages, expected 3",
            s.msg_backlog
        );
        ensure!(
            s.unacked_messages == Some(3),
            "unacked_messages {:?} with 3 received and none acked, expected 3",
            s.unacked_messages
        );
        let held = format!(
            "holding 3: backlog 3, unacked 3, type Shared, permits {}, blocked {}, address {}, \
             connected since {}",
            shown(&s.available_permits),
            shown(&s.blocked_consumer_on_unacked_msgs),
            shown(&s.address),
            shown(&s.connected_since)
        );

        for m in &got {
            ack(&mut c, m).await?;
        }
        let end = Instant::now() + Duration::from_secs(5);
        let mut left = backlog(&b.admin_url, &topic, "sub").await?;
        while left != Some(0) && Instant::now() < end {
            tokio::time::sleep(Duration::from_millis(100)).await;
            left = backlog(&b.admin_url, &topic, "sub").await?;
        }
        ensure!(
            left == Some(0),
            "the admin API's backlog is {left:?} 5 s after the 3 acks, expected 0"
        );
        let s = stats(&mut c).await?;
        ensure!(
            s.msg_backlog == Some(0),
            "msg_backlog {:?} after the 3 acks (the admin API says 0), expected 0",
            s.msg_backlog
        );
        ensure!(
            s.unacked_messages == Some(0),
            "unacked_messages {:?} after the 3 acks, expected 0",
            s.unacked_messages
        );
        close(c).await?;
        p.close().await?;
        b.stop()?;
        Ok(format!("{held}; after 3 acks: backlog 0, unacked 0"))
    })
    .await;
}
