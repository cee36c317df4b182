//! `cargo xtask versus-pulsar [--pulsar 5.0.1|4.0.7] [--only seeds|load]`: Apache Pulsar standalone
//! and our broker side by side, on loopback, running the same Java programs
//! (`tests/versus/`, see its README).
//!
//! 1. Maven resolves Pulsar's broker (`tests/versus/pulsar/pom.xml`) and builds the programs
//!    against the Java client and admin API of the same version; both classpaths are cached under
//!    `target/versus/<version>/`.
//! 2. Pulsar standalone starts (a JVM of its own process group, `-Xmx1g`, a fresh data dir) and is
//!    ready when its admin API lists `public/default`.
//! 3. Each incident program runs against Pulsar, then against ours (a fresh broker per incident
//!    with `--data-dir`; restarted on the program's request); each prints its violations.
//! 4. The load rows (`load.rs`): pulsar-perf against a fresh Pulsar standalone, then against ours.
//! 5. The tables, and `target/versus/results.json`.
//!
//! Every process runs in its own process group and is killed when the run ends, whatever the
//! outcome. Not part of `cargo xtask ci` (it downloads about 220 MiB of Pulsar per version and
//! takes minutes).

mod load;
mod own;
mod procs;

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{json, Value};

use crate::cmd::{cargo, project_root, sh};
use procs::Group;

/// The Pulsar versions this compares with, and the JDK each needs.
const VERSIONS: &[(&str, u32)] = &[("5.0.1", 21), ("4.0.7", 17)];

/// One incident program run: what it printed as `result {json}` lines.
type Results = Vec<Value>;

struct Options {
    version: &'static str,
    java_min: u32,
    seeds: bool,
    load: bool,
}

fn options(args: &[String]) -> anyhow::Result<Options> {
    let mut version = VERSIONS[0];
    let (mut seeds, mut load) = (true, true);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--pulsar" => {
                let v = it.next().context("--pulsar needs a version")?;
                version = *VERSIONS.iter().find(|(n, _)| n == v).with_context(|| {
                    let have: Vec<&str> = VERSIONS.iter().map(|(n, _)| *n).collect();
                    format!(
                        "--pulsar {v}: the versions that resolve are {}",
                        have.join(", ")
                    )
                })?;
            }
            "--only" => match it.next().map(String::as_str) {
                Some("seeds") => load = false,
                Some("load") => seeds = false,
                other => anyhow::bail!("--only {other:?}: seeds or load"),
            },
            other => anyhow::bail!("unknown flag {other} (--pulsar VERSION, --only seeds|load)"),
        }
    }
    Ok(Options {
        version: version.0,
        java_min: version.1,
        seeds,
        load,
    })
}

pub(crate) fn run(args: &[String]) -> anyhow::Result<()> {
    let opts = options(args)?;
    let root = project_root();
    let dir = root.join("target/versus").join(opts.version);
    fs::create_dir_all(&dir)?;
    let java = procs::java(opts.java_min)?;
    let (pulsar_cp, programs_cp) = resolve(&root, &dir, opts.version)?;
    let mut build = cargo();
    build.args(["build", "--release", "--locked", "-p", "broker"]);
    build.args(["-p", "tests", "--bin", "loadgen"]);
    sh(build)?;
    let ctx = Ctx {
        java,
        programs_cp,
        broker: root.join("target/release/broker"),
        loadgen: root.join("target/release/loadgen"),
        dir: dir.clone(),
    };
    let mut out = json!({ "pulsar": opts.version, "machine_cores": cores() });
    if opts.seeds {
        out["seeds"] = seeds(&ctx, &pulsar_cp, opts.version)?;
    }
    if opts.load {
        let perf_file = root.join("target/versus/perf.classpath");
        if !perf_file.exists() {
            println!("versus: resolving pulsar-perf 4.0.8 with Maven");
            mvn(&root, "tests/versus/perf/pom.xml", "4.0.7", &[], &perf_file)?;
        }
        let perf = load::Perf {
            java: ctx.java.clone(),
            cp: fs::read_to_string(&perf_file)?.trim().to_owned(),
            dir: dir.clone(),
        };
        out["load"] = load_rows(&ctx, &perf, &pulsar_cp, opts.version)?;
    }
    let path = root.join("target/versus/results.json");
    fs::write(&path, serde_json::to_string_pretty(&out)? + "\n")?;
    println!("versus: results in {}", path.display());
    Ok(())
}

struct Ctx {
    java: PathBuf,
    programs_cp: String,
    broker: PathBuf,
    loadgen: PathBuf,
    dir: PathBuf,
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Pulsar's broker classpath and the programs' (their classes first), resolved once per
/// version with Maven and kept in `dir`.
fn resolve(root: &Path, dir: &Path, version: &str) -> anyhow::Result<(String, String)> {
    let pulsar_file = dir.join("pulsar.classpath");
    if !pulsar_file.exists() {
        println!("versus: resolving Apache Pulsar {version}'s broker with Maven (about 220 MiB the first time)");
        mvn(
            root,
            "tests/versus/pulsar/pom.xml",
            version,
            &[],
            &pulsar_file,
        )?;
    }
    let programs = dir.join("programs");
    let programs_file = dir.join("programs.classpath");
    let build_dir = format!("-Dversus.build.dir={}", programs.display());
    mvn(
        root,
        "tests/versus/pom.xml",
        version,
        &["compile", &build_dir],
        &programs_file,
    )?;
    let read = |p: &Path| fs::read_to_string(p).with_context(|| format!("reading {}", p.display()));
    let cp = format!(
        "{}:{}",
        programs.join("classes").display(),
        read(&programs_file)?.trim()
    );
    Ok((read(&pulsar_file)?.trim().to_owned(), cp))
}

fn mvn(
    root: &Path,
    pom: &str,
    version: &str,
    goals: &[&str],
    cp_file: &Path,
) -> anyhow::Result<()> {
    let mut c = Command::new("mvn");
    c.current_dir(root)
        .args(["-B", "-q", "-f", pom, &format!("-Ppulsar-{version}")])
        .args(goals)
        .arg("dependency:build-classpath")
        .arg(format!("-Dmdep.outputFile={}", cp_file.display()));
    sh(c).with_context(|| {
        format!(
            "Maven could not resolve {pom} for Pulsar {version}: is Maven Central reachable (a proxy in \
             ~/.m2/settings.xml)? Run the command above without -q to see which artifact"
        )
    })
}

/// Pulsar standalone, running until dropped.
struct Pulsar {
    group: Group,
    broker_port: u16,
    web_port: u16,
    ready: Duration,
}

fn start_pulsar(ctx: &Ctx, cp: &str) -> anyhow::Result<Pulsar> {
    let run = ctx.dir.join("run");
    let _ = fs::remove_dir_all(&run);
    fs::create_dir_all(&run)?;
    let (broker_port, web_port) = (procs::free_port()?, procs::free_port()?);
    let conf = run.join("standalone.conf");
    fs::write(&conf, procs::standalone_conf(broker_port, web_port))?;
    let mut c = Command::new(&ctx.java);
    c.current_dir(&run)
        .args(procs::PULSAR_JVM_FLAGS)
        .args(["-cp", cp, "org.apache.pulsar.PulsarStandaloneStarter"])
        .args(["--config", "standalone.conf", "-nfw", "-nss", "--wipe-data"])
        .args([
            "--metadata-dir",
            "data/metadata",
            "--bookkeeper-dir",
            "data/bookkeeper",
        ]);
    let log = run.join("pulsar.log");
    println!("versus: starting Apache Pulsar standalone on 127.0.0.1:{broker_port} (admin {web_port}); log {}", log.display());
    let mut group = Group::spawn(c, "Pulsar standalone", &log)?;
    let ready = procs::wait_ready(&mut group, Duration::from_secs(180), &log, || {
        procs::http_get(web_port, "/admin/v2/namespaces/public")
            .is_some_and(|(s, body)| s == 200 && body.contains("public/default"))
    })?;
    println!("versus: Pulsar ready after {:.1} s", ready.as_secs_f64());
    Ok(Pulsar {
        group,
        broker_port,
        web_port,
        ready,
    })
}

/// Our broker on a data dir of its own, restartable on the same ports and data.
struct Ours {
    bin: PathBuf,
    flags: Vec<String>,
    data: PathBuf,
    log: PathBuf,
    broker_port: u16,
    admin_port: u16,
    group: Option<Group>,
    /// From exec to the admin API answering, on the last start.
    ready: Duration,
}

impl Ours {
    fn new(ctx: &Ctx, name: &str, flags: &[&str]) -> anyhow::Result<Ours> {
        let data = ctx.dir.join("ours").join(name);
        let _ = fs::remove_dir_all(&data);
        fs::create_dir_all(&data)?;
        let mut ours = Ours {
            bin: ctx.broker.clone(),
            flags: flags.iter().map(|s| (*s).to_owned()).collect(),
            log: data.with_extension("log"),
            data,
            broker_port: procs::free_port()?,
            admin_port: procs::free_port()?,
            group: None,
            ready: Duration::ZERO,
        };
        ours.start()?;
        Ok(ours)
    }

    fn start(&mut self) -> anyhow::Result<()> {
        let mut c = Command::new(&self.bin);
        c.args(["--listen", &format!("127.0.0.1:{}", self.broker_port)])
            .args(["--admin", &format!("127.0.0.1:{}", self.admin_port)])
            .arg("--data-dir")
            .arg(&self.data)
            .args(&self.flags);
        let mut g = Group::spawn(c, "our broker", &self.log)?;
        let port = self.admin_port;
        self.ready = procs::wait_ready(&mut g, Duration::from_secs(30), &self.log, || {
            procs::http_get(port, "/admin/v2/clusters").is_some_and(|(s, _)| s == 200)
        })?;
        self.group = Some(g);
        Ok(())
    }

    fn restart(&mut self) -> anyhow::Result<()> {
        if let Some(mut g) = self.group.take() {
            g.stop();
        }
        self.start()
    }
}

/// Where a program connects, and whether it may ask for a restart (ours).
struct Target<'a> {
    broker_port: u16,
    admin_port: u16,
    ours: Option<&'a mut Ours>,
}

/// Runs `Versus <incident> [extra…]` against `target`; the `result` lines it printed.
fn program(
    ctx: &Ctx,
    incident: &str,
    extra: &[&str],
    mut target: Target<'_>,
) -> anyhow::Result<Results> {
    let who = if target.ours.is_some() {
        "ours"
    } else {
        "pulsar"
    };
    let log = ctx.dir.join(format!("{incident}-{who}.log"));
    let mut c = Command::new(&ctx.java);
    c.args([
        "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
        "-cp",
        &ctx.programs_cp,
        "org.versus.Versus",
    ])
    .arg(incident)
    .args([
        "--service-url",
        &format!("pulsar://127.0.0.1:{}", target.broker_port),
    ])
    .args([
        "--admin-url",
        &format!("http://127.0.0.1:{}", target.admin_port),
    ])
    .args(["--broker", who])
    .args(extra)
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(fs::File::create(&log)?)
    .process_group(0);
    let mut child = c.spawn().context("starting the Java program")?;
    let pgid = child.id();
    let mut stdin = child.stdin.take().context("stdin")?;
    let stdout = child.stdout.take().context("stdout")?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut results = Vec::new();
    let outcome = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line == "versus: reload" => {
                let ours = target
                    .ours
                    .as_deref_mut()
                    .context("a reload was asked of Pulsar")?;
                println!("versus: restarting our broker for {incident}");
                ours.restart()?;
                writeln!(stdin, "ok")?;
            }
            Ok(line) => match line.strip_prefix("result ") {
                Some(j) => results.push(serde_json::from_str::<Value>(j).context("a result line")?),
                None => println!("    {line}"),
            },
            Err(mpsc::RecvTimeoutError::Disconnected) => break Ok(()),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                break Err(anyhow::anyhow!("{incident} against {who}: no end in 600 s"))
            }
        }
    };
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .stderr(Stdio::null())
        .status();
    let status = child.wait()?;
    outcome?;
    anyhow::ensure!(
        status.success() && !results.is_empty(),
        "{incident} against {who} failed ({status}); see {}",
        log.display()
    );
    Ok(results)
}

/// The incidents, each against Pulsar then ours: (program, our broker's flags).
const INCIDENTS: &[(&str, &[&str])] = &[
    (
        "seed000",
        &[
            "--message-expiry-check-interval-ms",
            "1000",
            "--backlog-quota-check-interval-ms",
            "1000",
        ],
    ),
    ("seed001", &[]),
    ("seed002", &["--key-shared-max-unacked-per-key", "1"]),
];

fn seeds(ctx: &Ctx, pulsar_cp: &str, version: &str) -> anyhow::Result<Value> {
    let mut pulsar = start_pulsar(ctx, pulsar_cp)?;
    let mut rows = Vec::new();
    for (incident, flags) in INCIDENTS {
        println!("versus: {incident} against Apache Pulsar {version}");
        let theirs = program(
            ctx,
            incident,
            &[],
            Target {
                broker_port: pulsar.broker_port,
                admin_port: pulsar.web_port,
                ours: None,
            },
        )?;
        println!("versus: {incident} against ours ({})", flags.join(" "));
        let mut ours = Ours::new(ctx, incident, flags)?;
        let (bp, ap) = (ours.broker_port, ours.admin_port);
        let mine = program(
            ctx,
            incident,
            &[],
            Target {
                broker_port: bp,
                admin_port: ap,
                ours: Some(&mut ours),
            },
        )?;
        for (t, o) in theirs.iter().zip(&mine) {
            rows.push(
                json!({ "incident": incident, "variant": t["variant"], "pulsar": t, "ours": o }),
            );
        }
    }
    let pulsar_rss = procs::rss_mib(pulsar.group.pid());
    pulsar.group.stop();
    print_seeds(&rows, version);
    Ok(
        json!({ "pulsar_ready_s": pulsar.ready.as_secs_f64(), "pulsar_rss_mib_after": pulsar_rss, "rows": rows }),
    )
}

/// The load rows against a fresh Pulsar, then against ours (`--data-dir`, `--sync always`: both
/// brokers sync to disk before they acknowledge a publish).
fn load_rows(
    ctx: &Ctx,
    perf: &load::Perf,
    pulsar_cp: &str,
    version: &str,
) -> anyhow::Result<Value> {
    let mut pulsar = start_pulsar(ctx, pulsar_cp)?;
    let subject = load::Subject {
        name: "pulsar",
        broker_port: pulsar.broker_port,
        admin_port: pulsar.web_port,
        pid: pulsar.group.pid(),
    };
    let mut theirs = load::rows(perf, &subject)?;
    theirs["own"] = own::rows(&ctx.loadgen, &subject)?;
    theirs["key_shared_1000_keys"] = key_shared_load(
        ctx,
        Target {
            broker_port: pulsar.broker_port,
            admin_port: pulsar.web_port,
            ours: None,
        },
    )?;
    pulsar.group.stop();
    let mut ours = Ours::new(ctx, "load", &["--sync", "always"])?;
    let pid = ours.group.as_ref().map_or(0, Group::pid);
    let subject = load::Subject {
        name: "ours",
        broker_port: ours.broker_port,
        admin_port: ours.admin_port,
        pid,
    };
    let mut mine = load::rows(perf, &subject)?;
    mine["own"] = own::rows(&ctx.loadgen, &subject)?;
    let (bp, ap) = (ours.broker_port, ours.admin_port);
    mine["key_shared_1000_keys"] = key_shared_load(
        ctx,
        Target {
            broker_port: bp,
            admin_port: ap,
            ours: Some(&mut ours),
        },
    )?;
    theirs["ready_s"] = json!(pulsar.ready.as_secs_f64());
    mine["ready_s"] = json!(ours.ready.as_secs_f64());
    let out = json!({ "pulsar": theirs, "ours": mine });
    print_load(&out, version);
    Ok(out)
}

/// The Key_Shared row with a fixed key count, which pulsar-perf cannot offer: the programs'
/// `KeySharedLoad` (Java client, 4 consumers, 1,000 keys, 20,000 msg/s for 12 s).
fn key_shared_load(ctx: &Ctx, target: Target<'_>) -> anyhow::Result<Value> {
    let r = program(ctx, "keyshared-load", &[], target)?;
    let v = r.into_iter().next().unwrap_or(Value::Null);
    let share = load::share(
        v["received"].as_f64().unwrap_or(0.0),
        v["sent"].as_f64().unwrap_or(0.0),
    );
    let mut out = v;
    out["received_fraction"] = json!(share);
    println!(
        "versus: Key_Shared with 1,000 keys: {}",
        out["detail"].as_str().unwrap_or("")
    );
    Ok(out)
}

fn print_load(out: &Value, version: &str) {
    println!("\nLoad, pulsar-perf 4.0.8 against each broker in turn (100-byte messages):\n");
    println!("| row | Apache Pulsar {version} | ours | ours / Pulsar |");
    println!("|---|---|---|---|");
    let rows: &[(&str, &[&str])] = &[
        ("ready after start, s", &["ready_s"]),
        ("idle RSS, MiB", &["idle_rss_mib"]),
        ("unbatched publish, msg/s", &["unbatched", "msg_per_s"]),
        ("batched publish, msg/s", &["batched", "msg_per_s"]),
        (
            "unbatched publish, two producer processes, msg/s (sum)",
            &["unbatched_two_producers", "msg_per_s"],
        ),
        (
            "broker CPU s per million, two unbatched producers",
            &["unbatched_two_producers", "broker_cpu_s_per_million"],
        ),
        (
            "broker CPU s per million, unbatched",
            &["unbatched", "broker_cpu_s_per_million"],
        ),
        (
            "broker CPU s per million, batched",
            &["batched", "broker_cpu_s_per_million"],
        ),
        ("RSS after the batched run, MiB", &["rss_after_load_mib"]),
        (
            "publish p50 at 20k msg/s, ms",
            &["latency_at_rate", "publish_p50_ms"],
        ),
        (
            "publish p99 at 20k msg/s, ms",
            &["latency_at_rate", "publish_p99_ms"],
        ),
        (
            "end-to-end p50 at 20k msg/s, ms",
            &["latency_at_rate", "e2e_p50_ms"],
        ),
        (
            "end-to-end p99 at 20k msg/s, ms",
            &["latency_at_rate", "e2e_p99_ms"],
        ),
        (
            "at 20k msg/s, share of the messages received in the run",
            &["latency_at_rate", "received_fraction"],
        ),
        (
            "Key_Shared 4 consumers (20k msg/s offered), share received",
            &["key_shared_4_consumers", "received_fraction"],
        ),
        (
            "Key_Shared end-to-end p50, ms",
            &["key_shared_4_consumers", "e2e_p50_ms"],
        ),
        (
            "Key_Shared end-to-end p99, ms",
            &["key_shared_4_consumers", "e2e_p99_ms"],
        ),
        (
            "Key_Shared 1,000 keys (Java client, 20k msg/s), share received",
            &["key_shared_1000_keys", "received_fraction"],
        ),
        (
            "Key_Shared 1,000 keys, end-to-end p50, ms",
            &["key_shared_1000_keys", "e2e_p50_ms"],
        ),
        (
            "Key_Shared 1,000 keys, end-to-end p99, ms",
            &["key_shared_1000_keys", "e2e_p99_ms"],
        ),
        (
            "Key_Shared 1,000 keys, per-key order breaks",
            &["key_shared_1000_keys", "violations"],
        ),
        (
            "RSS with a 1M-message backlog, MiB",
            &["rss_with_backlog_mib"],
        ),
    ];
    for (label, path) in rows.iter().chain(own::TABLE) {
        let get =
            |who: &str| -> Option<f64> { path.iter().fold(&out[who], |v, k| &v[*k]).as_f64() };
        let (t, o) = (get("pulsar"), get("ours"));
        let f = |x: Option<f64>| x.map_or("?".to_owned(), |x| format!("{x:.2}"));
        let ratio = match (t, o) {
            (Some(t), Some(o)) if t != 0.0 => format!("{:.2}", o / t),
            _ => "?".to_owned(),
        };
        println!("| {label} | {} | {} | {ratio} |", f(t), f(o));
    }
    println!(
        "\nThe client's own CPU per run is in target/versus/results.json (client_cpu_s, wall_s)."
    );
}

fn print_seeds(rows: &[Value], version: &str) {
    println!("\nThe three incidents, same Java programs (Java client and admin API {version}):\n");
    println!("| incident | variant | Apache Pulsar {version} | ours |");
    println!("|---|---|---|---|");
    let count = |v: &Value| match v["violations"].as_i64() {
        Some(-1) => "failed".to_owned(),
        Some(n) => format!("{n} violations"),
        None => "?".to_owned(),
    };
    for r in rows {
        println!(
            "| {} | {} | {} | {} |",
            r["incident"].as_str().unwrap_or("?"),
            r["variant"].as_str().unwrap_or("?"),
            count(&r["pulsar"]),
            count(&r["ours"])
        );
    }
    println!();
    for r in rows {
        let (i, v) = (
            r["incident"].as_str().unwrap_or("?"),
            r["variant"].as_str().unwrap_or("?"),
        );
        println!(
            "{i} {v}, Pulsar: {}",
            r["pulsar"]["detail"].as_str().unwrap_or("")
        );
        println!(
            "{i} {v}, ours: {}",
            r["ours"]["detail"].as_str().unwrap_or("")
        );
    }
}
