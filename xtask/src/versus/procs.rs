//! The two brokers of `cargo xtask versus-pulsar` as processes: Apache Pulsar standalone (a JVM)
//! and ours, each in its own process group that a guard kills when it goes out of scope, so a
//! failed or interrupted run leaves no JVM behind.

use std::fs;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;

/// A process group killed (SIGTERM, then SIGKILL after 10 s) when dropped.
pub(crate) struct Group {
    child: Child,
    name: String,
}

impl Group {
    /// Spawns `c` as a new process group with stdout and stderr appended to `log`.
    pub(crate) fn spawn(mut c: Command, name: &str, log: &Path) -> anyhow::Result<Group> {
        let file = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("opening {}", log.display()))?;
        c.stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .process_group(0);
        let child = c.spawn().with_context(|| format!("starting {name}"))?;
        Ok(Group {
            child,
            name: name.to_owned(),
        })
    }

    /// The group's leader pid (for CPU and memory readings in /proc).
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the leader is still running.
    pub(crate) fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits up to `limit` for the leader to exit: whether it did. (Dropping the group kills
    /// what it left behind either way.)
    pub(crate) fn wait(&mut self, limit: Duration) -> bool {
        let t0 = Instant::now();
        while t0.elapsed() < limit {
            if !self.alive() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }

    /// SIGTERM to the group, up to 10 s for the leader to exit, then SIGKILL to the group.
    pub(crate) fn stop(&mut self) {
        signal_group(self.child.id(), "-TERM");
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if !matches!(self.child.try_wait(), Ok(None)) {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        signal_group(self.child.id(), "-KILL");
        let _ = self.child.wait();
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            println!("versus: stopping {}", self.name);
        }
        self.stop();
    }
}

fn signal_group(pgid: u32, sig: &str) {
    let _ = Command::new("kill")
        .args([sig, "--", &format!("-{pgid}")])
        .stderr(Stdio::null())
        .status();
}

/// A loopback port nobody listens on right now.
pub(crate) fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// `GET http://127.0.0.1:{port}{path}` over HTTP/1.0: the status and the body, or `None` when
/// nothing answers.
pub(crate) fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_owned();
    Some((status, body))
}

/// Waits until `ready()` or `limit`; fails early if `group` exits.
pub(crate) fn wait_ready(
    group: &mut Group,
    limit: Duration,
    log: &Path,
    mut ready: impl FnMut() -> bool,
) -> anyhow::Result<Duration> {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if ready() {
            return Ok(t0.elapsed());
        }
        anyhow::ensure!(
            group.alive(),
            "{} exited before it was ready; see {}",
            group.name,
            log.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    anyhow::bail!(
        "{} not ready after {limit:?}; see {}",
        group.name,
        log.display()
    )
}

/// Resident memory of `pid` in MiB (VmRSS), if it runs.
pub(crate) fn rss_mib(pid: u32) -> Option<f64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: f64 = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kib / 1024.0)
}

/// A JDK whose major version is at least `min`: `$VERSUS_JAVA_HOME`, else the newest under
/// `/usr/lib/jvm` (its `release` file says the version), else `java` on the PATH as is.
pub(crate) fn java(min: u32) -> anyhow::Result<PathBuf> {
    if let Some(home) = std::env::var_os("VERSUS_JAVA_HOME") {
        return Ok(PathBuf::from(home).join("bin/java"));
    }
    let mut best: Option<(u32, PathBuf)> = None;
    for e in fs::read_dir("/usr/lib/jvm").into_iter().flatten().flatten() {
        let release = fs::read_to_string(e.path().join("release")).unwrap_or_default();
        let major = release
            .lines()
            .find_map(|l| l.strip_prefix("JAVA_VERSION=\""))
            .and_then(|v| v.split(['.', '"']).next()?.parse::<u32>().ok());
        if let Some(m) = major.filter(|m| *m >= min) {
            if best.as_ref().is_none_or(|(b, _)| m > *b) {
                best = Some((m, e.path().join("bin/java")));
            }
        }
    }
    best.map(|(_, p)| p).with_context(|| {
        format!("no JDK {min} or newer under /usr/lib/jvm; set VERSUS_JAVA_HOME to one")
    })
}

/// The JVM flags Pulsar's own `bin/pulsar` passes (reflective access for BookKeeper and Netty,
/// Pulsar's metadata drivers for BookKeeper).
pub(crate) const PULSAR_JVM_FLAGS: &[&str] = &[
    "-Xmx1g",
    "--add-opens",
    "java.base/java.io=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.util.zip=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.nio=ALL-UNNAMED",
    "--add-opens",
    "java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-opens",
    "java.base/sun.net=ALL-UNNAMED",
    "--add-opens",
    "java.management/sun.management=ALL-UNNAMED",
    "-Djava.net.preferIPv4Stack=true",
    "-Dio.netty.tryReflectionSetAccessible=true",
    "-Dbookkeeper.metadata.bookie.drivers=org.apache.pulsar.metadata.bookkeeper.PulsarMetadataBookieDriver",
    "-Dbookkeeper.metadata.client.drivers=org.apache.pulsar.metadata.bookkeeper.PulsarMetadataClientDriver",
];

/// Pulsar standalone's configuration: loopback only, one bookie (quorums of 1), batch-index acks
/// on (so batch acks compare with ours), the TTL and backlog-quota checks as often as Pulsar
/// allows (1 minute, 1 second), topics kept while idle.
pub(crate) fn standalone_conf(broker_port: u16, web_port: u16) -> String {
    format!(
        "# Written by cargo xtask versus-pulsar.\n\
         clusterName=standalone\n\
         bindAddress=127.0.0.1\n\
         advertisedAddress=127.0.0.1\n\
         brokerServicePort={broker_port}\n\
         webServicePort={web_port}\n\
         # The bookie reads this file too: it listens on the advertised loopback address.\n\
         allowLoopback=true\n\
         managedLedgerDefaultEnsembleSize=1\n\
         managedLedgerDefaultWriteQuorum=1\n\
         managedLedgerDefaultAckQuorum=1\n\
         acknowledgmentAtBatchIndexLevelEnabled=true\n\
         messageExpiryCheckIntervalInMinutes=1\n\
         backlogQuotaCheckIntervalInSeconds=1\n\
         brokerDeleteInactiveTopicsEnabled=false\n"
    )
}
