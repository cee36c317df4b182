//! The `pulsar` crate logs through the `log` facade; this writes its records (and the
//! harness's own) to `client.log` in the running scenario's log directory.
//!
//! Level: `INTEROP_CLIENT_LOG` (`error`, `warn`, `info` (default), `debug`, `trace`).

use std::{
    fs::File,
    io::Write,
    path::Path,
    sync::{Mutex, Once},
    time::Instant,
};

use log::{LevelFilter, Log, Metadata, Record};

struct FileLogger {
    file: Mutex<Option<File>>,
    start: Instant,
}

static LOGGER: std::sync::OnceLock<FileLogger> = std::sync::OnceLock::new();
static INIT: Once = Once::new();

impl Log for FileLogger {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        m.level() <= log::max_level()
    }

    fn log(&self, r: &Record<'_>) {
        if !self.enabled(r.metadata()) {
            return;
        }
        let mut g = self.file.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = g.as_mut() {
            let t = self.start.elapsed().as_secs_f64();
            let _ = writeln!(f, "{t:10.3} {:5} {}: {}", r.level(), r.target(), r.args());
        }
    }

    fn flush(&self) {
        let mut g = self.file.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = g.as_mut() {
            let _ = f.flush();
        }
    }
}

fn logger() -> &'static FileLogger {
    LOGGER.get_or_init(|| FileLogger {
        file: Mutex::new(None),
        start: Instant::now(),
    })
}

/// Sends the log records from now on to `path` (scenarios run one at a time).
pub fn set_file(path: &Path) {
    INIT.call_once(|| {
        let level = match std::env::var("INTEROP_CLIENT_LOG")
            .unwrap_or_default()
            .as_str()
        {
            "error" => LevelFilter::Error,
            "warn" => LevelFilter::Warn,
            "debug" => LevelFilter::Debug,
            "trace" => LevelFilter::Trace,
            _ => LevelFilter::Info,
        };
        if log::set_logger(logger()).is_ok() {
            log::set_max_level(level);
        }
    });
    let mut g = logger().file.lock().unwrap_or_else(|p| p.into_inner());
    *g = File::create(path).ok();
}
