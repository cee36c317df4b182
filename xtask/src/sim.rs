//! `cargo xtask sim [args…]`: the deterministic simulator, in release mode.

use crate::cmd::{cargo, sh};

pub(crate) fn run(args: &[String]) -> anyhow::Result<()> {
    let sim = std::path::Path::new("tests/src/bin/sim.rs");
    anyhow::ensure!(
        sim.exists(),
        "the simulator has not landed yet (issue 7); `cargo xtask ci` runs the tests meanwhile"
    );
    let mut c = cargo();
    c.args([
        "run",
        "--release",
        "--quiet",
        "--package",
        "tests",
        "--bin",
        "sim",
        "--",
    ])
    .args(args);
    sh(c)
}
