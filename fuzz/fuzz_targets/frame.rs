//! Pulsar frames: `decode_frame` on the whole input, the streaming `FrameReader` fed in pieces
//! (split points and the size limit come from the input's last bytes), the strict field check,
//! and the conversions a broker runs on a decoded command. Every decoded frame must re-encode
//! to bytes that decode again to the same bytes; the reader must agree with `decode_frame`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wire::{decode_frame, encode_command, encode_with_section, Frame, FrameReader};

fn enc(f: &Frame) -> Vec<u8> {
    let mut out = Vec::new();
    match &f.payload {
        None => encode_command(&f.command, &mut out),
        Some(p) => encode_with_section(&f.command, &p.section, &mut out),
    }
    out
}

fn exercise(f: &Frame) {
    let once = enc(f);
    let again = decode_frame(&once).expect("a re-encoded frame decodes");
    assert_eq!(enc(&again), once, "re-encoding is not stable");
    if let Some(p) = &f.payload {
        assert!(p.body_offset <= p.section.len());
        let _ = p.info();
    }
    let c = &f.command;
    if let Some(a) = &c.ack {
        for id in &a.message_id {
            let _ = wire::convert::position(id);
            let size = wire::convert::batch_size(id).unwrap_or(0).min(1 << 16);
            let acked = wire::convert::acked_indexes_from_ack_set(&id.ack_set, size);
            let back = wire::convert::ack_set_from_acked(&acked, size);
            let _ = wire::convert::merge_ack_sets(&id.ack_set, &back);
            let _ = wire::convert::ack_request(id, size);
        }
    }
    let _ = wire::strict::check_frame(&once);
}

fuzz_target!(|data: &[u8]| {
    let whole = decode_frame(data);
    if let Ok(f) = &whole {
        exercise(f);
    }
    let _ = wire::strict::check_frame(data);
    for f in wire::strict::frames(data).take(64) {
        if f.is_err() {
            break;
        }
    }
    // The reader, fed in pieces whose sizes come from the last bytes of the input.
    let (limit, step) = match data.last() {
        Some(b) => ([wire::DEFAULT_MAX_FRAME_SIZE, 64, 16, 1024][(*b & 3) as usize], 1 + (*b >> 2) as usize),
        None => (wire::DEFAULT_MAX_FRAME_SIZE, 1),
    };
    let mut r = FrameReader::new(limit);
    let mut first = None;
    for piece in data.chunks(step) {
        r.feed(piece);
        loop {
            match r.next_frame() {
                Ok(Some(f)) => {
                    exercise(&f);
                    first.get_or_insert(Ok(enc(&f)));
                }
                Ok(None) => break,
                Err(e) => {
                    let fatal = e.is_fatal();
                    first.get_or_insert(Err(()));
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
    if limit == wire::DEFAULT_MAX_FRAME_SIZE {
        if let Ok(f) = whole {
            assert_eq!(first, Some(Ok(enc(&f))), "reader and decode_frame disagree");
        }
    }
});
