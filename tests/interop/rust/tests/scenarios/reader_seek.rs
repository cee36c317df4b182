//! Seek (by message id and by publish time) and Readers.
//!
//! The crate has no `hasMessageAvailable`; `get_last_message_id` (what it is built on in the
//! other clients) is checked instead. The crate drops no message after a seek or at a reader's
//! start: the start message itself is delivered (Pulsar's broker starts there too; the Java and
//! C++ clients drop it themselves for an exclusive start). The crate has no inclusive /
//! exclusive switch for readers.
//!
//! 1. Consumer: 10 messages (5, a pause, 5) received and acked; `seek(earliest)` brings all 10
//!    back; `seek(id of #6)` brings #6..#9; `seek(publish time between #4 and #5)` brings
//!    #5..#9. No message twice within one pass.
//! 2. Readers: from earliest all 10 in order; from #4 #4..#9; from latest only a message
//!    published after it was created; `get_last_message_id` names the last message.
//! 3. A Reader's `seek` by publish time re-reads from #5: an EXPECTED FAILURE for a broker
//!    bug. On SEEK the broker closes the reader's consumer (CLOSE_CONSUMER) and moves the
//!    cursor; the crate then sends its own CLOSE_CONSUMER for that consumer before subscribing
//!    again, and the broker, which still has the consumer in the connection's table, removes
//!    it and with it the emptied non-durable subscription, so the re-subscribe starts a new
//!    one at the reader's start (all 10 again). Pulsar keeps a non-durable subscription whose
//!    consumer was removed by a reset, and answers a CLOSE_CONSUMER for a consumer it already
//!    closed with success without touching the subscription.

use std::time::Duration;

use futures::StreamExt;
use pulsar::{consumer::InitialPosition, proto::MessageIdData, ConsumerOptions, SubType};
use pulsar_rs_interop::{
    broker::Broker,
    client::{self, ack, close, recv_n, text, Client, Msg, Sub},
    ensure, scenario, Result,
};

const N: usize = 10;

fn names(msgs: &[Msg]) -> Vec<String> {
    msgs.iter().map(text).collect()
}

fn want(range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("m{i}")).collect()
}

fn earliest() -> MessageIdData {
    MessageIdData {
        ledger_id: u64::MAX,
        entry_id: u64::MAX,
        ..Default::default()
    }
}

type Reader = pulsar::reader::Reader<Vec<u8>, pulsar::TokioExecutor>;

async fn reader(cl: &Client, topic: &str, name: &str, opts: ConsumerOptions) -> Result<Reader> {
    let b = cl
        .reader()
        .with_topic(topic)
        .with_consumer_name(name)
        .with_options(opts);
    client::bounded(&format!("reader {name}"), b.into_reader::<Vec<u8>>()).await
}

/// Reads until nothing comes for `quiet` (at most 8 s, at most 50 messages).
async fn read_all(r: &mut Reader, quiet: Duration) -> Result<Vec<String>> {
    let end = tokio::time::Instant::now() + Duration::from_secs(8);
    let mut out = Vec::new();
    while out.len() < 50 && tokio::time::Instant::now() < end {
        match tokio::time::timeout(quiet, r.next()).await {
            Err(_) => break,
            Ok(None) => anyhow::bail!("the reader's stream ended"),
            Ok(Some(Err(e))) => anyhow::bail!("read: {e}"),
            Ok(Some(Ok(m))) => out.push(String::from_utf8_lossy(&m.payload.data).into_owned()),
        }
    }
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seek_by_id_and_time() {
    scenario::run("seek_by_id_and_time", |ctx| async move {
        let mut b = Broker::start(&ctx.log_dir, "broker", &[])?;
        let cl = client::client(&b.service_url).await?;
        let topic = client::unique_topic("seek");
        let mut c = Sub::new(SubType::Shared, "c")
            .subscribe(&cl, &topic, "sub")
            .await?;
        let mut p = client::producer(&cl, &topic).await?;
        let mut ids = Vec::new();
        for i in 0..5 {
            ids.push(client::send(&mut p, format!("m{i}"), None).await?);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let t_mid = client::now_ms();
        tokio::time::sleep(Duration::from_millis(100)).await;
        for i in 5..N {
            ids.push(client::send(&mut p, format!("m{i}"), None).await?);
        }
        let got = recv_n(
            &mut c,
            N,
            Duration::from_secs(5),
            Duration::from_millis(300),
        )
        .await?;
        ctx.count(got.len() as u64);
        ensure!(names(&got) == want(0..N), "first pass {:?}", names(&got));
        for m in &got {
            ack(&mut c, m).await?;
        }

        let mut passes = Vec::new();
        for (label, id, time, expect) in [
            ("earliest", Some(earliest()), None, want(0..N)),
            ("id of #6", Some(ids[6].clone()), None, want(6..N)),
            ("time between #4 and #5", None, Some(t_mid), want(5..N)),
        ] {
            client::bounded(
                &format!("seek({label})"),
                c.seek(None, id, time, cl.clone()),
            )
            .await?;
            let again = recv_n(
                &mut c,
                expect.len(),
                Duration::from_secs(5),
                Duration::from_millis(500),
            )
            .await?;
            ctx.count(again.len() as u64);
            let mut got = names(&again);
            got.sort_by_key(|s| s[1..].parse::<u32>().unwrap_or(u32::MAX));
            ensure!(
                got == expect,
                "after seek({label}): {:?}, expected {expect:?}",
                names(&again)
            );
            for m in &again {
                ack(&mut c, m).await?;
            }
            passes.push(format!("seek({label}) {}", again.len()));
        }
        close(c).await?;
        p.close().await?;
        b.stop()?;
        Ok(passes.join(", "))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers() {
    scenario::run("readers", |ctx| async move {
        let mut b = Broker::start(&ctx.log_dir, "broker", &[])?;
        let cl = client::client(&b.service_url).await?;
        let topic = client::unique_topic("reader");
        let mut p = client::producer(&cl, &topic).await?;
        let mut ids = Vec::new();
        for i in 0..5 {
            ids.push(client::send(&mut p, format!("m{i}"), None).await?);
        }
        for i in 5..N {
            ids.push(client::send(&mut p, format!("m{i}"), None).await?);
        }
        let quiet = Duration::from_millis(700);

        let mut r = reader(&cl, &topic, "r-earliest", ConsumerOptions::default().with_initial_position(InitialPosition::Earliest)).await?;
        let all = read_all(&mut r, quiet).await?;
        ctx.count(all.len() as u64);
        ensure!(all == want(0..N), "reader from earliest: {all:?}");
        let last = client::bounded("get_last_message_id", r.get_last_message_id()).await?;
        let sent_last = ids.last().expect("ids");
        ensure!(
            (last.ledger_id, last.entry_id) == (sent_last.ledger_id, sent_last.entry_id),
            "get_last_message_id {}:{}, the last receipt {}:{}",
            last.ledger_id,
            last.entry_id,
            sent_last.ledger_id,
            sent_last.entry_id
        );
        drop(r);

        let mut r = reader(&cl, &topic, "r-from-4", ConsumerOptions::default().starting_on_message(ids[4].clone())).await?;
        let from4 = read_all(&mut r, quiet).await?;
        ctx.count(from4.len() as u64);
        ensure!(from4 == want(4..N), "reader from #4: {from4:?} (expected the start message too: the crate does not drop it)");
        drop(r);

        let mut r = reader(&cl, &topic, "r-latest", ConsumerOptions::default()).await?;
        client::send(&mut p, "late", None).await?;
        let latest = read_all(&mut r, quiet).await?;
        ctx.count(latest.len() as u64);
        ensure!(latest == ["late"], "reader from latest: {latest:?}");
        drop(r);
        p.close().await?;
        b.stop()?;
        Ok(format!(
            "earliest {} in order, get_last_message_id = last receipt, from #4 {} (start included), latest {}",
            all.len(),
            from4.len(),
            latest.len()
        ))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reader_seek_by_time() {
    // The crate closes the consumer the broker closed for the seek (CLOSE_CONSUMER) before it
    // subscribes again: the Reader's subscription must keep the position the seek set.
    scenario::run("reader_seek_by_time", |ctx| async move {
        let mut b = Broker::start(&ctx.log_dir, "broker", &[])?;
        let cl = client::client(&b.service_url).await?;
        let topic = client::unique_topic("reader-seek");
        let mut p = client::producer(&cl, &topic).await?;
        for i in 0..5 {
            client::send(&mut p, format!("m{i}"), None).await?;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let t_mid = client::now_ms();
        tokio::time::sleep(Duration::from_millis(100)).await;
        for i in 5..N {
            client::send(&mut p, format!("m{i}"), None).await?;
        }
        let quiet = Duration::from_millis(700);
        let opts = ConsumerOptions::default().with_initial_position(InitialPosition::Earliest);
        let mut r = reader(&cl, &topic, "r", opts).await?;
        let all = read_all(&mut r, quiet).await?;
        ctx.count(all.len() as u64);
        ensure!(all == want(0..N), "reader from earliest: {all:?}");
        client::bounded("reader seek by time", r.seek(None, Some(t_mid))).await?;
        let reread = read_all(&mut r, quiet).await?;
        ctx.count(reread.len() as u64);
        ensure!(
            reread == want(5..N),
            "reader after seek(time between #4 and #5) read {reread:?}, expected m5..m9"
        );
        drop(r);
        p.close().await?;
        b.stop()?;
        Ok(format!("seek by time re-read {}", reread.join(" ")))
    })
    .await;
}
