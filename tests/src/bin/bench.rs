//! `cargo xtask bench` runs this binary in release mode: it measures every workload, prints the
//! table and writes `target/bench/results.json`. Arguments: workload ids (a prefix: `W8` runs
//! W8, W8/W9, W8N…; `=W8` runs W8 alone), `--rounds N`, `--warmup N`, `--quick`, `--out FILE`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use tests::bench::{self, Settings};

const USAGE: &str = "usage: bench [ID…] [--rounds N] [--warmup N] [--quick] [--out FILE]

  ID          a workload id prefix (`W8` runs W8, W8/W9, W8N…); `=W8` runs W8 alone;
              none: every workload
  --rounds N  measured rounds per workload
  --warmup N  rounds run first and not counted
  --quick     3 rounds, 1 warm-up
  --out FILE  the JSON results (default target/bench/results.json)";

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // The message and its causes, without a backtrace (RUST_BACKTRACE is often set).
            eprintln!("bench: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run() -> anyhow::Result<()> {
    let mut settings = Settings::default();
    let mut out = PathBuf::from("target/bench/results.json");
    let mut args = std::env::args().skip(1);
    let number = |flag: &str, v: Option<String>| -> anyhow::Result<usize> {
        let v = v.with_context(|| format!("{flag} needs a number\n\n{USAGE}"))?;
        v.parse()
            .with_context(|| format!("{flag} {v}: not a number\n\n{USAGE}"))
    };
    while let Some(a) = args.next() {
        match a.as_str() {
            "--help" | "-h" => {
                println!("{USAGE}");
                return Ok(());
            }
            "--rounds" => settings.rounds = number("--rounds", args.next())?,
            "--warmup" => settings.warmup = number("--warmup", args.next())?,
            "--out" => {
                out = PathBuf::from(
                    args.next()
                        .with_context(|| format!("--out needs a file\n\n{USAGE}"))?,
                )
            }
            "--quick" => {
                settings.rounds = 3;
                settings.warmup = 1;
            }
            other if other.starts_with('-') => anyhow::bail!("unknown flag {other}\n\n{USAGE}"),
            id => settings.filter.push(id.to_string()),
        }
    }
    // `cargo xtask bench` sets GLIBC_TUNABLES so that freed memory stays in the process; say
    // which way this run went, since fresh structures (W1, W5a) pay page faults otherwise.
    match std::env::var("GLIBC_TUNABLES") {
        Ok(t) if t.contains("trim_threshold") => {
            eprintln!("memory: glibc malloc keeps freed memory in the process (GLIBC_TUNABLES={t})")
        }
        _ => eprintln!(
            "memory: glibc malloc defaults (freed memory goes back to the kernel; fresh structures pay page faults)"
        ),
    }
    let mut rows = Vec::new();
    let workloads = bench::all();
    let ids: Vec<String> = workloads.iter().map(|w| w.id.to_string()).collect();
    for mut w in workloads {
        if !settings.filter.is_empty()
            && !settings.filter.iter().any(|f| match f.strip_prefix('=') {
                // `=W8`: exactly W8 (a plain id is a prefix: `W8` also runs W8/W9, W8N, …).
                Some(exact) => w.id == exact,
                None => w.id.starts_with(f.as_str()),
            })
        {
            continue;
        }
        eprintln!("running {} ({} rounds)", w.id, settings.rounds);
        rows.push(bench::measure(&mut w, &settings).map_err(anyhow::Error::msg)?);
    }
    if rows.is_empty() {
        anyhow::bail!(
            "no workload matches {}; the ids: {}",
            settings.filter.join(" "),
            ids.join(" ")
        );
    }
    print!("{}", bench::table(&rows));
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&out, bench::json(&rows))?;
    println!("wrote {}", out.display());
    Ok(())
}
