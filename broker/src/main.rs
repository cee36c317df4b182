//! `broker`: the Pulsar-protocol broker binary (see the `broker` library for what it serves).
//!
//! Prints the service URL and the admin URL as its first two lines on stdout, logs to stderr,
//! and shuts down gracefully on SIGTERM or SIGINT.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use broker::{Broker, BrokerConfig, ConfigError};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

fn main() -> ExitCode {
    let cfg = match BrokerConfig::parse_args(std::env::args().skip(1)) {
        Ok(c) => c,
        Err(ConfigError::Help) => {
            println!("{}", broker::usage());
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("broker: {e}\n\nRun `broker --help` for the flags.");
            return ExitCode::from(2);
        }
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let mut signals = match Signals::new([SIGTERM, SIGINT]) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("broker: cannot install signal handlers: {e}");
            return ExitCode::FAILURE;
        }
    };
    let b = match Broker::start(cfg) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("broker: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{}", b.service_url());
        let _ = writeln!(out, "{}", b.admin_url());
        let _ = out.flush();
    }
    if let Some(sig) = signals.forever().next() {
        tracing::info!(signal = sig, "shutting down");
    }
    b.shutdown(Duration::from_secs(4));
    ExitCode::SUCCESS
}
