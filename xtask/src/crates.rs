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
    let mut package = cargo();
    package.args(["package", "--locked"]);
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
