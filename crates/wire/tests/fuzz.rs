//! Randomized decoder test: mutated golden frames and random bytes through [`decode_frame`] and
//! [`FrameReader`]. Asserts that nothing panics, that every successful decode re-encodes to a
//! frame that decodes again and re-encodes to the same bytes, and that the reader agrees with
//! `decode_frame` on a whole frame.
//!
//! 1,000,000 cases by default (seeded, deterministic). Longer runs:
//! `WIRE_FUZZ_CASES=50000000 WIRE_FUZZ_SEED=7 cargo test -p key-ordered-wire --release --test fuzz`.
//! A failure prints the seed, the case number and the input in hex.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};

use common::{golden_frames, hex};
use wire::proto::{command_subscribe, KeySharedMeta, MessageMetadata};
use wire::{
    commands, convert, decode_frame, encode_command, encode_with_payload, encode_with_section,
    DecodeError, Frame, FrameReader, DEFAULT_MAX_FRAME_SIZE,
};

/// SplitMix64 (Steele, Lea, Flood 2014): small, fast, good enough to drive mutations.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (n > 0; the modulo bias is irrelevant here).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn byte(&mut self) -> u8 {
        self.next() as u8
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(default)
}

/// The inputs mutations start from: the golden frames plus frames of our own encoders that the
/// capture lacks (MESSAGE with a section and ack_set, 0e02, subscribe with Key_Shared ranges).
fn corpus() -> Vec<Vec<u8>> {
    let mut c = golden_frames();
    let meta = MessageMetadata {
        producer_name: "p-1".into(),
        sequence_id: 9,
        publish_time: 1_764_547_200_000,
        num_messages_in_batch: Some(5),
        uuid: Some("p-1-9".into()),
        chunk_id: Some(0),
        num_chunks_from_msg: Some(2),
        total_chunk_msg_size: Some(10),
        ..Default::default()
    };
    let mut send = Vec::new();
    encode_with_payload(&commands::send(2, 9, 5), &meta, b"0123456789", &mut send);
    let section = decode_frame(&send).unwrap().payload.unwrap().section;
    let id = convert::message_id(cursor::Position::new(3, 4));
    let mut msg = Vec::new();
    encode_with_section(
        &commands::message(1, id.clone(), 2, Some(vec![26, -1])),
        &section,
        &mut msg,
    );
    c.push(msg.clone());
    // The same MESSAGE with a broker-entry-metadata section in front of 0e01.
    let cmd_end = 8 + u32::from_be_bytes(msg[4..8].try_into().unwrap()) as usize;
    let mut with_bem = msg[..cmd_end].to_vec();
    with_bem.extend_from_slice(&[0x0e, 0x02, 0, 0, 0, 4, 0x08, 0x01, 0x10, 0x02]);
    with_bem.extend_from_slice(&msg[cmd_end..]);
    let total = (with_bem.len() - 4) as u32;
    with_bem[..4].copy_from_slice(&total.to_be_bytes());
    assert!(decode_frame(&with_bem).is_ok());
    c.push(with_bem);
    c.push(send);
    for cmd in [
        commands::subscribe(
            "persistent://public/default/t",
            "sub",
            1,
            2,
            command_subscribe::SubType::KeyShared,
            Some(KeySharedMeta {
                key_shared_mode: 1,
                hash_ranges: vec![wire::proto::IntRange {
                    start: 0,
                    end: 32767,
                }],
                allow_out_of_order_delivery: Some(false),
            }),
            command_subscribe::InitialPosition::Earliest,
        ),
        commands::ack(1, id.clone(), Some(vec![26])),
        commands::redeliver_unacknowledged(1, vec![id.clone(), id]),
        commands::flow(1, 1000),
        commands::ping(),
    ] {
        let mut out = Vec::new();
        encode_command(&cmd, &mut out);
        c.push(out);
    }
    c
}

const INTERESTING_U32: [u32; 9] = [0, 1, 3, 4, 5, 0x7f, 0x8000_0000, 0xffff_fffe, 0xffff_ffff];

fn mutate(rng: &mut SplitMix64, corpus: &[Vec<u8>]) -> Vec<u8> {
    if rng.below(16) == 0 {
        let n = rng.below(80);
        return (0..n).map(|_| rng.byte()).collect();
    }
    let mut b = corpus[rng.below(corpus.len())].clone();
    for _ in 0..1 + rng.below(3) {
        match rng.below(8) {
            // bit flip
            0 | 1 if !b.is_empty() => {
                let i = rng.below(b.len());
                b[i] ^= 1 << rng.below(8);
            }
            // byte set
            2 if !b.is_empty() => {
                let i = rng.below(b.len());
                b[i] = [0, 0xff, 0x7f, 0x80, rng.byte()][rng.below(5)];
            }
            // truncation
            3 if !b.is_empty() => {
                let n = rng.below(b.len());
                b.truncate(n);
            }
            // insertion
            4 => {
                let at = rng.below(b.len() + 1);
                let n = 1 + rng.below(8);
                let ins: Vec<u8> = (0..n).map(|_| rng.byte()).collect();
                b.splice(at..at, ins);
            }
            // deletion of a range
            5 if !b.is_empty() => {
                let at = rng.below(b.len());
                let n = 1 + rng.below((b.len() - at).min(8));
                b.drain(at..at + n);
            }
            // size-field edit: total, cmd_size, or the u32 after a 0e01 / 0e02 magic
            6 => {
                let mut spots = vec![0, 4];
                for i in 8..b.len().saturating_sub(1) {
                    if b[i] == 0x0e && (b[i + 1] == 0x01 || b[i + 1] == 0x02) {
                        spots.push(i + 2); // crc or bem size
                        spots.push(i + 6); // meta_size
                    }
                }
                let at = spots[rng.below(spots.len())];
                if at + 4 <= b.len() {
                    let old = u32::from_be_bytes(b[at..at + 4].try_into().unwrap());
                    let new = match rng.below(3) {
                        0 => old.wrapping_add(1),
                        1 => old.wrapping_sub(1),
                        _ => INTERESTING_U32[rng.below(INTERESTING_U32.len())],
                    };
                    b[at..at + 4].copy_from_slice(&new.to_be_bytes());
                }
            }
            // keep the total consistent after other edits, so decoding goes deeper
            _ if b.len() >= 4 => {
                let total = (b.len() - 4) as u32;
                b[..4].copy_from_slice(&total.to_be_bytes());
            }
            _ => {}
        }
    }
    // Half the time, re-seal the checksum so mutated metadata and size fields get past the CRC.
    if rng.below(2) == 0 {
        fix_crc(&mut b);
    }
    b
}

/// Recomputes the CRC32C of the `0e01` section, if the frame has one where the decoder looks.
fn fix_crc(b: &mut [u8]) {
    let be32 = |b: &[u8], at: usize| -> Option<usize> {
        let s = b.get(at..at.checked_add(4)?)?;
        Some(u32::from_be_bytes(s.try_into().ok()?) as usize)
    };
    let Some(mut at) = be32(b, 4).and_then(|n| n.checked_add(8)) else {
        return;
    };
    if b.get(at..at + 2) == Some(&[0x0e, 0x02]) {
        let Some(n) = be32(b, at + 2) else { return };
        at = match at.checked_add(6 + n) {
            Some(a) => a,
            None => return,
        };
    }
    if b.get(at..at + 2) == Some(&[0x0e, 0x01]) && at + 6 <= b.len() {
        let crc = crc32c::crc32c(&b[at + 6..]);
        b[at + 2..at + 6].copy_from_slice(&crc.to_be_bytes());
    }
}

/// Re-encodes a decoded frame; it must decode again and re-encode to the same bytes (bytes, not
/// `==`, because a fuzzed double may be NaN).
fn enc(f: &Frame) -> Vec<u8> {
    let mut out = Vec::new();
    match &f.payload {
        None => encode_command(&f.command, &mut out),
        Some(p) => encode_with_section(&f.command, &p.section, &mut out),
    }
    out
}

fn check_roundtrip(f: &Frame) {
    let once = enc(f);
    let again = decode_frame(&once).unwrap_or_else(|e| panic!("re-encoded frame fails: {e}"));
    assert_eq!(hex(&enc(&again)), hex(&once), "re-encoding is not stable");
    assert_eq!(
        again.command.r#type, f.command.r#type,
        "command type changed"
    );
    if let Some(p) = &f.payload {
        assert!(p.body_offset <= p.section.len());
        // Conversions must not panic either.
        let _ = p.info();
    }
}

fn run_case(rng: &mut SplitMix64, input: &[u8]) {
    let whole = decode_frame(input);
    if let Ok(f) = &whole {
        check_roundtrip(f);
    }

    let max = [DEFAULT_MAX_FRAME_SIZE, 64, 16][rng.below(3)];
    let mut r = FrameReader::new(max);
    let mut fed = 0;
    let mut first: Option<Result<Frame, DecodeError>> = None;
    while fed < input.len() {
        let n = 1 + rng.below(input.len() - fed);
        r.feed(&input[fed..fed + n]);
        fed += n;
        assert!(r.buffered() <= input.len());
        loop {
            match r.next_frame() {
                Ok(Some(f)) => {
                    if whole.is_err() {
                        check_roundtrip(&f); // else compared with `whole` below
                    }
                    first.get_or_insert(Ok(f));
                }
                Ok(None) => break,
                Err(e) => {
                    let fatal = e.is_fatal();
                    first.get_or_insert(Err(e));
                    if fatal {
                        assert!(r.is_poisoned());
                        break;
                    }
                }
            }
        }
        if r.is_poisoned() {
            break;
        }
    }
    // With no limit in the way, the reader's first result on a whole frame is decode_frame's.
    if max == DEFAULT_MAX_FRAME_SIZE {
        if let Ok(f) = whole {
            let got = first.map(|r| r.map(|g| hex(&enc(&g))));
            assert_eq!(
                got,
                Some(Ok(hex(&enc(&f)))),
                "reader and decode_frame disagree"
            );
        }
    }
}

#[test]
fn mutated_and_random_frames_never_panic_and_round_trip() {
    let cases = env_u64("WIRE_FUZZ_CASES", 1_000_000);
    let seed = env_u64("WIRE_FUZZ_SEED", 0x5eed_f00d);
    let corpus = corpus();
    let mut rng = SplitMix64(seed);
    let mut decoded = 0u64;
    let mut with_payload = 0u64;
    for case in 0..cases {
        let input = mutate(&mut rng, &corpus);
        let mut case_rng = SplitMix64(rng.next());
        let ok = catch_unwind(AssertUnwindSafe(|| {
            run_case(&mut case_rng, &input);
            decode_frame(&input).map(|f| f.payload.is_some())
        }));
        match ok {
            Ok(Ok(has_payload)) => {
                decoded += 1;
                with_payload += u64::from(has_payload);
            }
            Ok(Err(_)) => {}
            Err(_) => panic!(
                "fuzz case {case} failed (WIRE_FUZZ_SEED={seed}): input {}",
                hex(&input)
            ),
        }
    }
    println!(
        "fuzz: {cases} cases, {decoded} decoded whole ({with_payload} with a payload), seed {seed}"
    );
    // The mutations must reach the success path often enough to test the round trip.
    assert!(
        cases < 1000 || decoded * 20 > cases,
        "only {decoded} of {cases} decoded"
    );
    assert!(
        cases < 1000 || with_payload * 100 > cases,
        "only {with_payload} payload frames"
    );
}
