//! The simulator's command line as a user sees it: snapshots of its output (wall-clock figures
//! redacted) for a passing mix, failing scripted runs and a threaded run, its exit statuses,
//! and the `--timeline` picture of the seed-000 scenario with and without the legacy switch.

use std::path::PathBuf;
use std::process::Command;

use tests::sim::{
    builtin, check_well_formed, repro_command, run_scenario, timeline_svg, Legacy, RunOptions,
    TimelineOptions,
};

/// Runs the `sim` binary in the `tests/` directory (so `tests/data/…` paths work) with its JSON
/// report in a temp file. Returns (exit code, stdout, stderr).
fn sim(args: &[&str]) -> (i32, String, String) {
    let json = temp("report.json");
    let out = Command::new(env!("CARGO_BIN_EXE_sim"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(args)
        .arg("--json")
        .arg(&json)
        .output()
        .expect("the sim binary runs");
    let _ = std::fs::remove_file(&json);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kod-sim-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    // One file per test thread.
    let t = format!("{:?}", std::thread::current().id());
    let t: String = t.chars().filter(char::is_ascii_digit).collect();
    dir.join(format!("{t}-{name}"))
}

/// Byte ranges of the whitespace-separated words of `line`.
fn words(line: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in line.char_indices() {
        match (c.is_whitespace(), start) {
            (true, Some(s)) => {
                out.push((s, i));
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    if let Some(s) = start {
        out.push((s, line.len()));
    }
    out
}

/// Redacts what depends on the machine: the msgs/wall-s column (same width, so the table stays
/// aligned), `… runs in 1.2s,`, the report path, and with `threads` the wall-clock `t=…ms` of a
/// threaded violation.
fn redact(out: &str, threads: bool) -> String {
    let mut lines = Vec::new();
    let mut in_table = false;
    for l in out.lines() {
        let mut l = l.to_string();
        if l.starts_with("scenario ") {
            in_table = true;
        } else if in_table {
            // name seeds messages keys faults violations RATE [checked]
            // The rate column is ` {:>12}` after the violations column; a wide figure may
            // push the rest right, so the whole stretch is replaced by a fixed one.
            let w = words(&l);
            if let (Some(&(_, v)), Some(&(a, b))) = (w.get(5), w.get(6)) {
                if l[a..b].chars().all(|c| c.is_ascii_digit()) {
                    l.replace_range(v..b, &format!(" {:>12}", "[wall]"));
                }
            }
            if l.starts_with("total ") {
                in_table = false;
            }
        }
        if let Some(i) = l.find(" runs in ") {
            if let Some(j) = l[i..].find(',') {
                l.replace_range(i + " runs in ".len()..i + j, "[wall]");
            }
        }
        if l.starts_with("report: ") {
            l = "report: [json]".into();
        }
        if threads {
            while let Some(i) = l.find(" at t=") {
                let rest = &l[i + " at t=".len()..];
                let n = rest.chars().take_while(char::is_ascii_digit).count();
                if n == 0 || !rest[n..].starts_with("ms") {
                    break;
                }
                l.replace_range(i..i + " at t=".len() + n + 2, " at [wall]");
            }
        }
        lines.push(l);
    }
    lines.join("\n") + "\n"
}

#[test]
fn passing_mix() {
    let (code, out, _) = sim(&[
        "--seeds",
        "2",
        "--scenario",
        "f03-ack",
        "--scenario",
        "mix-shared",
        "--scenario",
        "seed-002-nack",
    ]);
    assert_eq!(code, 0, "{out}");
    insta::assert_snapshot!("passing_mix", redact(&out, false));
}

#[test]
fn failing_scripted_runs_are_grouped() {
    let (code, out, _) = sim(&[
        "--legacy",
        "mark-delete-cleanup",
        "--expect-violation",
        "--seeds",
        "3",
        "--scenario",
        "seed-000-draining-skip",
        "--scenario",
        "f08-mark-delete",
    ]);
    assert_eq!(code, 0, "the expected violation was found: {out}");
    // One violation in full, the other five as one grouped line.
    assert_eq!(out.matches("VIOLATION [").count(), 1, "{out}");
    insta::assert_snapshot!("failing_legacy", redact(&out, false));

    let (code, all, _) = sim(&[
        "--legacy",
        "mark-delete-cleanup",
        "--expect-violation",
        "--seeds",
        "3",
        "--scenario",
        "seed-000-draining-skip",
        "--all-violations",
    ]);
    assert_eq!(code, 0);
    assert_eq!(all.matches("VIOLATION [").count(), 3, "{all}");
}

#[test]
fn a_failed_expectation_names_its_line() {
    let (code, out, _) = sim(&["--seeds", "3", "--scenario", "tests/data/wrong-expect.sim"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("  failed expectation: line 11: expect start c1 1:0\n"),
        "{out}"
    );
    insta::assert_snapshot!("failing_expectation", redact(&out, false));
}

#[test]
fn threads_runs_honour_expectations_and_name_skipped_steps() {
    let (code, out, err) = sim(&[
        "--runtime",
        "threads",
        "--seeds",
        "2",
        "--scenario",
        "f03-ack",
        "--scenario",
        "mix-key-shared-admin",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    insta::assert_snapshot!("threads", redact(&out, true));

    let (code, out, _) = sim(&[
        "--runtime",
        "threads",
        "--seeds",
        "2",
        "--scenario",
        "tests/data/wrong-expect.sim",
    ]);
    assert_eq!(
        code, 1,
        "the broken expectation fails on threads too: {out}"
    );
    insta::assert_snapshot!("threads_failing_expectation", redact(&out, true));

    // A script the threaded runtime cannot follow is refused, not passed.
    let (code, _, err) = sim(&[
        "--runtime",
        "threads",
        "--scenario",
        "seed-000-draining-skip",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("cannot honour the `expect` lines"), "{err}");
    assert!(err.contains("1 ack, 1 auto, 1 manual"), "{err}");
}

#[test]
fn bad_input_exits_2_with_a_message() {
    let empty = temp("empty.sim");
    std::fs::write(&empty, "config type=shared\nat 0 join c1\n").expect("write");
    let dup = temp("dup.sim");
    std::fs::write(&dup, "at 0 join c1\nat 1 publish\nat 5 join c1\n").expect("write");
    let binary = temp("binary.sim");
    std::fs::write(&binary, b"at 0 join c1\xff\n").expect("write");
    let dir = std::env::temp_dir();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["--scenario".into(), empty.display().to_string()],
            "publishes nothing",
        ),
        (
            vec!["--scenario".into(), dup.display().to_string()],
            "line 3: `join c1`: c1 already joined on line 1",
        ),
        (
            vec!["--scenario".into(), binary.display().to_string()],
            "is not UTF-8 text",
        ),
        (
            vec!["--scenario".into(), dir.display().to_string()],
            "is a directory, not a scenario file",
        ),
        (
            vec!["--seed".into(), "x".into()],
            "invalid value 'x' for '--seed <S>'",
        ),
        (
            vec!["--frobnicate".into()],
            "unexpected argument '--frobnicate'",
        ),
        (
            vec!["--seeds".into(), "0".into()],
            "invalid value '0' for '--seeds <N>'",
        ),
        (
            vec![
                "--runtime".into(),
                "threads".into(),
                "--check-determinism".into(),
            ],
            "drop --check-determinism",
        ),
    ];
    for (args, want) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, _, err) = sim(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    // An unwritable report fails before running, with the path.
    let out = Command::new(env!("CARGO_BIN_EXE_sim"))
        .args([
            "--scenario",
            "f03-ack",
            "--json",
            "/proc/no-such-dir/r.json",
        ])
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("`/proc/no-such-dir/r.json`"), "{err}");
    // --help is not an error.
    let out = Command::new(env!("CARGO_BIN_EXE_sim"))
        .arg("--help")
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("Usage: sim [OPTIONS]"), "{help}");
    assert!(help.contains("--runtime <sim|threads|broker>"), "{help}");
}

/// The seed-000 timeline: well formed, and the violation marked only in the legacy run.
#[test]
fn seed_000_timeline() {
    let s = builtin("seed-000-draining-skip").expect("shipped");
    let mut svgs = Vec::new();
    for legacy in [None, Some(Legacy::MarkDeleteCleanup)] {
        let r = run_scenario(
            &s,
            &RunOptions {
                seed: 1,
                legacy,
                keep_log: true,
            },
        )
        .expect("runs");
        assert_eq!(r.violations.is_empty(), legacy.is_none());
        let title = repro_command(&s.name, 1, legacy);
        let svg = timeline_svg(&r, &title, &TimelineOptions::default()).expect("draws");
        check_well_formed(&svg).unwrap_or_else(|e| panic!("{e}\n{svg}"));
        // One lane (key K), the two messages, both consumers, the join and the skip.
        assert!(svg.contains(">key K</text>"), "{svg}");
        assert!(svg.contains("c1 1:0 key=K"), "{svg}");
        assert!(svg.contains("c2 1:1 key=K"), "{svg}");
        assert!(svg.contains(">join c2</text>"), "{svg}");
        assert!(svg.contains(">skip 1</text>"), "{svg}");
        svgs.push(svg);
    }
    let (fixed, legacy) = (&svgs[0], &svgs[1]);
    assert!(!fixed.contains(r#"class="violation""#), "{fixed}");
    assert!(!fixed.contains("bar violation"), "{fixed}");
    assert!(fixed.contains("no violation"), "{fixed}");
    assert!(fixed.contains("c1 1:0 key=K: delivered t=3, started t=4, acked t=500"));
    assert!(legacy.contains(r#"<g class="violation">"#), "{legacy}");
    assert!(
        legacy.contains("order violation at t=31 ms (key K)"),
        "{legacy}"
    );
    // Both messages of the violation are outlined.
    assert_eq!(
        legacy.matches(r#"class="bar violation""#).count(),
        2,
        "{legacy}"
    );

    // And through the command line.
    let out_svg = temp("seed-000.svg");
    let path = out_svg.display().to_string();
    let (code, out, err) = sim(&[
        "--seed",
        "1",
        "--scenario",
        "seed-000-draining-skip",
        "--legacy",
        "mark-delete-cleanup",
        "--timeline",
        &path,
    ]);
    assert_eq!(
        code, 1,
        "a legacy run without --expect-violation fails: {out}{err}"
    );
    assert!(out.contains(&format!("timeline: {path}")), "{out}");
    let svg = std::fs::read_to_string(&out_svg).expect("written");
    check_well_formed(&svg).expect("well formed");
    assert!(svg.contains(r#"<g class="violation">"#));
}
