//! Positions split into (segment, offset).

/// A position split into `(segment, offset)`, e.g. Pulsar's `(ledger id, entry id)`.
///
/// [`PendingAcks`](crate::PendingAcks) is keyed by it and stores it compactly: one bucket per
/// segment, entries of a segment as offsets from a base. Implemented for `(u64, u64)` (segment,
/// offset) and for `u64` (a single segment 0, the value is the offset).
///
/// Contract for your own implementations: `Ord` must agree with the lexicographic order of
/// `(segment(), offset())`, and `from_parts(p.segment(), p.offset()) == p` for every `p`. The
/// map only calls `from_parts` with parts of positions it was given.
pub trait SegmentedPosition: Copy + Ord + core::fmt::Debug + Send + Sync + 'static {
    /// The segment (ledger) this position lies in.
    fn segment(&self) -> u64;
    /// The offset (entry id) inside the segment.
    fn offset(&self) -> u64;
    /// Rebuilds a position from its parts.
    fn from_parts(segment: u64, offset: u64) -> Self;
}

impl SegmentedPosition for (u64, u64) {
    #[inline]
    fn segment(&self) -> u64 {
        self.0
    }
    #[inline]
    fn offset(&self) -> u64 {
        self.1
    }
    #[inline]
    fn from_parts(segment: u64, offset: u64) -> Self {
        (segment, offset)
    }
}

impl SegmentedPosition for u64 {
    #[inline]
    fn segment(&self) -> u64 {
        0
    }
    #[inline]
    fn offset(&self) -> u64 {
        *self
    }
    /// The segment is always 0 for `u64` positions, so only `offset` is kept.
    #[inline]
    fn from_parts(_segment: u64, offset: u64) -> Self {
        offset
    }
}

#[cfg(test)]
mod tests {
    use super::SegmentedPosition;

    #[test]
    fn pair_round_trips_and_orders_like_its_parts() {
        let p = (7u64, 9u64);
        assert_eq!((p.segment(), p.offset()), (7, 9));
        assert_eq!(<(u64, u64)>::from_parts(7, 9), p);
        assert!((1u64, u64::MAX) < (2u64, 0u64));
    }

    #[test]
    fn u64_is_a_single_segment() {
        assert_eq!(5u64.segment(), 0);
        assert_eq!(5u64.offset(), 5);
        assert_eq!(u64::from_parts(0, 5), 5);
    }
}
