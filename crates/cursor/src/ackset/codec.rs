//! An [`AckSet`]'s persisted form (inside a cursor's `PersistedState`).

use std::collections::VecDeque;

use super::container::{Bitmap, Container, BLOCK_BITS, BLOCK_SHIFT, MAX_RUNS, MIN_RUNS};
use super::{AckSet, Blocks};
use crate::codec::{DecodeError, Reader, Writer};

/// One block's runs: kind 0, the count, then each run as (gap from the last end, length - 1).
fn encode_runs(w: &mut Writer, runs: &[(u16, u16)]) {
    w.byte(0);
    w.varint(runs.len() as u64);
    let mut next_free = 0u64;
    for &(s, e) in runs {
        w.varint(u64::from(s) - next_free);
        w.varint(u64::from(e - s));
        next_free = u64::from(e) + 1;
    }
}

impl AckSet {
    /// The persisted form: per ledger the id delta and block count, per block the id delta, a
    /// kind byte and its runs or bitmap.
    pub(crate) fn encode(&self, w: &mut Writer) {
        // Per ledger: ledger id delta, block count; per block: block delta, kind, contents.
        let mut ledgers: Vec<(u64, Vec<(u64, &Container)>)> = Vec::new();
        for ((l, b), c) in self.iter_blocks() {
            match ledgers.last_mut() {
                Some((ll, v)) if *ll == l => v.push((b, c)),
                _ => ledgers.push((l, vec![(b, c)])),
            }
        }
        w.varint(ledgers.len() as u64);
        let mut prev_l = 0;
        for (l, blocks) in &ledgers {
            w.varint(l - prev_l);
            prev_l = *l;
            w.varint(blocks.len() as u64);
            let mut prev_b = 0;
            for (b, c) in blocks {
                w.varint(b - prev_b);
                prev_b = *b;
                match c {
                    Container::Runs(r) => encode_runs(w, r),
                    // A bitmap with few runs (the head keeps its bitmap) is written as runs,
                    // so the encoding follows the contents, not the form.
                    Container::Bitmap(bm) if bm.runs <= MIN_RUNS => {
                        encode_runs(w, &bm.to_runs());
                    }
                    Container::Bitmap(bm) => {
                        w.byte(1);
                        for word in &bm.words {
                            w.bytes(&word.to_le_bytes());
                        }
                    }
                }
            }
        }
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<AckSet, DecodeError> {
        let mut set = AckSet::new();
        let n_ledgers = r.varint()?;
        let mut l = 0u64;
        for li in 0..n_ledgers {
            l = next_id(r, l, li == 0, LEDGER_ID_ERRORS)?;
            let n_blocks = r.varint()?;
            if n_blocks == 0 {
                return Err(r.error("ledger without blocks"));
            }
            let mut b = 0u64;
            for bi in 0..n_blocks {
                b = next_id(r, b, bi == 0, BLOCK_ID_ERRORS)?;
                if b > (u64::MAX >> BLOCK_SHIFT) {
                    return Err(r.error("block id out of range"));
                }
                let c = decode_block(r)?;
                set.len += c.len();
                match set.ledgers.last_mut() {
                    Some(lb) if lb.ledger_id == l => lb.blocks.push_back((b, c)),
                    _ => set.ledgers.push(Blocks {
                        ledger_id: l,
                        blocks: VecDeque::from([(b, c)]),
                    }),
                }
            }
        }
        Ok(set)
    }
}

/// The names of a ledger id that does not increase and of one that overflows.
const LEDGER_ID_ERRORS: [&str; 2] = ["ledger ids not increasing", "ledger id overflow"];
/// The same for a block id.
const BLOCK_ID_ERRORS: [&str; 2] = ["block ids not increasing", "block id overflow"];

/// The next id of an increasing list stored as deltas (the first one from 0); `errors` names a
/// repeated id and an overflow.
fn next_id(
    r: &mut Reader<'_>,
    prev: u64,
    first: bool,
    errors: [&'static str; 2],
) -> Result<u64, DecodeError> {
    let [not_increasing, overflow] = errors;
    let d = r.varint()?;
    if !first && d == 0 {
        return Err(r.error(not_increasing));
    }
    prev.checked_add(d).ok_or_else(|| r.error(overflow))
}

/// One block's contents after its id: kind 0 (runs) or 1 (a bitmap), in the form a block of
/// those contents takes.
fn decode_block(r: &mut Reader<'_>) -> Result<Container, DecodeError> {
    Ok(match r.byte()? {
        0 => {
            let n = r.varint()?;
            if n == 0 || n > BLOCK_BITS / 2 {
                return Err(r.error("bad run count"));
            }
            let mut runs = Vec::with_capacity(n as usize);
            let mut next_free = 0u64;
            for _ in 0..n {
                let s = next_free
                    .checked_add(r.varint()?)
                    .ok_or_else(|| r.error("run start overflow"))?;
                let e = s
                    .checked_add(r.varint()?)
                    .ok_or_else(|| r.error("run end overflow"))?;
                if e >= BLOCK_BITS || (next_free > 0 && s == next_free) {
                    return Err(r.error("run out of range or adjacent"));
                }
                runs.push((s as u16, e as u16));
                next_free = e + 1;
            }
            if runs.len() > MAX_RUNS {
                Container::Bitmap(Bitmap::from_runs(&runs))
            } else {
                Container::Runs(runs)
            }
        }
        1 => {
            let mut bm = Bitmap::empty();
            for w in bm.words.iter_mut() {
                let bytes = r.take(8)?;
                let mut a = [0u8; 8];
                a.copy_from_slice(bytes);
                *w = u64::from_le_bytes(a);
            }
            bm.recount();
            if bm.len == 0 {
                return Err(r.error("empty bitmap block"));
            }
            if bm.runs <= MIN_RUNS {
                Container::Runs(bm.to_runs())
            } else {
                Container::Bitmap(bm)
            }
        }
        _ => return Err(r.error("unknown block kind")),
    })
}
