//! `cargo xtask bench [ids…] [--quick] [--rounds N]`: runs the benchmark binary in release mode.
//! The workloads live in `tests/src/bench/`; results go to `target/bench/results.json`.

use crate::cmd::{cargo, sh};

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
    .args(args);
    sh(c)
}
