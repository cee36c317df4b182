//! `cargo xtask ci`: what CI runs on a clean clone (2 cores; keep it well under 30 minutes).
//!
//! 1. `cargo fmt --check`, and the dependency policy of `deny.toml` (`cargo xtask deps`)
//! 2. `cargo clippy` on every target with warnings denied
//! 3. `cargo test` for the workspace (unit, integration and doc tests) with insta updates off
//! 4. the published crates: `cargo package` verified, `cargo doc` with warnings denied
//! 5. a quick loom run (preemption bound 2)
//! 6. the simulator (release): a smoke seed range, the six legacy detections, a determinism check,
//!    the threaded runtime
//! 7. the interop suites (every stock client against the broker)
//! 8. every fuzz target (a debug build) on its stored corpus, then 5 s of fuzzing
//! 9. tidy checks
//!
//! Before any of it, the run checks that the disk holding `target/` has room for what is still to
//! be built, and stops with a message that says how much it needs if not.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::cmd::{cargo, project_root, sh};

/// Disk a clean checkout's run fills, in MiB, with a margin: measured at 2.1 GiB in
/// `target/` (the debug tests, the loom models, the release simulator and broker, the Python
/// venv) on a fresh clone, about 0.5 GiB for the Rust client suite's build and 1.4 GiB for the
/// fuzz targets' instrumented build (`target/fuzz`); the Maven and Go caches live outside
/// `target/` (`~/.m2`, Go's module cache).
const CLEAN_RUN_NEEDS_MIB: u64 = 5_120;

pub(crate) fn run_all(_args: &[String]) -> anyhow::Result<()> {
    let started = Instant::now();
    check_disk()?;
    let mut steps = Steps::default();

    steps.time("fmt and deps", || {
        let mut fmt = cargo();
        fmt.args(["fmt", "--all", "--", "--check"]);
        sh(fmt)?;
        crate::deps::run()
    })?;
    steps.time("clippy", || {
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
        sh(clippy)
    })?;
    steps.time("test", || {
        let mut test = cargo();
        test.args(["test", "--workspace", "--locked"])
            .env("INSTA_UPDATE", "no")
            .env("INSTA_FORCE_PASS", "0")
            .env("CI", "true");
        sh(test)
    })?;
    steps.time("crates", crate::crates::run)?;
    steps.time("loom", || crate::loom::run_with(None, 2))?;
    steps.time("sim", crate::sim::ci_steps)?;
    steps.time("interop", || crate::interop::run(&[]))?;
    steps.time("fuzz", || crate::fuzz::run(&["--ci".to_owned()]))?;
    steps.time("tidy", crate::tidy::run)?;

    println!("xtask ci: {}", steps.summary());
    println!("xtask ci: all checks passed in {:.0?}", started.elapsed());
    Ok(())
}

/// How long each step of the run took, for the summary line (a slow step shows which).
#[derive(Default)]
struct Steps(Vec<(&'static str, Duration)>);

impl Steps {
    /// Runs `f`, recording its time under `name`; a failure prints the times so far.
    fn time(
        &mut self,
        name: &'static str,
        f: impl FnOnce() -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let t = Instant::now();
        let r = f();
        self.0.push((name, t.elapsed()));
        if r.is_err() {
            println!("xtask ci: {} (failed)", self.summary());
        }
        r
    }

    fn summary(&self) -> String {
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|(n, d)| format!("{n} {:.0} s", d.as_secs_f64()))
            .collect();
        parts.join(", ")
    }
}

/// Fails the run early, with the figures, when the disk cannot hold what is still to be built:
/// the clean run's need less what `target/` already holds (a rerun reuses most of it).
fn check_disk() -> anyhow::Result<()> {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| project_root().join("target"));
    let (Some(free), Some(held)) = (free_mib(&target), used_mib(&target)) else {
        println!("xtask ci: could not read the disk space (df, du); not checked");
        return Ok(());
    };
    let needed = CLEAN_RUN_NEEDS_MIB.saturating_sub(held);
    if free >= needed {
        return Ok(());
    }
    anyhow::bail!(
        "xtask ci: only {free} MiB free on the disk of {}; a run from a clean checkout fills \
         about {CLEAN_RUN_NEEDS_MIB} MiB there and {held} MiB is built already. Free space, or \
         point CARGO_TARGET_DIR at a larger disk",
        target.display()
    )
}

/// MiB that `path` holds (0 if it does not exist), read from `du -sk`.
fn used_mib(path: &Path) -> Option<u64> {
    if !path.exists() {
        return Some(0);
    }
    kib_field("du", &["-sk".as_ref(), path.as_os_str()], 0, 0).map(|k| k / 1024)
}

/// Free MiB on the file system of `path` (or of its nearest existing ancestor), read from the
/// POSIX `df -Pk`.
fn free_mib(path: &Path) -> Option<u64> {
    let existing = path.ancestors().find(|p| p.exists())?;
    kib_field("df", &["-Pk".as_ref(), existing.as_os_str()], 1, 3).map(|k| k / 1024)
}

/// Runs `prog args` and parses field `field` (whitespace-separated) of output line `line` as
/// a number; `None` if the command is missing, fails or prints something else.
fn kib_field(prog: &str, args: &[&std::ffi::OsStr], line: usize, field: usize) -> Option<u64> {
    let out = std::process::Command::new(prog).args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    text.lines()
        .nth(line)?
        .split_whitespace()
        .nth(field)?
        .parse()
        .ok()
}

pub(crate) fn run(args: &[String]) -> anyhow::Result<()> {
    run_all(args)
}
