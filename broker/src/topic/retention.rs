//! Retention: which whole ledgers a topic drops, and when. Without a retention policy a
//! ledger goes once every subscription's mark-delete position has passed it (Pulsar's default
//! retention of 0), and a topic without subscriptions keeps a closed ledger for
//! [`NO_SUBSCRIPTION_KEEP_MS`]; a namespace's retention policy keeps consumed ledgers for a
//! time or up to a size, as Pulsar's `retentionTimeInMinutes` and `retentionSizeInMB` do.

use std::sync::Arc;

use cursor::{InMemoryLedger, Ledger, Position};
use tracing::debug;

use super::{Subscription, Topic};
use crate::sync::lock;

/// How long a closed ledger of a topic without subscriptions is kept: Pulsar, without a
/// retention policy, deletes it when it rolls over, which it does not do before
/// `managedLedgerMinLedgerRolloverTimeMinutes` (10 minutes by default).
pub(crate) const NO_SUBSCRIPTION_KEEP_MS: u64 = 10 * 60 * 1000;

/// A namespace's retention policy: consumed ledgers are kept until they closed longer than
/// `time_ms` ago or the kept ledgers exceed `size_bytes` (either: `None` is no limit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Retention {
    /// Keep for this long after the ledger closed (`None`: forever as far as time goes).
    pub time_ms: Option<u64>,
    /// Keep at most this many bytes of consumed ledgers (`None`: no size limit).
    pub size_bytes: Option<u64>,
}

/// Where a topic without subscriptions may drop its ledgers: below the first ledger that is
/// still being written or whose first entry is younger than [`NO_SUBSCRIPTION_KEEP_MS`].
fn no_subscription_boundary(ledger: &InMemoryLedger, now_ms: u64) -> Option<Position> {
    let last = ledger.last_position()?;
    let mut p = ledger.first_position();
    while let Some(first) = p.filter(|q| q.ledger_id < last.ledger_id) {
        let published = ledger.publish_time(first).unwrap_or(u64::MAX);
        if now_ms.saturating_sub(published) < NO_SUBSCRIPTION_KEEP_MS {
            return Some(Position::new(first.ledger_id, 0));
        }
        p = ledger.next_position(Position::new(first.ledger_id + 1, 0).before());
    }
    Some(Position::new(last.ledger_id, 0))
}

/// Of the consumed ledgers below `below`, where the retention policy lets the topic drop
/// them: the oldest go while the oldest closed more than `time_ms` ago or the consumed
/// ledgers kept exceed `size_bytes`. A ledger's close time is its successor's first publish
/// time.
fn retention_boundary(
    ledger: &InMemoryLedger,
    below: Position,
    now_ms: u64,
    r: Retention,
) -> Position {
    let consumed: Vec<(u64, u64)> = ledger
        .ledger_totals()
        .into_iter()
        .filter(|(id, _)| *id < below.ledger_id)
        .map(|(id, t)| (id, t.bytes))
        .collect();
    let mut kept: u64 = consumed.iter().map(|(_, b)| b).sum();
    let mut boundary = match consumed.first() {
        Some((id, _)) => Position::new(*id, 0),
        None => return below,
    };
    for (id, bytes) in consumed {
        let closed = ledger
            .next_position(Position::new(id + 1, 0).before())
            .and_then(|p| ledger.publish_time(p))
            .unwrap_or(now_ms);
        let expired = r
            .time_ms
            .is_some_and(|t| now_ms.saturating_sub(closed) >= t);
        let over = r.size_bytes.is_some_and(|s| kept > s);
        if !(expired || over) {
            break;
        }
        kept -= bytes;
        boundary = Position::new(id + 1, 0);
    }
    boundary
}

impl Topic {
    /// Retention: drops whole ledgers (metadata, payloads and the ledger's log file) once
    /// every subscription's mark-delete position has moved past them, as Pulsar deletes
    /// consumed ledgers, or later under a retention policy (`retention`). Entries of the ledger
    /// being consumed stay (a Reader from the earliest message still finds them). A topic
    /// without subscriptions treats its closed ledgers as consumed under a retention policy;
    /// without one it keeps them for [`NO_SUBSCRIPTION_KEEP_MS`] after their first entry's
    /// publish time, as Pulsar does. `now_ms` is the wall clock.
    pub(crate) fn trim(&self, now_ms: u64, retention: Option<Retention>) {
        // Under the state lock, so no subscription is created (at the earliest entry) and no
        // cursor is reset (see `Topic::reset`) between choosing the boundary and trimming.
        let mut st = lock(&self.state);
        let subs: Vec<Arc<Subscription>> = st.subs.values().cloned().collect();
        let min = subs
            .iter()
            .map(|s| s.runtime.cursor_view().mark_delete)
            .min();
        let below = {
            let ledger = self.ledger.read();
            let consumed = match (min, retention) {
                (Some(min), _) => Some(Position::new(min.next().ledger_id, 0)),
                (None, Some(_)) => ledger
                    .last_position()
                    .map(|l| Position::new(l.ledger_id, 0)),
                (None, None) => no_subscription_boundary(&ledger, now_ms),
            };
            match (consumed, retention) {
                (None, _) => return,
                (Some(b), None) => b,
                (Some(b), Some(r)) => retention_boundary(&ledger, b, now_ms, r),
            }
        };
        // Whole ledgers are taken out under the write lock (they move without touching their
        // entries) and freed here, after the lock, on the housekeeping thread: freeing 50,000
        // entries under the lock would stall every subscription's reads for milliseconds.
        let old_entries = {
            let mut ledger = self.ledger.write();
            if ledger.first_position().is_none_or(|f| f >= below) {
                return;
            }
            ledger.split_off_below(below)
        };
        st.chunks.retain(|_, ps| {
            ps.retain(|p| *p >= below);
            !ps.is_empty()
        });
        drop(st);
        self.entries.delete_below(below);
        let dropped = old_entries.len();
        drop(old_entries);
        if dropped > 0 {
            debug!(topic = %self.name, dropped, below = %below, subscriptions = subs.len(), "entries trimmed");
        }
    }
}
