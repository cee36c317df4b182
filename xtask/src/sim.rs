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

/// Runs the simulator and exits with its exit status (0 no violation, 1 a violation, 2 bad
/// arguments or a scenario that does not parse; cargo's own status if the build fails): the
/// simulator has already said what went wrong, so there is no extra error line here.
pub(crate) fn run(args: &[String]) -> anyhow::Result<()> {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let status = match sim(&args).status() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("xtask sim: cannot run cargo: {e}");
            std::process::exit(2);
        }
    };
    // A child killed by a signal has no code: report it as a failure.
    std::process::exit(status.code().unwrap_or(1))
}

/// [`sim`] on the deterministic world (`--runtime sim`).
fn world(args: &[&str]) -> std::process::Command {
    let mut all = vec!["--runtime", "sim"];
    all.extend_from_slice(args);
    sim(&all)
}

/// The simulator steps of `cargo xtask ci` (each well under a minute in release): on the
/// deterministic world (the dispatcher crate alone) a smoke seed range of the default mix, the
/// six legacy detections (the checker must fail) and a determinism check (every run twice,
/// identical event-log hash); the randomised mixes on the dispatcher's threaded runtime; then
/// the same through the broker (the default runtime).
pub(crate) fn ci_steps() -> anyhow::Result<()> {
    sh(world(&[
        "--seeds",
        "10",
        "--json",
        "target/sim/ci-smoke.json",
    ]))?;
    sh(world(&[
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
    sh(world(&[
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
    sh(world(&[
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
    sh(world(&[
        "--legacy",
        "no-batch-ack-set",
        "--expect-violation",
        "--seeds",
        "4",
        "--scenario",
        "mix-key-shared-batch-nack",
        "--scenario",
        "mix-shared",
        "--json",
        "target/sim/ci-legacy-ack-set.json",
    ]))?;
    sh(world(&[
        "--legacy",
        "no-delayed-delivery",
        "--expect-violation",
        "--seeds",
        "4",
        "--scenario",
        "f11-delayed",
        "--scenario",
        "mix-key-shared-delayed",
        "--scenario",
        "mix-shared-delayed",
        "--json",
        "target/sim/ci-legacy-delayed.json",
    ]))?;
    sh(world(&[
        "--legacy",
        "replay-settle",
        "--expect-violation",
        "--seeds",
        "4",
        "--scenario",
        "mix-key-shared-slow-reads",
        "--json",
        "target/sim/ci-legacy-replay-settle.json",
    ]))?;
    sh(world(&[
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
    ]))?;
    broker_steps()
}

/// The same mixes through the broker's sans-IO core (`--runtime broker`, restarts over a data
/// directory), each run twice for determinism, and every legacy switch, each caught there too.
fn broker_steps() -> anyhow::Result<()> {
    sh(sim(&[
        "--runtime",
        "broker",
        "--check-determinism",
        "--seeds",
        "10",
        "--json",
        "target/sim/ci-broker.json",
    ]))?;
    // (switch, scenario, first seed): four seeds each.
    for (legacy, scenario, first) in [
        ("mark-delete-cleanup", "seed-000-draining-skip", "1"),
        ("unordered-nack", "seed-002-nack", "1"),
        ("no-delayed-delivery", "mix-key-shared-delayed", "1"),
        ("orphan-chunk-replay", "mix-shared-chunks", "1"),
        ("no-batch-ack-set", "mix-key-shared-batch-nack", "1"),
        ("replay-settle", "mix-key-shared-slow-reads", "1"),
        ("early-receipt", "mix-key-shared-store-faults", "1"),
    ] {
        let json = format!("target/sim/ci-broker-legacy-{legacy}.json");
        sh(sim(&[
            "--runtime",
            "broker",
            "--legacy",
            legacy,
            "--expect-violation",
            "--seed",
            first,
            "--seeds",
            "4",
            "--scenario",
            scenario,
            "--json",
            &json,
        ]))?;
    }
    Ok(())
}
