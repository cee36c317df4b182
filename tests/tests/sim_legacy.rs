//! The checker must be able to fail: each legacy switch restores a Pulsar bug, and the
//! simulator must report the matching violation on the scenarios built for it.

use tests::sim::{builtin, run_scenario, Legacy, RunOptions, ViolationKind};

fn violations(
    scenario: &str,
    seeds: std::ops::RangeInclusive<u64>,
    legacy: Legacy,
) -> Vec<ViolationKind> {
    let s = builtin(scenario).expect("shipped scenario");
    seeds
        .flat_map(|seed| {
            run_scenario(
                &s,
                &RunOptions {
                    seed,
                    legacy: Some(legacy),
                    ..RunOptions::default()
                },
            )
            .expect("runs")
            .violations
            .into_iter()
            .map(|v| v.kind)
        })
        .collect()
}

#[test]
fn mark_delete_cleanup_breaks_order_on_the_seed_000_scenario() {
    let v = violations("seed-000-draining-skip", 1..=1, Legacy::MarkDeleteCleanup);
    assert_eq!(v, vec![ViolationKind::Order]);
    let v = violations("f08-mark-delete", 1..=1, Legacy::MarkDeleteCleanup);
    assert_eq!(v, vec![ViolationKind::Order]);
}

#[test]
fn mark_delete_cleanup_breaks_order_in_the_admin_mix() {
    let v = violations("mix-key-shared-admin", 1..=4, Legacy::MarkDeleteCleanup);
    assert!(v.contains(&ViolationKind::Order), "{v:?}");
}

#[test]
fn orphan_chunk_replay_stalls_the_seed_001_scenario_and_the_chunk_mix() {
    let v = violations("seed-001-orphan-chunk", 1..=1, Legacy::OrphanChunkReplay);
    assert_eq!(v, vec![ViolationKind::Stall]);
    let v = violations("mix-shared-chunks", 1..=2, Legacy::OrphanChunkReplay);
    assert!(v.contains(&ViolationKind::Stall), "{v:?}");
}

#[test]
fn unordered_nack_breaks_order_on_the_nack_scenarios() {
    let v = violations("seed-002-nack", 1..=1, Legacy::UnorderedNack);
    assert_eq!(v, vec![ViolationKind::Order]);
    let v = violations("f04-nack", 1..=1, Legacy::UnorderedNack);
    assert_eq!(v, vec![ViolationKind::Order]);
}

/// Without the acked indexes on a redelivered batch, an acked batch index goes out unmarked:
/// the batch-nack mix (batches, partial acks, nacks, joins and leaves) and the Shared mix.
#[test]
fn no_batch_ack_set_hands_acked_messages_out_again() {
    for scenario in ["mix-key-shared-batch-nack", "mix-shared"] {
        let v = violations(scenario, 1..=4, Legacy::NoBatchAckSet);
        assert!(
            v.contains(&ViolationKind::AckedRedelivered),
            "{scenario}: {v:?}"
        );
        let ours: Vec<ViolationKind> = (1..=4u64)
            .flat_map(|seed| {
                let s = builtin(scenario).expect("shipped scenario");
                run_scenario(
                    &s,
                    &RunOptions {
                        seed,
                        ..RunOptions::default()
                    },
                )
                .expect("runs")
                .violations
                .into_iter()
                .map(|v| v.kind)
            })
            .collect();
        assert!(ours.is_empty(), "{scenario} without the switch: {ours:?}");
    }
}
