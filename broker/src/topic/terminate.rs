//! Terminated topics (Pulsar's `terminate`): once terminated, nothing is appended any more; a
//! subscription that has acknowledged everything has reached the end of the topic.

use std::sync::atomic::Ordering;

use cursor::Position;

use super::Topic;
use crate::storage::StorageError;
use crate::sync::lock;

impl Topic {
    /// Terminates the topic: recorded first (under `--data-dir`, so it survives a restart),
    /// then no entry is appended any more. Returns the last entry's position (the position
    /// before the first when the topic is empty), as Pulsar answers it. Terminating again is
    /// harmless.
    pub(crate) fn terminate(&self) -> Result<Position, StorageError> {
        let st = lock(&self.state);
        if !self.is_terminated() {
            self.catalog.record_terminated()?;
            self.terminated.store(true, Ordering::Release);
        }
        drop(st);
        Ok(self.last_position())
    }

    /// Whether the topic is terminated (one atomic load: asked per PRODUCER, per append and
    /// by the housekeeping thread).
    pub(crate) fn is_terminated(&self) -> bool {
        self.terminated.load(Ordering::Acquire)
    }
}
