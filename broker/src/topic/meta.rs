//! An entry's metadata, decoded from its stored section: at recovery, and when the topic's
//! ledger reads back metadata it no longer keeps in memory.

use std::sync::{Arc, OnceLock};

use cursor::{EntryMeta, MetaSource, Position};
use tracing::{error, warn};

use crate::storage::EntryStore;

/// How many of a topic's newest entries keep their decoded metadata in memory (about 200
/// bytes each): the entries consumers at the tail read next. Older entries' metadata is
/// decoded again from the stored section (through the read cache) when a cursor reads them.
pub(crate) const KEPT_METAS: usize = 16_384;

/// Why a stored section gives no metadata.
#[derive(Debug, thiserror::Error)]
pub(crate) enum MetaError {
    #[error("the section does not parse: {0}")]
    Section(#[from] wire::DecodeError),
    #[error("the metadata is invalid: {0}")]
    Metadata(#[from] wire::convert::MetadataError),
}

/// The metadata of a stored `0e01…` section, as the producer path computes it on SEND.
pub(crate) fn decode(section: &[u8]) -> Result<EntryMeta, MetaError> {
    let payload = wire::parse_section(section)?;
    Ok(wire::convert::message_info(&payload.metadata, payload.body().len())?.meta)
}

/// Reads a topic's entries' metadata back from its entry store. The ledger gets it before
/// recovery (so that recovering a long log keeps only the newest entries' metadata), and the
/// store once it is open; nothing is read back before that.
#[derive(Debug)]
pub(crate) struct StoredMeta {
    topic: String,
    entries: OnceLock<Arc<dyn EntryStore>>,
}

impl StoredMeta {
    /// A source for `topic`, whose store is not open yet.
    pub(crate) fn new(topic: String) -> StoredMeta {
        StoredMeta {
            topic,
            entries: OnceLock::new(),
        }
    }

    /// The topic's store, now open.
    pub(crate) fn opened(&self, entries: Arc<dyn EntryStore>) {
        let _ = self.entries.set(entries);
    }
}

impl MetaSource for StoredMeta {
    fn load(&self, p: Position) -> Option<Arc<EntryMeta>> {
        let section = match self.entries.get().map(|e| e.read(p)) {
            Some(Ok(Some(section))) => section,
            Some(Err(e)) => {
                // The ledger answers as if the entry were not there yet: the cursor's read
                // stops before it and reads it again later.
                warn!(topic = %self.topic, position = %p, error = %e, "an entry's metadata could not be read back; its read is tried again later");
                return None;
            }
            Some(Ok(None)) | None => {
                error!(topic = %self.topic, position = %p, "an entry's stored section is missing; the entry is not dispatched");
                return None;
            }
        };
        match decode(&section) {
            Ok(meta) => Some(Arc::new(meta)),
            Err(e) => {
                error!(topic = %self.topic, position = %p, error = %e, "a stored entry does not decode; the entry is not dispatched");
                None
            }
        }
    }
}
