//! Hash maps with ahash and fixed seeds (deterministic; nothing iterates them to produce
//! output anyway).

use std::hash::BuildHasher;

const SEEDS: ahash::RandomState = ahash::RandomState::with_seeds(
    0x243f_6a88_85a3_08d3,
    0x1319_8a2e_0370_7344,
    0xa409_3822_299f_31d0,
    0x082e_fa98_ec4e_6c89,
);

/// ahash with fixed seeds, constructible by `Default`.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Fixed;

impl BuildHasher for Fixed {
    type Hasher = ahash::AHasher;

    fn build_hasher(&self) -> ahash::AHasher {
        SEEDS.build_hasher()
    }
}

/// A `HashMap` hashed with [`Fixed`].
pub(crate) type HashMap<K, V> = std::collections::HashMap<K, V, Fixed>;
/// A `HashSet` hashed with [`Fixed`].
pub(crate) type HashSet<K> = std::collections::HashSet<K, Fixed>;
