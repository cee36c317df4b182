//! `cargo xtask sim [args…]`: the deterministic simulator, in release mode (docs/SIMULATOR.md).

use crate::cmd::{cargo, sh};

fn sim(args: &[&str]) -> std::process::Command {
    let mut c = cargo();
    c.args([
        "run",
        "--release",
        "--quiet",
        "--locked",
        "--package",
        "tests",
        "--bin",
        "sim",
        "--",
    ])
    .args(args);
    c
}

pub(crate) fn run(args: &[String]) -> anyhow::Result<()> {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    sh(sim(&args))
}

/// The simulator steps of `cargo xtask ci` (each well under a minute in release):
/// a smoke seed range of the default mix, the three legacy detections (the checker must fail), a
/// determinism check (every run twice, identical event-log hash) and the randomised mixes on the
/// dispatcher's threaded runtime.
pub(crate) fn ci_steps() -> anyhow::Result<()> {
    sh(sim(&[
        "--seeds",
        "10",
        "--json",
        "target/sim/ci-smoke.json",
    ]))?;
    sh(sim(&[
        "--legacy",
        "mark-delete-cleanup",
        "--expect-violation",
        "--seeds",
        "4",
        "--scenario",
        "seed-000-draining-skip",
        "--scenario",
        "mix-key-shared-admin",
        "--json",
        "target/sim/ci-legacy-mark-delete.json",
    ]))?;
    sh(sim(&[
        "--legacy",
        "orphan-chunk-replay",
        "--expect-violation",
        "--seeds",
        "4",
        "--scenario",
        "seed-001-orphan-chunk",
        "--scenario",
        "mix-shared-chunks",
        "--json",
        "target/sim/ci-legacy-orphan.json",
    ]))?;
    sh(sim(&[
        "--legacy",
        "unordered-nack",
        "--expect-violation",
        "--seeds",
        "4",
        "--scenario",
        "seed-002-nack",
        "--scenario",
        "f04-nack",
        "--json",
        "target/sim/ci-legacy-nack.json",
    ]))?;
    sh(sim(&[
        "--check-determinism",
        "--seeds",
        "3",
        "--json",
        "target/sim/ci-determinism.json",
    ]))?;
    sh(sim(&[
        "--runtime",
        "threads",
        "--seeds",
        "2",
        "--json",
        "target/sim/ci-threads.json",
    ]))
}
