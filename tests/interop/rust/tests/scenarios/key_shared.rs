//! Key_Shared (the crate sends no key-shared metadata, so the broker's default AUTO_SPLIT),
//! consumers joining and leaving mid-stream.
//!
//! 20 keys x 30 messages, published at a steady pace. c1 starts alone; c2 joins once 100
//! messages were processed; c1 leaves once 200 were processed (with messages still in its
//! prefetch) and c3 joins. Each application logs `(key, seq)` when it processes a message,
//! then acks it. The merged log must keep per-key order: seq s of key K is first processed only
//! after every earlier seq of K.
//!
//! c1 leaves by dropping its consumer: the crate's `close` waits for the consumer's engine,
//! which is blocked while the application's queue is full (it hangs). On the drop the engine
//! sends CLOSE_CONSUMER, but acks it still had queued are lost, so messages c1 processed may
//! be processed again by c2 or c3 (allowed, counted). The crate shows no redelivery count, so
//! nothing else may be processed twice. Every consumer processes some, and a late consumer
//! gets nothing.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use pulsar::SubType;
use pulsar_rs_interop::{
    anyhow,
    broker::Broker,
    client::{self, ack, close, drain, id_of, key_seq, recv, Client, Sub},
    ensure,
    order::{check_key_order, ProcessingLog},
    scenario, Result,
};
use tokio::task::JoinHandle;

const KEYS: u32 = 20;
const PER_KEY: u32 = 30;
const N: u32 = KEYS * PER_KEY;

struct App {
    stop: Arc<AtomicBool>,
    task: JoinHandle<Result<usize>>,
}

/// Starts an application; when stopped it closes its consumer, or drops it when `drop_on_stop`.
async fn start(
    url: &str,
    topic: &str,
    name: &str,
    log: &ProcessingLog,
    drop_on_stop: bool,
) -> Result<App> {
    let cl: Client = client::client(url).await?;
    let mut cons = Sub::new(SubType::KeyShared, name)
        .prefetch(10)
        .subscribe(&cl, topic, "sub")
        .await?;
    let stop = Arc::new(AtomicBool::new(false));
    let (st, log, name) = (stop.clone(), log.clone(), name.to_owned());
    let task = tokio::spawn(async move {
        let mut n = 0;
        let end = Instant::now() + Duration::from_secs(45);
        while Instant::now() < end && !st.load(Ordering::SeqCst) {
            let Some(m) = recv(&mut cons, Duration::from_millis(100)).await? else {
                continue;
            };
            let (k, s) = key_seq(&m)?;
            tokio::time::sleep(Duration::from_millis(2)).await; // the application's work
            log.add("recv", &name, &k, s, id_of(&m));
            n += 1;
            ack(&mut cons, &m).await?;
        }
        if drop_on_stop {
            client::drop_consumer(cons);
        } else {
            close(cons).await?;
        }
        drop(cl);
        Ok(n)
    });
    Ok(App { stop, task })
}

async fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) -> Result<()> {
    let end = Instant::now() + limit;
    while !cond() {
        if Instant::now() > end {
            return Err(anyhow!("timed out after {limit:?} waiting for {what}"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_shared_join_leave() {
    scenario::run("key_shared_join_leave", |ctx| async move {
        let mut b = Broker::start(&ctx.log_dir, "broker", &[])?;
        let topic = client::unique_topic("ks-join-leave");
        let log = ProcessingLog::default();
        let mut apps: HashMap<&str, App> = HashMap::new();
        apps.insert("c1", start(&b.service_url, &topic, "c1", &log, true).await?);
        let pc = client::client(&b.service_url).await?;
        let mut p = client::producer(&pc, &topic).await?;
        let producing = tokio::spawn(async move {
            let mut pending = Vec::new();
            for i in 0..N {
                let (k, s) = (i % KEYS, i / KEYS);
                let m = p.create_message().with_content(format!("key-{k}#{s}")).with_key(format!("key-{k}"));
                pending.push(client::bounded("send", m.send_non_blocking()).await?);
                if i % 20 == 19 {
                    for f in pending.drain(..) {
                        client::bounded("receipt", f).await?;
                    }
                    tokio::time::sleep(Duration::from_millis(30)).await;
                }
            }
            for f in pending {
                client::bounded("receipt", f).await?;
            }
            p.close().await?;
            Ok::<_, anyhow::Error>(())
        });
        let mut events = Vec::new();
        wait_for("100 processed messages", Duration::from_secs(20), || log.count("recv", None) >= 100).await?;
        apps.insert("c2", start(&b.service_url, &topic, "c2", &log, false).await?);
        events.push(format!("c2 joined at {}", log.count("recv", None)));
        wait_for("200 processed messages", Duration::from_secs(20), || log.count("recv", None) >= 200).await?;
        let c1 = apps.remove("c1").expect("c1");
        c1.stop.store(true, Ordering::SeqCst);
        let c1_n = tokio::time::timeout(Duration::from_secs(10), c1.task).await???;
        events.push(format!("c1 left at {}", log.count("recv", None)));
        apps.insert("c3", start(&b.service_url, &topic, "c3", &log, false).await?);
        events.push(format!("c3 joined at {}", log.count("recv", None)));
        tokio::time::timeout(Duration::from_secs(30), producing).await???;
        wait_for(&format!("all {N} messages processed"), Duration::from_secs(30), || {
            log.distinct_received() >= N as usize
        })
        .await?;
        tokio::time::sleep(Duration::from_millis(300)).await; // stray duplicates would show
        let mut counts = vec![("c1".to_owned(), c1_n)];
        for name in ["c2", "c3"] {
            let a = apps.remove(name).expect("app");
            a.stop.store(true, Ordering::SeqCst);
            counts.push((name.to_owned(), tokio::time::timeout(Duration::from_secs(10), a.task).await???));
        }
        ctx.write_log("processing.log", &log.render());
        let expected: BTreeMap<String, u32> = (0..KEYS).map(|k| (format!("key-{k}"), PER_KEY)).collect();
        // What c1 processed may come again (its last acks can be lost with the drop).
        let snapshot = log.snapshot();
        let c1_done: HashSet<(String, u32)> =
            snapshot.iter().filter(|e| e.consumer == "c1").map(|e| (e.key.clone(), e.seq)).collect();
        let (first, again) = check_key_order(&snapshot, &expected, &c1_done)?;
        ctx.count((first + again) as u64);
        ensure!(first == N as usize, "{first} first processings, expected {N}");
        for (n, c) in &counts {
            ensure!(*c > 0, "{n} processed nothing: {counts:?}");
        }
        let mut late = Sub::new(SubType::KeyShared, "late").subscribe(&pc, &topic, "sub").await?;
        let extra = drain(&mut late, Duration::from_millis(700), Duration::from_secs(3), 100).await?;
        ensure!(extra.is_empty(), "{} messages redelivered after every ack", extra.len());
        close(late).await?;
        b.stop()?;
        let per: Vec<String> = counts.iter().map(|(n, c)| format!("{n}={c}")).collect();
        Ok(format!(
            "{N} sent ({KEYS} keys x {PER_KEY}), {first} processed in per-key order ({}; {}), {again} of c1's \
             processed again after its drop",
            per.join("/"),
            events.join(", ")
        ))
    })
    .await;
}
