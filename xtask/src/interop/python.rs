//! The Python suite: `tests/interop/python/test_*.py` with the stock `pulsar-client` wheel.
//!
//! Creates (or reuses) a venv at `target/interop/venv` with `pulsar-client` pinned to
//! [`CLIENT_VERSION`], then runs each script (or the named subset) as its own process group with
//! a hard deadline. Each script starts its own broker (`BROKER_BIN`, plus `BROKER_ARGS`) and
//! writes its logs to `INTEROP_LOG_DIR=<suite logs>/<scenario>`; logs of passing scenarios are
//! removed unless `--keep-logs` is given. A script that exits 77 needs something the broker
//! lacks and is counted as skipped.

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{run_group, suite_env, tail, target_dir};
use crate::cmd::sh;

/// The stock client the suite is pinned to (it wraps the C++ client 4.2.0).
pub(crate) const CLIENT_VERSION: &str = "3.13.0";

/// The hard limit for one scenario process (and everything it started).
const SCENARIO_DEADLINE: Duration = Duration::from_secs(90);

/// The exit code of a scenario that cannot run against this broker (automake's "skipped").
const SKIP_EXIT: i32 = 77;

/// Lines of a failed scenario's output shown inline.
const TAIL_LINES: usize = 25;

/// Runs the named scenarios (all when none is named); the summary, or an error naming the
/// failed ones.
pub(super) fn run(
    broker: &Path,
    logs_root: &Path,
    keep_logs: bool,
    wanted: &[String],
) -> anyhow::Result<String> {
    let wanted: Vec<String> = wanted.iter().map(|s| normalise(s)).collect();
    let scenarios = select(&wanted)?;
    let python = venv()?;

    let (mut passed, mut failed, mut skipped) = (0usize, 0usize, 0usize);
    for script in &scenarios {
        let name = script
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let logs = logs_root.join(&name);
        let _ = fs::remove_dir_all(&logs);
        fs::create_dir_all(&logs)?;
        let outcome = run_scenario(&python, script, broker, &logs)?;
        let verdict = match (outcome.ok, outcome.skipped) {
            (_, true) => "SKIP",
            (true, false) => "PASS",
            (false, false) => "FAIL",
        };
        println!(
            "    scenario {name:<32} {verdict} {:>5.1}s  {}",
            outcome.secs, outcome.summary
        );
        if outcome.skipped {
            skipped += 1;
            let _ = fs::remove_dir_all(&logs);
        } else if outcome.ok {
            passed += 1;
            if !keep_logs {
                let _ = fs::remove_dir_all(&logs);
            }
        } else {
            failed += 1;
            for line in &outcome.tail {
                println!("    | {line}");
            }
            println!("    logs: {}", logs.display());
        }
    }
    let summary = format!("{passed} scenarios passed, {failed} failed, {skipped} skipped");
    if failed > 0 {
        anyhow::bail!("{summary}");
    }
    Ok(summary)
}

/// `shared`, `test_shared` and `tests/interop/python/test_shared.py` all name the same
/// scenario.
fn normalise(s: &str) -> String {
    let base = Path::new(s)
        .file_name()
        .map_or_else(|| s.to_owned(), |f| f.to_string_lossy().into_owned());
    let base = base.strip_suffix(".py").unwrap_or(&base).to_owned();
    if base.starts_with("test_") {
        base
    } else {
        format!("test_{base}")
    }
}

fn select(wanted: &[String]) -> anyhow::Result<Vec<PathBuf>> {
    let dir = Path::new("tests").join("interop").join("python");
    let mut all: Vec<PathBuf> = fs::read_dir(&dir)?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.extension().is_some_and(|x| x == "py")
                && p.file_name()
                    .is_some_and(|f| f.to_string_lossy().starts_with("test_"))
        })
        .collect();
    all.sort();
    if wanted.is_empty() {
        return Ok(all);
    }
    let mut out = Vec::new();
    for w in wanted {
        match all.iter().find(|p| {
            p.file_stem()
                .is_some_and(|s| s.to_string_lossy() == w.as_str())
        }) {
            Some(p) => out.push(p.clone()),
            None => {
                let names: Vec<String> = all
                    .iter()
                    .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
                    .collect();
                anyhow::bail!("interop: no scenario `{w}` (have: {})", names.join(", "));
            }
        }
    }
    Ok(out)
}

/// The venv's python, with `pulsar-client` at [`CLIENT_VERSION`] (installed if needed).
fn venv() -> anyhow::Result<PathBuf> {
    let dir = target_dir().join("interop").join("venv");
    let python = dir.join("bin").join("python");
    let fail = |what: String| {
        anyhow::anyhow!("interop: cannot install pulsar-client {CLIENT_VERSION} from PyPI: {what}")
    };
    if !python.exists() {
        let mut c = Command::new("python3");
        c.arg("-m").arg("venv").arg(&dir);
        sh(c).map_err(|e| fail(format!("creating the venv failed: {e}")))?;
    }
    if installed_version(&python).as_deref() != Some(CLIENT_VERSION) {
        let mut c = Command::new(&python);
        c.args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            &format!("pulsar-client=={CLIENT_VERSION}"),
        ]);
        sh(c).map_err(|e| fail(e.to_string()))?;
        match installed_version(&python) {
            Some(v) if v == CLIENT_VERSION => {}
            other => return Err(fail(format!("after pip install the venv has {other:?}"))),
        }
    }
    // Not canonicalised: the venv's python is a symlink, and resolving it leaves the venv.
    Ok(std::env::current_dir()?.join(python))
}

fn installed_version(python: &Path) -> Option<String> {
    let out = Command::new(python)
        .args([
            "-c",
            "import importlib.metadata as m; print(m.version('pulsar-client'))",
        ])
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

struct Outcome {
    ok: bool,
    skipped: bool,
    secs: f64,
    summary: String,
    tail: Vec<String>,
}

fn run_scenario(
    python: &Path,
    script: &Path,
    broker: &Path,
    logs: &Path,
) -> anyhow::Result<Outcome> {
    let stdout_path = logs.join("stdout.log");
    let stderr_path = logs.join("stderr.log");
    let script_dir = fs::canonicalize(script.parent().unwrap_or(Path::new(".")))?;
    let mut c = Command::new(python);
    c.arg("-u")
        .arg(fs::canonicalize(script)?)
        .current_dir(&script_dir)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null())
        .stdout(fs::File::create(&stdout_path)?)
        .stderr(fs::File::create(&stderr_path)?)
        .process_group(0);
    suite_env(&mut c, broker, &fs::canonicalize(logs)?);
    let started = Instant::now();
    let (status, timed_out) = run_group(c, SCENARIO_DEADLINE)?;
    let secs = started.elapsed().as_secs_f64();
    let out = fs::read_to_string(&stdout_path).unwrap_or_default();
    let err = fs::read_to_string(&stderr_path).unwrap_or_default();
    let last = out
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("(no output)")
        .trim()
        .to_owned();
    let ok = !timed_out && status.is_some_and(|s| s.success());
    let skipped = !timed_out && status.and_then(|s| s.code()) == Some(SKIP_EXIT);
    let summary = if timed_out {
        format!(
            "timed out after {}s (process group killed); last output: {last}",
            SCENARIO_DEADLINE.as_secs()
        )
    } else if !ok && !skipped && !last.starts_with("FAIL") {
        let code = status.map_or_else(|| "?".to_owned(), |s| s.to_string());
        format!("{code}; last output: {last}")
    } else {
        last
    };
    let tail = if !ok && !skipped {
        let both = format!("{err}\n{out}");
        tail(&both, TAIL_LINES)
    } else {
        Vec::new()
    };
    Ok(Outcome {
        ok,
        skipped,
        secs,
        summary,
        tail,
    })
}
