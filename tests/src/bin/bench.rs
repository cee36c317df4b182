//! `cargo xtask bench` runs this binary in release mode: it measures every workload, prints the
//! table and writes `target/bench/results.json`. Arguments: workload ids (a prefix: `W8` runs
//! W8, W8/W9, W8N…; `=W8` runs W8 alone), `--rounds N`, `--warmup N`, `--quick`, `--out FILE`.

use std::path::PathBuf;

use tests::bench::{self, Settings};

fn main() -> anyhow::Result<()> {
    let mut settings = Settings::default();
    let mut out = PathBuf::from("target/bench/results.json");
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--rounds" => settings.rounds = args.next().unwrap_or_default().parse()?,
            "--warmup" => settings.warmup = args.next().unwrap_or_default().parse()?,
            "--out" => out = PathBuf::from(args.next().unwrap_or_default()),
            "--quick" => {
                settings.rounds = 3;
                settings.warmup = 1;
            }
            other if other.starts_with('-') => anyhow::bail!("unknown flag {other}"),
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
    for mut w in bench::all() {
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
    print!("{}", bench::table(&rows));
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&out, bench::json(&rows))?;
    println!("wrote {}", out.display());
    Ok(())
}
