//! Reads as requests: a delivery (on a dispatch worker) takes an entry's payload only from
//! memory ([`Topic::payload_cached`]); an entry on the disk becomes a [`ReadRequest`] that the
//! topic's [`Runtimes`](super::Runtimes) runs where IO may (the shell's reader thread; the
//! stepped broker's driver), and its completion carries the payloads read (or the error) back
//! to the delivery, which sends them without asking the store again.

use std::sync::Arc;

use bytes::Bytes;
use cursor::Position;

use super::Topic;
use crate::storage::{Cached, StorageError};

/// What a read request gives back: the payload section of each entry read, in position order
/// (an entry no longer stored is left out), or the first error.
pub(crate) type ReadOutcome = Result<Vec<(Position, Bytes)>, StorageError>;

/// The entries a delivery could not take from memory, and what to call once they were read
/// (or could not be).
pub(crate) struct ReadRequest {
    pub topic: Arc<Topic>,
    /// In position order.
    pub positions: Vec<Position>,
    /// Called once, with what was read.
    pub done: Box<dyn FnOnce(ReadOutcome) + Send>,
}

impl ReadRequest {
    /// Reads the entries (the file store also keeps what it reads in its cache) and completes
    /// the request with them. The IO: only the shell and the stepped driver call it.
    pub(crate) fn run(self) {
        let ReadRequest {
            topic,
            positions,
            done,
        } = self;
        let mut read = Vec::with_capacity(positions.len());
        for p in positions {
            match topic.payload(p) {
                Ok(Some(section)) => read.push((p, section)),
                Ok(None) => {}
                Err(e) => return done(Err(e)),
            }
        }
        done(Ok(read));
    }
}

impl std::fmt::Debug for ReadRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadRequest")
            .field("topic", &self.topic.name)
            .field("positions", &self.positions.len())
            .finish()
    }
}

impl Topic {
    /// The payload section of the entry at `p` if it is in memory, without IO: what a
    /// delivery takes.
    pub(crate) fn payload_cached(&self, p: Position) -> Cached {
        self.entries.read_cached(p)
    }

    /// Asks for `request` to be run where IO may (see [`ReadRequest::run`]).
    pub(crate) fn request_read(&self, request: ReadRequest) {
        self.runtimes.read(request);
    }
}
