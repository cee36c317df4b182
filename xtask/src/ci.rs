//! `cargo xtask ci`: what CI runs on a clean clone (2 cores; keep it well under 30 minutes).
//!
//! 1. `cargo fmt --check`
//! 2. `cargo clippy` on every target with warnings denied
//! 3. `cargo test` for the workspace (unit, integration and doc tests) with insta updates off
//! 4. a quick loom run (preemption bound 2)
//! 5. the simulator (release): a smoke seed range, the five legacy detections, a determinism check,
//!    the threaded runtime
//! 6. tidy checks

use crate::cmd::{cargo, sh};

pub(crate) fn run_all(_args: &[String]) -> anyhow::Result<()> {
    let started = std::time::Instant::now();

    let mut fmt = cargo();
    fmt.args(["fmt", "--all", "--", "--check"]);
    sh(fmt)?;

    let mut clippy = cargo();
    clippy.args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--locked",
        "--",
        "-D",
        "warnings",
    ]);
    sh(clippy)?;

    let mut test = cargo();
    test.args(["test", "--workspace", "--locked"])
        .env("INSTA_UPDATE", "no")
        .env("INSTA_FORCE_PASS", "0")
        .env("CI", "true");
    sh(test)?;

    crate::loom::run_with(None, 2)?;

    crate::sim::ci_steps()?;

    crate::interop::run(&[])?;

    crate::tidy::run()?;

    println!("xtask ci: all checks passed in {:.0?}", started.elapsed());
    Ok(())
}

pub(crate) fn run(args: &[String]) -> anyhow::Result<()> {
    run_all(args)
}
