//! `cargo xtask tidy`: repository hygiene, run by `cargo xtask ci` (rust-analyzer's tidy idea).
//!
//! * no placeholder macros (todo, unimplemented) and no ignore / should_panic test attributes
//!   in our code;
//! * only `sync.rs` names `std::sync` or `loom` in the loom-checked crates;
//! * library crates never read the clock, spawn threads or install a tracing subscriber
//!   (the dispatcher's `runtime` module is the one place allowed to);
//! * every crate has a top doc, and the README and `.ci/run` keep the two set-up commands.

use std::fs;
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n == "target") {
                continue;
            }
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Splits `"a" + "b"` so this file does not trip its own checks.
fn pat(parts: &[&str]) -> String {
    parts.concat()
}

pub(crate) fn run() -> anyhow::Result<()> {
    println!("$ tidy (xtask/src/tidy.rs)");
    let mut problems = Vec::new();

    let mut files = Vec::new();
    for d in ["crates", "tests", "xtask"] {
        rust_files(Path::new(d), &mut files);
    }
    let banned = [
        pat(&["todo", "!("]),
        pat(&["unimplemented", "!("]),
        pat(&["#[", "ignore"]),
        pat(&["#[", "should_panic"]),
    ];
    for f in files.iter().filter(|f| !f.ends_with("xtask/src/tidy.rs")) {
        let text = fs::read_to_string(f)?;
        for (i, line) in text.lines().enumerate() {
            for b in &banned {
                if line.contains(b.as_str()) {
                    problems.push(format!("{}:{}: `{b}` is not allowed", f.display(), i + 1));
                }
            }
        }
    }

    // Library crates: no clock, threads or subscribers outside the dispatcher runtime.
    let lib_banned = [
        pat(&["Instant", "::now"]),
        pat(&["SystemTime", "::now"]),
        pat(&["thread", "::spawn"]),
        pat(&["tracing_subscriber"]),
    ];
    let mut lib_files = Vec::new();
    rust_files(Path::new("crates"), &mut lib_files);
    for f in &lib_files {
        let s = f.to_string_lossy();
        let is_runtime = s.contains("dispatcher/src/runtime");
        let is_test = s.contains("/tests/") || s.ends_with("tests.rs") || s.contains("/benches/");
        if is_runtime || is_test {
            continue;
        }
        let text = fs::read_to_string(f)?;
        for (i, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for b in &lib_banned {
                if line.contains(b.as_str()) {
                    problems.push(format!(
                        "{}:{}: library code must not use `{b}` (time, threads and subscribers are passed in)",
                        f.display(),
                        i + 1
                    ));
                }
            }
        }
    }

    // Loom-checked crates: only src/sync.rs names the primitives.
    for c in ["pending-acks", "draining-hashes"] {
        let mut fs_ = Vec::new();
        rust_files(&Path::new("crates").join(c).join("src"), &mut fs_);
        for f in fs_ {
            if f.ends_with("sync.rs") {
                continue;
            }
            let text = fs::read_to_string(&f)?;
            for (i, line) in text.lines().enumerate() {
                if line.contains(&pat(&["std::", "sync"])) || line.contains(&pat(&["loom", "::"])) {
                    problems.push(format!(
                        "{}:{}: import sync primitives from `crate::sync` so loom can check them",
                        f.display(),
                        i + 1
                    ));
                }
            }
        }
    }

    // Every crate has a top doc.
    for e in fs::read_dir("crates")?.flatten() {
        let lib = e.path().join("src/lib.rs");
        if let Ok(text) = fs::read_to_string(&lib) {
            if !text.trim_start().starts_with("//!") {
                problems.push(format!("{}: missing crate-level `//!` doc", lib.display()));
            }
        }
    }

    // The two set-up commands.
    let readme = fs::read_to_string("README.md").unwrap_or_default();
    for c in ["cargo xtask ci", "cargo xtask sim"] {
        if !readme.contains(c) {
            problems.push(format!("README.md: must show `{c}`"));
        }
    }
    let ci = fs::read_to_string(".ci/run").unwrap_or_default();
    if !ci.contains("cargo xtask ci") {
        problems.push(".ci/run: must run `cargo xtask ci`".into());
    }
    if !Path::new("docs/ARCHITECTURE.md").exists() {
        problems.push("docs/ARCHITECTURE.md is missing".into());
    }

    if problems.is_empty() {
        println!("tidy: ok ({} Rust files)", files.len());
        Ok(())
    } else {
        for p in &problems {
            eprintln!("tidy: {p}");
        }
        anyhow::bail!("tidy found {} problem(s)", problems.len())
    }
}
