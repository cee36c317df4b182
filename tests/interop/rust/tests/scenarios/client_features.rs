//! Smaller client features, all on one broker:
//! * an Exclusive subscription refuses a second consumer (`ConsumerBusy`; the crate retries it
//!   a few times, then fails);
//! * a second producer with a connected producer's name is refused (`ProducerBusy`);
//! * key, properties and event time survive the round trip;
//! * cumulative ack on Exclusive: after acking #2 cumulatively and reconnecting, #3 and #4
//!   come back, #0..#2 do not;
//! * a multi-topic consumer (`with_topics`) gets the messages of both topics;
//! * two subscriptions on one topic each get every message.

use std::{collections::BTreeSet, time::Duration};

use pulsar::SubType;
use pulsar_rs_interop::{
    anyhow,
    broker::Broker,
    client::{self, ack, close, recv, recv_n, text, Sub},
    ensure, scenario,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_features() {
    scenario::run("client_features", |ctx| async move {
        let mut b = Broker::start(&ctx.log_dir, "broker", &[])?;
        let cl = client::client(&b.service_url).await?;
        let mut checks = Vec::new();

        // Exclusive: a second consumer is refused.
        let topic = client::unique_topic("exclusive");
        let first = Sub::new(SubType::Exclusive, "x1")
            .subscribe(&cl, &topic, "ex")
            .await?;
        let second = Sub::new(SubType::Exclusive, "x2")
            .subscribe(&cl, &topic, "ex")
            .await;
        let err = match second {
            Ok(c) => {
                close(c).await?;
                anyhow::bail!("a second consumer on an Exclusive subscription was accepted");
            }
            Err(e) => e.to_string(),
        };
        ensure!(
            err.contains("ConsumerBusy"),
            "the second Exclusive consumer failed with {err}, expected ConsumerBusy"
        );
        close(first).await?;
        checks.push("exclusive: 2nd consumer ConsumerBusy");

        // Producer names are unique while connected.
        let topic = client::unique_topic("names");
        let named = || cl.producer().with_topic(&topic).with_name("the-one");
        let mut p1 = client::bounded("producer the-one", named().build()).await?;
        let dup = client::bounded("2nd producer the-one", named().build()).await;
        ensure!(dup.is_err(), "a second producer named the-one was accepted");
        let err = dup.err().map(|e| e.to_string()).unwrap_or_default();
        ensure!(
            err.contains("ProducerBusy"),
            "the second producer failed with {err}, expected ProducerBusy"
        );
        p1.close().await?;
        let mut again = client::bounded("producer the-one after close", named().build()).await?;
        again.close().await?;
        checks.push("producer name: 2nd ProducerBusy, free after close");

        // Key, properties, event time.
        let topic = client::unique_topic("meta");
        let mut c = Sub::new(SubType::Shared, "c")
            .subscribe(&cl, &topic, "sub")
            .await?;
        let mut p = client::producer(&cl, &topic).await?;
        let m = p
            .create_message()
            .with_content("hello".to_owned())
            .with_key("k-1")
            .with_property("color", "teal")
            .event_time(123_456);
        let f = client::bounded("send", m.send_non_blocking()).await?;
        client::bounded("receipt", f).await?;
        let m = recv(&mut c, Duration::from_secs(5))
            .await?
            .ok_or_else(|| anyhow!("no message"))?;
        ctx.count(1);
        ensure!(text(&m) == "hello", "payload {:?}", text(&m));
        ensure!(m.key().as_deref() == Some("k-1"), "key {:?}", m.key());
        let color = m
            .metadata()
            .properties
            .iter()
            .find(|kv| kv.key == "color")
            .map(|kv| kv.value.clone());
        ensure!(color.as_deref() == Some("teal"), "property color={color:?}");
        ensure!(
            m.metadata().event_time == Some(123_456),
            "event_time {:?}",
            m.metadata().event_time
        );
        ack(&mut c, &m).await?;
        close(c).await?;
        p.close().await?;
        checks.push("key, properties, event time kept");

        // Cumulative ack on Exclusive.
        let topic = client::unique_topic("cumulative");
        let mut c = Sub::new(SubType::Exclusive, "c")
            .subscribe(&cl, &topic, "sub")
            .await?;
        let mut p = client::producer(&cl, &topic).await?;
        for i in 0..5 {
            client::send(&mut p, format!("m{i}"), None).await?;
        }
        let got = recv_n(
            &mut c,
            5,
            Duration::from_secs(5),
            Duration::from_millis(300),
        )
        .await?;
        ctx.count(got.len() as u64);
        ensure!(got.len() == 5, "got {} of 5", got.len());
        c.cumulative_ack(&got[2])
            .await
            .map_err(|e| anyhow!("cumulative ack: {e}"))?;
        close(c).await?;
        let mut c = Sub::new(SubType::Exclusive, "c")
            .subscribe(&cl, &topic, "sub")
            .await?;
        let rest = recv_n(
            &mut c,
            2,
            Duration::from_secs(5),
            Duration::from_millis(500),
        )
        .await?;
        ctx.count(rest.len() as u64);
        let names: Vec<String> = rest.iter().map(text).collect();
        ensure!(
            names == ["m3", "m4"],
            "after a cumulative ack of m2 the consumer got {names:?}"
        );
        for m in &rest {
            ack(&mut c, m).await?;
        }
        close(c).await?;
        p.close().await?;
        checks.push("cumulative ack");

        // Multi-topic consumer.
        let t1 = client::unique_topic("multi-a");
        let t2 = format!("{t1}-b");
        let mt = cl
            .consumer()
            .with_topics([&t1, &t2])
            .with_subscription("multi")
            .with_subscription_type(SubType::Shared)
            .with_options(
                pulsar::ConsumerOptions::default()
                    .with_initial_position(pulsar::consumer::InitialPosition::Earliest),
            );
        let mut mc: client::Consumer = client::bounded("multi-topic subscribe", mt.build()).await?;
        for t in [&t1, &t2] {
            let mut p = client::producer(&cl, t).await?;
            for i in 0..3 {
                client::send(&mut p, format!("{t}#{i}"), None).await?;
            }
            p.close().await?;
        }
        let got = recv_n(
            &mut mc,
            6,
            Duration::from_secs(5),
            Duration::from_millis(300),
        )
        .await?;
        ctx.count(got.len() as u64);
        let topics: BTreeSet<String> = got.iter().map(|m| m.topic.clone()).collect();
        ensure!(
            got.len() == 6 && topics.len() == 2,
            "multi-topic consumer got {} from {topics:?}",
            got.len()
        );
        for m in &got {
            ack(&mut mc, m).await?;
        }
        close(mc).await?;
        checks.push("multi-topic consumer");

        // Two subscriptions each get everything.
        let topic = client::unique_topic("two-subs");
        let mut s1 = Sub::new(SubType::Shared, "s1")
            .subscribe(&cl, &topic, "one")
            .await?;
        let mut s2 = Sub::new(SubType::Shared, "s2")
            .subscribe(&cl, &topic, "two")
            .await?;
        let mut p = client::producer(&cl, &topic).await?;
        for i in 0..20 {
            client::send(&mut p, format!("m{i}"), None).await?;
        }
        for (n, s) in [("one", &mut s1), ("two", &mut s2)] {
            let got = recv_n(s, 20, Duration::from_secs(5), Duration::from_millis(300)).await?;
            ctx.count(got.len() as u64);
            ensure!(got.len() == 20, "subscription {n} got {} of 20", got.len());
            for m in &got {
                ack(s, m).await?;
            }
        }
        close(s1).await?;
        close(s2).await?;
        p.close().await?;
        checks.push("two subscriptions x 20");
        b.stop()?;
        Ok(checks.join("; "))
    })
    .await;
}
