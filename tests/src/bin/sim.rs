//! `cargo xtask sim`: the deterministic simulator's command line (see docs/SIMULATOR.md).
//!
//! ```text
//! sim [--seed S] [--seeds N] [--scenario NAME|FILE]... [--legacy NAME] [--expect-violation]
//!     [--check-determinism] [--runtime sim|threads|broker] [--log FILE] [--json FILE]
//!     [--all-violations] [--timeline FILE.svg] [--timeline-keys N] [--list] [--help]
//! ```
//!
//! Runtimes: `sim` (default) is the deterministic world; `threads` runs the workload on the
//! dispatcher's threaded runtime (not reproducible by seed); `broker` drives the same workload
//! through the broker's stepped sans-IO core in Pulsar's binary protocol, deterministically
//! (see `tests::sim::run_broker`), printing what it skipped or approximated per scenario.
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

struct Args {
    seed: u64,
    seeds: u64,
    scenarios: Vec<String>,
    legacy: Option<Legacy>,
    expect_violation: bool,
    check_determinism: bool,
    /// `--runtime`: the world, the threaded runtime or the broker's stepped core.
    runtime: SimRuntime,
    log: Option<String>,
    json: String,
    list: bool,
    all_violations: bool,
    timeline: Option<String>,
    timeline_keys: usize,
}

/// Why the command line was not run: `Help` prints the usage and exits 0.
enum ArgError {
    Help,
    Bad(String),
}

fn usage() -> &'static str {
    "usage: cargo xtask sim [--seed S] [--seeds N] [--scenario NAME|FILE]... [--legacy NAME] \
     [--expect-violation] [--check-determinism] [--runtime sim|threads|broker] [--log FILE] \
     [--json FILE] [--all-violations] [--timeline FILE.svg] [--timeline-keys N] [--list]\n\
     runtimes: sim (the deterministic world), threads (the dispatcher's threaded runtime, not \
     reproducible), broker (the broker's stepped core in Pulsar's binary protocol, \
     deterministic; legacy switches: mark-delete-cleanup, orphan-chunk-replay, unordered-nack, \
     no-delayed-delivery)\n\
     legacy switches: mark-delete-cleanup (expects an order violation), orphan-chunk-replay \
     (expects a stall), unordered-nack (Pulsar-mode nack on Key_Shared; expects an order violation),\n\
     no-batch-ack-set (redelivered batches without their acked indexes; expects acked-redelivered),\n\
     no-delayed-delivery (deliver-at times ignored; expects early),\n\
     replay-settle (a redelivery during a Key_Shared replay read can wait forever; expects a stall)\n\
     exit status: 0 no violation, 1 a violation, 2 bad arguments or a scenario that cannot run\n\
     details: docs/SIMULATOR.md"
}

fn parse_args() -> Result<Args, ArgError> {
    let bad = |m: String| ArgError::Bad(m);
    let mut a = Args {
        seed: DEFAULT_SEED,
        seeds: DEFAULT_SEEDS,
        scenarios: Vec::new(),
        legacy: None,
        expect_violation: false,
        check_determinism: false,
        runtime: SimRuntime::World,
        log: None,
        json: "target/sim/report.json".into(),
        list: false,
        all_violations: false,
        timeline: None,
        timeline_keys: TimelineOptions::default().max_keys,
    };
    let mut seeds_given = false;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut val = |name: &str| {
            it.next()
                .ok_or_else(|| ArgError::Bad(format!("{name} needs a value\n{}", usage())))
        };
        match arg.as_str() {
            "--seed" => {
                let v = val("--seed")?;
                a.seed = v
                    .parse()
                    .map_err(|_| bad(format!("--seed: `{v}` is not a number")))?;
                if !seeds_given {
                    a.seeds = 1;
                }
            }
            "--seeds" => {
                let v = val("--seeds")?;
                a.seeds = v
                    .parse()
                    .map_err(|_| bad(format!("--seeds: `{v}` is not a number")))?;
                seeds_given = true;
            }
            "--scenario" => a.scenarios.push(val("--scenario")?),
            "--legacy" => {
                let v = val("--legacy")?;
                a.legacy = Some(
                    Legacy::parse(&v)
                        .ok_or_else(|| bad(format!("unknown legacy switch `{v}`\n{}", usage())))?,
                );
            }
            "--expect-violation" => a.expect_violation = true,
            "--check-determinism" => a.check_determinism = true,
            "--runtime" => match val("--runtime")?.as_str() {
                "sim" => a.runtime = SimRuntime::World,
                "threads" => a.runtime = SimRuntime::Threads,
                "broker" => a.runtime = SimRuntime::Broker,
                other => {
                    return Err(bad(format!(
                        "unknown runtime `{other}` (sim, threads or broker)"
                    )))
                }
            },
            "--log" => a.log = Some(val("--log")?),
            "--json" => a.json = val("--json")?,
            "--list" => a.list = true,
            "--all-violations" => a.all_violations = true,
            "--timeline" => a.timeline = Some(val("--timeline")?),
            "--timeline-keys" => {
                let v = val("--timeline-keys")?;
                a.timeline_keys = v
                    .parse()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| bad(format!("--timeline-keys: `{v}` is not a count")))?;
            }
            "-h" | "--help" => return Err(ArgError::Help),
            other => return Err(bad(format!("unknown argument `{other}`\n{}", usage()))),
        }
    }
    if a.seeds == 0 {
        return Err(bad("--seeds must be at least 1".into()));
    }
    if a.timeline.is_some() && a.runtime == SimRuntime::Threads {
        return Err(bad(
            "--timeline draws one deterministic run; drop --runtime threads".into(),
        ));
    }
    if a.check_determinism && a.runtime == SimRuntime::Threads {
        return Err(bad(
            "--runtime threads is not deterministic (the threads decide the interleaving); \
             drop --check-determinism"
                .into(),
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
                match args.runtime {
                    SimRuntime::World => String::new(),
                    other => format!(" --runtime {}", other.as_str()),
                }
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
                SimRuntime::World => "",
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
        Err(ArgError::Help) => {
            println!("{}", usage());
            return ExitCode::SUCCESS;
        }
        Err(ArgError::Bad(e)) => {
            eprintln!("sim: {e}");
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
