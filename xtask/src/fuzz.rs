//! `cargo xtask fuzz [TARGET…] [--time S] [--list] [--ci]`: coverage-guided fuzzing of every
//! parser of outside bytes (fuzz/README.md). `--ci` is what `cargo xtask ci` runs: a debug build
//! of the targets, each replaying its stored corpus and fuzzing for 5 s.
//!
//! The engine is libFuzzer through `cargo fuzz` (pinned below, installed on first use) with
//! `--sanitizer none`, which runs on the pinned stable toolchain. Each target starts from its
//! stored corpus `fuzz/corpus/TARGET` (read only) and writes what it finds to
//! `target/fuzz/corpus/TARGET`; crashes go to `target/fuzz/artifacts/TARGET`, with the command
//! that replays one. The fuzz build lives in `target/fuzz/build`.

use std::path::Path;
use std::process::Command;

use crate::cmd::{cargo, sh};

/// The fuzz targets, in `fuzz/fuzz_targets/` (a tidy check keeps the list and the directory
/// in step).
pub(crate) const TARGETS: [&str; 6] = [
    "frame",
    "admin_http",
    "data_dir",
    "cursor_store",
    "broker_flags",
    "scenario",
];

/// The cargo-fuzz release the project is tested with.
const CARGO_FUZZ_VERSION: &str = "0.13.2";

/// Seconds per target when `--time` is not given (and in `--ci`).
const DEFAULT_SECONDS: u64 = 60;
const CI_SECONDS: u64 = 5;

pub(crate) fn run(args: &[String]) -> anyhow::Result<()> {
    let mut targets: Vec<String> = Vec::new();
    let mut seconds = DEFAULT_SECONDS;
    // `--ci`: a debug build (1 min 48 s against 3 min 19 s for the optimized one on 2 cores),
    // which still replays every stored input and then fuzzes briefly.
    let mut dev = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--list" => {
                for t in TARGETS {
                    println!("{t}");
                }
                return Ok(());
            }
            "--ci" => {
                seconds = CI_SECONDS;
                dev = true;
            }
            "--time" => {
                let v = it
                    .next()
                    .ok_or_else(|| anyhow::anyhow!("--time needs a number of seconds"))?;
                seconds = v
                    .parse()
                    .map_err(|_| anyhow::anyhow!("--time {v}: not a number of seconds"))?;
            }
            t if TARGETS.contains(&t) => targets.push(t.to_owned()),
            other => anyhow::bail!(
                "xtask fuzz: unknown target or flag `{other}`; targets: {} (`--list`), flags: \
                 --time S, --ci",
                TARGETS.join(", ")
            ),
        }
    }
    if targets.is_empty() {
        targets = TARGETS.iter().map(|t| t.to_string()).collect();
    }
    ensure_cargo_fuzz()?;
    let mut build = fuzz_command("build", dev);
    build.args(["--sanitizer", "none", "--target-dir", "target/fuzz/build"]);
    sh(build)?;
    for t in &targets {
        run_target(t, seconds, dev)?;
    }
    println!(
        "xtask fuzz: {} target(s), {seconds} s each, no crash",
        targets.len()
    );
    Ok(())
}

fn run_target(target: &str, seconds: u64, dev: bool) -> anyhow::Result<()> {
    let work = format!("target/fuzz/corpus/{target}");
    let artifacts = format!("target/fuzz/artifacts/{target}/");
    std::fs::create_dir_all(&work)?;
    std::fs::create_dir_all(&artifacts)?;
    let stored = format!("fuzz/corpus/{target}");
    let mut c = fuzz_command("run", dev);
    c.args([
        "--sanitizer",
        "none",
        "--target-dir",
        "target/fuzz/build",
        target,
        &work,
        &stored,
        "--",
    ])
    .arg(format!("-max_total_time={seconds}"))
    .arg(format!("-artifact_prefix={artifacts}"))
    .args(["-timeout=10", "-rss_limit_mb=2048", "-print_final_stats=1"]);
    // Scratch files of the file-based targets on a RAM disk where there is one (fsync is free).
    if Path::new("/dev/shm").is_dir() {
        c.env("TMPDIR", "/dev/shm");
    }
    if let Err(e) = sh(c) {
        anyhow::bail!(
            "{e}\nxtask fuzz: {target} failed; the crashing input is in {artifacts} and \
             `cargo fuzz run --sanitizer none {target} FILE` replays it (make it a regression test)"
        );
    }
    Ok(())
}

fn fuzz_command(sub: &str, dev: bool) -> Command {
    let mut c = cargo();
    c.args(["fuzz", sub]);
    if dev {
        c.arg("--dev");
    }
    c
}

/// Installs the pinned cargo-fuzz when `cargo fuzz` is missing or another version.
fn ensure_cargo_fuzz() -> anyhow::Result<()> {
    let have = cargo()
        .args(["fuzz", "--version"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    if have
        .as_deref()
        .is_some_and(|v| v.ends_with(CARGO_FUZZ_VERSION))
    {
        return Ok(());
    }
    println!(
        "xtask fuzz: installing cargo-fuzz {CARGO_FUZZ_VERSION} (found: {}) from crates.io",
        have.as_deref().unwrap_or("none")
    );
    let mut c = cargo();
    c.args([
        "install",
        "cargo-fuzz",
        "--version",
        CARGO_FUZZ_VERSION,
        "--locked",
    ]);
    sh(c).map_err(|e| {
        anyhow::anyhow!(
            "{e}\nxtask fuzz: could not install cargo-fuzz {CARGO_FUZZ_VERSION}: is crates.io \
             reachable? (cargo install needs the registry once; the binary then stays in \
             ~/.cargo/bin)"
        )
    })
}
