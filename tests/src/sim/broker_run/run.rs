//! The time loop of a broker run: the scripted steps at their times, the wire in both
//! directions, the broker's dispatcher steps and housekeeping, each iteration at the next time
//! anything is due; the step dispatch (faults chosen by the fault stream); the event log and its
//! hash.

use super::{CState, Run, HOUSEKEEPING_MS, T0, TAIL};
use crate::sim::check::{Violation, ViolationKind};
use crate::sim::scenario::{Action, Evict, FaultKind, Step};

impl Run {
    pub(super) fn log(&mut self, line: String) {
        let line = format!("t={} {line}", self.now);
        for b in line.bytes().chain(std::iter::once(b'\n')) {
            self.hash ^= u64::from(b);
            self.hash = self.hash.wrapping_mul(0x0000_0100_0000_01B3);
        }
        self.lines += 1;
        if self.tail.len() == TAIL {
            self.tail.pop_front();
        }
        if let Some(full) = &mut self.full {
            full.push(line.clone());
        }
        self.tail.push_back(line);
    }

    pub(super) fn violate(
        &mut self,
        kind: ViolationKind,
        key: Option<String>,
        positions: Vec<String>,
        consumers: Vec<String>,
        detail: String,
    ) {
        let v = Violation {
            kind,
            at: self.now,
            key,
            positions,
            consumers,
            detail,
        };
        self.log(format!("VIOLATION {v}"));
        self.violations.push(v);
    }

    pub(super) fn simple(&mut self, kind: ViolationKind, detail: String) {
        self.violate(kind, None, Vec::new(), Vec::new(), detail);
    }

    pub(super) fn net(&mut self) -> u64 {
        let (a, b) = self.cfg.net;
        self.rng_net.range(a, b).max(1)
    }

    /// Runs the steps, then until every published entry is acked or dropped, a loss is seen,
    /// a stall bound passes, or the first violation.
    pub(super) fn run(&mut self, steps: &[Step]) {
        let mut i = 0;
        let mut house = 0;
        loop {
            self.events += 1;
            self.b.set_time(T0 + self.now);
            while i < steps.len() && steps[i].at <= self.now && self.violations.is_empty() {
                self.step(steps[i].clone());
                i += 1;
            }
            self.due_chunks();
            self.due_writes();
            self.due_reads();
            self.due_reopens();
            self.due_connections();
            self.poll_all();
            self.deliver_up();
            while self.b.step() {}
            self.note_reads();
            self.check_livelock();
            self.check_replay_idle();
            self.poll_all();
            self.check_cursor_passed();
            self.check_model();
            self.deliver_down();
            let housekeeping = self.now >= house;
            if housekeeping {
                self.housekeeping();
                house = self.now + HOUSEKEEPING_MS;
            }
            if !self.violations.is_empty() {
                return;
            }
            let quiet = i == steps.len()
                && self.later.is_empty()
                && self.write_due.is_empty()
                && self.read_due.is_empty()
                && self.producers_settled()
                && self.reads_fail_until.is_none();
            let last = steps.last().map_or(0, |s| s.at).max(self.last_publish);
            if quiet && self.drained(housekeeping, last) {
                return;
            }
            self.now = self.next_time(steps.get(i).map(|s| s.at), house);
        }
    }

    /// The next time anything is due (at least 1 ms on).
    pub(super) fn next_time(&self, step: Option<u64>, house: u64) -> u64 {
        let mut t = vec![step, Some(house), self.later.keys().next().map(|k| k.0)];
        t.push(self.write_due.first().copied());
        t.push(self.reads_fail_until);
        t.push(self.next_read());
        t.push(self.next_reopen());
        t.push(self.b.next_deadline().map(|d| d.saturating_sub(T0)));
        t.extend(self.dying.iter().map(|d| Some(d.0)));
        for c in self.cons.values() {
            t.push(c.up.front().map(|u| u.at));
            t.push(c.down.front().map(|d| d.0));
            t.push(c.busy.and_then(|b| b.done_at));
            t.push(c.reconnect_at);
            if c.conn.is_some() {
                t.push(c.client.next_timer());
            }
        }
        let next = t.into_iter().flatten().min().unwrap_or(house);
        next.max(self.now + 1)
    }

    /// Retention, TTLs, quotas and keep-alives every 100 ms.
    pub(super) fn housekeeping(&mut self) {
        self.b.housekeeping();
        let _ = self.producer.handle_timeout();
        self.producer_frames();
        let names: Vec<String> = self.cons.keys().cloned().collect();
        for n in names {
            if let Some(conn) = self.cons.get_mut(&n).and_then(|c| c.conn.as_mut()) {
                if let Err(e) = conn.handle_timeout() {
                    self.log(format!("broker closes {n}'s connection: {e:?}"));
                }
            }
        }
        self.poll_all();
    }

    pub(super) fn step(&mut self, s: Step) {
        if s.action.is_fault() || (matches!(s.action, Action::Join(..)) && s.at > 0) {
            self.faults += 1;
        }
        match s.action {
            Action::Join(name, o) => self.join(&name, o),
            Action::Leave(name) => self.leave(&name),
            Action::Crash(name) => self.crash(&name),
            Action::Restart | Action::RandomFault(FaultKind::Restart) => self.restart(),
            Action::Publish(p) => self.publish(&p),
            Action::Skip(n) => self.admin(&format!("skip {n}"), &format!("skip/{n}")),
            Action::Clear => self.admin("clear-backlog", "skip_all"),
            Action::Expire(age) => self.expire(age),
            Action::Ack(name, p) => self.manual_finish(&name, p, false),
            Action::Nack(name, p) => self.manual_finish(&name, p, true),
            Action::Auto(name) => self.auto(&name),
            Action::Evict(e) => self.evict(e),
            Action::RandomFault(k @ (FaultKind::Leave | FaultKind::Crash)) => {
                let live: Vec<String> = self
                    .cons
                    .iter()
                    .filter(|(_, c)| c.state == CState::Connected)
                    .map(|(n, _)| n.clone())
                    .collect();
                if live.len() < 2 {
                    self.faults -= 1;
                    self.log(format!(
                        "{k:?} skipped: only {} consumer(s) left",
                        live.len()
                    ));
                    let what = if k == FaultKind::Leave {
                        "leave (one consumer left)"
                    } else {
                        "crash (one consumer left)"
                    };
                    *self.skipped.entry(what).or_insert(0) += 1;
                    return;
                }
                let n = &live[self.rng_fault.below(live.len() as u64) as usize];
                if k == FaultKind::Leave {
                    self.leave(n);
                } else {
                    self.crash(n);
                }
            }
            Action::RandomFault(FaultKind::Skip) => {
                let n = self.rng_fault.range(1, 10);
                self.admin(&format!("skip {n}"), &format!("skip/{n}"));
            }
            Action::RandomFault(FaultKind::Clear) => self.admin("clear-backlog", "skip_all"),
            Action::RandomFault(FaultKind::Expire) => {
                let age = self.rng_fault.range(200, 2000);
                self.expire(age);
            }
            Action::RandomFault(FaultKind::Evict) => {
                // The world's draws: a policy, and an age for the last one.
                let which = self.rng_fault.below(3);
                let age = self.rng_fault.range(200, 2000);
                let (messages, bytes) = self.backlog().unwrap_or((0, 0));
                self.evict(match which {
                    0 => Evict::Count(messages / 2),
                    1 => Evict::Size(bytes / 2),
                    _ => Evict::Age(age),
                });
            }
            // Made concrete by `threads::concrete_joins`.
            Action::RandomFault(FaultKind::Join) => {}
        }
    }
}
