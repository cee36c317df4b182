//! Shared, three consumers (one client and one task each, prefetch 20), 300 messages.
//!
//! Every message is received and acked, all three consumers get some, none is lost and none
//! comes twice (nothing here asks for a redelivery); afterwards a fresh consumer on the
//! subscription gets nothing.

use std::{
    collections::HashSet,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use pulsar::SubType;
use pulsar_rs_interop::{
    broker::Broker,
    client::{self, ack, close, drain, recv, text, Sub},
    ensure, scenario,
};

const N: usize = 300;
const CONSUMERS: usize = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_three_consumers() {
    scenario::run("shared_three_consumers", |ctx| async move {
        let mut b = Broker::start(&ctx.log_dir, "broker", &[])?;
        let topic = client::unique_topic("shared");
        let total = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for i in 0..CONSUMERS {
            let cl = client::client(&b.service_url).await?;
            let mut cons = Sub::new(SubType::Shared, &format!("c{i}"))
                .prefetch(20)
                .subscribe(&cl, &topic, "sub")
                .await?;
            let total = total.clone();
            tasks.push(tokio::spawn(async move {
                let mut got = Vec::new();
                let end = Instant::now() + Duration::from_secs(30);
                while Instant::now() < end && total.load(Ordering::SeqCst) < N {
                    if let Some(m) = recv(&mut cons, Duration::from_millis(200)).await? {
                        got.push(text(&m));
                        ack(&mut cons, &m).await?;
                        total.fetch_add(1, Ordering::SeqCst);
                    }
                }
                close(cons).await?;
                drop(cl);
                Ok::<_, anyhow::Error>(got)
            }));
        }
        let pc = client::client(&b.service_url).await?;
        let mut p = client::producer(&pc, &topic).await?;
        // The crate's producer queue holds 100 pending sends: send in windows of 50.
        for w in 0..N / 50 {
            let mut pending = Vec::new();
            for i in w * 50..(w + 1) * 50 {
                pending.push(client::bounded("send", p.send_non_blocking(format!("m-{i}"))).await?);
            }
            for f in pending {
                client::bounded("receipt", f).await?;
            }
        }
        let mut per = Vec::new();
        let mut all = Vec::new();
        for t in tasks {
            let got = t.await??;
            per.push(got.len());
            all.extend(got);
        }
        ctx.count(all.len() as u64);
        let distinct: HashSet<&String> = all.iter().collect();
        let missing: Vec<String> = (0..N)
            .map(|i| format!("m-{i}"))
            .filter(|m| !distinct.contains(m))
            .collect();
        ensure!(
            missing.is_empty(),
            "{} messages never received, e.g. {:?}",
            missing.len(),
            &missing[..missing.len().min(5)]
        );
        ensure!(
            all.len() == N,
            "{} deliveries for {N} messages: {} duplicates (no redelivery was asked for)",
            all.len(),
            all.len() - N
        );
        ensure!(
            per.iter().all(|&n| n > 0),
            "not spread over the consumers: {per:?}"
        );

        let late = Sub::new(SubType::Shared, "late")
            .subscribe(&pc, &topic, "sub")
            .await?;
        let mut late = late;
        let extra = drain(
            &mut late,
            Duration::from_millis(700),
            Duration::from_secs(3),
            100,
        )
        .await?;
        ensure!(
            extra.is_empty(),
            "{} messages redelivered after every ack, e.g. {:?}",
            extra.len(),
            text(&extra[0])
        );
        close(late).await?;
        p.close().await?;
        b.stop()?;
        Ok(format!(
            "{N} sent, {} received+acked ({} over {CONSUMERS} consumers), 0 lost, 0 duplicates",
            all.len(),
            per.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("/")
        ))
    })
    .await;
}
