//! Message deduplication (Pulsar's `brokerDeduplicationEnabled` and the namespace's
//! `deduplication` policy): per producer name, the highest sequence id stored; a SEND whose
//! sequence id is not above it is a duplicate (a producer resending after a reconnect), which
//! gets its receipt without being stored again.

use cursor::EntryMeta;

/// The highest sequence id stored per producer name (always kept, so that deduplication
/// turned on later knows what came before).
#[derive(Debug)]
pub(super) struct Sequences {
    /// ahash: looked up on every stored entry.
    highest: std::collections::HashMap<String, u64, ahash::RandomState>,
}

impl Default for Sequences {
    fn default() -> Sequences {
        Sequences {
            highest: std::collections::HashMap::with_hasher(ahash::RandomState::new()),
        }
    }
}

impl Sequences {
    /// Records a stored entry: a batch's last message, or a chunked message's last chunk.
    pub(super) fn record(&mut self, meta: &EntryMeta) {
        let (Some(name), Some(seq)) = (&meta.producer_name, meta.sequence_id) else {
            return;
        };
        if meta
            .chunk
            .as_ref()
            .is_some_and(|c| c.chunk_id + 1 < c.num_chunks)
        {
            return; // a chunked message counts once whole
        }
        let last = seq + u64::from(meta.messages()) - 1;
        match self.highest.get_mut(name.as_str()) {
            Some(h) => *h = (*h).max(last),
            None => {
                self.highest.insert(name.clone(), last);
            }
        }
    }

    /// Whether `meta` repeats what its producer stored already.
    pub(super) fn is_duplicate(&self, meta: &EntryMeta) -> bool {
        match (&meta.producer_name, meta.sequence_id) {
            (Some(name), Some(seq)) => self.highest.get(name.as_str()).is_some_and(|h| seq <= *h),
            _ => false,
        }
    }

    /// The highest sequence id stored for `producer`.
    pub(super) fn last(&self, producer: &str) -> Option<u64> {
        self.highest.get(producer).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cursor::ChunkMeta;

    fn meta(producer: &str, seq: u64, messages: u32) -> EntryMeta {
        let mut m = EntryMeta::simple(0, 1);
        m.producer_name = Some(producer.into());
        m.sequence_id = Some(seq);
        m.num_messages = messages;
        m
    }

    #[test]
    fn a_sequence_id_not_above_the_stored_one_is_a_duplicate() {
        let mut s = Sequences::default();
        assert!(!s.is_duplicate(&meta("p", 0, 1)));
        s.record(&meta("p", 0, 1));
        assert!(s.is_duplicate(&meta("p", 0, 1)));
        assert!(!s.is_duplicate(&meta("q", 0, 1)), "per producer name");
        s.record(&meta("p", 1, 5)); // a batch of 1..=5
        assert_eq!(s.last("p"), Some(5));
        assert!(s.is_duplicate(&meta("p", 5, 1)));
        assert!(!s.is_duplicate(&meta("p", 6, 1)));
        let mut chunk = meta("p", 6, 1);
        chunk.chunk = Some(ChunkMeta {
            uuid: "u".into(),
            chunk_id: 0,
            num_chunks: 2,
            total_size: 10,
        });
        s.record(&chunk);
        assert!(
            !s.is_duplicate(&chunk),
            "the next chunk of the message is not a duplicate"
        );
        chunk.chunk.as_mut().unwrap().chunk_id = 1;
        s.record(&chunk);
        assert!(s.is_duplicate(&chunk), "the whole message is stored");
    }
}
