//! Real broker restarts: the run's temporary data directory (created for a run that can
//! restart, removed when the run ends, also when it fails or panics), and a `restart`: the
//! broker killed ([`SteppedBroker::crash`]), every connection lost, the same directory opened
//! again ([`SteppedBroker::open`]) at the virtual time. What the crash lost is read from the
//! cursor's store (the file the restarted broker reads back) and the recovered mark-delete: acks
//! the broker accepted after the cursor's last persist are no longer counted as accepted (they
//! may legitimately come back); admin drops the crash undid are logged.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use broker::stepped::SteppedBroker;
use cursor::{CursorStore, FileStore, PersistedState, Position};

use super::{Run, T0};
use crate::sim::check::ViolationKind;
use crate::sim::scenario::{Action, FaultKind, Step, StoreKind, WorldConfig};

/// Runs in this process so far: part of each data directory's name.
static RUNS: AtomicU64 = AtomicU64::new(0);

/// A run's data directory, removed when dropped.
pub(super) struct DataDir(PathBuf);

impl DataDir {
    /// Whether a run of these steps needs durable storage: it restarts the broker (a scripted
    /// `restart` or a random restart fault), or the scenario asks for `store=file`.
    pub(super) fn wanted(cfg: &WorldConfig, steps: &[Step]) -> bool {
        cfg.store == StoreKind::File
            || steps.iter().any(|s| {
                matches!(
                    s.action,
                    Action::Restart | Action::RandomFault(FaultKind::Restart)
                )
            })
    }

    /// A fresh, empty directory under the system's temporary directory, unique to this run:
    /// `sim-broker-<pid>-<scenario>-s<seed>-<n>`.
    pub(super) fn create(scenario: &str, seed: u64) -> Result<DataDir, String> {
        let name: String = scenario
            .chars()
            .map(
                |c| match c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    true => c,
                    false => '_',
                },
            )
            .collect();
        let n = RUNS.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let path = std::env::temp_dir().join(format!("sim-broker-{pid}-{name}-s{seed}-{n}"));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)
            .map_err(|e| format!("cannot create the broker's data directory {path:?}: {e}"))?;
        Ok(DataDir(path))
    }

    /// The directory.
    pub(super) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for DataDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The subscription's cursor as its store holds it under `dir` (what a restarted broker reads
/// back); `None` before the subscription's first persist.
fn stored_cursor(dir: &Path) -> Result<Option<PersistedState>, String> {
    let Ok(topics) = std::fs::read_dir(dir.join("topics")) else {
        return Ok(None);
    };
    let mut files: Vec<PathBuf> = topics
        .flatten()
        .map(|t| t.path().join("subscriptions").join("sim.cursor"))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    match files.as_slice() {
        [] => Ok(None),
        [file] => FileStore::open(file)
            .and_then(|mut s| s.load())
            .map_err(|e| format!("{}: {e}", file.display())),
        _ => Err(format!("{} cursor files for the subscription", files.len())),
    }
}

/// Whether the restarted broker holds the ack of `p`'s batch index `i` (`None`: the whole
/// entry): at or below its recovered mark-delete `md` (recovery moves it past entries the
/// broker no longer has, such as those trimmed after acks a crash lost: they cannot come back),
/// or acked in the stored cursor `s` above it.
fn holds(md: Option<Position>, s: Option<&PersistedState>, p: Position, i: Option<u32>) -> bool {
    if md.is_some_and(|md| p <= md) {
        return true;
    }
    let Some(s) = s else { return false };
    if p <= s.mark_delete || s.acked.contains(p) {
        return true;
    }
    let batch = s.batch_acks.get(&p);
    match i {
        Some(i) => batch.is_some_and(|b| b.is_set(i)),
        None => batch.is_some_and(|b| b.is_complete()),
    }
}

impl Run {
    /// A broker restart (see the module doc).
    pub(super) fn restart(&mut self) {
        let before = self.cursor().map(|c| c.0.to_string());
        self.log("broker restart: killed, every connection lost".into());
        let Some(dir) = self.bcfg.data_dir.clone() else {
            let d = "a restart without a data directory".to_string();
            return self.simple(ViolationKind::Model, d);
        };
        // A stand-in until the directory is open again (it never sees a connection).
        let stand_in = SteppedBroker::new(self.bcfg.clone(), T0 + self.now);
        std::mem::replace(&mut self.b, stand_in).crash();
        self.producer = self.b.connect("producer");
        // Held writes die with the broker: their SENDs were never receipted, and the producer
        // sends them again once it is back (`reconnect_producer`), as a client resends its
        // pending messages.
        self.reads_fail_until = None;
        self.producers_open.clear();
        self.lose_consumer_connections();
        let stored = match stored_cursor(&dir) {
            Ok(s) => s,
            Err(e) => {
                let d = format!("the crashed broker's cursor store is unreadable: {e}");
                return self.simple(ViolationKind::Model, d);
            }
        };
        match SteppedBroker::open_with(self.bcfg.clone(), T0 + self.now, self.ropts) {
            Ok(b) => {
                self.b = b;
                self.apply_read_mode();
            }
            Err(e) => {
                let d = format!("the broker did not open its data directory again: {e}");
                return self.simple(ViolationKind::Model, d);
            }
        }
        let after = self.cursor().map(|c| c.0);
        let stored_md = stored.as_ref().map(|s| s.mark_delete.to_string());
        let text = |p: Option<String>| p.unwrap_or_else(|| "-".into());
        self.log(format!(
            "broker open: cursor mark-delete {} before the crash, {} stored, {} recovered",
            text(before),
            text(stored_md),
            text(after.map(|p| p.to_string()))
        ));
        self.forget_lost_acks(after, stored.as_ref());
        if !self.unreceipted.is_empty() {
            self.log("producer: sends again what was not receipted".into());
        }
        self.reconnect_producer();
    }

    /// On Key_Shared, messages the client discarded (acked without handing them to an
    /// application: an orphan or expired chunked message) whose acks the crash lost come back
    /// and are processed for the first time, after later messages of their key: they are exempt
    /// from the first-start order rule, as a redelivered message is (reported as a note). Not the broker's doing:
    /// the world flags the same runs when it persists as seldom (`persist=1000`).
    fn exempt_discarded(&mut self, lost: &[(Position, Option<u32>)]) {
        if !self.key_shared {
            return; // no order to keep
        }
        let discarded: Vec<Position> = lost
            .iter()
            .filter(|(p, i)| i.is_none() && !self.inner_chunks.contains(p))
            .map(|(p, _)| *p)
            .filter(|p| self.order.first_start(*p).is_none())
            .collect();
        if discarded.is_empty() {
            return;
        }
        for p in &discarded {
            self.order.mark_delayed(*p);
        }
        let list: Vec<String> = discarded.iter().map(Position::to_string).collect();
        self.log(format!(
            "crash lost the acks of {} message(s) the client discarded [{}]: exempt from \
             first-start order",
            list.len(),
            list.join(" ")
        ));
        let note = "order: a client-discarded message whose ack a crash lost (exempt from \
                    first-start order)";
        *self.skipped.entry(note).or_insert(0) += discarded.len() as u64;
    }

    /// Acks the broker accepted that the crash lost (the stored cursor does not hold them): no
    /// longer accepted, their entries no longer acked (they come back and are acked again).
    fn forget_lost_acks(&mut self, md: Option<Position>, stored: Option<&PersistedState>) {
        let lost: Vec<(Position, Option<u32>)> = self
            .broker_acked
            .iter()
            .filter(|(p, i)| !holds(md, stored, *p, *i))
            .copied()
            .collect();
        for a in &lost {
            self.broker_acked.remove(a);
        }
        let batches = &self.batches;
        let lost_entries: Vec<Position> = self
            .acked
            .iter()
            .filter(|p| {
                let n = batches.get(p).copied().unwrap_or(1);
                let all = n > 1 && (0..n).all(|i| holds(md, stored, **p, Some(i)));
                !holds(md, stored, **p, None) && !all
            })
            .copied()
            .collect();
        for p in &lost_entries {
            self.acked.remove(p);
        }
        let list: Vec<String> = lost
            .iter()
            .map(|(p, i)| match i {
                Some(i) => format!("{p}:{i}"),
                None => p.to_string(),
            })
            .collect();
        self.log(format!(
            "crash lost {} accepted ack(s) [{}], {} acked entries",
            lost.len(),
            list.join(" "),
            lost_entries.len()
        ));
        self.exempt_discarded(&lost);
        let undone: Vec<String> = self
            .dropped
            .iter()
            .filter(|p| !holds(md, stored, **p, None))
            .map(Position::to_string)
            .collect();
        if !undone.is_empty() {
            self.log(format!(
                "crash undid admin drops: {} dropped entries are backlog again [{}]",
                undone.len(),
                undone.join(" ")
            ));
        }
    }
}
