//! Starting and stopping the broker under test.
//!
//! `$BROKER_BIN --listen 127.0.0.1:P --admin 127.0.0.1:Q [flags…] $BROKER_ARGS`; the first two
//! stdout lines are the service and admin URLs (read within 10 s); stderr goes to a log file.
//! Stopping is SIGTERM, up to 5 s, then SIGKILL; a broker that needs the SIGKILL or exits
//! non-zero fails [`Broker::stop`]. A broker still running when its [`Broker`] is dropped (a
//! failed or panicking test) is stopped the same way, and the kernel kills it if the test
//! process dies first (`PR_SET_PDEATHSIG`).

use std::{
    fs::File,
    io::{BufRead, BufReader, Read},
    net::TcpListener,
    os::unix::process::{CommandExt, ExitStatusExt},
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

use anyhow::{anyhow, bail, Context, Result};

/// How long the two URL lines may take.
pub const START_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a SIGTERMed broker may take to exit before it is SIGKILLed.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a restart retries while the fixed ports are still taken.
const BIND_RETRY: Duration = Duration::from_secs(5);

/// `$BROKER_BIN`, which must name an existing file.
pub fn broker_bin() -> Result<PathBuf> {
    let Some(bin) = std::env::var_os("BROKER_BIN") else {
        bail!(
            "BROKER_BIN is not set: build the broker (cargo build --release -p broker) and set \
             BROKER_BIN to the absolute path of target/release/broker"
        );
    };
    let bin = PathBuf::from(bin);
    if !bin.is_file() {
        bail!("BROKER_BIN={} is not a file", bin.display());
    }
    Ok(bin)
}

/// `$BROKER_ARGS`, split on whitespace (CI sets `--check-frames`).
pub fn broker_args() -> Vec<String> {
    std::env::var("BROKER_ARGS")
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// A port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0").context("binding 127.0.0.1:0 to find a free port")?;
    Ok(l.local_addr()?.port())
}

/// One broker: a process, or for restart scenarios a series of processes (generations) on the
/// same ports and data directory.
pub struct Broker {
    name: String,
    log_dir: PathBuf,
    flags: Vec<String>,
    /// Fixed (service, admin) ports for a restartable broker; `None`: the OS picks them.
    ports: Option<(u16, u16)>,
    data_dir: Option<PathBuf>,
    generation: u32,
    child: Option<Child>,
    stderr_path: PathBuf,
    /// `pulsar://127.0.0.1:PORT`
    pub service_url: String,
    /// `http://127.0.0.1:PORT`
    pub admin_url: String,
    /// Exec to the first URL line, per generation.
    pub startup: Vec<Duration>,
}

impl Broker {
    /// A broker on ports the OS picks, with `flags` (then `$BROKER_ARGS`).
    pub fn start(log_dir: &Path, name: &str, flags: &[&str]) -> Result<Broker> {
        let mut b = Broker::new(log_dir, name, flags, None, None);
        b.spawn()?;
        Ok(b)
    }

    /// A broker that can be restarted: two fixed ports picked once and `--data-dir data_dir`.
    pub fn restartable(
        log_dir: &Path,
        name: &str,
        data_dir: &Path,
        flags: &[&str],
    ) -> Result<Broker> {
        let port = free_port()?;
        let mut admin = free_port()?;
        for _ in 0..20 {
            if admin != port {
                break;
            }
            admin = free_port()?;
        }
        let mut b = Broker::new(
            log_dir,
            name,
            flags,
            Some((port, admin)),
            Some(data_dir.to_path_buf()),
        );
        b.spawn_retrying()?;
        Ok(b)
    }

    fn new(
        log_dir: &Path,
        name: &str,
        flags: &[&str],
        ports: Option<(u16, u16)>,
        data_dir: Option<PathBuf>,
    ) -> Broker {
        Broker {
            name: name.to_owned(),
            log_dir: log_dir.to_path_buf(),
            flags: flags.iter().map(|s| (*s).to_owned()).collect(),
            ports,
            data_dir,
            generation: 0,
            child: None,
            stderr_path: PathBuf::new(),
            service_url: String::new(),
            admin_url: String::new(),
            startup: Vec::new(),
        }
    }

    /// The running generation's process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The running generation's stderr log.
    pub fn stderr_path(&self) -> &Path {
        &self.stderr_path
    }

    /// `host:port` of the service URL (for a raw connection).
    pub fn service_addr(&self) -> &str {
        self.service_url.trim_start_matches("pulsar://")
    }

    fn spawn_retrying(&mut self) -> Result<()> {
        let deadline = Instant::now() + BIND_RETRY;
        loop {
            match self.spawn() {
                Ok(()) => return Ok(()),
                Err(e) if Instant::now() < deadline => {
                    log::warn!("broker {} did not start ({e:#}); retrying", self.name);
                    thread::sleep(Duration::from_millis(200));
                }
                Err(e) => return Err(e.context(format!("cannot (re)start broker {}", self.name))),
            }
        }
    }

    fn spawn(&mut self) -> Result<()> {
        let bin = broker_bin()?;
        self.generation += 1;
        let (listen, admin) = match self.ports {
            Some((p, q)) => (format!("127.0.0.1:{p}"), format!("127.0.0.1:{q}")),
            None => ("127.0.0.1:0".to_owned(), "127.0.0.1:0".to_owned()),
        };
        let mut args = vec!["--listen".to_owned(), listen, "--admin".to_owned(), admin];
        if let Some(d) = &self.data_dir {
            args.push("--data-dir".to_owned());
            args.push(d.display().to_string());
        }
        args.extend(self.flags.iter().cloned());
        args.extend(broker_args());
        self.stderr_path = self
            .log_dir
            .join(format!("{}.{}.stderr.log", self.name, self.generation));
        let stderr = File::create(&self.stderr_path)
            .with_context(|| format!("creating {}", self.stderr_path.display()))?;
        let mut cmd = Command::new(&bin);
        cmd.args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr);
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let t0 = Instant::now();
        let mut child = cmd
            .spawn()
            .with_context(|| format!("spawning {} {}", bin.display(), args.join(" ")))?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, rx) = mpsc::channel::<String>();
        // Reads the URL lines, then drains stdout until the broker exits.
        thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            let mut line = String::new();
            for _ in 0..2 {
                line.clear();
                match r.read_line(&mut line) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {
                        if tx.send(line.trim().to_owned()).is_err() {
                            return;
                        }
                    }
                }
            }
            let _ = std::io::copy(&mut r, &mut std::io::sink());
        });
        let mut lines = Vec::new();
        let mut first_at = None;
        let deadline = t0 + START_TIMEOUT;
        while lines.len() < 2 {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(l) => {
                    first_at.get_or_insert_with(Instant::now);
                    lines.push(l);
                }
                Err(_) => break,
            }
        }
        if lines.len() < 2 {
            let status = stop_child(&mut child);
            bail!(
                "broker {} generation {} printed {} of 2 URL lines within {:?} ({}); stderr {}:\n{}",
                self.name,
                self.generation,
                lines.len(),
                START_TIMEOUT,
                describe(status),
                self.stderr_path.display(),
                tail(&self.stderr_path, 15)
            );
        }
        let (service, admin) = (lines[0].clone(), lines[1].clone());
        if !service.starts_with("pulsar://") || !admin.starts_with("http://") {
            let _ = stop_child(&mut child);
            bail!(
                "broker {}: unexpected URL lines {service:?} {admin:?}",
                self.name
            );
        }
        if let Some((p, _)) = self.ports {
            let want = format!("pulsar://127.0.0.1:{p}");
            if service != want {
                let _ = stop_child(&mut child);
                bail!(
                    "broker {}: service URL {service}, expected {want}",
                    self.name
                );
            }
        }
        self.startup.push(first_at.unwrap_or(t0) - t0);
        self.service_url = service;
        self.admin_url = admin;
        self.child = Some(child);
        Ok(())
    }

    /// SIGTERM, up to 5 s, then SIGKILL. Fails when the broker needed the SIGKILL or exited
    /// non-zero (or died on its own before).
    pub fn stop(&mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let pid = child.id();
        if let Ok(Some(status)) = child.try_wait() {
            bail!(
                "broker {} (pid {pid}) had exited on its own ({}); stderr {}:\n{}",
                self.name,
                describe(Ok((status, false))),
                self.stderr_path.display(),
                tail(&self.stderr_path, 15)
            );
        }
        match stop_child(&mut child) {
            Ok((status, false)) if status.success() => Ok(()),
            other => Err(anyhow!(
                "broker {} (pid {pid}) did not stop cleanly on SIGTERM: {}; stderr {}:\n{}",
                self.name,
                describe(other),
                self.stderr_path.display(),
                tail(&self.stderr_path, 15)
            )),
        }
    }

    /// A graceful stop (checked) and a new generation on the same ports and data directory.
    pub fn restart(&mut self) -> Result<()> {
        if self.ports.is_none() {
            bail!("broker {} was not started restartable", self.name);
        }
        self.stop()?;
        self.spawn_retrying()
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = stop_child(&mut child);
        }
    }
}

/// SIGTERM, wait up to [`STOP_TIMEOUT`], SIGKILL. Returns the exit status and whether the
/// SIGKILL was needed.
fn stop_child(child: &mut Child) -> Result<(ExitStatus, bool)> {
    if let Some(status) = child.try_wait()? {
        return Ok((status, false));
    }
    let pid = child.id() as libc::pid_t;
    // SAFETY: kill(2) on our own child's pid, which is not reaped yet.
    unsafe {
        libc::kill(pid, libc::SIGTERM);
    }
    let deadline = Instant::now() + STOP_TIMEOUT;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait()? {
            return Ok((status, false));
        }
        thread::sleep(Duration::from_millis(20));
    }
    child.kill()?;
    Ok((child.wait()?, true))
}

fn describe(r: Result<(ExitStatus, bool)>) -> String {
    match r {
        Ok((_, true)) => format!("still running {STOP_TIMEOUT:?} after SIGTERM, SIGKILLed"),
        Ok((s, false)) => match (s.code(), s.signal()) {
            (Some(c), _) => format!("exit code {c}"),
            (None, Some(sig)) => format!("killed by signal {sig}"),
            _ => format!("{s}"),
        },
        Err(e) => format!("error waiting for it: {e}"),
    }
}

/// The last `n` lines of a log file (for failure messages).
pub fn tail(path: &Path, n: usize) -> String {
    let mut s = String::new();
    if let Ok(mut f) = File::open(path) {
        let _ = f.read_to_string(&mut s);
    }
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
