//! The pin table against a `HashMap` over seeded random inserts, touches and removals (long probe
//! runs, wrap-around and backward-shift deletion get exercised with thousands of keys).

use std::collections::HashMap;

use crate::pins::PinTable;

#[test]
fn pin_table_matches_a_hash_map() {
    for seed in 0..20u64 {
        let mut state = seed;
        let mut next = move || {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        let mut t: PinTable<u32> = PinTable::new();
        let mut m: HashMap<String, u32> = HashMap::new();
        let keys = 1 + next() % 3000;
        for step in 0..20_000u64 {
            let k = format!("producer-{}-{}", next() % 3, next() % keys);
            let (found, hash) = t.lookup(&k, step % 2 == 0);
            assert_eq!(
                found.is_some(),
                m.contains_key(&k),
                "seed {seed} step {step} key {k}"
            );
            match (found, next() % 3) {
                (Some(p), 0) => {
                    assert_eq!(
                        Some(&t.get(p).consumer),
                        m.get(&k),
                        "seed {seed} step {step}"
                    );
                    t.remove(p);
                    m.remove(&k);
                }
                (Some(p), _) => t.touch(p, step),
                (None, _) => {
                    let c = (next() % 10) as u32;
                    t.insert(&k, hash, c, 0, step);
                    m.insert(k, c);
                }
            }
            assert_eq!(t.len(), m.len());
        }
        // Oldest-first iteration sees every live pin once.
        let mut seen: Vec<&str> = t.iter().map(|(_, p)| p.uuid.as_str()).collect();
        seen.sort_unstable();
        let mut want: Vec<&str> = m.keys().map(String::as_str).collect();
        want.sort_unstable();
        assert_eq!(seen, want, "seed {seed}");
        t.clear();
        assert_eq!(t.len(), 0);
        assert!(t.lookup("producer-0-0", true).0.is_none());
    }
}
