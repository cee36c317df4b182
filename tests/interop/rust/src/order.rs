//! The applications' merged processing log and the per-key order check.

use std::{
    collections::{BTreeMap, HashSet},
    fmt::Write,
    sync::{Arc, Mutex},
};

use anyhow::{bail, Result};

/// One processing: what an application did with a message, in one global order.
#[derive(Clone, Debug)]
pub struct Event {
    /// Position in the log.
    pub index: usize,
    /// What happened (`recv`, `ack`, `close`, …).
    pub what: &'static str,
    /// The application (consumer name).
    pub consumer: String,
    /// The message's key.
    pub key: String,
    /// Its sequence number within the key.
    pub seq: u32,
    /// Its message id, `ledger:entry:batch`.
    pub id: String,
}

/// A log shared by the applications' tasks (appends under a lock).
#[derive(Clone, Default)]
pub struct ProcessingLog {
    events: Arc<Mutex<Vec<Event>>>,
}

impl ProcessingLog {
    /// Appends an event.
    pub fn add(
        &self,
        what: &'static str,
        consumer: &str,
        key: &str,
        seq: u32,
        id: (u64, u64, i32),
    ) {
        let mut g = self.events.lock().unwrap_or_else(|p| p.into_inner());
        let index = g.len();
        g.push(Event {
            index,
            what,
            consumer: consumer.to_owned(),
            key: key.to_owned(),
            seq,
            id: format!("{}:{}:{}", id.0, id.1, id.2),
        });
    }

    /// A copy of the events so far.
    pub fn snapshot(&self) -> Vec<Event> {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Events of kind `what` (by `consumer` when given).
    pub fn count(&self, what: &str, consumer: Option<&str>) -> usize {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|e| e.what == what && consumer.is_none_or(|c| e.consumer == c))
            .count()
    }

    /// Distinct `(key, seq)` with a `recv` event.
    pub fn distinct_received(&self) -> usize {
        let g = self.events.lock().unwrap_or_else(|p| p.into_inner());
        g.iter()
            .filter(|e| e.what == "recv")
            .map(|e| (&e.key, e.seq))
            .collect::<HashSet<_>>()
            .len()
    }

    /// The log as text, one event per line.
    pub fn render(&self) -> String {
        let mut s = String::new();
        for e in self.snapshot() {
            let _ = writeln!(
                s,
                "{}\t{}\t{}\t{}#{}\t{}",
                e.index, e.what, e.consumer, e.key, e.seq, e.id
            );
        }
        s
    }
}

/// Checks per-key order over processing events (`recv` events, in log order).
///
/// The first processing of seq `s` of key `K` must come after the first processing of every
/// seq below `s` of `K`. A second processing of a seq is allowed only for the `(key, seq)` in
/// `may_repeat` (the crate does not show the redelivery count, so a scenario names the copies
/// it expects to see again). Every key must reach `expected[K] - 1`. Returns (first
/// processings, repeats).
pub fn check_key_order(
    events: &[Event],
    expected: &BTreeMap<String, u32>,
    may_repeat: &HashSet<(String, u32)>,
) -> Result<(usize, usize)> {
    let mut done: BTreeMap<&str, i64> = expected.keys().map(|k| (k.as_str(), -1)).collect();
    let (mut first, mut again) = (0, 0);
    for e in events.iter().filter(|e| e.what == "recv") {
        let Some(d) = done.get_mut(e.key.as_str()) else {
            bail!("event {}: unexpected key {:?}", e.index, e.key);
        };
        let s = i64::from(e.seq);
        if s == *d + 1 {
            *d = s;
            first += 1;
        } else if s <= *d {
            if !may_repeat.contains(&(e.key.clone(), e.seq)) {
                bail!(
                    "event {}: {} processed {}#{} ({}) again (key {} already at #{})",
                    e.index,
                    e.consumer,
                    e.key,
                    e.seq,
                    e.id,
                    e.key,
                    d
                );
            }
            again += 1;
        } else {
            bail!(
                "event {}: {} processed {}#{} ({}) before {}#{} (per-key order broken)",
                e.index,
                e.consumer,
                e.key,
                e.seq,
                e.id,
                e.key,
                *d + 1
            );
        }
    }
    for (k, n) in expected {
        let d = done[k.as_str()];
        if d != i64::from(*n) - 1 {
            bail!("key {k}: processed up to #{d} of {n}");
        }
    }
    Ok((first, again))
}
