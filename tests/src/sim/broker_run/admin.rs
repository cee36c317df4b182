//! Admin operations over the broker's REST API: the subscription's cursor from
//! `internalStats`, and skip / clear-backlog / expiry, whose mark-delete move records what it
//! dropped (and tells a client that nacked a dropped entry).

use std::ops::Bound::{Excluded, Included};

use client::EntryId;
use cursor::Position;

use super::frames::parse_position;
use super::{Run, SUB_PATH};

impl Run {
    /// The subscription's mark-delete position and backlog (entries), from `internalStats`.
    pub(super) fn cursor(&self) -> Option<(Position, u64)> {
        let q = "GET /admin/v2/persistent/public/default/sim/internalStats HTTP/1.1\r\nHost: sim\r\n\r\n";
        let (status, body) = self.b.admin(q.as_bytes());
        if status != 200 {
            return None;
        }
        let stats: serde_json::Value = serde_json::from_slice(&body).ok()?;
        let cursor = &stats["cursors"]["sim"];
        let md = parse_position(cursor["markDeletePosition"].as_str()?)?;
        let backlog = cursor["numberOfEntriesSinceFirstNotAckedMessage"].as_u64()?;
        Some((md, backlog))
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
        let before = self.cursor();
        let req =
            format!("POST {SUB_PATH}/{op} HTTP/1.1\r\nHost: sim\r\nContent-Length: 0\r\n\r\n");
        let (status, body) = self.b.admin(req.as_bytes());
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
        self.poll_all();
    }
}
