//! The priority round robin on its own.

use crate::{ConsumerSlot, PriorityRoundRobin};

fn slots(prios: &[i32]) -> Vec<ConsumerSlot<usize>> {
    prios
        .iter()
        .enumerate()
        .map(|(id, &priority)| ConsumerSlot {
            id,
            permits: 1,
            priority,
        })
        .collect()
}

/// Runs `n` picks with per-consumer capacities, returning the chosen indices.
fn picks(
    rr: &mut PriorityRoundRobin,
    c: &[ConsumerSlot<usize>],
    cap: &mut [i64],
    n: usize,
) -> Vec<Option<usize>> {
    (0..n)
        .map(|_| {
            let got = rr.next(c, |i| cap[i] > 0);
            if let Some(i) = got {
                cap[i] -= 1;
            }
            got
        })
        .collect()
}

#[test]
fn empty_or_unavailable_gives_none() {
    let mut rr = PriorityRoundRobin::new();
    assert_eq!(rr.next::<u32>(&[], |_| true), None);
    assert_eq!(rr.next(&slots(&[0, 0]), |_| false), None);
}

#[test]
fn rotates_within_the_top_level_and_skips_unavailable() {
    let mut rr = PriorityRoundRobin::new();
    let c = slots(&[0, 0, 0, 1]);
    let mut cap = [10, 0, 10, 10];
    assert_eq!(
        picks(&mut rr, &c, &mut cap, 4),
        [Some(0), Some(2), Some(0), Some(2)]
    );
}

#[test]
fn falls_to_lower_levels_in_order_and_comes_back_up() {
    let mut rr = PriorityRoundRobin::new();
    let c = slots(&[0, 1, 1, 2]);
    let mut cap = [1, 1, 1, 5];
    assert_eq!(
        picks(&mut rr, &c, &mut cap, 5),
        [Some(0), Some(1), Some(2), Some(3), Some(3)]
    );
    // Capacity returns at level 0 and level 1: level 0 first, then level 1 from its start.
    let mut cap = [1, 1, 1, 0];
    assert_eq!(
        picks(&mut rr, &c, &mut cap, 4),
        [Some(0), Some(1), Some(2), None]
    );
}

#[test]
fn wraps_within_a_level_before_going_lower() {
    let mut rr = PriorityRoundRobin::new();
    let c = slots(&[0, 0, 0, 1]);
    let mut cap = [5, 5, 5, 5];
    assert_eq!(picks(&mut rr, &c, &mut cap, 2), [Some(0), Some(1)]);
    // Cursor at index 2; index 2 runs dry: wrap to 0 before index 3 (a lower level).
    cap[2] = 0;
    assert_eq!(picks(&mut rr, &c, &mut cap, 3), [Some(0), Some(1), Some(0)]);
}

#[test]
fn unsorted_slice_is_ordered_by_priority_stably() {
    let mut rr = PriorityRoundRobin::new();
    let c = slots(&[2, 0, 1, 0]);
    let mut cap = [1, 1, 1, 1];
    assert_eq!(
        picks(&mut rr, &c, &mut cap, 5),
        [Some(1), Some(3), Some(2), Some(0), None]
    );
}

#[test]
fn reset_moves_the_cursor_to_the_start() {
    let mut rr = PriorityRoundRobin::new();
    let c = slots(&[0, 0, 0]);
    let mut cap = [9, 9, 9];
    assert_eq!(picks(&mut rr, &c, &mut cap, 2), [Some(0), Some(1)]);
    rr.reset();
    assert_eq!(picks(&mut rr, &c, &mut cap, 1), [Some(0)]);
}

#[test]
fn shrinking_list_wraps_the_cursor() {
    let mut rr = PriorityRoundRobin::new();
    let mut cap = [9, 9, 9];
    assert_eq!(
        picks(&mut rr, &slots(&[0, 0, 0]), &mut cap, 3),
        [Some(0), Some(1), Some(2)]
    );
    assert_eq!(picks(&mut rr, &slots(&[0, 0]), &mut cap, 1), [Some(0)]);
}
