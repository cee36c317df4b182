//! The scenario workloads through the broker's stepped core in Pulsar's binary protocol
//! (`--runtime broker`): the shipped scenarios keep their invariants, a seed gives one
//! byte-identical run, and the broker's legacy switches make the checker fail where the
//! deterministic world's do.

use tests::sim::{
    broker_cannot_run, builtin, default_mix, run_broker, Legacy, RunOptions, RunResult,
    ViolationKind,
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
        if !s.expects.is_empty() && !broker_cannot_run(&s).is_empty() {
            continue; // its expect lines need a step the broker skips (f08's evict)
        }
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

#[test]
fn orphan_chunk_replay_stalls_through_the_broker() {
    assert_eq!(kinds("seed-001-orphan-chunk", 1..=1, None), []);
    let v = kinds(
        "seed-001-orphan-chunk",
        1..=1,
        Some(Legacy::OrphanChunkReplay),
    );
    assert!(v.contains(&ViolationKind::Stall), "{v:?}");
}

#[test]
fn legacy_switches_the_broker_lacks_are_refused() {
    let s = builtin("f03-ack").expect("shipped scenario");
    for l in [Legacy::NoBatchAckSet, Legacy::ReplaySettle] {
        let opts = RunOptions {
            seed: 1,
            legacy: Some(l),
            keep_log: false,
        };
        let e = run_broker(&s, &opts).expect_err("refused");
        assert!(e.contains("not available with --runtime broker"), "{e}");
    }
}
