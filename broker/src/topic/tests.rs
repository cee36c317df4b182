//! Retention, message-id resolution and late subscriptions on in-memory topics.

use bytes::Bytes;

use super::*;

/// An in-memory topic whose dispatchers run on threads of their own.
fn topic(name: String, entries_per_ledger: u64) -> Topic {
    let config = TopicConfig {
        entries_per_ledger,
        sync: SyncPolicy::Always,
        defaults: SubscriptionDefaults::default(),
        kept_metas: KEPT_METAS,
        runtimes: Arc::new(crate::shell::ShellRuntimes::threads()),
        write_refusal_ms: crate::config::WRITE_REFUSAL_MS,
    };
    Topic::open(name, &MemoryBackend, config).expect("an in-memory topic opens")
}

/// A consumer on `s` with permits, and the first `n` deliveries it receives (within 5 s).
fn deliveries(
    s: &Subscription,
    n: usize,
) -> (dispatcher::ConsumerHandle, Vec<dispatcher::Delivery>) {
    let c = s
        .runtime
        .add_consumer(dispatcher::ConsumerSpec::new(1, "c"))
        .unwrap();
    c.flow(100);
    let mut got = Vec::new();
    while got.len() < n {
        let b = c
            .deliveries
            .recv_timeout(std::time::Duration::from_secs(5))
            .unwrap_or_else(|_| panic!("{} of {n} delivered within 5 s", got.len()));
        got.extend(b);
    }
    (c, got)
}

/// A consumer on `s` with permits, and the first `n` positions it receives.
fn receive(s: &Subscription, n: usize) -> (dispatcher::ConsumerHandle, Vec<Position>) {
    let (c, got) = deliveries(s, n);
    (c, got.iter().map(|d| d.position).collect())
}

#[test]
fn retention_trims_ledgers_below_the_slowest_mark_delete() {
    // One entry per ledger, so each acked entry is a whole ledger.
    let t = topic("persistent://p/d/r".into(), 1);
    let section = Bytes::from_static(b"x");
    let fast = t
        .subscription("fast", SubKind::Shared, InitialPosition::Earliest)
        .unwrap();
    let slow = t
        .subscription("slow", SubKind::Shared, InitialPosition::Earliest)
        .unwrap();
    let ps: Vec<_> = (0..5)
        .map(|i| {
            t.publish(EntryMeta::simple(i, 1), section.clone())
                .unwrap()
                .unwrap()
        })
        .collect();
    let drain = |s: &Subscription, n: usize| {
        let (c, got) = receive(s, 5);
        for p in &got[..n] {
            c.ack(*p).unwrap();
        }
        c
    };
    let _a = drain(&fast, 5);
    let _b = drain(&slow, 2);
    // One copy of each entry, whatever the number of subscriptions: the topic's ledger holds
    // the metadata once, and the only other reference is this handle.
    let first = t.ledger.read().get(ps[0]).unwrap().meta;
    assert_eq!(Arc::strong_count(&first), 2);
    t.trim(0, None);
    assert_eq!(
        Arc::strong_count(&first),
        1,
        "every ledger let the entry go"
    );
    assert!(
        t.payload(ps[0]).unwrap().is_none(),
        "a ledger below both mark-deletes"
    );
    assert!(
        t.payload(ps[1]).unwrap().is_some(),
        "the ledger the slow subscription's mark-delete is in stays"
    );
    assert!(
        t.payload(ps[2]).unwrap().is_some(),
        "the slow subscription still needs it"
    );
    assert!(t.meta(ps[0]).is_none());
    assert!(t.meta(ps[4]).is_some());
    drop((_a, _b, fast, slow));
    t.close();
}

#[test]
fn earliest_and_latest_message_ids_resolve_to_the_ends() {
    let t = topic("persistent://p/d/t".into(), 3);
    assert_eq!(
        t.resolve_message_id(u64::MAX, u64::MAX),
        Position::new(1, 0)
    );
    let section = Bytes::from_static(b"x");
    let ps: Vec<_> = (0..4)
        .map(|i| {
            t.publish(EntryMeta::simple(i, 1), section.clone())
                .unwrap()
                .unwrap()
        })
        .collect();
    assert_eq!(t.resolve_message_id(u64::MAX, u64::MAX), ps[0]);
    let latest = i64::MAX as u64;
    assert_eq!(t.resolve_message_id(latest, latest), ps[3].next());
    assert_eq!(t.resolve_message_id(1, 2), Position::new(1, 2));
    // Ledgers of 3 entries: 1:0 1:1 1:2 2:0.
    assert_eq!(
        t.positions_between(None, Position::new(1, 1)),
        ps[..2].to_vec()
    );
    assert_eq!(t.positions_between(Some(ps[1]), ps[3]), ps[2..].to_vec());
    assert_eq!(
        t.positions_between(Some(ps[3]), ps[3]),
        Vec::<Position>::new()
    );
    t.close();
}

#[test]
fn a_late_subscription_sees_the_same_positions() {
    let t = topic("persistent://p/d/t".into(), 3);
    let section = Bytes::from_static(b"x");
    let p0 = t
        .publish(EntryMeta::simple(1, 1), section.clone())
        .unwrap()
        .unwrap();
    let early = t
        .subscription("early", SubKind::Shared, InitialPosition::Earliest)
        .unwrap();
    let ps: Vec<_> = (0..4)
        .map(|i| {
            t.publish(EntryMeta::simple(i, 1), section.clone())
                .unwrap()
                .unwrap()
        })
        .collect();
    let late = t
        .subscription("late", SubKind::Shared, InitialPosition::Earliest)
        .unwrap();
    let p5 = t
        .publish(EntryMeta::simple(9, 1), section)
        .unwrap()
        .unwrap();
    assert_eq!(p0, Position::new(1, 0));
    assert_eq!(ps[2], Position::new(2, 0));
    assert_eq!(p5, Position::new(2, 2));
    for s in [&early, &late] {
        let (_c, got) = receive(s, 6);
        let mut want = vec![p0];
        want.extend(&ps);
        want.push(p5);
        assert_eq!(got, want);
    }
    assert!(matches!(
        t.subscription(
            "early",
            SubKind::KeyShared(dispatcher::KeySharedConfig::default()),
            InitialPosition::Latest
        ),
        Err(SubscribeError::TypeMismatch { .. })
    ));
    drop((early, late));
    t.close();
}

#[test]
fn a_topic_without_subscriptions_drops_closed_ledgers_after_ten_minutes() {
    // Ledgers of 2 entries; entries published at t = 0, 0 | 5 min, 5 min | 9 min.
    let t = topic("persistent://p/d/n".into(), 2);
    let section = Bytes::from_static(b"x");
    let minute = 60_000;
    let ps: Vec<_> = [0, 0, 5, 5, 9]
        .iter()
        .map(|m| {
            t.publish(EntryMeta::simple(m * minute, 1), section.clone())
                .unwrap()
                .unwrap()
        })
        .collect();
    t.trim(9 * minute, None);
    assert!(
        t.payload(ps[0]).unwrap().is_some(),
        "younger than ten minutes"
    );
    t.trim(10 * minute, None);
    assert!(
        t.payload(ps[1]).unwrap().is_none(),
        "the first ledger is ten minutes old"
    );
    assert!(t.payload(ps[2]).unwrap().is_some());
    t.trim(60 * minute, None);
    assert!(t.payload(ps[3]).unwrap().is_none());
    assert!(
        t.payload(ps[4]).unwrap().is_some(),
        "the ledger being written stays"
    );
    assert_eq!(t.last_position(), ps[4]);
    t.close();
}

#[test]
fn a_retention_policy_keeps_consumed_ledgers_for_its_time_and_up_to_its_size() {
    // Ledgers of 2 entries published at 0, 0 | 5, 5 | 9 minutes; everything is acked.
    let t = topic("persistent://p/d/kept".into(), 2);
    let section = Bytes::from_static(b"x");
    let minute = 60_000;
    let sub = t
        .subscription("s", SubKind::Shared, InitialPosition::Earliest)
        .unwrap();
    let ps: Vec<_> = [0, 0, 5, 5, 9]
        .iter()
        .map(|m| {
            t.publish(EntryMeta::simple(m * minute, 1), section.clone())
                .unwrap()
                .unwrap()
        })
        .collect();
    let (c, got) = receive(&sub, 5);
    for p in got {
        c.ack(p).unwrap();
    }
    let forever = Retention {
        time_ms: None,
        size_bytes: None,
    };
    t.trim(1_000 * minute, Some(forever));
    assert!(
        t.payload(ps[0]).unwrap().is_some(),
        "no limit: everything stays"
    );
    let ten = Retention {
        time_ms: Some(10 * minute),
        size_bytes: None,
    };
    // The first ledger closed at 5 minutes (its successor's first entry).
    t.trim(14 * minute, Some(ten));
    assert!(t.payload(ps[0]).unwrap().is_some(), "closed 9 minutes ago");
    t.trim(15 * minute, Some(ten));
    assert!(t.payload(ps[1]).unwrap().is_none(), "closed 10 minutes ago");
    assert!(t.payload(ps[2]).unwrap().is_some(), "closed 6 minutes ago");
    let nothing = Retention {
        time_ms: None,
        size_bytes: Some(0),
    };
    t.trim(15 * minute, Some(nothing));
    assert!(t.payload(ps[3]).unwrap().is_none(), "over the size");
    assert!(
        t.payload(ps[4]).unwrap().is_some(),
        "the ledger being written stays"
    );
    drop(c);
    drop(sub);
    t.close();
}

/// A stored entry for `key` with publish time `t`, as a producer's SEND carries it.
fn stored(key: &str, t: u64) -> (EntryMeta, Bytes) {
    let md = wire::proto::MessageMetadata {
        producer_name: "p".into(),
        sequence_id: t,
        publish_time: t,
        ordering_key: Some(key.as_bytes().to_vec()),
        ..Default::default()
    };
    let section = wire::encode_section(&md, key.as_bytes());
    (meta::decode(&section).unwrap(), Bytes::from(section))
}

/// With room for 4 entries' metadata, a topic of 40 entries (in memory, then on disk across a
/// restart) keeps at most 4 decoded and delivers every entry with the metadata it was
/// published with (read back from the stored sections), and a seek by time finds its entry.
#[test]
fn metadata_beyond_the_kept_window_is_read_back_from_the_stored_entries() {
    let dir = std::env::temp_dir().join(format!("broker-topic-meta-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let config = TopicConfig {
        entries_per_ledger: 7,
        sync: SyncPolicy::Always,
        defaults: SubscriptionDefaults::default(),
        runtimes: Arc::new(crate::shell::ShellRuntimes::threads()),
        kept_metas: 4,
        write_refusal_ms: crate::config::WRITE_REFUSAL_MS,
    };
    let cache = Arc::new(crate::storage::ReadCache::new(1 << 20));
    let file = FileBackend::new(dir.clone(), cache);
    let backends: [(&str, &dyn Backend); 2] = [("memory", &MemoryBackend), ("file", &file)];
    for (name, backend) in backends {
        let t = Topic::open("persistent://p/d/m".into(), backend, config.clone()).unwrap();
        let ps: Vec<Position> = (0..40u64)
            .map(|i| {
                let (m, s) = stored(&format!("k{i}"), 1_000 + i);
                t.publish(m, s).unwrap().unwrap()
            })
            .collect();
        t.sync().unwrap();
        assert!(t.ledger.read().kept_metas() <= 4, "{name}");
        let check = |t: &Topic| {
            let s = t
                .subscription("s", SubKind::Shared, InitialPosition::Earliest)
                .unwrap();
            let (c, got) = deliveries(&s, ps.len());
            let keys: Vec<Vec<u8>> = got
                .iter()
                .map(|d| d.meta.ordering_key.clone().unwrap())
                .collect();
            let want: Vec<Vec<u8>> = (0..40).map(|i| format!("k{i}").into_bytes()).collect();
            assert_eq!(keys, want, "{name}: every entry with its own metadata");
            assert_eq!(t.position_at_time(1_010), ps[10], "{name}");
            assert_eq!(t.position_at_time(5_000), ps[39].next(), "{name}");
            drop(c);
        };
        check(&t);
        t.close();
        if name == "file" {
            let t = Topic::open("persistent://p/d/m".into(), backend, config.clone()).unwrap();
            assert!(
                t.ledger.read().kept_metas() <= 4,
                "recovery keeps the window"
            );
            check(&t);
            t.close();
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Schema versions survive a restart under `--data-dir`: a known schema keeps its version and a
/// new one gets the next.
#[test]
fn schema_versions_survive_a_restart() {
    let dir = std::env::temp_dir().join(format!("broker-topic-schemas-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cache = Arc::new(crate::storage::ReadCache::new(1 << 20));
    let file = FileBackend::new(dir.clone(), cache);
    let config = TopicConfig {
        entries_per_ledger: 10,
        sync: SyncPolicy::Always,
        defaults: SubscriptionDefaults::default(),
        runtimes: Arc::new(crate::shell::ShellRuntimes::threads()),
        kept_metas: KEPT_METAS,
        write_refusal_ms: crate::config::WRITE_REFUSAL_MS,
    };
    let schema = |data: &[u8]| wire::proto::Schema {
        name: "s".into(),
        schema_data: data.to_vec(),
        r#type: wire::proto::schema::Type::Json as i32,
        properties: Vec::new(),
    };
    let v = |n: u8| vec![0, 0, 0, 0, 0, 0, 0, n];
    let t = Topic::open("persistent://p/d/s".into(), &file, config.clone()).unwrap();
    assert_eq!(
        t.schema_version(&schema(b"{a}"), crate::schema::Strategy::Full)
            .unwrap(),
        v(0)
    );
    assert_eq!(
        t.schema_version(&schema(b"{b}"), crate::schema::Strategy::Full)
            .unwrap(),
        v(1)
    );
    t.close();
    drop(t);
    let t = Topic::open("persistent://p/d/s".into(), &file, config).unwrap();
    assert_eq!(
        t.schema_version(&schema(b"{b}"), crate::schema::Strategy::Full)
            .unwrap(),
        v(1)
    );
    assert_eq!(t.schemas.get(Some(&v(0))).unwrap().0, schema(b"{a}"));
    assert_eq!(
        t.schema_version(&schema(b"{c}"), crate::schema::Strategy::Full)
            .unwrap(),
        v(2)
    );
    t.close();
    let _ = std::fs::remove_dir_all(&dir);
}
