//! The sticky key of an entry and its hash, bit-compatible with Pulsar's StickyKeyConsumerSelector and Murmur3_32Hash.

use std::borrow::Cow;

use base64::alphabet;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::Engine as _;
use tracing::warn;

/// The key used when an entry has no ordering key, no partition key and no producer/sequence pair.
pub const NONE_KEY: &[u8] = b"NONE_KEY";

/// MurmurHash3 x86_32 of `data` with `seed` (the standard algorithm, unmasked).
///
/// ```
/// assert_eq!(dispatcher::murmur3_x86_32(b"hello", 0), 0x248b_fa47);
/// ```
pub fn murmur3_x86_32(data: &[u8], seed: u32) -> u32 {
    const C1: u32 = 0xcc9e_2d51;
    const C2: u32 = 0x1b87_3593;
    let mut h = seed;
    let mut blocks = data.chunks_exact(4);
    for b in &mut blocks {
        let mut k = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        k = k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
        h ^= k;
        h = h.rotate_left(13).wrapping_mul(5).wrapping_add(0xe654_6b64);
    }
    let tail = blocks.remainder();
    if !tail.is_empty() {
        let mut k = 0u32;
        for (i, &byte) in tail.iter().enumerate() {
            k |= u32::from(byte) << (8 * i);
        }
        k = k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
        h ^= k;
    }
    // Pulsar (like the reference) mixes in the length as a 32-bit int.
    h ^= data.len() as u32;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    h
}

/// The entry-level metadata fields that decide the sticky key (as Pulsar reads them).
///
/// Build one from your entry metadata and pass it to [`sticky_key_bytes`]. `None` means the field
/// is absent; `Some` of an empty value is present (and hashes as the empty key).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyFields<'a> {
    /// `ordering_key`: used first, as raw bytes.
    pub ordering_key: Option<&'a [u8]>,
    /// `partition_key`: used when there is no ordering key.
    pub partition_key: Option<&'a str>,
    /// `partition_key_b64_encoded`: the partition key is base64 and is decoded before hashing.
    pub partition_key_b64: bool,
    /// Producer name; with `sequence_id` forms the fallback key `"<producer>-<sequence>"`.
    pub producer_name: Option<&'a str>,
    /// Sequence id (of the batch, for a batch entry).
    pub sequence_id: Option<u64>,
}

fn b64_engine() -> GeneralPurpose {
    // Java's basic decoder accepts missing padding; be as lenient as it is.
    GeneralPurpose::new(
        &alphabet::STANDARD,
        GeneralPurposeConfig::new()
            .with_decode_padding_mode(DecodePaddingMode::Indifferent)
            .with_decode_allow_trailing_bits(true),
    )
}

/// The sticky key bytes of an entry, in Pulsar's order.
///
/// 1. the ordering key, if present (borrowed);
/// 2. else the partition key: base64-decoded when `partition_key_b64` is set, otherwise its UTF-8
///    bytes. A flagged key that is not valid base64 falls back to its UTF-8 bytes, with a `warn`
///    event (Pulsar would fail the decode; we keep dispatching);
/// 3. else, when both are present, `producer_name + "-" + sequence_id`;
/// 4. else [`NONE_KEY`].
///
/// ```
/// use dispatcher::{sticky_key_bytes, KeyFields};
/// let f = KeyFields { producer_name: Some("producer-1"), sequence_id: Some(0), ..Default::default() };
/// assert_eq!(&*sticky_key_bytes(&f), b"producer-1-0");
/// ```
pub fn sticky_key_bytes<'a>(f: &KeyFields<'a>) -> Cow<'a, [u8]> {
    if let Some(k) = f.ordering_key {
        return Cow::Borrowed(k);
    }
    if let Some(pk) = f.partition_key {
        if f.partition_key_b64 {
            match b64_engine().decode(pk) {
                Ok(bytes) => return Cow::Owned(bytes),
                Err(e) => {
                    warn!(
                        partition_key = pk,
                        error = %e,
                        "partition key flagged base64 is not valid base64; hashing its utf-8 bytes"
                    );
                }
            }
        }
        return Cow::Borrowed(pk.as_bytes());
    }
    if let (Some(p), Some(seq)) = (f.producer_name, f.sequence_id) {
        return Cow::Owned(format!("{p}-{seq}").into_bytes());
    }
    Cow::Borrowed(NONE_KEY)
}

/// Murmur3 x86_32 of `key` with seed 0, masked to 31 bits (`& 0x7fffffff`), as Pulsar does.
///
/// ```
/// assert_eq!(dispatcher::key_hash31(b"NONE_KEY"), 504_741_539);
/// ```
pub fn key_hash31(key: &[u8]) -> u32 {
    murmur3_x86_32(key, 0) & 0x7fff_ffff
}

/// An inclusive range of hash slots, `[start, end]`.
///
/// Ranges handed out by this crate always satisfy `start <= end <= 65535`. Ranges built by callers
/// are validated where they matter (see the exclusive selector).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HashRange {
    /// First slot of the range.
    pub start: u32,
    /// Last slot of the range (inclusive).
    pub end: u32,
}

impl HashRange {
    /// The range `[start, end]` (not validated).
    pub const fn new(start: u32, end: u32) -> Self {
        HashRange { start, end }
    }

    /// Number of slots in the range (`end - start + 1`), 0 when inverted.
    pub const fn size(&self) -> u64 {
        if self.end < self.start {
            0
        } else {
            self.end as u64 - self.start as u64 + 1
        }
    }

    /// Whether `slot` lies in `[start, end]`.
    pub const fn contains(&self, slot: u32) -> bool {
        self.start <= slot && slot <= self.end
    }
}

impl std::fmt::Display for HashRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{}, {}]", self.start, self.end)
    }
}

/// The key range of the consistent-hashing selector: `[1, 65535]` (slot = `hash % 65535 + 1`).
pub const CONSISTENT_RANGE: HashRange = HashRange::new(1, 65535);
/// The key range of the auto-split and exclusive selectors: `[0, 65535]` (slot = `hash % 65536`,
/// 0 remapped to 1).
pub const FULL_RANGE: HashRange = HashRange::new(0, 65535);

/// The slot of a 31-bit hash in a selector's key range: `hash31 % size + start`, with 0 (Pulsar's
/// "hash not set" sentinel) remapped to 1.
///
/// An inverted range (`end < start`) is treated as the single slot `start` (then 0 → 1).
///
/// ```
/// use dispatcher::{key_hash31, slot, CONSISTENT_RANGE, FULL_RANGE};
/// assert_eq!(slot(key_hash31(b"NONE_KEY"), FULL_RANGE), 48_803);
/// assert_eq!(slot(key_hash31(b"NONE_KEY"), CONSISTENT_RANGE), 56_505);
/// ```
pub fn slot(hash31: u32, range: HashRange) -> u32 {
    let size = range.size();
    let s = if size == 0 {
        range.start
    } else {
        // start + (x % size) <= end, so it fits in u32.
        (u64::from(hash31) % size + u64::from(range.start)) as u32
    };
    if s == 0 {
        1
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VECTORS: &[(&str, u32, u32, u32)] = &[
        ("NONE_KEY", 504741539, 48803, 56505),
        ("", 0, 1, 1),
        ("a", 1009084850, 27058, 42456),
        ("A", 1423767502, 63438, 19628),
        ("hello", 613153351, 64071, 7892),
        ("key-0", 1664612543, 63679, 23544),
        ("key-1", 414258592, 5536, 11858),
        ("key-2", 1945654540, 21772, 51461),
        ("key-3", 2034982562, 24226, 55278),
        ("order-42", 1259446670, 41358, 60576),
        ("user:1001", 446218176, 49088, 55897),
        ("producer-1-0", 664740111, 8463, 18607),
        ("ключ", 442048578, 8258, 15004),
    ];

    #[test]
    fn murmur_standard_vectors() {
        assert_eq!(murmur3_x86_32(b"hello", 0), 0x248b_fa47);
        assert_eq!(
            murmur3_x86_32(b"The quick brown fox jumps over the lazy dog", 0),
            0x2e4f_f723
        );
        assert_eq!(murmur3_x86_32(b"", 0), 0);
        // Standard seeded vectors of MurmurHash3 x86_32.
        assert_eq!(murmur3_x86_32(b"", 1), 0x514e_28b7);
        assert_eq!(murmur3_x86_32(b"", 0xffff_ffff), 0x81f1_6f39);
    }

    #[test]
    fn pulsar_vectors_hash_and_both_slot_rules() {
        for &(key, h, full, consistent) in VECTORS {
            let got = key_hash31(key.as_bytes());
            assert_eq!(got, h, "hash of {key:?}");
            assert_eq!(slot(got, FULL_RANGE), full, "full-range slot of {key:?}");
            assert_eq!(
                slot(got, CONSISTENT_RANGE),
                consistent,
                "consistent slot of {key:?}"
            );
        }
    }

    #[test]
    fn k179888_is_remapped_from_zero() {
        let h = key_hash31(b"k179888");
        assert_eq!(h, 852_623_360);
        assert_eq!(h % 65536, 0);
        assert_eq!(slot(h, FULL_RANGE), 1);
    }

    #[test]
    fn slot_handles_degenerate_ranges() {
        assert_eq!(slot(12345, HashRange::new(7, 3)), 7);
        assert_eq!(slot(12345, HashRange::new(0, 0)), 1);
        assert_eq!(slot(u32::MAX, HashRange::new(0, u32::MAX)), u32::MAX);
        assert_eq!(slot(5, HashRange::new(10, 10)), 10);
    }

    #[test]
    fn sticky_key_resolution_order() {
        let all = KeyFields {
            ordering_key: Some(b"ok"),
            partition_key: Some("pk"),
            partition_key_b64: false,
            producer_name: Some("p"),
            sequence_id: Some(7),
        };
        assert_eq!(&*sticky_key_bytes(&all), b"ok");
        let no_ok = KeyFields {
            ordering_key: None,
            ..all
        };
        assert_eq!(&*sticky_key_bytes(&no_ok), b"pk");
        let fallback = KeyFields {
            partition_key: None,
            ..no_ok
        };
        assert_eq!(&*sticky_key_bytes(&fallback), b"p-7");
        let only_producer = KeyFields {
            sequence_id: None,
            ..fallback
        };
        assert_eq!(&*sticky_key_bytes(&only_producer), NONE_KEY);
        let only_seq = KeyFields {
            producer_name: None,
            sequence_id: Some(1),
            ..Default::default()
        };
        assert_eq!(&*sticky_key_bytes(&only_seq), NONE_KEY);
        assert_eq!(&*sticky_key_bytes(&KeyFields::default()), NONE_KEY);
        // A present but empty ordering key wins and hashes as the empty key.
        let empty_ok = KeyFields {
            ordering_key: Some(b""),
            ..all
        };
        assert_eq!(&*sticky_key_bytes(&empty_ok), b"");
    }

    #[test]
    fn fallback_key_matches_vector() {
        let f = KeyFields {
            producer_name: Some("producer-1"),
            sequence_id: Some(0),
            ..Default::default()
        };
        assert_eq!(key_hash31(&sticky_key_bytes(&f)), 664_740_111);
    }

    #[test]
    fn base64_partition_key_is_decoded() {
        // "a2V5LTA=" is base64 of "key-0".
        for pk in ["a2V5LTA=", "a2V5LTA"] {
            let f = KeyFields {
                partition_key: Some(pk),
                partition_key_b64: true,
                ..Default::default()
            };
            assert_eq!(&*sticky_key_bytes(&f), b"key-0", "{pk}");
        }
        // Not flagged: hashed as text.
        let f = KeyFields {
            partition_key: Some("a2V5LTA="),
            ..Default::default()
        };
        assert_eq!(&*sticky_key_bytes(&f), b"a2V5LTA=");
    }

    #[test]
    fn invalid_base64_falls_back_to_utf8() {
        let f = KeyFields {
            partition_key: Some("not base64!"),
            partition_key_b64: true,
            ..Default::default()
        };
        assert_eq!(&*sticky_key_bytes(&f), b"not base64!");
    }

    #[test]
    fn range_helpers() {
        assert_eq!(CONSISTENT_RANGE.size(), 65535);
        assert_eq!(FULL_RANGE.size(), 65536);
        assert_eq!(HashRange::new(3, 2).size(), 0);
        assert!(HashRange::new(3, 5).contains(3));
        assert!(HashRange::new(3, 5).contains(5));
        assert!(!HashRange::new(3, 5).contains(6));
        assert_eq!(HashRange::new(3, 5).to_string(), "[3, 5]");
    }
}
