//! The acked indexes of one partially acknowledged batch entry.

/// A bitset of acked message indexes inside one batch entry of `batch_size` messages.
///
/// ```
/// let mut b = cursor::BatchAcks::new(3);
/// assert!(b.set(0) && b.set(2) && !b.set(2));
/// assert_eq!(b.acked_indexes(), vec![0, 2]);
/// assert!(!b.is_complete());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchAcks {
    batch_size: u32,
    words: Vec<u64>,
    count: u32,
}

impl BatchAcks {
    /// No index acked yet, for a batch of `batch_size` messages (at least 1).
    pub fn new(batch_size: u32) -> Self {
        let batch_size = batch_size.max(1);
        BatchAcks {
            batch_size,
            words: vec![0; batch_size.div_ceil(64) as usize],
            count: 0,
        }
    }

    /// The batch size.
    pub fn batch_size(&self) -> u32 {
        self.batch_size
    }

    /// How many indexes are acked.
    pub fn acked_count(&self) -> u32 {
        self.count
    }

    /// Whether index `i` is acked (false when out of range).
    pub fn is_set(&self, i: u32) -> bool {
        i < self.batch_size && self.words[(i / 64) as usize] & (1 << (i % 64)) != 0
    }

    /// Marks index `i` acked; returns whether it was new. Out-of-range indexes are ignored
    /// (returns false); the cursor rejects them with an error before calling this.
    pub fn set(&mut self, i: u32) -> bool {
        if i >= self.batch_size || self.is_set(i) {
            return false;
        }
        self.words[(i / 64) as usize] |= 1 << (i % 64);
        self.count += 1;
        true
    }

    /// Whether every index is acked.
    pub fn is_complete(&self) -> bool {
        self.count == self.batch_size
    }

    /// The acked indexes in increasing order.
    pub fn acked_indexes(&self) -> Vec<u32> {
        (0..self.batch_size).filter(|&i| self.is_set(i)).collect()
    }

    pub(crate) fn words(&self) -> &[u64] {
        &self.words
    }

    /// Rebuilds from stored words; `None` if the words do not fit the batch size.
    pub(crate) fn from_words(batch_size: u32, words: Vec<u64>) -> Option<Self> {
        if batch_size == 0 || words.len() != batch_size.div_ceil(64) as usize {
            return None;
        }
        let tail = batch_size % 64;
        if tail != 0 && words.last().is_some_and(|w| w >> tail != 0) {
            return None;
        }
        let count = words.iter().map(|w| w.count_ones()).sum();
        Some(BatchAcks {
            batch_size,
            words,
            count,
        })
    }
}
