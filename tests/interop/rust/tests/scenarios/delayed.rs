//! Delayed delivery with the crate's `MessageBuilder::delay` (it sets `deliver_at_time`; the
//! crate's producer does not batch by default). The broker's defaults: strict, tick 1000 ms.
//!
//! * Shared, two consumers: 5 messages delayed 1.5 s between 5 plain ones; the plain ones
//!   arrive at once, no delayed one before its deliver-at time (same clock: the broker and the
//!   client run on this machine).
//! * Key_Shared, one key: m0 delayed 1 s, then m1..m4; the application gets m1..m4, then m0,
//!   not before its time (a delayed message holds no key, as in Pulsar).
//! * Exclusive: a message delayed 5 s arrives at once (Pulsar delays only Shared and
//!   Key_Shared).
//! * Restart: with `--data-dir`, a message delayed 2 s, the broker stopped and started again
//!   before that: it arrives after the restart, not before its time.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use pulsar::SubType;
use pulsar_rs_interop::{
    anyhow,
    broker::Broker,
    client::{self, ack, close, now_ms, recv, text, Sub},
    ensure, scenario, Result,
};

async fn send_delayed(
    p: &mut client::Producer,
    payload: &str,
    key: Option<&str>,
    delay: Option<Duration>,
) -> Result<()> {
    let mut m = p.create_message().with_content(payload.to_owned());
    if let Some(k) = key {
        m = m.with_key(k);
    }
    if let Some(d) = delay {
        m = m.delay(d)?;
    }
    let f = client::bounded("send", m.send_non_blocking()).await?;
    client::bounded("receipt", f).await?;
    Ok(())
}

/// (payload, arrival ms, deliver_at_time or None, publish time)
type Arrival = (String, u64, Option<i64>, u64);

fn arrival(m: &client::Msg) -> Arrival {
    (
        text(m),
        now_ms(),
        m.metadata().deliver_at_time,
        m.metadata().publish_time,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayed_shared() {
    scenario::run("delayed_shared", |ctx| async move {
        let mut b = Broker::start(&ctx.log_dir, "broker", &[])?;
        let cl = client::client(&b.service_url).await?;
        let topic = client::unique_topic("delayed-shared");
        let got: Arc<Mutex<Vec<Arrival>>> = Arc::default();
        let mut tasks = Vec::new();
        for i in 0..2 {
            let mut c = Sub::new(SubType::Shared, &format!("c{i}"))
                .prefetch(10)
                .subscribe(&cl, &topic, "sub")
                .await?;
            let got = got.clone();
            tasks.push(tokio::spawn(async move {
                let end = Instant::now() + Duration::from_secs(8);
                while Instant::now() < end && got.lock().expect("lock").len() < 10 {
                    if let Some(m) = recv(&mut c, Duration::from_millis(100)).await? {
                        got.lock().expect("lock").push(arrival(&m));
                        ack(&mut c, &m).await?;
                    }
                }
                close(c).await?;
                Ok::<_, anyhow::Error>(())
            }));
        }
        let mut p = client::producer(&cl, &topic).await?;
        for i in 0..10u32 {
            let delay = i.is_multiple_of(2).then_some(Duration::from_millis(1500));
            send_delayed(&mut p, &format!("m{i}"), None, delay).await?;
        }
        for t in tasks {
            t.await??;
        }
        let got = got.lock().expect("lock").clone();
        ctx.count(got.len() as u64);
        ensure!(
            got.len() == 10,
            "{} of 10 messages arrived: {:?}",
            got.len(),
            got.iter().map(|a| &a.0).collect::<Vec<_>>()
        );
        let (mut late, mut plain_wait) = (Vec::new(), Vec::new());
        for (name, at, deliver_at, published) in &got {
            let i: u32 = name[1..].parse()?;
            if i.is_multiple_of(2) {
                let due = deliver_at
                    .ok_or_else(|| anyhow!("{name}: no deliver_at_time in its metadata"))?
                    as u64;
                ensure!(
                    *at >= due,
                    "{name} arrived {} ms before its deliver-at time",
                    due - at
                );
                late.push(at - due);
            } else {
                ensure!(
                    deliver_at.is_none(),
                    "{name} (plain) carries deliver_at_time {deliver_at:?}"
                );
                plain_wait.push(at.saturating_sub(*published));
            }
        }
        let max_plain = plain_wait.iter().copied().max().unwrap_or(0);
        ensure!(max_plain < 1000, "a plain message waited {max_plain} ms");
        p.close().await?;
        b.stop()?;
        Ok(format!(
            "5 of 5 delayed after their time (at most {} ms late); plain within {max_plain} ms",
            late.iter().max().unwrap_or(&0)
        ))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayed_key_shared() {
    scenario::run("delayed_key_shared", |ctx| async move {
        let mut b = Broker::start(&ctx.log_dir, "broker", &[])?;
        let cl = client::client(&b.service_url).await?;
        let topic = client::unique_topic("delayed-ks");
        let mut c = Sub::new(SubType::KeyShared, "c")
            .prefetch(10)
            .subscribe(&cl, &topic, "sub")
            .await?;
        let mut p = client::producer(&cl, &topic).await?;
        send_delayed(&mut p, "m0", Some("k"), Some(Duration::from_millis(1000))).await?;
        for i in 1..5 {
            send_delayed(&mut p, &format!("m{i}"), Some("k"), None).await?;
        }
        let mut got = Vec::new();
        let end = Instant::now() + Duration::from_secs(8);
        while got.len() < 5 && Instant::now() < end {
            if let Some(m) = recv(&mut c, Duration::from_millis(500)).await? {
                got.push(arrival(&m));
                ack(&mut c, &m).await?;
            }
        }
        ctx.count(got.len() as u64);
        let order: Vec<&str> = got.iter().map(|a| a.0.as_str()).collect();
        ensure!(order == ["m1", "m2", "m3", "m4", "m0"], "order {order:?}");
        let (_, at, due, _) = &got[4];
        let due = due.ok_or_else(|| anyhow!("m0 without deliver_at_time"))? as u64;
        ensure!(*at >= due, "m0 arrived {} ms early", due - at);
        close(c).await?;
        p.close().await?;
        b.stop()?;
        Ok(format!(
            "order {} (m0 {} ms after its time)",
            order.join(" "),
            at - due
        ))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayed_exclusive_at_once() {
    scenario::run("delayed_exclusive_at_once", |ctx| async move {
        let mut b = Broker::start(&ctx.log_dir, "broker", &[])?;
        let cl = client::client(&b.service_url).await?;
        let topic = client::unique_topic("delayed-excl");
        let mut c = Sub::new(SubType::Exclusive, "c")
            .subscribe(&cl, &topic, "sub")
            .await?;
        let mut p = client::producer(&cl, &topic).await?;
        let t0 = Instant::now();
        send_delayed(&mut p, "now", None, Some(Duration::from_secs(5))).await?;
        let m = recv(&mut c, Duration::from_secs(3)).await?.ok_or_else(|| {
            anyhow!("a delayed message was held on Exclusive (Pulsar dispatches it at once)")
        })?;
        ctx.count(1);
        let ms = t0.elapsed().as_millis();
        ack(&mut c, &m).await?;
        close(c).await?;
        p.close().await?;
        b.stop()?;
        Ok(format!("a message delayed 5 s arrived after {ms} ms"))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayed_after_restart() {
    scenario::run("delayed_after_restart", |ctx| async move {
        let data = ctx.log_dir.join("data");
        let mut b = Broker::restartable(&ctx.log_dir, "broker", &data, &[])?;
        let topic = client::unique_topic("delayed-restart");
        {
            let cl = client::client(&b.service_url).await?;
            close(
                Sub::new(SubType::Shared, "c")
                    .subscribe(&cl, &topic, "sub")
                    .await?,
            )
            .await?;
            let mut p = client::producer(&cl, &topic).await?;
            send_delayed(&mut p, "later", None, Some(Duration::from_millis(2000))).await?;
            p.close().await?;
        }
        let sent_at = now_ms();
        b.restart()?;
        let restarted_after = now_ms() - sent_at;
        ensure!(
            restarted_after < 2000,
            "the restart took {restarted_after} ms, longer than the delay"
        );
        let cl = client::client(&b.service_url).await?;
        let mut c = Sub::new(SubType::Shared, "c")
            .subscribe(&cl, &topic, "sub")
            .await?;
        let m = recv(&mut c, Duration::from_secs(8)).await?.ok_or_else(|| {
            anyhow!("the delayed message did not arrive within 8 s of the restart")
        })?;
        ctx.count(1);
        let (name, at, due, _) = arrival(&m);
        ensure!(name == "later", "got {name:?}");
        let due = due.ok_or_else(|| anyhow!("no deliver_at_time after the restart"))? as u64;
        ensure!(at >= due, "arrived {} ms early", due - at);
        ack(&mut c, &m).await?;
        close(c).await?;
        b.stop()?;
        let _ = std::fs::remove_dir_all(&data);
        Ok(format!(
            "restarted {restarted_after} ms after the send; arrived {} ms after its time",
            at - due
        ))
    })
    .await;
}
