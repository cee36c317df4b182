//! `cargo xtask sim`: the deterministic simulator's command line (see docs/SIMULATOR.md).
//!
//! `--help` lists the flags (the [`Cli`] struct declares them).
//!
//! Runtimes: `broker` (default) drives the workload through the broker's stepped sans-IO core
//! in Pulsar's binary protocol, deterministically (see `tests::sim::run_broker`), printing what
//! it skipped or approximated per scenario; `sim` is the deterministic world, the dispatcher
//! crate alone under the simulator's own model of a broker (4 times as fast); `threads` runs
//! the workload on the dispatcher's threaded runtime (not reproducible by seed).
//!
//! Output: the summary table (with the invariants each scenario's runs checked), then the
//! violations grouped (the first in full, one line per further kind), then where the reports
//! went and the totals. Exit status: 0 no violation, 1 a violation, 2 bad arguments or a
//! scenario the simulator cannot run (it does not parse, publishes nothing, …).

use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use tests::sim::{
    default_mix, describe_skipped, json_report, load, repro_command, repro_line, run_broker,
    run_scenario, run_threaded_with, summary_table, timeline_svg, violation_report, Legacy,
    ReportStyle, RunOptions, RunResult, Scenario, SimRuntime, Skipped, Summary, TimelineOptions,
};

const DEFAULT_SEED: u64 = 1;
const DEFAULT_SEEDS: u64 = 150;

/// The simulator's flags, declared once (clap derives the parser and `--help` from them).
#[derive(clap::Parser, Debug)]
#[command(
    name = "sim",
    about = "The deterministic simulator: scenarios through the dispatcher, checked (docs/SIMULATOR.md).",
    after_help = "Exit status: 0 no violation, 1 a violation, 2 bad arguments or a scenario that cannot run.",
    args_override_self = true,
    disable_version_flag = true
)]
struct Cli {
    /// The first seed (default 1); alone, it runs that one seed.
    #[arg(long, value_name = "S")]
    seed: Option<u64>,
    /// Seeds per scenario, from --seed on (default 150, or 1 with --seed).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    seeds: Option<u64>,
    /// A shipped scenario's name or a scenario file (repeatable; default: the whole mix).
    #[arg(long = "scenario", value_name = "NAME|FILE", action = clap::ArgAction::Append)]
    scenarios: Vec<String>,
    /// Bring back a bug the checkers must catch: mark-delete-cleanup (expects order),
    /// orphan-chunk-replay (a stall), unordered-nack (order), no-batch-ack-set
    /// (acked-redelivered), no-delayed-delivery (early), replay-settle (a stall),
    /// early-receipt (loss; broker runs with store_faults=on).
    #[arg(long, value_name = "NAME", value_parser = legacy)]
    legacy: Option<Legacy>,
    /// Exit 0 only if a violation of the legacy switch's kind was found.
    #[arg(long)]
    expect_violation: bool,
    /// Run every seed twice and compare the event-log hashes.
    #[arg(long)]
    check_determinism: bool,
    /// broker (the broker's stepped core in Pulsar's binary protocol, default), sim (the
    /// dispatcher crate alone in the deterministic world) or threads (the dispatcher's threaded
    /// runtime, not reproducible).
    #[arg(long, value_name = "sim|threads|broker", value_parser = runtime)]
    runtime: Option<SimRuntime>,
    /// Write the event log of the runs to FILE.
    #[arg(long, value_name = "FILE")]
    log: Option<String>,
    /// Where the JSON report goes.
    #[arg(long, value_name = "FILE", default_value = "target/sim/report.json")]
    json: String,
    /// List the default mix's scenarios and exit.
    #[arg(long)]
    list: bool,
    /// Print every violation in full, not one per kind.
    #[arg(long)]
    all_violations: bool,
    /// Draw one run's timeline as SVG.
    #[arg(long, value_name = "FILE.svg")]
    timeline: Option<String>,
    /// Keys drawn in the timeline (default: the timeline's own).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    timeline_keys: Option<u64>,
}

/// What the runs use of the command line.
struct Args {
    seed: u64,
    seeds: u64,
    scenarios: Vec<String>,
    legacy: Option<Legacy>,
    expect_violation: bool,
    check_determinism: bool,
    /// `--runtime`: the broker's stepped core, the world or the threaded runtime.
    runtime: SimRuntime,
    log: Option<String>,
    json: String,
    list: bool,
    all_violations: bool,
    timeline: Option<String>,
    timeline_keys: usize,
}

fn legacy(v: &str) -> Result<Legacy, String> {
    Legacy::parse(v).ok_or_else(|| format!("unknown legacy switch `{v}` (see --help)"))
}

fn runtime(v: &str) -> Result<SimRuntime, &'static str> {
    match v {
        "sim" => Ok(SimRuntime::World),
        "threads" => Ok(SimRuntime::Threads),
        "broker" => Ok(SimRuntime::Broker),
        _ => Err("must be sim, threads or broker"),
    }
}

/// The command line, checked; `Err` is clap's error (help included), printed by the caller.
fn parse_args() -> Result<Args, clap::Error> {
    use clap::{CommandFactory, Parser};
    let c = Cli::try_parse()?;
    let a = Args {
        seed: c.seed.unwrap_or(DEFAULT_SEED),
        seeds: c
            .seeds
            .unwrap_or(if c.seed.is_some() { 1 } else { DEFAULT_SEEDS }),
        scenarios: c.scenarios,
        legacy: c.legacy,
        expect_violation: c.expect_violation,
        check_determinism: c.check_determinism,
        runtime: c.runtime.unwrap_or_default(),
        log: c.log,
        json: c.json,
        list: c.list,
        all_violations: c.all_violations,
        timeline: c.timeline,
        timeline_keys: c
            .timeline_keys
            .map_or(TimelineOptions::default().max_keys, |n| {
                usize::try_from(n).unwrap_or(usize::MAX)
            }),
    };
    let conflict = |m: &str| Cli::command().error(clap::error::ErrorKind::ArgumentConflict, m);
    if a.timeline.is_some() && a.runtime == SimRuntime::Threads {
        return Err(conflict(
            "--timeline draws one deterministic run; drop --runtime threads",
        ));
    }
    if a.check_determinism && a.runtime == SimRuntime::Threads {
        return Err(conflict(
            "--runtime threads is not deterministic (the threads decide the interleaving); \
             drop --check-determinism",
        ));
    }
    Ok(a)
}

/// Makes sure `path` can be written (creating its directory), before the runs start, so a typo
/// fails at once and names the path.
fn writable(what: &str, path: &str) -> Result<(), String> {
    let p = Path::new(path);
    if p.is_dir() {
        return Err(format!(
            "cannot write {what} to `{path}`: it is a directory"
        ));
    }
    if let Some(dir) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot write {what} to `{path}`: {e}"))?;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(p)
        .map(|_| ())
        .map_err(|e| format!("cannot write {what} to `{path}`: {e}"))
}

fn write_file(what: &str, path: &str, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("cannot write {what} to `{path}`: {e}"))
}

/// What one job produced.
enum Outcome {
    /// The result, its wall time and (`--runtime broker`) what it skipped or approximated.
    Ran(RunResult, f64, Skipped),
    NonDeterministic(String),
    Error(String),
}

fn run_one(s: &Scenario, seed: u64, args: &Args, keep_log: bool) -> Outcome {
    let opts = RunOptions {
        seed,
        legacy: args.legacy,
        keep_log,
    };
    let run = |opts: &RunOptions| {
        if args.runtime == SimRuntime::Broker {
            run_broker(s, opts)
        } else {
            run_scenario(s, opts).map(|r| (r, Skipped::new()))
        }
    };
    let t = Instant::now();
    let (r, skipped) = match run(&opts) {
        Ok(r) => r,
        Err(e) => return Outcome::Error(format!("{}: {e}", s.name)),
    };
    let wall = t.elapsed().as_secs_f64();
    if args.check_determinism {
        let (again, _) = match run(&opts) {
            Ok(r) => r,
            Err(e) => return Outcome::Error(format!("{}: {e}", s.name)),
        };
        if again.log_hash != r.log_hash || again.log_lines != r.log_lines {
            return Outcome::NonDeterministic(format!(
                "NON-DETERMINISTIC [{} seed={seed}] event-log hash {:016x} ({} lines) then {:016x} ({} lines)\n  reproduce: {}{} --check-determinism",
                s.name,
                r.log_hash,
                r.log_lines,
                again.log_hash,
                again.log_lines,
                repro_command(&s.name, seed, args.legacy),
                args.runtime.flag()
            ));
        }
    }
    Outcome::Ran(r, wall, skipped)
}

/// Progress on stderr, at most every 3 s, for long runs.
struct Progress {
    started: Instant,
    last: Mutex<Instant>,
}

impl Progress {
    fn new() -> Self {
        Progress {
            started: Instant::now(),
            last: Mutex::new(Instant::now()),
        }
    }

    fn tick(&self, done: usize, total: usize) {
        if let Ok(mut last) = self.last.lock() {
            if last.elapsed().as_secs() >= 3 {
                eprintln!(
                    "sim: {done}/{total} runs, {:.0?} elapsed",
                    self.started.elapsed()
                );
                *last = Instant::now();
            }
        }
    }
}

/// Everything after the runs: table, violations, reports, totals, verdict.
struct Finish<'a> {
    args: &'a Args,
    scenarios: &'a [Scenario],
    results: Vec<RunResult>,
    walls: Vec<f64>,
    started: Instant,
    /// Threaded and broker runs: steps skipped (or approximated) per scenario, in run order,
    /// and over how many seeds.
    skipped: Vec<(String, Skipped, u64)>,
}

impl Finish<'_> {
    fn report(self) -> ExitCode {
        let args = self.args;
        let threads = args.runtime == SimRuntime::Threads;
        let mut rows = Summary::group(&self.results, &self.walls);
        Summary::annotate(&mut rows, self.scenarios, args.runtime);
        print!("{}", summary_table(&rows, true));
        for (name, sk, seeds) in self.skipped.iter().filter(|s| !s.1.is_empty()) {
            if args.runtime == SimRuntime::Broker {
                println!(
                    "broker: {name}: skipped or approximated {} over {seeds} seed(s)",
                    describe_skipped(sk)
                );
            } else {
                println!(
                    "threads: {name}: skipped {} over {seeds} seed(s) (they need the deterministic world)",
                    describe_skipped(sk)
                );
            }
        }
        let style = ReportStyle {
            legacy: args.legacy,
            all: args.all_violations,
            runtime: args.runtime,
        };
        let report = violation_report(&self.results, self.scenarios, &style);
        print!("{report}");
        if args.check_determinism {
            println!("determinism: every run repeated with an identical event-log hash");
        }
        let mut failed_write = false;
        if let Some(h) = self.results.first().filter(|_| self.results.len() == 1) {
            if !threads {
                println!(
                    "event-log hash: {:016x} ({} lines)",
                    h.log_hash, h.log_lines
                );
            }
        }
        if let Some(path) = &args.log {
            let mut full = String::new();
            for r in &self.results {
                if let Some(log) = &r.log {
                    full.push_str(&format!("# {} seed={}\n", r.scenario, r.seed));
                    for l in log {
                        full.push_str(l);
                        full.push('\n');
                    }
                }
            }
            match write_file("the event log", path, &full) {
                Ok(()) => println!("log: {path}"),
                Err(e) => {
                    eprintln!("sim: {e}");
                    failed_write = true;
                }
            }
        }
        if let (Some(path), Some(r)) = (&args.timeline, self.results.first()) {
            let title = repro_command(&r.scenario, r.seed, args.legacy);
            let opts = TimelineOptions {
                max_keys: args.timeline_keys,
                ..TimelineOptions::default()
            };
            match timeline_svg(r, &title, &opts)
                .and_then(|svg| write_file("the timeline", path, &svg))
            {
                Ok(()) => println!("timeline: {path}"),
                Err(e) => {
                    eprintln!("sim: {e}");
                    failed_write = true;
                }
            }
        }
        let json = json_report(
            &self.results,
            &self.walls,
            args.legacy.map(Legacy::as_str),
            |r| repro_line(r, &style),
        );
        match write_file("the JSON report", &args.json, &json) {
            Ok(()) => println!("report: {}", args.json),
            Err(e) => {
                eprintln!("sim: {e}");
                failed_write = true;
            }
        }
        let violations: usize = self.results.iter().map(|r| r.violations.len()).sum();
        println!(
            "{} {}runs in {:.1?}, {violations} violation(s)",
            self.results.len(),
            match args.runtime {
                SimRuntime::Threads => "threaded ",
                SimRuntime::Broker => "broker ",
                SimRuntime::World => "world ",
            },
            self.started.elapsed()
        );
        let code = verdict(&self.results, args.legacy, args.expect_violation);
        if failed_write && code == ExitCode::SUCCESS {
            return ExitCode::from(2);
        }
        code
    }
}

fn run_threads(args: &Args, scenarios: Vec<Scenario>) -> ExitCode {
    let scenarios: Vec<Scenario> = if args.scenarios.is_empty() {
        scenarios.into_iter().filter(|s| s.mix.is_some()).collect()
    } else {
        scenarios
    };
    let started = Instant::now();
    let progress = Progress::new();
    let total = scenarios.len() * args.seeds as usize;
    let mut results = Vec::new();
    let mut walls = Vec::new();
    let mut skipped: Vec<(String, Skipped, u64)> = Vec::new();
    for s in &scenarios {
        for seed in args.seed..args.seed.saturating_add(args.seeds) {
            let t = Instant::now();
            let opts = RunOptions {
                seed,
                legacy: args.legacy,
                keep_log: args.log.is_some(),
            };
            match run_threaded_with(s, &opts) {
                Ok((r, sk)) => {
                    walls.push(t.elapsed().as_secs_f64());
                    if skipped.last().is_none_or(|(n, _, _)| *n != s.name) {
                        skipped.push((s.name.clone(), Skipped::new(), 0));
                    }
                    if let Some((_, all, seeds)) = skipped.last_mut() {
                        *seeds += 1;
                        for (k, n) in sk {
                            *all.entry(k).or_insert(0) += n;
                        }
                    }
                    results.push(r);
                }
                Err(e) => {
                    eprintln!("sim: {}: {e}", s.name);
                    return ExitCode::from(2);
                }
            }
            progress.tick(results.len(), total);
        }
    }
    Finish {
        args,
        scenarios: &scenarios,
        results,
        walls,
        started,
        skipped,
    }
    .report()
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
            // Help goes to stdout with 0; a refusal to stderr with 2.
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
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
    if args.timeline.is_some() && (scenarios.len() != 1 || args.seeds != 1) {
        eprintln!(
            "sim: --timeline draws one run: give one --scenario and one --seed (e.g. the repro \
             line of a violation)"
        );
        return ExitCode::from(2);
    }
    let mut outputs = vec![("the JSON report", args.json.as_str())];
    if let Some(l) = &args.log {
        outputs.push(("the event log", l));
    }
    if let Some(t) = &args.timeline {
        outputs.push(("the timeline", t));
    }
    for (what, path) in outputs {
        if let Err(e) = writable(what, path) {
            eprintln!("sim: {e}");
            return ExitCode::from(2);
        }
    }
    if args.runtime == SimRuntime::Threads {
        return run_threads(&args, scenarios);
    }
    let keep_log = args.log.is_some() || args.timeline.is_some();
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
    let progress = Progress::new();
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
                progress.tick(n, total);
                if failed {
                    // Stop handing out work; the others finish their current run.
                    next.store(total, Ordering::SeqCst);
                }
            });
        }
    });
    let mut results = Vec::new();
    let mut walls = Vec::new();
    let mut skipped: Vec<(String, Skipped, u64)> = Vec::new();
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
            Some(Outcome::Ran(r, wall, sk)) => {
                if skipped.last().is_none_or(|(n, _, _)| *n != r.scenario) {
                    skipped.push((r.scenario.clone(), Skipped::new(), 0));
                }
                if let Some((_, all, seeds)) = skipped.last_mut() {
                    *seeds += 1;
                    for (k, n) in sk {
                        *all.entry(k).or_insert(0) += n;
                    }
                }
                results.push(r);
                walls.push(wall);
            }
        }
    }
    Finish {
        args: &args,
        scenarios: &scenarios,
        results,
        walls,
        started,
        skipped,
    }
    .report()
}
