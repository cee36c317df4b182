//! `cargo xtask bench [ids…] [--quick] [--rounds N] [--return-memory]`: runs the benchmark
//! binary in release mode. The workloads live in `tests/src/bench/`; results go to
//! `target/bench/results.json`.
//!
//! By default the binary runs with glibc's malloc told to keep freed memory in the process
//! ([`KEEP_FREED_MEMORY`]), the state a warmed JVM heap is in when the Pulsar baseline is
//! measured: without it, every fresh structure of a round pays the kernel's page faults for
//! memory the previous round gave back. `--return-memory` (or a `GLIBC_TUNABLES` of the caller's
//! own) runs with the caller's settings instead.

use crate::cmd::{cargo, sh};

/// glibc tunables for the benchmark process: never trim the heap top, and serve blocks up to
/// 32 MiB from the heap rather than from fresh `mmap`s that `free` unmaps.
pub(crate) const KEEP_FREED_MEMORY: &str =
    "glibc.malloc.trim_threshold=4294967295:glibc.malloc.mmap_threshold=33554432";

pub(crate) fn run(args: &[String]) -> anyhow::Result<()> {
    // B3 execs the release broker binary, so it must exist (and be current).
    let mut b = cargo();
    b.args([
        "build",
        "--release",
        "--quiet",
        "--package",
        "broker",
        "--bin",
        "broker",
    ]);
    sh(b)?;
    let return_memory = args.iter().any(|a| a == "--return-memory");
    let mut c = cargo();
    c.args([
        "run",
        "--release",
        "--quiet",
        "--package",
        "tests",
        "--bin",
        "bench",
        "--",
    ])
    .args(args.iter().filter(|a| *a != "--return-memory"));
    if !return_memory && std::env::var_os("GLIBC_TUNABLES").is_none() {
        c.env("GLIBC_TUNABLES", KEEP_FREED_MEMORY);
    }
    sh(c)
}
