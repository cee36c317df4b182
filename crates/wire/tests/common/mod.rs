//! Helpers shared by the integration tests: the golden frames and a hex decoder.

#![allow(dead_code)]

/// The captured client frames, one hex line each (see `frames/README.md`).
pub const PRODUCE_FRAMES_HEX: &str = include_str!("../frames/produce-frames.hex");

/// Decodes lowercase or uppercase hex without separators.
pub fn unhex(s: &str) -> Vec<u8> {
    assert!(s.len().is_multiple_of(2), "odd hex length");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex digit"))
        .collect()
}

/// Lowercase hex of `b`.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The seven golden frames as bytes.
pub fn golden_frames() -> Vec<Vec<u8>> {
    PRODUCE_FRAMES_HEX
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| unhex(l.trim()))
        .collect()
}
