//! `cargo xtask sim`: the deterministic simulator's command line (see docs/SIMULATOR.md).
//!
//! ```text
//! sim [--seed S] [--seeds N] [--scenario NAME|FILE]... [--legacy NAME] [--expect-violation]
//!     [--check-determinism] [--runtime sim|threads] [--log FILE] [--json FILE] [--list]
//! ```

use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use tests::sim::{
    default_mix, json_report, load, repro_command, run_scenario, summary_table, Legacy, RunOptions,
    RunResult, Scenario, Summary,
};

const DEFAULT_SEED: u64 = 1;
const DEFAULT_SEEDS: u64 = 150;

struct Args {
    seed: u64,
    seeds: u64,
    scenarios: Vec<String>,
    legacy: Option<Legacy>,
    expect_violation: bool,
    check_determinism: bool,
    runtime_threads: bool,
    log: Option<String>,
    json: String,
    list: bool,
}

fn usage() -> &'static str {
    "usage: cargo xtask sim [--seed S] [--seeds N] [--scenario NAME|FILE]... [--legacy NAME] \
     [--expect-violation] [--check-determinism] [--runtime sim|threads] [--log FILE] \
     [--json FILE] [--list]\n\
     legacy switches: mark-delete-cleanup (expects an order violation), orphan-chunk-replay \
     (expects a stall), unordered-nack (Pulsar-mode nack on Key_Shared; expects an order violation)"
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        seed: DEFAULT_SEED,
        seeds: DEFAULT_SEEDS,
        scenarios: Vec::new(),
        legacy: None,
        expect_violation: false,
        check_determinism: false,
        runtime_threads: false,
        log: None,
        json: "target/sim/report.json".into(),
        list: false,
    };
    let mut seeds_given = false;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut val = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--seed" => {
                a.seed = val("--seed")?.parse().map_err(|_| "--seed: not a number")?;
                if !seeds_given {
                    a.seeds = 1;
                }
            }
            "--seeds" => {
                a.seeds = val("--seeds")?
                    .parse()
                    .map_err(|_| "--seeds: not a number")?;
                seeds_given = true;
            }
            "--scenario" => a.scenarios.push(val("--scenario")?),
            "--legacy" => {
                let v = val("--legacy")?;
                a.legacy = Some(
                    Legacy::parse(&v)
                        .ok_or_else(|| format!("unknown legacy switch `{v}`\n{}", usage()))?,
                );
            }
            "--expect-violation" => a.expect_violation = true,
            "--check-determinism" => a.check_determinism = true,
            "--runtime" => match val("--runtime")?.as_str() {
                "sim" => a.runtime_threads = false,
                "threads" => a.runtime_threads = true,
                other => return Err(format!("unknown runtime `{other}` (sim or threads)")),
            },
            "--log" => a.log = Some(val("--log")?),
            "--json" => a.json = val("--json")?,
            "--list" => a.list = true,
            "-h" | "--help" => return Err(usage().into()),
            other => return Err(format!("unknown argument `{other}`\n{}", usage())),
        }
    }
    if a.seeds == 0 {
        return Err("--seeds must be at least 1".into());
    }
    Ok(a)
}

/// What one job produced.
enum Outcome {
    Ran(RunResult, f64),
    NonDeterministic(String),
    Error(String),
}

fn run_one(s: &Scenario, seed: u64, args: &Args, keep_log: bool) -> Outcome {
    let opts = RunOptions {
        seed,
        legacy: args.legacy,
        keep_log,
    };
    let t = Instant::now();
    let r = match run_scenario(s, &opts) {
        Ok(r) => r,
        Err(e) => return Outcome::Error(format!("{}: {e}", s.name)),
    };
    let wall = t.elapsed().as_secs_f64();
    if args.check_determinism {
        let again = match run_scenario(s, &opts) {
            Ok(r) => r,
            Err(e) => return Outcome::Error(format!("{}: {e}", s.name)),
        };
        if again.log_hash != r.log_hash || again.log_lines != r.log_lines {
            return Outcome::NonDeterministic(format!(
                "NON-DETERMINISTIC [{} seed={seed}] event-log hash {:016x} ({} lines) then {:016x} ({} lines)\n  reproduce: {} --check-determinism",
                s.name,
                r.log_hash,
                r.log_lines,
                again.log_hash,
                again.log_lines,
                repro_command(&s.name, seed, args.legacy)
            ));
        }
    }
    Outcome::Ran(r, wall)
}

fn print_violations(r: &RunResult, legacy: Option<Legacy>) {
    for v in &r.violations {
        println!("VIOLATION [{} seed={}] {v}", r.scenario, r.seed);
        println!(
            "  reproduce: {}",
            repro_command(&r.scenario, r.seed, legacy)
        );
    }
    if !r.violations.is_empty() {
        println!("  last events before it:");
        for l in r
            .log_tail
            .iter()
            .rev()
            .take(15)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
        {
            println!("    {l}");
        }
    }
}

/// `--runtime threads`: the randomised scenarios (or the given ones) on the dispatcher's
/// threaded runtime, consumers acking on their own threads, checked from the event log.
fn run_threads(args: &Args, scenarios: Vec<Scenario>) -> ExitCode {
    let scenarios: Vec<Scenario> = if args.scenarios.is_empty() {
        scenarios.into_iter().filter(|s| s.mix.is_some()).collect()
    } else {
        scenarios
    };
    if args.check_determinism {
        eprintln!(
            "sim: --runtime threads is not deterministic (the threads decide the interleaving); \
             drop --check-determinism"
        );
        return ExitCode::from(2);
    }
    let started = Instant::now();
    let mut results = Vec::new();
    let mut walls = Vec::new();
    for s in &scenarios {
        for seed in args.seed..args.seed.saturating_add(args.seeds) {
            let t = Instant::now();
            match tests::sim::run_threaded(s, seed, args.legacy) {
                Ok((r, skipped)) => {
                    walls.push(t.elapsed().as_secs_f64());
                    if skipped > 0 {
                        eprintln!(
                            "sim: [{} seed={seed}] threads: {skipped} crash/restart fault(s) skipped (they need the deterministic world)",
                            s.name
                        );
                    }
                    for v in &r.violations {
                        println!("VIOLATION [{} seed={seed} runtime=threads] {v}", r.scenario);
                        println!(
                            "  reproduce (the workload; threads decide the interleaving): {} --runtime threads",
                            repro_command(&r.scenario, seed, args.legacy)
                        );
                    }
                    results.push(r);
                }
                Err(e) => {
                    eprintln!("sim: {}: {e}", s.name);
                    return ExitCode::from(2);
                }
            }
        }
    }
    let rows = Summary::group(&results, &walls);
    print!("{}", summary_table(&rows, true));
    let json = json_report(&results, &walls, None, |r| {
        format!(
            "{} --runtime threads",
            repro_command(&r.scenario, r.seed, None)
        )
    });
    if let Some(dir) = std::path::Path::new(&args.json).parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let _ = std::fs::write(&args.json, json);
    let violations: usize = results.iter().map(|r| r.violations.len()).sum();
    println!(
        "{} threaded runs in {:.1?}, {violations} violation(s)",
        results.len(),
        started.elapsed()
    );
    verdict(&results, args.legacy, args.expect_violation)
}

/// The exit status: 0 without violations; with a legacy switch, 0 only when
/// `--expect-violation` was given and a violation of the expected kind was found.
fn verdict(results: &[RunResult], legacy: Option<Legacy>, expect_violation: bool) -> ExitCode {
    let violations: usize = results.iter().map(|r| r.violations.len()).sum();
    match legacy {
        None if violations == 0 => ExitCode::SUCCESS,
        None => ExitCode::from(1),
        Some(l) => {
            let want = l.expected_kind();
            let found = results
                .iter()
                .flat_map(|r| r.violations.iter())
                .filter(|v| v.kind == want)
                .count();
            if found > 0 {
                println!(
                    "legacy {}: {found} {want} violation(s) found, as expected",
                    l.as_str()
                );
            } else {
                println!(
                    "legacy {}: NO {want} violation found — the checker or the scenarios cannot see this bug",
                    l.as_str()
                );
            }
            if expect_violation && found > 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
    }
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    if args.list {
        for s in default_mix() {
            println!("{}", s.name);
        }
        return ExitCode::SUCCESS;
    }
    let scenarios: Vec<Scenario> = if args.scenarios.is_empty() {
        default_mix()
    } else {
        let mut v = Vec::new();
        for s in &args.scenarios {
            match load(s) {
                Ok(s) => v.push(s),
                Err(e) => {
                    eprintln!("sim: {e}");
                    return ExitCode::from(2);
                }
            }
        }
        v
    };
    if args.runtime_threads {
        return run_threads(&args, scenarios);
    }
    let keep_log = args.log.is_some();
    let started = Instant::now();
    let jobs: Vec<(usize, u64)> = (0..scenarios.len())
        .flat_map(|i| (args.seed..args.seed.saturating_add(args.seeds)).map(move |s| (i, s)))
        .collect();
    let total = jobs.len();
    // Runs are independent worlds: spread them over the machine's cores, print and report in
    // job order so the output does not depend on scheduling.
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 4)
        .min(total.max(1));
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let last_progress = Mutex::new(Instant::now());
    let slots: Vec<Mutex<Option<Outcome>>> = (0..total).map(|_| Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let j = next.fetch_add(1, Ordering::SeqCst);
                let Some(&(i, seed)) = jobs.get(j) else { break };
                let out = run_one(&scenarios[i], seed, &args, keep_log);
                let failed = !matches!(out, Outcome::Ran(..));
                if let Ok(mut slot) = slots[j].lock() {
                    *slot = Some(out);
                }
                let n = done.fetch_add(1, Ordering::SeqCst) + 1;
                if let Ok(mut last) = last_progress.lock() {
                    if last.elapsed().as_secs() >= 3 {
                        eprintln!("sim: {n}/{total} runs, {:.0?} elapsed", started.elapsed());
                        *last = Instant::now();
                    }
                }
                if failed {
                    // Stop handing out work; the others finish their current run.
                    next.store(total, Ordering::SeqCst);
                }
            });
        }
    });
    let mut results = Vec::new();
    let mut walls = Vec::new();
    let mut full_logs = String::new();
    for slot in slots {
        match slot.into_inner().ok().flatten() {
            None => {}
            Some(Outcome::Error(e)) => {
                eprintln!("sim: {e}");
                return ExitCode::from(2);
            }
            Some(Outcome::NonDeterministic(msg)) => {
                println!("{msg}");
                return ExitCode::from(1);
            }
            Some(Outcome::Ran(r, wall)) => {
                if let Some(log) = &r.log {
                    full_logs.push_str(&format!("# {} seed={}\n", r.scenario, r.seed));
                    for l in log {
                        full_logs.push_str(l);
                        full_logs.push('\n');
                    }
                }
                print_violations(&r, args.legacy);
                results.push(r);
                walls.push(wall);
            }
        }
    }
    let rows = Summary::group(&results, &walls);
    print!("{}", summary_table(&rows, true));
    if args.check_determinism {
        println!("determinism: every run repeated with an identical event-log hash");
    }
    if let Some(h) = results.first().filter(|_| results.len() == 1) {
        println!(
            "event-log hash: {:016x} ({} lines)",
            h.log_hash, h.log_lines
        );
    }
    if let Some(path) = &args.log {
        if let Err(e) = std::fs::write(path, full_logs) {
            eprintln!("sim: cannot write {path}: {e}");
        }
    }
    let legacy = args.legacy;
    let json = json_report(&results, &walls, legacy.map(Legacy::as_str), |r| {
        repro_command(&r.scenario, r.seed, legacy)
    });
    if let Some(dir) = std::path::Path::new(&args.json).parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    if let Err(e) = std::fs::write(&args.json, json) {
        eprintln!("sim: cannot write {}: {e}", args.json);
    } else {
        println!("report: {}", args.json);
    }
    let violations: usize = results.iter().map(|r| r.violations.len()).sum();
    println!(
        "{} runs in {:.1?}, {violations} violation(s)",
        results.len(),
        started.elapsed()
    );
    verdict(&results, legacy, args.expect_violation)
}
