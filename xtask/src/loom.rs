//! `cargo xtask loom [crate] [--preemptions N]`: loom models in release mode with their own target
//! dir, so a loom build never invalidates the normal one.
//!
//! Models live in `tests/loom/tests/loom_*.rs` (cross-crate: pending-acks + draining-hashes, the
//! `loom-models` package) and in a crate's own `tests/loom_*.rs`. Both concurrent crates switch
//! to loom through their `loom` feature, never through a global `--cfg loom`, so third-party
//! crates build as usual.

use crate::cmd::{cargo, sh};

/// Packages with loom models (their directory names; the published crates' package names carry
/// the `key-ordered-` prefix, see [`package_name`]), and the feature that turns them on.
const LOOM_PACKAGES: &[&str] = &[
    "pending-acks",
    "draining-hashes",
    "dispatcher",
    "loom-models",
];

pub(crate) fn run_with(package: Option<&str>, preemptions: u32) -> anyhow::Result<()> {
    let packages: Vec<&str> = match package {
        Some(p) => {
            anyhow::ensure!(
                LOOM_PACKAGES.contains(&p),
                "no loom models in `{p}` (have: {})",
                LOOM_PACKAGES.join(", ")
            );
            vec![p]
        }
        None => LOOM_PACKAGES.to_vec(),
    };
    for p in packages {
        let dir = if p == "loom-models" {
            "tests/loom/tests".to_string()
        } else {
            format!("crates/{p}/tests")
        };
        let has_models = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| {
                let n = e.file_name();
                let n = n.to_string_lossy();
                n.starts_with("loom_") && n.ends_with(".rs")
            });
        if !has_models {
            println!("(no loom models in {dir} yet; skipping {p})");
            continue;
        }
        let mut c = cargo();
        c.args([
            "test",
            "--release",
            "--package",
            &package_name(p),
            "--features",
            "loom",
            "--test",
            "loom_*",
        ])
        .env("CARGO_TARGET_DIR", "target/loom")
        .env("LOOM_MAX_PREEMPTIONS", preemptions.to_string())
        .env("RUST_BACKTRACE", "1");
        sh(c)?;
    }
    Ok(())
}

/// The cargo package name of the crate in `crates/<dir>` (or of the cross-crate models).
fn package_name(dir: &str) -> String {
    if dir == "loom-models" {
        dir.to_string()
    } else {
        format!("key-ordered-{dir}")
    }
}

pub(crate) fn run(args: &[String]) -> anyhow::Result<()> {
    let mut package = None;
    let mut preemptions = 3;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--preemptions" => {
                preemptions = it
                    .next()
                    .ok_or_else(|| anyhow::anyhow!("--preemptions needs a number"))?
                    .parse()?
            }
            p if !p.starts_with('-') => package = Some(p.to_string()),
            other => anyhow::bail!("unknown flag {other}"),
        }
    }
    run_with(package.as_deref(), preemptions)
}
