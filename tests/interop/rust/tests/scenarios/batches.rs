//! Batches with the crate, which has no batch-index acknowledgement.
//!
//! A producer with `batch_size: 5` sends 5 messages with one key: one entry, batch indexes
//! 0..4. The crate acks a message of a batch with its id (batch index set, no `ack_set`), which
//! Pulsar's broker reads as an ack of the whole entry:
//! 1. c1 receives the 5, acks index 0 only and closes; c2 then gets nothing (the entry is
//!    acked: indexes 1..4 are gone, as with Pulsar for a client without batch-index acks);
//! 2. a second batch: c2 nacks index 2 and holds the others (the crate names that id in its
//!    redelivery request); the broker redelivers the whole entry, so c2 sees all 5 again; it
//!    acks them and a third consumer gets nothing.

use std::time::Duration;

use pulsar::{ProducerOptions, SubType};
use pulsar_rs_interop::{
    broker::Broker,
    client::{self, ack, close, drain, id_of, nack, recv_n, text, Msg, Sub},
    ensure, scenario, Result,
};

async fn send_batch(p: &mut client::Producer, tag: &str) -> Result<()> {
    let mut pending = Vec::new();
    for i in 0..5 {
        let m = p
            .create_message()
            .with_content(format!("{tag}-{i}"))
            .with_key("kb");
        pending.push(client::bounded("send", m.send_non_blocking()).await?);
    }
    for f in pending {
        client::bounded("receipt", f).await?;
    }
    Ok(())
}

fn one_entry(msgs: &[Msg]) -> Result<(u64, u64)> {
    let ids: Vec<(u64, u64, i32)> = msgs.iter().map(id_of).collect();
    let entries: std::collections::BTreeSet<(u64, u64)> =
        ids.iter().map(|&(l, e, _)| (l, e)).collect();
    ensure!(
        entries.len() == 1,
        "the 5 messages are not one entry: {ids:?}"
    );
    let idx: Vec<i32> = ids.iter().map(|&(_, _, i)| i).collect();
    ensure!(idx == [0, 1, 2, 3, 4], "batch indexes {idx:?}");
    Ok(*entries.iter().next().expect("one"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_ack_without_batch_index_ack() {
    scenario::run("batch_ack_without_batch_index_ack", |ctx| async move {
        let mut b = Broker::start(&ctx.log_dir, "broker", &[])?;
        let topic = client::unique_topic("batch");
        let cl = client::client(&b.service_url).await?;
        let mut c1 = Sub::new(SubType::Shared, "c1").subscribe(&cl, &topic, "sub").await?;
        let opts = ProducerOptions {
            batch_size: Some(5),
            batch_timeout: Some(Duration::from_secs(2)),
            ..Default::default()
        };
        let mut p = client::producer_with(&cl, &topic, opts).await?;
        send_batch(&mut p, "a").await?;
        let first = recv_n(&mut c1, 5, Duration::from_secs(5), Duration::from_millis(300)).await?;
        ctx.count(first.len() as u64);
        ensure!(first.len() == 5, "c1 got {} messages, expected the batch of 5", first.len());
        let entry1 = one_entry(&first)?;
        ack(&mut c1, &first[0]).await?;
        close(c1).await?;

        let mut c2 = Sub::new(SubType::Shared, "c2").subscribe(&cl, &topic, "sub").await?;
        let after = drain(&mut c2, Duration::from_millis(1000), Duration::from_secs(3), 100).await?;
        ensure!(
            after.is_empty(),
            "c2 got {:?} after c1 acked index 0 only: the broker did not take an ack without ack_set as \
             the whole entry (Pulsar does)",
            after.iter().map(text).collect::<Vec<_>>()
        );

        send_batch(&mut p, "b").await?;
        let second = recv_n(&mut c2, 5, Duration::from_secs(5), Duration::from_millis(300)).await?;
        ctx.count(second.len() as u64);
        ensure!(second.len() == 5, "c2 got {} of the second batch", second.len());
        let entry2 = one_entry(&second)?;
        // Only index 2 is nacked; the others are held (an ack of any of them would ack the entry).
        nack(&mut c2, &second[2]).await?;
        let again = recv_n(&mut c2, 5, Duration::from_secs(5), Duration::from_millis(500)).await?;
        ctx.count(again.len() as u64);
        let got: Vec<String> = again.iter().map(text).collect();
        ensure!(
            got == ["b-0", "b-1", "b-2", "b-3", "b-4"],
            "after nacking index 2 c2 got {got:?}, expected the whole batch again (no batch-index acks)"
        );
        ensure!(one_entry(&again)? == entry2, "the redelivered batch is another entry");
        for m in &again {
            ack(&mut c2, m).await?;
        }
        close(c2).await?;
        let mut c3 = Sub::new(SubType::Shared, "c3").subscribe(&cl, &topic, "sub").await?;
        let left = drain(&mut c3, Duration::from_millis(700), Duration::from_secs(3), 100).await?;
        ensure!(left.is_empty(), "c3 got {:?} after every message was acked", left.iter().map(text).collect::<Vec<_>>());
        close(c3).await?;
        p.close().await?;
        b.stop()?;
        Ok(format!(
            "batch 1 in entry {entry1:?}: c1 acked index 0, c2 got 0 (whole entry acked); batch 2 in entry \
             {entry2:?}: nack of index 2 redelivered all 5; c3 got 0"
        ))
    })
    .await;
}
