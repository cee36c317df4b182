//! The end of a broker run: whether the backlog drained, a loss (entries neither acked nor
//! dropped with an empty backlog) or a stall (with the broker's `whyBlocked` for the key), the
//! scenario's `expect` lines, and the [`RunResult`].

use std::ops::Bound::{Excluded, Included, Unbounded};

use cursor::Position;

use super::{Run, SUB_PATH, TOPIC};
use crate::sim::check::{key_str, ViolationKind};
use crate::sim::scenario::{Expect, Scenario};
use crate::sim::threads::Skipped;
use crate::sim::world::RunResult;

impl Run {
    /// The cursor never passes an entry that was neither acked nor dropped by a recorded
    /// operation: after every round of steps (and the acks it answered), the subscription's
    /// mark-delete position against the entries published up to it.
    pub(super) fn check_cursor_passed(&mut self) {
        let Some(md) = self.b.mark_delete(TOPIC, "sim") else {
            return;
        };
        if self.checked_md.is_some_and(|c| md <= c) {
            return;
        }
        let from = self.checked_md.map_or(Unbounded, Excluded);
        let bad = self
            .published
            .range((from, Included(md)))
            .map(|(p, _)| *p)
            .find(|p| !self.acked.contains(p) && !self.dropped.contains(p));
        let Some(q) = bad else {
            self.checked_md = Some(md);
            return;
        };
        let detail = format!(
            "mark-delete is {md}, at or past {q}, which was neither acked nor dropped by a recorded operation"
        );
        self.violate_at(ViolationKind::CursorPassed, q, vec![md.to_string()], detail);
    }

    /// After every round of steps and the frames they produced: the model of who holds what
    /// (see [`model`](super::model)) against the subscription's dispatcher.
    pub(super) fn check_model(&mut self) {
        if !self.violations.is_empty() {
            return;
        }
        let Some(h) = self.b.holdings(TOPIC, "sim") else {
            return;
        };
        if let Err(m) = self.model.check(&h) {
            self.violate(
                ViolationKind::Model,
                None,
                m.positions,
                m.consumers,
                m.detail,
            );
        }
    }

    /// After every round of steps: no dispatcher loop failed to settle (more commands for one
    /// event, or more productive steps in a row, than a healthy loop needs).
    pub(super) fn check_livelock(&mut self) {
        if let Some((topic, sub, how)) = self.b.livelock() {
            let d = format!("{topic} subscription {sub}: {how}");
            self.simple(ViolationKind::Livelock, d);
        }
    }

    /// Idle-replay liveness, after every round of broker steps: a subscription whose
    /// dispatcher has nothing scheduled (no timer, no read in flight, no consumer paused) and
    /// still has an entry in replay that nothing holds back sits on work that no later input
    /// is bound to unblock: a stall, even if unrelated traffic would unstick it later. Chunked
    /// entries are not judged (their pins have rules of their own).
    pub(super) fn check_replay_idle(&mut self) {
        let Some((_, sub, p)) = self.b.replay_idle() else {
            return;
        };
        if self.chunks.contains_key(&p) {
            return;
        }
        let detail = format!(
            "subscription {sub}: the dispatcher went idle (no read in flight, no timer) with {p} in replay although nothing held it back (first of its key, its consumer had permits)"
        );
        self.violate_at(ViolationKind::Stall, p, Vec::new(), detail);
    }

    /// A violation about the entry at `p` (its key from what was published), then `more`
    /// positions.
    fn violate_at(&mut self, kind: ViolationKind, p: Position, more: Vec<String>, detail: String) {
        let key = self.published.get(&p).cloned().flatten();
        let positions = std::iter::once(p.to_string()).chain(more).collect();
        self.violate(
            kind,
            key.map(|k| key_str(&k)),
            positions,
            Vec::new(),
            detail,
        );
    }

    /// After the last step: whether the run is over (drained, lost, or stalled).
    pub(super) fn drained(&mut self, housekeeping: bool, last: u64) -> bool {
        let done = self
            .published
            .keys()
            .all(|p| self.acked.contains(p) || self.dropped.contains(p));
        if !done && !housekeeping {
            return self.stalled(last);
        }
        let Some((_, backlog)) = self.cursor() else {
            return self.stalled(last);
        };
        match (done, backlog) {
            (true, 0) => {
                self.log("backlog drained".into());
                true
            }
            (false, 0) => {
                let lost: Vec<String> = self
                    .published
                    .keys()
                    .filter(|p| !self.acked.contains(p) && !self.dropped.contains(p))
                    .map(Position::to_string)
                    .collect();
                let detail = format!("{} published entries are neither acked nor dropped by a recorded operation, and the broker's backlog is empty", lost.len());
                self.violate(
                    ViolationKind::Loss,
                    None,
                    lost.into_iter().take(10).collect(),
                    Vec::new(),
                    detail,
                );
                true
            }
            _ => self.stalled(last),
        }
    }

    pub(super) fn stalled(&mut self, last: u64) -> bool {
        let quiet_since = last.max(self.last_progress);
        let why = if self.now > last.saturating_add(self.cfg.drain_bound) {
            "the backlog did not drain within the bound".to_string()
        } else if self.now > quiet_since.saturating_add(self.cfg.stall_window) {
            format!(
                "no entry was acked or dropped for {} ms",
                self.now - quiet_since
            )
        } else {
            return false;
        };
        let first = self
            .published
            .iter()
            .find(|(p, _)| !self.acked.contains(p) && !self.dropped.contains(p))
            .map(|(p, k)| (*p, k.clone()));
        let backlog = self.cursor().map_or(0, |c| c.1);
        let mut detail = format!("{why}: the broker's backlog is {backlog} entries");
        let mut key = None;
        if let Some((p, k)) = first {
            detail.push_str(&format!(
                "; the first entry neither acked nor dropped is {p}"
            ));
            if let (true, Some(k)) = (self.key_shared, k) {
                let q = format!("{SUB_PATH}/whyBlocked?key={}", key_str(&k));
                let (_, body) = self.b.admin("GET", &q, b"");
                let why = String::from_utf8_lossy(&body);
                let why = why.split_whitespace().collect::<Vec<_>>().join(" ");
                detail.push_str(&format!("; whyBlocked: {why}"));
                key = Some(key_str(&k));
            }
        }
        self.violate(ViolationKind::Stall, key, Vec::new(), Vec::new(), detail);
        true
    }

    pub(super) fn check_expectations(&mut self, expects: &[Expect]) {
        for e in expects {
            let failed = self.order.expectation_failure(e);
            if let Some(d) = failed {
                self.simple(ViolationKind::Expectation, d);
            }
        }
    }

    pub(super) fn result(mut self, scenario: &Scenario, seed: u64) -> (RunResult, Skipped) {
        self.log(format!(
            "end violations={} messages={} entries={} faults={}",
            self.violations.len(),
            self.messages,
            self.published.len(),
            self.faults
        ));
        let r = RunResult {
            scenario: scenario.name.clone(),
            seed,
            messages: self.messages,
            entries: self.published.len() as u64,
            keys: self.keys.len() as u64,
            faults: self.faults,
            violations: std::mem::take(&mut self.violations),
            log_hash: self.hash,
            log_lines: self.lines,
            sim_time: self.now,
            events: self.events,
            starts: self.order.starts,
            log_tail: self.tail.iter().cloned().collect(),
            log: self.full.take(),
        };
        (r, std::mem::take(&mut self.skipped))
    }
}
