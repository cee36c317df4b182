//! Failover: one active consumer gets every entry, in order; on a change of active consumer the
//! previous one's unacked entries go to the new one first; every consumer hears whether it is
//! active.

mod common;

use common::run;
use cursor::Position;
use insta::assert_snapshot;

fn received(w: &common::World, name: &str) -> Vec<Position> {
    w.received.get(name).cloned().unwrap_or_default()
}

fn ascending(ps: &[Position]) -> bool {
    ps.windows(2).all(|p| p[0] < p[1])
}

fn entries(range: std::ops::Range<u64>) -> Vec<Position> {
    range.map(|e| Position::new(1, e)).collect()
}

#[test]
fn the_active_consumer_gets_everything_and_the_other_nothing() {
    // Partition 0, one priority level: the first name in order (A) is active.
    let w = run("failover partition 0\njoin B\njoin A\nflow A 10\nflow B 10\npub k1 k2 k3 k4\n");
    assert_eq!(received(&w, "A"), entries(0..4), "{}", w.out);
    assert!(received(&w, "B").is_empty(), "{}", w.out);
    assert_eq!(w.d.active_consumer(), Some(w.id("A")));
    assert_snapshot!(w.out);
}

#[test]
fn partition_index_picks_among_the_candidates() {
    let w = run(
        "failover partition 1\njoin A\njoin B\njoin C\nflow A 5\nflow B 5\nflow C 5\npub k1 k2\n",
    );
    assert_eq!(received(&w, "B"), entries(0..2), "{}", w.out);
    let w =
        run("failover partition 4\njoin A\njoin B\njoin C\nflow A 5\nflow B 5\nflow C 5\npub k1\n");
    assert_eq!(received(&w, "B"), entries(0..1), "{}", w.out);
}

#[test]
fn a_standby_with_permits_does_not_get_what_the_active_cannot_take() {
    let w = run("failover partition 0\njoin A\njoin B\nflow A 2\nflow B 10\npub k1 k2 k3 k4\n");
    assert_eq!(received(&w, "A"), entries(0..2), "{}", w.out);
    assert!(received(&w, "B").is_empty(), "{}", w.out);
    assert_eq!(
        w.d.stats().replay_size,
        0,
        "no entry may wait in replay: {}",
        w.out
    );
}

#[test]
fn when_the_active_leaves_the_next_gets_its_unacked_entries_first_in_order() {
    let w = run("failover partition 0\njoin A\njoin B\nflow A 10\nflow B 10\npub k1 k2 k3 k4 k5\nack A 1:0 1:1\nleave A\npub k6\n");
    let b = received(&w, "B");
    assert_eq!(b, entries(2..6), "{}", w.out);
    assert!(w.out.contains("  B active"), "{}", w.out);
    assert_snapshot!(w.out);
}

#[test]
fn a_better_priority_joiner_takes_over_with_the_unacked_entries() {
    // B (level 1) alone is active; A (level 0) joins and becomes active: the entries B holds
    // unacked are re-sent to A before the new ones; B is told it stands by.
    let w = run("failover partition 0\njoin B prio=1\nflow B 10\npub k1 k2 k3\nack B 1:0\njoin A prio=0\nflow A 10\npub k4\n");
    assert_eq!(received(&w, "B"), entries(0..3), "{}", w.out);
    assert_eq!(received(&w, "A"), entries(1..4), "{}", w.out);
    assert!(w.out.contains("  B standby"), "{}", w.out);
    assert!(w.out.contains("  A active"), "{}", w.out);
    assert_eq!(w.d.stats().unacked, 3, "B's debit moved to A: {}", w.out);
}

#[test]
fn a_joiner_that_changes_nothing_is_told_alone() {
    let w = run("failover partition 0\njoin A\njoin B\n");
    let after_b = &w.out[w.out.find("> join B").unwrap()..];
    assert_eq!(after_b.matches("  ").count(), 1, "{}", w.out);
    assert!(after_b.contains("  B standby"), "{}", w.out);
}

#[test]
fn a_nack_brings_back_every_unacked_entry_in_order() {
    let w =
        run("failover partition 0\njoin A\nflow A 20\npub k1 k2 k3 k4\nack A 1:0\nnack A 1:2\n");
    let a = received(&w, "A");
    assert_eq!(&a[..4], entries(0..4).as_slice(), "{}", w.out);
    assert_eq!(&a[4..], entries(1..4).as_slice(), "{}", w.out);
    let w = run("failover partition 0\njoin A\nflow A 20\npub k1 k2 k3\nonack A 0 1:1\n");
    assert_eq!(
        &received(&w, "A")[3..],
        entries(0..3).as_slice(),
        "{}",
        w.out
    );
}

#[test]
fn the_ring_pick_does_not_depend_on_join_order() {
    let joins = [
        "join x\njoin y\njoin z\n",
        "join z\njoin x\njoin y\n",
        "join y\njoin z\njoin x\n",
    ];
    let picks: Vec<String> = joins
        .iter()
        .map(|j| {
            let w = run(&format!(
                "failover topic persistent://public/default/t\n{j}"
            ));
            w.name(w.d.active_consumer().unwrap())
        })
        .collect();
    assert!(picks.windows(2).all(|p| p[0] == p[1]), "{picks:?}");
}

#[test]
fn every_entry_reaches_an_active_consumer_in_order_across_changes() {
    // C, then B (joins, takes over: B < C by name), then A (takes over), B leaves, A leaves.
    // Each consumer's deliveries ascend within each stretch of activity, and once the last one
    // acks everything the cursor is at the end with nothing unacked.
    let w = run("failover partition 0\njoin C\nflow C 100\npub k*5\nack C 1:0\njoin B\nflow B 100\npub k*3\nack B 1:1 1:2\njoin A\nflow A 100\nleave B\npub k*2\nack A all\nleave A\nack C all\n");
    assert_eq!(received(&w, "C"), entries(0..5), "{}", w.out);
    assert_eq!(received(&w, "B"), entries(1..8), "{}", w.out);
    assert_eq!(received(&w, "A"), entries(3..10), "{}", w.out);
    assert_eq!(w.d.stats().unacked, 0, "{}", w.out);
    let md = w.cell.lock().unwrap().cursor.mark_delete_position();
    assert_eq!(md, Position::new(1, 9), "{}", w.out);
    assert!(ascending(&received(&w, "A")), "{}", w.out);
}
