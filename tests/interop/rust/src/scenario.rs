//! Running a scenario: one at a time, bounded in time, with its log directory and one summary
//! line `scenario <name>: <PASS|XFAIL(feature)|FAIL> messages=<n> <seconds>s`.
//!
//! The summary line (and a `detail <name>: …` line before it) is written to the process's
//! stdout directly, so `cargo test` shows it without `--nocapture`; it is also appended to
//! `$INTEROP_LOG_DIR/summary.log`.
//!
//! Expected failures are strict: [`run_xfail`] passes only when the scenario fails, and a
//! scenario that passes fails the test with a message saying to remove the marker.

use std::{
    future::Future,
    io::Write,
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use anyhow::{Context, Result};

use crate::clientlog;

/// The hard limit of one scenario (each wait inside is bounded more tightly).
pub const LIMIT: Duration = Duration::from_secs(90);

/// Scenarios run one after another even though `cargo test` runs tests on several threads:
/// they measure delays and orders on 2 shared cores, and each starts its own broker.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// What a scenario body gets: its name, its log directory, a message counter.
#[derive(Clone)]
pub struct Ctx {
    /// The scenario's name (also its log directory's name).
    pub name: &'static str,
    /// `$INTEROP_LOG_DIR/<name>/`, emptied when the scenario starts.
    pub log_dir: PathBuf,
    messages: Arc<AtomicU64>,
}

impl Ctx {
    /// Counts `n` messages the applications received (the summary's `messages=`).
    pub fn count(&self, n: u64) {
        self.messages.fetch_add(n, Ordering::Relaxed);
    }

    /// The count so far.
    pub fn messages(&self) -> u64 {
        self.messages.load(Ordering::Relaxed)
    }

    /// Writes `name` in the scenario's log directory (a processing log, a trace).
    pub fn write_log(&self, name: &str, text: &str) {
        let _ = std::fs::write(self.log_dir.join(name), text);
    }
}

/// `$INTEROP_LOG_DIR`, or `<temp dir>/pulsar-rs-interop` when it is unset.
pub fn log_root() -> PathBuf {
    std::env::var_os("INTEROP_LOG_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("pulsar-rs-interop"))
}

fn prepare(name: &'static str) -> Result<Ctx> {
    let log_dir = log_root().join(name);
    let _ = std::fs::remove_dir_all(&log_dir);
    std::fs::create_dir_all(&log_dir).with_context(|| format!("creating {}", log_dir.display()))?;
    clientlog::set_file(&log_dir.join("client.log"));
    Ok(Ctx {
        name,
        log_dir,
        messages: Arc::new(AtomicU64::new(0)),
    })
}

fn emit(name: &str, result: &str, messages: u64, secs: f64, detail: &str) {
    let mut text = String::new();
    if !detail.is_empty() {
        text.push_str(&format!("detail {name}: {detail}\n"));
    }
    text.push_str(&format!(
        "scenario {name}: {result} messages={messages} {secs:.1}s\n"
    ));
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
    append_summary(&log_root(), &text);
}

fn append_summary(root: &Path, text: &str) {
    if std::fs::create_dir_all(root).is_ok() {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(root.join("summary.log"))
        {
            let _ = f.write_all(text.as_bytes());
        }
    }
}

async fn run_body<F, Fut>(ctx: Ctx, body: F) -> Result<String>
where
    F: FnOnce(Ctx) -> Fut,
    Fut: Future<Output = Result<String>>,
{
    // Boxed: a scenario's future is large in a debug build and would overflow the test
    // thread's stack if it lived there.
    match tokio::time::timeout(LIMIT, Box::pin(body(ctx))).await {
        Ok(r) => r,
        Err(_) => Err(anyhow::anyhow!(
            "the scenario did not finish within {LIMIT:?}"
        )),
    }
}

/// Runs a scenario that must pass. `body` returns a one-line description of what it saw.
pub async fn run<F, Fut>(name: &'static str, body: F)
where
    F: FnOnce(Ctx) -> Fut,
    Fut: Future<Output = Result<String>>,
{
    let _serial = SERIAL.lock().await;
    let ctx = prepare(name).expect("scenario log directory");
    let t0 = Instant::now();
    let r = run_body(ctx.clone(), body).await;
    let secs = t0.elapsed().as_secs_f64();
    match r {
        Ok(detail) => emit(name, "PASS", ctx.messages(), secs, &detail),
        Err(e) => {
            emit(name, "FAIL", ctx.messages(), secs, &format!("{e:#}"));
            panic!(
                "scenario {name} failed (logs in {}): {e:?}",
                ctx.log_dir.display()
            );
        }
    }
}

/// Runs a scenario for a broker feature that does not exist yet (`feature` names it). It must
/// fail, with an error that contains `because` (how the missing feature shows today); when it
/// passes, the test fails and says to remove the marker, and when it fails for another reason
/// the test fails too.
pub async fn run_xfail<F, Fut>(
    name: &'static str,
    feature: &'static str,
    because: &'static str,
    body: F,
) where
    F: FnOnce(Ctx) -> Fut,
    Fut: Future<Output = Result<String>>,
{
    let _serial = SERIAL.lock().await;
    let ctx = prepare(name).expect("scenario log directory");
    let t0 = Instant::now();
    let r = run_body(ctx.clone(), body).await;
    let secs = t0.elapsed().as_secs_f64();
    match r {
        Err(e) if format!("{e:#}").contains(because) => emit(
            name,
            &format!("XFAIL({feature})"),
            ctx.messages(),
            secs,
            &format!("fails as expected without {feature}: {e:#}"),
        ),
        Err(e) => {
            emit(name, "FAIL", ctx.messages(), secs, &format!("{e:#}"));
            panic!(
                "scenario {name} is an expected failure (missing broker feature \"{feature}\") but it \
                 failed for another reason (expected an error containing {because:?}; logs in {}): {e:?}",
                ctx.log_dir.display()
            );
        }
        Ok(detail) => {
            emit(
                name,
                "FAIL",
                ctx.messages(),
                secs,
                &format!("UNEXPECTED PASS: {detail}"),
            );
            panic!(
                "scenario {name} is marked as an expected failure (missing broker feature \
                 \"{feature}\") but it PASSED: the broker has the feature now; remove the \
                 marker (call scenario::run instead of scenario::run_xfail). It saw: {detail}"
            );
        }
    }
}
