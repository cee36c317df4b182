//! Helpers shared by the fuzz targets in `fuzz_targets/` and the seed writer (`examples/seeds.rs`).
//!
//! Targets that need several files or arguments from one input split it at [`SEP`], a marker
//! no real input contains; the seeds show the fuzzer where it goes.

/// Separates the parts of one input (files of a data directory, command-line arguments).
pub const SEP: &[u8] = b"\n\x00--8<--\x00\n";

/// `data` cut at every [`SEP`].
pub fn split_parts(data: &[u8]) -> Vec<&[u8]> {
    let mut parts = Vec::new();
    let mut rest = data;
    while let Some(i) = rest.windows(SEP.len()).position(|w| w == SEP) {
        parts.push(&rest[..i]);
        rest = &rest[i + SEP.len()..];
    }
    parts.push(rest);
    parts
}

/// `parts` joined with [`SEP`] (the inverse of [`split_parts`]).
pub fn join_parts(parts: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(SEP);
        }
        out.extend_from_slice(p);
    }
    out
}

/// A scratch directory of this process under the system's temporary directory, emptied.
pub fn scratch(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("kod-fuzz-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("a scratch directory");
    d
}
