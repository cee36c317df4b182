//! `cargo xtask crates`: the seven library crates as a user gets them from crates.io.
//!
//! 1. `cargo package` of all seven together, verified: each `.crate` is unpacked and built on its
//!    own, against the others' packages (not the workspace's paths), so a missing file, a path
//!    dependency without a version or an example that needs the repository fails here.
//! 2. `cargo doc --no-deps` of each with warnings denied (broken intra-doc links, missing docs,
//!    bad code blocks); the README is each crate's documentation, so its example is a doctest that
//!    `cargo test` runs.

use crate::cmd::{cargo, sh};

/// The published crates, by package name (the directory is the name without the prefix).
pub(crate) const PUBLISHED: &[&str] = &[
    "key-ordered-pending-acks",
    "key-ordered-draining-hashes",
    "key-ordered-chunk-assignor",
    "key-ordered-cursor",
    "key-ordered-dispatcher",
    "key-ordered-client",
    "key-ordered-wire",
];

pub(crate) fn run() -> anyhow::Result<()> {
    forget_unpacked_packages()?;
    // Its own target directory, emptied first: cargo never rebuilds a registry package whose
    // version it has built, so our 0.1.0s built by an earlier run would stand in for today's.
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| crate::cmd::project_root().join("target"))
        .join("crates-verify");
    if target.exists() {
        std::fs::remove_dir_all(&target)?;
    }
    let mut package = cargo();
    package
        .args(["package", "--locked", "--target-dir"])
        .arg(&target);
    for p in PUBLISHED {
        package.args(["--package", p]);
    }
    sh(package)?;

    let mut doc = cargo();
    doc.args(["doc", "--no-deps", "--locked"])
        .env("RUSTDOCFLAGS", "-D warnings");
    for p in PUBLISHED {
        doc.args(["--package", p]);
    }
    sh(doc)
}

/// Removes the copies of our own packages that an earlier `cargo package` unpacked into cargo's
/// registry sources.
///
/// Verification builds each `.crate` against the others through a temporary local registry in
/// `target/package/`; cargo unpacks those packages under `$CARGO_HOME/registry/src/<hash of that
/// registry's path>/` and never unpacks a version again once its directory is there. A checkout at
/// the same path as an earlier run (a CI machine's) would then verify against the earlier run's
/// sources, still version 0.1.0: an API added since is "not found". None of these packages comes
/// from crates.io, so nothing else is lost.
fn forget_unpacked_packages() -> anyhow::Result<()> {
    let home = match std::env::var_os("CARGO_HOME") {
        Some(h) => std::path::PathBuf::from(h),
        None => match std::env::var_os("HOME") {
            Some(h) => std::path::PathBuf::from(h).join(".cargo"),
            None => return Ok(()),
        },
    };
    let Ok(registries) = std::fs::read_dir(home.join("registry").join("src")) else {
        return Ok(());
    };
    for registry in registries.flatten() {
        let Ok(unpacked) = std::fs::read_dir(registry.path()) else {
            continue;
        };
        for dir in unpacked.flatten() {
            let name = dir.file_name();
            let name = name.to_string_lossy();
            let ours = PUBLISHED.iter().any(|p| {
                name.strip_prefix(p)
                    .and_then(|rest| rest.strip_prefix('-'))
                    .is_some_and(|v| v.starts_with(|c: char| c.is_ascii_digit()))
            });
            if ours {
                std::fs::remove_dir_all(dir.path())?;
            }
        }
    }
    Ok(())
}
