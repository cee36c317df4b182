//! Admin operations over the broker's REST API: the subscription's cursor from
//! `internalStats`, and skip / clear-backlog / expiry / backlog-quota eviction, whose
//! mark-delete move records what it dropped (and tells a client that nacked a dropped entry).
//!
//! Eviction is Pulsar's: a namespace backlog quota with `consumer_backlog_eviction`
//! (`destination_storage` for a size, `message_age` for an age), applied by one housekeeping
//! pass and then removed. Pulsar has no quota by message count, so an eviction down to `n`
//! messages is the REST skip of the messages above `n`.

use std::ops::Bound::{Excluded, Included};

use client::EntryId;
use cursor::Position;

use super::frames::parse_position;
use super::{Run, SUB_PATH};
use crate::sim::scenario::Evict;

/// The namespace's backlog-quota REST path.
const QUOTA_PATH: &str = "/admin/v2/namespaces/public/default/backlogQuota";

impl Run {
    /// The JSON the topic's admin `GET …/sim/<what>` answers (`None` unless 200).
    fn topic_json(&self, what: &str) -> Option<serde_json::Value> {
        let q = format!("/admin/v2/persistent/public/default/sim/{what}");
        let (status, body) = self.b.admin("GET", &q, b"");
        if status != 200 {
            return None;
        }
        serde_json::from_slice(&body).ok()
    }

    /// The subscription's mark-delete position and backlog (entries), from `internalStats`.
    pub(super) fn cursor(&self) -> Option<(Position, u64)> {
        let stats = self.topic_json("internalStats")?;
        let cursor = &stats["cursors"]["sim"];
        let md = parse_position(cursor["markDeletePosition"].as_str()?)?;
        let backlog = cursor["numberOfEntriesSinceFirstNotAckedMessage"].as_u64()?;
        Some((md, backlog))
    }

    /// The subscription's backlog in messages and in bytes, from the topic's `stats`.
    pub(super) fn backlog(&self) -> Option<(u64, u64)> {
        let stats = self.topic_json("stats")?;
        let sub = &stats["subscriptions"]["sim"];
        Some((sub["msgBacklog"].as_u64()?, sub["backlogSize"].as_u64()?))
    }

    /// Backlog-quota eviction as `e` asks (see the module doc for how each kind is applied).
    pub(super) fn evict(&mut self, e: Evict) {
        match e {
            Evict::Count(n) => {
                let above = self.backlog().map_or(0, |(m, _)| m.saturating_sub(n));
                if above == 0 {
                    self.log(format!("evict count={n}: backlog within it"));
                    return;
                }
                self.admin(
                    &format!("evict count={n} as skip {above}"),
                    &format!("skip/{above}"),
                );
            }
            Evict::Size(b) => self.quota(
                &format!("evict size={b}"),
                "destination_storage",
                &format!(
                    r#"{{"limitSize":{b},"limitTime":-1,"policy":"consumer_backlog_eviction"}}"#
                ),
            ),
            Evict::Age(a) => {
                let secs = a.div_ceil(1000);
                self.quota(
                    &format!("evict age={a}ms as {secs}s"),
                    "message_age",
                    &format!(r#"{{"limitSize":-1,"limitTime":{secs},"policy":"consumer_backlog_eviction"}}"#),
                );
            }
        }
    }

    /// Sets the namespace's backlog quota of `kind` to `body`, lets one housekeeping pass
    /// enforce it, and removes it.
    fn quota(&mut self, what: &str, kind: &str, body: &str) {
        let target = format!("{QUOTA_PATH}?backlogQuotaType={kind}");
        self.mark_delete_move(what, |r| {
            let (status, answer) = r.b.admin("POST", &target, body.as_bytes());
            if !(200..=299).contains(&status) {
                return (status, answer);
            }
            r.b.housekeeping();
            r.b.admin("DELETE", &target, b"")
        });
    }

    /// Expiry of messages older than `age` ms, in the REST operation's whole seconds (rounded
    /// up: never a message younger than asked).
    pub(super) fn expire(&mut self, age: u64) {
        let secs = age.div_ceil(1000);
        self.admin(
            &format!("expire age={age}ms as {secs}s"),
            &format!("expireMessages/{secs}"),
        );
    }

    /// One admin REST operation on the subscription; what its mark-delete move passed over
    /// without an ack is recorded as dropped.
    pub(super) fn admin(&mut self, what: &str, op: &str) {
        let target = format!("{SUB_PATH}/{op}");
        self.mark_delete_move(what, |r| r.b.admin("POST", &target, b""));
    }

    /// Runs `op` (REST requests; the last one's status and body), and records what the
    /// subscription's mark-delete move passed over without an ack as dropped.
    fn mark_delete_move(&mut self, what: &str, op: impl FnOnce(&Self) -> (u16, Vec<u8>)) {
        let before = self.cursor();
        let (status, body) = op(self);
        let after = self.cursor();
        let moved = matches!((before, after), (Some(a), Some(b)) if b.0 > a.0);
        let (Some((from, _)), Some((to, _)), 200..=299, true) = (before, after, status, moved)
        else {
            let body = String::from_utf8_lossy(&body).into_owned();
            self.log(format!(
                "admin {what}: status {status}, mark-delete unchanged {body}"
            ));
            return;
        };
        let dropped: Vec<Position> = self
            .published
            .range((Excluded(from), Included(to)))
            .map(|(p, _)| *p)
            .filter(|p| !self.acked.contains(p))
            .collect();
        let list: Vec<String> = dropped.iter().map(Position::to_string).collect();
        self.log(format!(
            "admin {what}: mark-delete {from} -> {to} dropped [{}]",
            list.join(" ")
        ));
        for p in dropped {
            if self.dropped.insert(p) {
                self.last_progress = self.now;
            }
            self.order.dropped(p);
            if let Some(name) = self.nacked_by.remove(&p) {
                let now = self.now;
                let known = self.cons.get_mut(&name).is_some_and(|c| {
                    c.client
                        .on_dropped_by_broker(now, EntryId::new(p.ledger_id, p.entry_id))
                });
                self.log(format!(
                    "client {name}: nacked {p} dropped by the broker (known={known})"
                ));
                self.pump(&name);
                self.try_start(&name);
            }
        }
        // Every delivery the operation's steps made, then what the move dropped (Shared).
        self.poll_all();
        if self.cleans_on_move {
            self.model.passed(to);
        }
    }
}
