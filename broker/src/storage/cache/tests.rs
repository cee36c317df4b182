//! The read cache: eviction order over topics, the byte count under concurrency, the queue's
//! stale arrivals.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use cursor::Position;

use super::{ReadCache, TopicCache, ENTRY_OVERHEAD, STALE_SLACK};
use crate::sync::{lock, read};

fn section(i: u64) -> Bytes {
    Bytes::from(format!("section-{i:04}").into_bytes())
}

#[test]
fn the_cache_evicts_the_oldest_arrival_over_all_topics() {
    let one = 12 + ENTRY_OVERHEAD;
    let budget = Arc::new(ReadCache::new(2 * one));
    let cache = |budget: &Arc<ReadCache>| TopicCache::new(budget.clone());
    let (a, b) = (cache(&budget), cache(&budget));
    for i in 0..3 {
        a.insert(Position::new(1, i), section(i));
    }
    assert!(
        a.get(Position::new(1, 0)).is_none(),
        "the oldest went first"
    );
    assert!(a.get(Position::new(1, 2)).is_some());
    assert_eq!(budget.bytes(), 2 * one);
    // Oldest by arrival, not by position: an old entry read back (a consumer far behind)
    // stays, and the earliest arrival goes.
    a.insert(Position::new(0, 5), section(5));
    assert!(a.get(Position::new(0, 5)).is_some(), "just read back: kept");
    assert!(
        a.get(Position::new(1, 1)).is_none(),
        "the earliest arrival went"
    );
    assert!(a.get(Position::new(1, 2)).is_some());
    // Another topic's new entry evicts the oldest arrival over all topics: a's.
    b.insert(Position::new(1, 0), section(0));
    assert!(b.get(Position::new(1, 0)).is_some(), "b's entry is kept");
    assert!(a.get(Position::new(1, 2)).is_none(), "a's oldest went");
    assert!(a.get(Position::new(0, 5)).is_some());
    assert!(
        a.get(Position::new(1, 0)).is_none(),
        "topics are told apart"
    );
    assert_eq!(budget.bytes(), 2 * one);
    a.remove_below(Position::new(2, 0));
    assert_eq!(budget.bytes(), one, "retention gives a's bytes back");
    drop(b);
    assert_eq!(budget.bytes(), 0, "a dropped topic gives its bytes back");
    let none = cache(&Arc::new(ReadCache::new(0)));
    none.insert(Position::new(1, 0), section(0));
    assert_eq!(none.budget.bytes(), 0, "a zero budget caches nothing");
}

/// A topic written fast whose subscription nobody reads holds the whole budget; a second
/// topic's new entries still stay cached (each evicts the first topic's oldest), where
/// self-eviction within a topic left the second one nothing. The test fails with a cache
/// that makes room only from the inserting topic's own entries.
#[test]
fn a_topic_nobody_reads_cannot_keep_the_others_out() {
    let one = 12 + ENTRY_OVERHEAD;
    let budget = Arc::new(ReadCache::new(100 * one));
    let idle = TopicCache::new(budget.clone());
    let busy = TopicCache::new(budget.clone());
    for i in 0..1_000 {
        idle.insert(Position::new(1, i), section(i));
    }
    assert_eq!(budget.bytes(), 100 * one, "the idle topic fills the budget");
    for i in 0..50 {
        busy.insert(Position::new(1, i), section(i));
    }
    let kept = (0..50)
        .filter(|i| busy.get(Position::new(1, *i)).is_some())
        .count();
    assert_eq!(kept, 50, "every new entry of the read topic is cached");
    let idle_kept = (0..1_000)
        .filter(|i| idle.get(Position::new(1, *i)).is_some())
        .count();
    assert_eq!(idle_kept, 50, "the idle topic kept its 50 newest");
    assert!(idle.get(Position::new(1, 999)).is_some());
    assert_eq!(budget.bytes(), 100 * one);
}

/// Arrivals of sections that retention took out do not pile up in the queue while the cache
/// stays under budget (a topic read and trimmed as fast as it is written).
#[test]
fn stale_arrivals_are_dropped_from_the_queue() {
    let budget = Arc::new(ReadCache::new(1 << 30));
    let t = TopicCache::new(budget.clone());
    for i in 0..100_000u64 {
        t.insert(Position::new(1, i), section(i));
        t.remove_below(Position::new(1, i + 1));
    }
    assert_eq!(budget.bytes(), 0);
    let queued = lock(&budget.arrivals).len();
    assert!(queued <= STALE_SLACK + 1, "{queued} arrivals queued");
}

/// Topics inserting, trimming and going away on several threads at once: the count of
/// bytes held stays what the maps hold, and the budget holds once the threads are done.
#[test]
fn concurrent_topics_keep_the_count_true() {
    let one = 12 + ENTRY_OVERHEAD;
    let budget = Arc::new(ReadCache::new(64 * one));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let budget = budget.clone();
            std::thread::spawn(move || {
                let mut kept = Vec::new();
                for round in 0..20u64 {
                    let c = TopicCache::new(budget.clone());
                    for i in 0..200u64 {
                        c.insert(Position::new(round, i), section(i));
                        if i % 50 == 49 {
                            c.remove_below(Position::new(round, i - 10));
                        }
                    }
                    if round % 2 == t % 2 {
                        kept.push(c);
                    }
                }
                kept
            })
        })
        .collect();
    let kept: Vec<TopicCache> = threads
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    let held: u64 = kept
        .iter()
        .flat_map(|c| {
            read(&c.map)
                .values()
                .map(|s| ReadCache::cost(s))
                .collect::<Vec<_>>()
        })
        .sum();
    assert_eq!(budget.bytes(), held);
    assert!(held <= 64 * one, "{held} bytes held");
    drop(kept);
    assert_eq!(budget.bytes(), 0);
    assert_eq!(budget.entries.load(Ordering::Relaxed), 0);
}
