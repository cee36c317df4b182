//! The invariants checked after every event and at the end of a run.

use super::*;

impl World {
    // ------------------------------------------------------------------ invariants

    /// The cursor never passes a position that was neither acked nor dropped.
    pub(super) fn check_cursor(&mut self) {
        let bad = {
            let g = lock(&self.cell);
            let md = g.cursor.mark_delete_position();
            let mut bad = None;
            let mut p = self.checked_md;
            while let Some(q) = g.ledger.next_position(p) {
                if q > md {
                    break;
                }
                if !self.acked.contains(&q) && !self.dropped.contains(&q) {
                    bad = Some((q, md));
                    break;
                }
                p = q;
            }
            if bad.is_none() && md > self.checked_md {
                self.checked_md = md;
            }
            bad
        };
        if let Some((q, md)) = bad {
            let v = Violation {
                kind: ViolationKind::CursorPassed,
                at: self.now,
                key: None,
                positions: vec![q.to_string(), md.to_string()],
                consumers: Vec::new(),
                detail: format!(
                    "mark-delete is {md}, past {q}, which was neither acked nor dropped by a recorded operation"
                ),
            };
            self.violate(v);
        }
    }

    /// Pending acks and draining refcounts against the reference model.
    pub(super) fn check_model(&mut self) {
        if !self.violations.is_empty() {
            return;
        }
        let ids: BTreeSet<ConsumerId> = self.d.consumer_ids().into_iter().collect();
        let model_ids: BTreeSet<ConsumerId> = self.model.keys().copied().collect();
        if ids != model_ids {
            self.simple_violation(
                ViolationKind::Model,
                format!("connected consumers {ids:?}, the model has {model_ids:?}"),
            );
            return;
        }
        let mut per_hash: BTreeMap<(ConsumerId, u32), u32> = BTreeMap::new();
        let unacked: BTreeMap<ConsumerId, i64> = self
            .d
            .consumer_stats()
            .into_iter()
            .map(|c| (c.id, c.unacked))
            .collect();
        for id in ids {
            let expected_unacked: i64 = self.model[&id]
                .iter()
                .map(|p| i64::from(self.remaining.get(p).copied().unwrap_or(0)))
                .sum();
            let real_unacked = unacked.get(&id).copied().unwrap_or(0);
            if real_unacked != expected_unacked {
                let name = self.name_of(id);
                self.simple_violation(
                    ViolationKind::Model,
                    format!("{name} is charged {real_unacked} unacked messages, its pending entries hold {expected_unacked}"),
                );
                return;
            }
            let real = self.d.pending_positions(id);
            let expected = &self.model[&id];
            let same = real.len() == expected.len()
                && real.iter().zip(expected.iter()).all(|((p, _), q)| p == q);
            if !same {
                let real_set: BTreeSet<Position> = real.iter().map(|(p, _)| *p).collect();
                let extra: Vec<String> = real_set
                    .difference(expected)
                    .take(5)
                    .map(|p| p.to_string())
                    .collect();
                let missing: Vec<String> = expected
                    .difference(&real_set)
                    .take(5)
                    .map(|p| p.to_string())
                    .collect();
                let name = self.name_of(id);
                let v = Violation {
                    kind: ViolationKind::Model,
                    at: self.now,
                    key: None,
                    positions: extra.iter().chain(missing.iter()).cloned().collect(),
                    consumers: vec![name.clone()],
                    detail: format!(
                        "pending acks of {name} differ from the model: unexpected [{}], missing [{}]",
                        extra.join(" "),
                        missing.join(" ")
                    ),
                };
                self.violate(v);
                return;
            }
            for (_, h) in real {
                *per_hash.entry((id, h)).or_insert(0) += 1;
            }
        }
        {
            let real = self.d.stats().chunk_pins;
            if real != self.pins.len() {
                let detail = format!(
                    "the chunk assignor holds {real} pins, the model {} ({:?})",
                    self.pins.len(),
                    self.pins.keys().take(5).collect::<Vec<_>>()
                );
                self.simple_violation(ViolationKind::Model, detail);
                return;
            }
        }
        for (hash, owner, refs) in self.d.draining_hashes() {
            let pending = per_hash.get(&(owner, hash)).copied().unwrap_or(0);
            if pending != refs {
                let name = self.name_of(owner);
                let v = Violation {
                    kind: ViolationKind::Model,
                    at: self.now,
                    key: None,
                    positions: Vec::new(),
                    consumers: vec![name.clone()],
                    detail: format!(
                        "hash {hash} drains on {name} with {refs} references, but {name} has {pending} pending entries of it"
                    ),
                };
                self.violate(v);
                return;
            }
        }
    }

    /// Idle-replay liveness, after every broker step: when the dispatcher has nothing left to
    /// do (no command, no read in flight, no timer armed) and still has an entry in replay that
    /// nothing holds back ([`Dispatcher::replay_ready`]: first of its key, the key not draining
    /// or held by a nack, its consumer with permits), it sits on work that no later input is
    /// bound to unblock: a stall, even if unrelated traffic would unstick it later. Chunked
    /// entries are not judged (their pins have rules of their own).
    pub(super) fn check_replay_idle(&mut self) {
        if self.reads_in_flight > 0 || self.d.poll_timeout().is_some() {
            return;
        }
        let Some(p) = self.d.replay_ready() else {
            return;
        };
        let meta = lock(&self.cell).ledger.meta(p).cloned();
        if meta.as_ref().is_some_and(|m| m.chunk.is_some()) {
            return;
        }
        let key = meta.as_ref().and_then(Self::key_of);
        let st = self.d.stats();
        let v = Violation {
            kind: ViolationKind::Stall,
            at: self.now,
            key: key.map(|k| key_str(&k)),
            positions: vec![p.to_string()],
            consumers: self.connected(),
            detail: format!(
                "the dispatcher went idle (no read in flight, no timer) with {p} in replay although nothing held it back (first of its key, its consumer had permits); replay={} consumers={}",
                st.replay_size, st.consumers
            ),
        };
        self.violate(v);
    }

    pub(super) fn stall(&mut self, why: &str) {
        let (first, backlog, meta) = {
            let g = lock(&self.cell);
            let md = g.cursor.mark_delete_position();
            let mut p = md;
            let mut first = None;
            while let Some(q) = g.ledger.next_position(p) {
                if !g.cursor.is_acked(q) {
                    first = Some(q);
                    break;
                }
                p = q;
            }
            let meta = first.and_then(|q| g.ledger.meta(q).cloned());
            (first, g.cursor.backlog(&g.ledger).entries, meta)
        };
        let key = meta.as_ref().and_then(Self::key_of);
        let mut detail = format!("{why}: {backlog} entries left");
        if let Some(q) = first {
            let _ = write!(detail, "; the first unacked entry is {q}");
        }
        if let Some(c) = meta.as_ref().and_then(|m| m.chunk.as_ref()) {
            let _ = write!(
                detail,
                " (chunk {} of {} of {})",
                c.chunk_id, c.num_chunks, c.uuid
            );
        }
        if let Some(k) = &key {
            let _ = write!(detail, "; why blocked: {:?}", self.d.why_blocked_key(k));
        }
        if let Some(q) = first {
            let in_replay = self.d.replay_positions().iter().any(|(p, _)| *p == q);
            let owner = self.model_owner(q).map(|c| self.name_of(c));
            let _ = write!(
                detail,
                "; in replay: {in_replay}; pending on: {}",
                owner.as_deref().unwrap_or("nobody")
            );
        }
        let st = self.d.stats();
        let _ = write!(
            detail,
            "; replay={} orphan_chunks={} consumers={}",
            st.replay_size, st.orphan_chunks, st.consumers
        );
        let consumers: Vec<String> = self.connected();
        let v = Violation {
            kind: ViolationKind::Stall,
            at: self.now,
            key: key.map(|k| key_str(&k)),
            positions: first.map(|p| p.to_string()).into_iter().collect(),
            consumers,
            detail,
        };
        self.violate(v);
    }

    pub(super) fn check_no_loss(&mut self) {
        let lost: Vec<Position> = {
            let g = lock(&self.cell);
            let mut p = g.ledger.before_first();
            let mut lost = Vec::new();
            while let Some(q) = g.ledger.next_position(p) {
                if !self.acked.contains(&q) && !self.dropped.contains(&q) {
                    lost.push(q);
                }
                p = q;
            }
            lost
        };
        if !lost.is_empty() {
            let v = Violation {
                kind: ViolationKind::Loss,
                at: self.now,
                key: None,
                positions: lost.iter().take(10).map(|p| p.to_string()).collect(),
                consumers: Vec::new(),
                detail: format!(
                    "{} published entries were neither acked nor dropped by a recorded operation",
                    lost.len()
                ),
            };
            self.violate(v);
        }
    }

    pub(super) fn check_expectations(&mut self) {
        let expects = std::mem::take(&mut self.expects);
        for e in expects {
            let failed = self.order.expectation_failure(&e);
            if let Some(detail) = failed {
                self.simple_violation(ViolationKind::Expectation, detail);
            }
        }
    }
}
