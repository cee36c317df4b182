//! The scenario workloads through the broker's stepped core in Pulsar's binary protocol
//! (`--runtime broker`): the shipped scenarios keep their invariants, a seed gives one
//! byte-identical run, a restart is a real one (the broker killed and reopened over its data
//! directory, which is gone after the run), and the broker's legacy switches make the checker
//! fail where the deterministic world's do.

use tests::sim::{
    builtin, default_mix, run_broker, Legacy, RunOptions, RunResult, Scenario, ViolationKind,
};

fn run(name: &str, seed: u64, legacy: Option<Legacy>) -> RunResult {
    let s = builtin(name).expect("shipped scenario");
    let opts = RunOptions {
        seed,
        legacy,
        keep_log: false,
    };
    run_broker(&s, &opts).expect("runs").0
}

fn kinds(
    name: &str,
    seeds: std::ops::RangeInclusive<u64>,
    legacy: Option<Legacy>,
) -> Vec<ViolationKind> {
    seeds
        .flat_map(|seed| run(name, seed, legacy).violations)
        .map(|v| v.kind)
        .collect()
}

/// Every shipped scenario the broker can honour, seeds 1 to 3: no violation, messages
/// processed.
#[test]
fn the_default_mix_keeps_its_invariants_through_the_broker() {
    let mut ran = 0;
    for s in default_mix() {
        for seed in 1..=3 {
            let r = run(&s.name, seed, None);
            let tail = r.log_tail.join("\n");
            let name = &s.name;
            assert!(
                r.violations.is_empty(),
                "{name} seed {seed}: {:?}\n{tail}",
                r.violations
            );
            assert!(
                r.starts > 0 && r.messages > 0,
                "{name}: messages were processed"
            );
        }
        ran += 1;
    }
    assert!(ran >= 25, "{ran} scenarios ran");
}

#[test]
fn one_seed_gives_one_run() {
    for name in ["mix-key-shared", "mix-shared"] {
        let (a, b) = (run(name, 2, None), run(name, 2, None));
        assert_eq!(
            (a.log_hash, a.log_lines),
            (b.log_hash, b.log_lines),
            "{name}"
        );
        assert_ne!(
            a.log_hash,
            run(name, 3, None).log_hash,
            "{name}: another seed, another run"
        );
    }
}

#[test]
fn mark_delete_cleanup_breaks_order_through_the_broker() {
    assert_eq!(kinds("seed-000-draining-skip", 1..=4, None), []);
    let v = kinds(
        "seed-000-draining-skip",
        1..=4,
        Some(Legacy::MarkDeleteCleanup),
    );
    assert!(v.contains(&ViolationKind::Order), "{v:?}");
}

#[test]
fn unordered_nack_breaks_order_through_the_broker() {
    assert_eq!(kinds("seed-002-nack", 1..=1, None), []);
    let v = kinds("seed-002-nack", 1..=1, Some(Legacy::UnorderedNack));
    assert!(v.contains(&ViolationKind::Order), "{v:?}");
}

/// Seed 001's orphan chunk with its restart after the cursor's persist at t=2000 (every 1 s), so
/// the client's ack of chunk 0 (t≈1004) is on disk: chunks 1 and 2 come after the restart
/// without it. (At t=2000 the crash comes first and loses that ack: chunk 0 is sent again, the
/// message completes and nothing is orphaned.)
const ORPHAN_LATE_RESTART: &str = "\
config type=shared net=1-3
at 0 join c1 queue=10 chunk_expiry=1000
at 0 join c2 queue=10 chunk_expiry=1000
at 1 publish key=K chunks=3 spread=3000
at 2 publish key=A count=5
at 2100 restart
at 3500 publish key=A count=5
";

/// Restarts between the cursor's persists (every 1 s): the acks since the last one are lost and
/// their messages come back (batch entries too); a consumer joins after a restart.
const RESTARTS: &str = "\
config type=key_shared net=1-5
at 0 join c1 queue=10 proc=2-8
at 0 join c2 queue=10 proc=2-8
at 1 publish key=K count=20
at 1 publish key=A batch=3 count=10
at 1100 publish key=K count=20
at 1100 publish key=B batch=4 count=5
at 1300 restart
at 1400 publish key=k0 count=10
at 2050 restart
at 2100 join c3 queue=5 proc=2-8
at 2200 publish key=A count=10
";

fn run_text(name: &str, text: &str, seed: u64, legacy: Option<Legacy>) -> RunResult {
    let s = Scenario::parse(name, text).expect("a scenario");
    let opts = RunOptions {
        seed,
        legacy,
        keep_log: true,
    };
    let (r, skipped) = run_broker(&s, &opts).expect("runs");
    assert!(
        !skipped.keys().any(|k| k.contains("approximated")),
        "{skipped:?}"
    );
    r
}

/// The run's data directories (`sim-broker-<pid>-<scenario>-s<seed>-<n>` under the temporary
/// directory) that still exist.
fn data_dirs(name: &str, seed: u64) -> Vec<String> {
    let prefix = format!("sim-broker-{}-{name}-s{seed}-", std::process::id());
    std::fs::read_dir(std::env::temp_dir())
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_restart_kills_the_broker_and_reopens_its_data_directory() {
    let name = "broker-restarts";
    let r = run_text(name, RESTARTS, 1, None);
    let log = r.log.clone().unwrap_or_default();
    let tail = r.log_tail.join("\n");
    assert!(r.violations.is_empty(), "{:?}\n{tail}", r.violations);
    let restarts = log
        .iter()
        .filter(|l| l.contains("broker restart: killed"))
        .count();
    assert_eq!(restarts, 2, "{tail}");
    assert_eq!(
        log.iter()
            .filter(|l| l.contains("broker open: cursor"))
            .count(),
        2
    );
    let lost = log
        .iter()
        .filter_map(|l| l.split("crash lost ").nth(1))
        .filter_map(|l| l.split(' ').next()?.parse::<u64>().ok());
    assert!(
        lost.sum::<u64>() > 0,
        "acks were lost and came back\n{tail}"
    );
    assert!(
        r.messages > 0 && r.starts > r.messages,
        "redeliveries after the restarts"
    );
    assert_eq!(
        data_dirs(name, 1),
        Vec::<String>::new(),
        "the data directory is removed"
    );
}

#[test]
fn orphan_chunk_replay_stalls_through_the_broker() {
    let name = "orphan-late-restart";
    assert_eq!(run_text(name, ORPHAN_LATE_RESTART, 1, None).violations, []);
    let r = run_text(
        name,
        ORPHAN_LATE_RESTART,
        2,
        Some(Legacy::OrphanChunkReplay),
    );
    let v: Vec<ViolationKind> = r.violations.iter().map(|v| v.kind).collect();
    assert!(v.contains(&ViolationKind::Stall), "{v:?}");
    assert_eq!(
        data_dirs(name, 2),
        Vec::<String>::new(),
        "removed after a failed run too"
    );
}

#[test]
fn no_batch_ack_set_redelivers_acked_messages_through_the_broker() {
    let name = "mix-key-shared-batch-nack";
    assert_eq!(kinds(name, 1..=2, None), []);
    let v = kinds(name, 1..=2, Some(Legacy::NoBatchAckSet));
    assert!(v.contains(&ViolationKind::AckedRedelivered), "{v:?}");
}

/// Seed 2 of the slow-reads mix stalls under `replay-settle` through the broker: the
/// dispatcher goes idle with a replay entry nothing holds back (the idle-replay check after
/// every round of steps; 19 of seeds 1-40 are caught); without the switch it drains.
#[test]
fn replay_settle_stalls_with_slow_reads_through_the_broker() {
    let name = "mix-key-shared-slow-reads";
    assert_eq!(kinds(name, 2..=2, None), []);
    let r = run(name, 2, Some(Legacy::ReplaySettle));
    let kinds: Vec<_> = r.violations.iter().map(|v| v.kind).collect();
    assert_eq!(kinds, [ViolationKind::Stall]);
    assert!(
        r.violations[0].detail.contains("went idle"),
        "{}",
        r.violations[0].detail
    );
}

/// Evictions by size and by age while the subscription has no consumer: each drops the
/// backlog it covers.
const EVICTIONS: &str = "\
config type=key_shared net=1-3
at 0 join c0 queue=10
at 1 leave c0
at 10 publish key=A count=10
at 50 evict size=0
at 100 publish key=B count=5
at 1500 evict age=1000
at 1600 publish key=C count=3
at 1700 join c1 queue=10
";

#[test]
fn size_and_age_evictions_drop_the_backlog_they_cover() {
    let r = run_text("evictions", EVICTIONS, 1, None);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    let log = r.log.unwrap_or_default();
    let dropped = |what: &str| {
        log.iter()
            .find(|l| l.contains(what))
            .and_then(|l| l.split("dropped [").nth(1))
            .map_or(0, |d| d.split_whitespace().count())
    };
    assert_eq!(dropped("admin evict size=0"), 10, "{log:?}");
    assert_eq!(dropped("admin evict age=1000ms"), 5, "{log:?}");
    assert_eq!(r.starts, 3, "only the last three reach c1");
}

/// f08's backlog-quota evictions go through a namespace quota and its `expect` lines hold.
#[test]
fn evictions_go_through_namespace_backlog_quotas() {
    let s = builtin("f08-mark-delete").expect("shipped scenario");
    let opts = RunOptions {
        seed: 1,
        legacy: None,
        keep_log: true,
    };
    let (r, skipped) = run_broker(&s, &opts).expect("runs");
    assert!(!skipped.contains_key("evict"), "{skipped:?}");
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    let log = r.log.unwrap_or_default();
    let evicted = log
        .iter()
        .filter(|l| l.contains("admin evict") && l.contains("dropped"))
        .count();
    assert!(evicted > 0, "an eviction moved mark-delete");
}
