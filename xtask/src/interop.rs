//! `cargo xtask interop [--suite NAME[,NAME…]] [--keep-logs] [python scenario…]`: the broker
//! against stock Pulsar clients, one suite per client family and version.
//!
//! Builds the broker in release mode, then runs each suite of [`SUITES`] (all by default) in
//! its own process group with a deadline. Every suite starts its own brokers from `BROKER_BIN`
//! and adds `BROKER_ARGS` (here `--check-frames`: the broker checks every frame it writes as
//! the strictest client reads it, and closes the connection on a failure) to each; logs go to
//! `INTEROP_LOG_DIR=target/interop/logs/<suite>/`.
//!
//! Output: the `scenario …` lines each suite prints, one verdict line per suite, then
//! `interop: N passed, M failed` alone. Fails if any suite failed. A suite whose tools or
//! registry are missing fails with a message that says which.

mod python;

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::cmd::{cargo, sh};

/// How a suite is built and run.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// `tests/interop/python/test_*.py`, one process per script.
    Python,
    /// A Maven project: `mvn test`, with an optional profile (the machine's default JDK, 17).
    Maven {
        dir: &'static str,
        profile: Option<&'static str>,
    },
    /// A Go module: `go test`.
    Go { dir: &'static str },
    /// A Cargo workspace of its own: `cargo test`.
    Cargo { dir: &'static str },
}

/// One client suite.
#[derive(Clone, Copy, Debug)]
struct Suite {
    name: &'static str,
    /// The client and version it runs.
    client: &'static str,
    kind: Kind,
}

/// Every suite, in the order `cargo xtask interop` runs them.
const SUITES: &[Suite] = &[
    Suite {
        name: "python",
        client: "pulsar-client 3.13.0 (Python, wraps the C++ client 4.2.0)",
        kind: Kind::Python,
    },
    Suite {
        name: "java",
        client: "org.apache.pulsar:pulsar-client 4.0.13 (Java 17)",
        kind: Kind::Maven {
            dir: "tests/interop/java",
            profile: None,
        },
    },
    Suite {
        name: "java-4.2",
        client: "org.apache.pulsar:pulsar-client 4.2.4 (Java 17)",
        kind: Kind::Maven {
            dir: "tests/interop/java",
            profile: Some("pulsar-4.2"),
        },
    },
    Suite {
        name: "java-5.0",
        client: "org.apache.pulsar:pulsar-client-original 5.0.1 (Java 17; Netty's native \
                 transports are not served, the client runs on NIO)",
        kind: Kind::Maven {
            dir: "tests/interop/java",
            profile: Some("pulsar-5.0"),
        },
    },
    Suite {
        name: "admin",
        client: "Pulsar's admin tools: org.apache.pulsar:pulsar-client-admin-original 4.2.4 (the \
                 Java admin API) and pulsar-client-tools 4.0.8 (the pulsar-admin CLI), Java 17",
        kind: Kind::Maven {
            dir: "tests/interop/admin",
            profile: None,
        },
    },
    Suite {
        name: "spring",
        client: "spring-boot-starter-pulsar (Spring Boot 4.0.7, Java client 4.1.3)",
        kind: Kind::Maven {
            dir: "tests/interop/spring",
            profile: None,
        },
    },
    Suite {
        name: "go",
        client: "github.com/apache/pulsar-client-go v0.21.0",
        kind: Kind::Go {
            dir: "tests/interop/go",
        },
    },
    Suite {
        name: "rust",
        client: "the pulsar crate 6.9.1 (tokio runtime)",
        kind: Kind::Cargo {
            dir: "tests/interop/rust",
        },
    },
];

/// The hard limit for one external suite (build excluded), everything it started included.
const SUITE_DEADLINE: Duration = Duration::from_secs(15 * 60);

/// Lines of a failed suite's output shown inline.
const TAIL_LINES: usize = 40;

/// The flags every broker of every suite gets.
const BROKER_ARGS: &str = "--check-frames";

pub(crate) fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| PathBuf::from("target"), PathBuf::from)
}

pub(crate) fn run(args: &[String]) -> anyhow::Result<()> {
    let mut keep_logs = false;
    let mut suites: Vec<Suite> = Vec::new();
    let mut scenarios: Vec<String> = Vec::new();
    let usage =
        "usage: cargo xtask interop [--suite NAME[,NAME…]] [--keep-logs] [python scenario…]";
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--keep-logs" => keep_logs = true,
            "--suite" => {
                let Some(v) = it.next() else {
                    anyhow::bail!("interop: `--suite` needs a value ({usage})");
                };
                for name in v.split(',') {
                    let Some(s) = SUITES.iter().find(|s| s.name == name) else {
                        let names: Vec<&str> = SUITES.iter().map(|s| s.name).collect();
                        anyhow::bail!("interop: no suite `{name}` (have: {})", names.join(", "));
                    };
                    suites.push(*s);
                }
            }
            s if s.starts_with('-') => anyhow::bail!("interop: unknown flag `{s}` ({usage})"),
            s => scenarios.push(s.to_owned()),
        }
    }
    if suites.is_empty() {
        suites = if scenarios.is_empty() {
            SUITES.to_vec()
        } else {
            SUITES
                .iter()
                .copied()
                .filter(|s| matches!(s.kind, Kind::Python))
                .collect()
        };
    }

    let mut build = cargo();
    build.args(["build", "--release", "--locked", "--package", "broker"]);
    sh(build)?;
    let broker = fs::canonicalize(target_dir().join("release").join("broker"))?;
    let logs_root = std::env::current_dir()?
        .join(target_dir())
        .join("interop")
        .join("logs");
    fs::create_dir_all(&logs_root)?;

    let (mut passed, mut failed) = (0usize, 0usize);
    for suite in &suites {
        let logs = logs_root.join(suite.name);
        let _ = fs::remove_dir_all(&logs);
        fs::create_dir_all(&logs)?;
        println!("interop: suite {} — {}", suite.name, suite.client);
        let started = Instant::now();
        let result = match suite.kind {
            Kind::Python => python::run(&broker, &logs, keep_logs, &scenarios),
            _ => run_external(suite, &broker, &logs),
        };
        let secs = started.elapsed().as_secs_f64();
        match result {
            Ok(summary) => {
                passed += 1;
                println!("interop: {:<9} PASS {secs:>6.1}s  {summary}", suite.name);
                if !keep_logs {
                    let _ = fs::remove_dir_all(&logs);
                }
            }
            Err(e) => {
                failed += 1;
                println!("interop: {:<9} FAIL {secs:>6.1}s  {e:#}", suite.name);
                println!("    logs: {}", logs.display());
            }
        }
    }
    println!("interop: {passed} passed, {failed} failed");
    if failed > 0 {
        anyhow::bail!("{failed} interop suite(s) failed");
    }
    Ok(())
}

/// The environment every suite's tests read.
fn suite_env(c: &mut Command, broker: &Path, logs: &Path) {
    c.env("BROKER_BIN", broker)
        .env("BROKER_ARGS", BROKER_ARGS)
        .env("INTEROP_LOG_DIR", logs);
}

/// Builds (downloading what the registry serves, the first time) and runs one external suite.
fn run_external(suite: &Suite, broker: &Path, logs: &Path) -> anyhow::Result<String> {
    let (prepare, test, registry) = commands(suite)?;
    let build_log = logs.join("build.log");
    let out = run_logged(prepare, &build_log, SUITE_DEADLINE)?;
    if !out.ok {
        anyhow::bail!(
            "cannot build the suite; {registry} must be reachable the first time (see {}):\n{}",
            build_log.display(),
            indent(&out.tail)
        );
    }
    let mut test = test;
    suite_env(&mut test, broker, logs);
    let test_log = logs.join("test.log");
    let out = run_logged(test, &test_log, SUITE_DEADLINE)?;
    let text = fs::read_to_string(&test_log).unwrap_or_default();
    // One line per scenario (a suite may print its summary again at the end).
    let mut seen = std::collections::BTreeSet::new();
    let scenario_lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("scenario "))
        .filter(|l| seen.insert(scenario_name(l)))
        .collect();
    for l in &scenario_lines {
        println!("    {l}");
    }
    if out.timed_out {
        anyhow::bail!(
            "timed out after {}s (process group killed):\n{}",
            SUITE_DEADLINE.as_secs(),
            indent(&out.tail)
        );
    }
    if !out.ok {
        anyhow::bail!("tests failed:\n{}", indent(&out.tail));
    }
    if scenario_lines.is_empty() {
        anyhow::bail!("the suite printed no `scenario` line: it ran no scenario");
    }
    let xfail = scenario_lines
        .iter()
        .filter(|l| l.contains("XFAIL"))
        .count();
    Ok(format!(
        "{} scenarios, {} passed, {xfail} expected failures",
        scenario_lines.len(),
        scenario_lines.len() - xfail
    ))
}

/// The prepare and test commands of an external suite, and the registry it downloads from.
fn commands(suite: &Suite) -> anyhow::Result<(Command, Command, &'static str)> {
    let root = std::env::current_dir()?;
    Ok(match suite.kind {
        Kind::Python => unreachable!("the Python suite runs its scripts itself"),
        Kind::Maven { dir, profile } => {
            need_tool("mvn", "Maven (Debian's `maven` package)")?;
            let mvn = |goal: &str| {
                let mut c = Command::new("mvn");
                c.current_dir(root.join(dir))
                    .args(["-B", "--no-transfer-progress", goal]);
                if let Some(p) = profile {
                    c.arg(format!("-P{p}"));
                }
                c
            };
            (mvn("test-compile"), mvn("surefire:test"), "Maven Central")
        }
        Kind::Go { dir } => {
            need_tool("go", "Go")?;
            let mut prepare = Command::new("go");
            prepare
                .current_dir(root.join(dir))
                .args(["test", "-count=1", "-run", "^$", "./..."]);
            let mut test = Command::new("go");
            test.current_dir(root.join(dir))
                .args(["test", "-count=1", "-v", "-timeout", "12m", "./..."]);
            (prepare, test, "the Go module proxy")
        }
        Kind::Cargo { dir } => {
            ensure_debian_packages(RUST_CLIENT_PACKAGES)?;
            let target = root.join(target_dir()).join("interop").join("rust-target");
            let manifest = root.join(dir).join("Cargo.toml");
            let cargo_in = |args: &[&str]| {
                let mut c = cargo();
                c.args(args)
                    .arg("--manifest-path")
                    .arg(&manifest)
                    .arg("--locked")
                    .env("CARGO_TARGET_DIR", &target);
                c
            };
            (
                cargo_in(&["test", "--no-run"]),
                cargo_in(&["test"]),
                "crates.io",
            )
        }
    })
}

/// The scenario's name in a `scenario NAME: …` or `scenario NAME …` line.
fn scenario_name(line: &str) -> &str {
    line.trim_start_matches("scenario ")
        .split([':', ' '])
        .next()
        .unwrap_or_default()
}

fn need_tool(prog: &str, what: &str) -> anyhow::Result<()> {
    let found = Command::new(prog)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !found {
        anyhow::bail!("`{prog}` is not on PATH: install {what}");
    }
    Ok(())
}

/// Debian packages the Rust client's build needs: `protoc` for its protocol types, OpenSSL's
/// headers and `pkg-config` for `native-tls` (every runtime feature of the crate brings a TLS
/// stack). Installed when missing and we are root; otherwise a clear error.
const RUST_CLIENT_PACKAGES: &[&str] = &["protobuf-compiler", "libssl-dev", "pkg-config"];

fn ensure_debian_packages(packages: &[&str]) -> anyhow::Result<()> {
    let installed = |p: &str| {
        Command::new("dpkg-query")
            .args(["-W", "-f=${Status}", p])
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
    };
    let missing: Vec<&str> = packages.iter().copied().filter(|p| !installed(p)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    println!("interop: installing Debian's {}", missing.join(", "));
    let mut update = Command::new("apt-get");
    update.args(["-q", "update"]);
    let mut install = Command::new("apt-get");
    install
        .args(["-q", "install", "-y", "--no-install-recommends"])
        .args(&missing)
        .env("DEBIAN_FRONTEND", "noninteractive");
    sh(update).and_then(|()| sh(install)).map_err(|e| {
        anyhow::anyhow!(
            "interop: the Rust client suite needs Debian's {}; installing failed ({e}): install \
             them by hand (as root, with Debian's package servers reachable)",
            missing.join(", ")
        )
    })
}

struct Logged {
    ok: bool,
    timed_out: bool,
    tail: Vec<String>,
}

/// Runs `c` as its own process group with stdout and stderr in `log`, killing the group when it
/// ends or after `deadline`.
fn run_logged(mut c: Command, log: &Path, deadline: Duration) -> anyhow::Result<Logged> {
    let file = fs::File::create(log)?;
    c.stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file)
        .process_group(0);
    let (status, timed_out) = run_group(c, deadline)?;
    let text = fs::read_to_string(log).unwrap_or_default();
    Ok(Logged {
        ok: !timed_out && status.is_some_and(|s| s.success()),
        timed_out,
        tail: tail(&text, TAIL_LINES),
    })
}

/// Spawns `c` (already set up as a process group), waits up to `deadline`, then kills the
/// whole group whatever the outcome, so nothing it started outlives it (brokers, JVMs, clients).
pub(crate) fn run_group(
    mut c: Command,
    deadline: Duration,
) -> anyhow::Result<(Option<std::process::ExitStatus>, bool)> {
    let started = Instant::now();
    let mut child = c.spawn()?;
    let pgid = child.id();
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break Some(s);
        }
        if started.elapsed() >= deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .stderr(Stdio::null())
        .status();
    if status.is_none() {
        let _ = child.wait();
    }
    Ok((status, status.is_none()))
}

/// The last `n` lines of `text`.
pub(crate) fn tail(text: &str, n: usize) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .map(|l| (*l).to_owned())
        .collect()
}

fn indent(lines: &[String]) -> String {
    lines
        .iter()
        .map(|l| format!("    | {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}
