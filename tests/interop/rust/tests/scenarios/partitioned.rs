//! Partitioned topics and namespaces, as the crate's applications use them: the crate asks
//! PARTITIONED_METADATA, then produces to and consumes from every `{topic}-partition-{i}`.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use pulsar::SubType;
use pulsar_rs_interop::{
    admin,
    broker::Broker,
    client::{self, ack, close, id_of, key_seq, recv, recv_n, text, Sub},
    ensure,
    order::{check_key_order, ProcessingLog},
    scenario,
};

/// A topic with 3 partitions (admin `PUT …/partitions`): the crate's producer routes over the
/// partitions, its consumer subscribes to all of them and gets every message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_shared() {
    scenario::run("partitioned_shared", |ctx| async move {
        let mut b = Broker::start(&ctx.log_dir, "broker", &[])?;
        let topic = client::unique_topic("partitioned");
        let tp = admin::topic_path(&b.admin_url, &topic);
        let (status, body) = admin::http("PUT", &format!("{tp}/partitions"), Some("3")).await?;
        ensure!(status == 204, "PUT {tp}/partitions 3: HTTP {status} {body}");
        let meta = admin::get(&format!("{tp}/partitions")).await?;
        ensure!(
            meta["partitions"].as_i64() == Some(3),
            "partitions metadata {meta}"
        );
        let cl = client::client(&b.service_url).await?;
        let mut c = Sub::new(SubType::Shared, "c")
            .subscribe(&cl, &topic, "sub")
            .await?;
        let mut p = client::producer(&cl, &topic).await?;
        let parts = p.partitions().unwrap_or_default();
        ensure!(parts.len() == 3, "the producer sees partitions {parts:?}");
        for i in 0..30 {
            client::send(&mut p, format!("m{i}"), Some(&format!("k{i}"))).await?;
        }
        let got = recv_n(
            &mut c,
            30,
            Duration::from_secs(8),
            Duration::from_millis(300),
        )
        .await?;
        ctx.count(got.len() as u64);
        let distinct: BTreeSet<String> = got.iter().map(text).collect();
        ensure!(
            distinct.len() == 30 && got.len() == 30,
            "got {} ({} distinct) of 30",
            got.len(),
            distinct.len()
        );
        let from: BTreeSet<String> = got.iter().map(|m| m.topic.clone()).collect();
        ensure!(
            from.len() == 3,
            "messages came from {from:?}, expected all 3 partitions"
        );
        close(c).await?;
        b.stop()?;
        Ok("30 messages over 3 partitions, all received".to_owned())
    })
    .await;
}

const KEYS: u32 = 20;
const PER_KEY: u32 = 20;
const N: u32 = KEYS * PER_KEY;

/// Key_Shared over 4 partitions: two applications (a client each) log `(key, seq)` as they
/// process, then ack. The crate routes a key to one partition, so each key's messages must be
/// processed in order, once, and by one application.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_key_shared() {
    scenario::run("partitioned_key_shared", |ctx| async move {
        let mut b = Broker::start(&ctx.log_dir, "broker", &[])?;
        let topic = client::unique_topic("partitioned-ks");
        let tp = admin::topic_path(&b.admin_url, &topic);
        let (status, body) = admin::http("PUT", &format!("{tp}/partitions"), Some("4")).await?;
        ensure!(status == 204, "PUT {tp}/partitions 4: HTTP {status} {body}");
        let log = ProcessingLog::default();
        let stop = Arc::new(AtomicBool::new(false));
        let mut apps = Vec::new();
        for name in ["c1", "c2"] {
            let cl = client::client(&b.service_url).await?;
            let mut cons = Sub::new(SubType::KeyShared, name).prefetch(10).subscribe(&cl, &topic, "sub").await?;
            let (st, log) = (stop.clone(), log.clone());
            apps.push(tokio::spawn(async move {
                let end = Instant::now() + Duration::from_secs(40);
                while Instant::now() < end && !st.load(Ordering::SeqCst) {
                    let Some(m) = recv(&mut cons, Duration::from_millis(100)).await? else {
                        continue;
                    };
                    let (k, s) = key_seq(&m)?;
                    log.add("recv", name, &k, s, id_of(&m));
                    ack(&mut cons, &m).await?;
                }
                close(cons).await?;
                drop(cl);
                Ok::<_, anyhow::Error>(())
            }));
        }
        let pc = client::client(&b.service_url).await?;
        let mut p = client::producer(&pc, &topic).await?;
        for s in 0..PER_KEY {
            for k in 0..KEYS {
                client::send(&mut p, format!("key-{k}#{s}"), Some(&format!("key-{k}"))).await?;
            }
        }
        let end = Instant::now() + Duration::from_secs(30);
        while log.distinct_received() < N as usize && Instant::now() < end {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await; // stray duplicates would show
        stop.store(true, Ordering::SeqCst);
        for a in apps {
            tokio::time::timeout(Duration::from_secs(10), a).await???;
        }
        ctx.write_log("processing.log", &log.render());
        let snapshot = log.snapshot();
        let expected: BTreeMap<String, u32> = (0..KEYS).map(|k| (format!("key-{k}"), PER_KEY)).collect();
        let (first, again) = check_key_order(&snapshot, &expected, &HashSet::new())?;
        ctx.count((first + again) as u64);
        ensure!(first == N as usize && again == 0, "{first} processed first, {again} again, of {N}");
        let mut owners: HashMap<&str, BTreeSet<&str>> = HashMap::new();
        for e in &snapshot {
            owners.entry(&e.key).or_default().insert(&e.consumer);
        }
        let both: Vec<&&str> = owners.iter().filter(|(_, c)| c.len() > 1).map(|(k, _)| k).collect();
        ensure!(both.is_empty(), "keys processed by both applications: {both:?}");
        let stats = admin::get(&format!("{tp}/partitioned-stats")).await?;
        ensure!(stats["msgInCounter"].as_u64() == Some(N as u64), "partitioned stats: {}", stats["msgInCounter"]);
        b.stop()?;
        let per: BTreeMap<&str, usize> = ["c1", "c2"].iter().map(|c| (*c, log.count("recv", Some(c)))).collect();
        Ok(format!("{N} over 4 partitions processed in per-key order, each key by one application ({per:?})"))
    })
    .await;
}

/// A producer in a namespace that does not exist is refused at once (not after the
/// operation timeout); after `PUT /admin/v2/namespaces/…` it is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_must_exist() {
    scenario::run("namespace_must_exist", |ctx| async move {
        let mut b = Broker::start(&ctx.log_dir, "broker", &[])?;
        let cl = client::client(&b.service_url).await?;
        let topic = "persistent://public/no-such-ns/t";
        let t0 = Instant::now();
        let refused = client::producer(&cl, topic).await;
        let took = t0.elapsed();
        let Err(e) = refused else {
            return Err(anyhow::anyhow!(
                "a producer in a namespace that does not exist was created"
            ));
        };
        ensure!(took < Duration::from_secs(4), "the refusal took {took:?}");
        let ns = format!("{}/admin/v2/namespaces/public/no-such-ns", b.admin_url);
        let (status, body) = admin::http("PUT", &ns, None).await?;
        ensure!(status == 204, "PUT {ns}: HTTP {status} {body}");
        let mut p = client::producer(&cl, topic).await?;
        client::send(&mut p, "after", None).await?;
        ctx.count(1);
        b.stop()?;
        Ok(format!(
            "refused in {} ms ({e:#}), created once the namespace exists",
            took.as_millis()
        ))
    })
    .await;
}
