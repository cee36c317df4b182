//! The deterministic simulator: the whole system end to end, under faults, with invariants
//! checked after every step (`cargo xtask sim`; see `docs/SIMULATOR.md`).
//!
//! One seed gives one run, byte-identical: a virtual clock (ms) and an event queue ordered by
//! (time, sequence number); four random streams derived from the seed (workload, faults,
//! network, timing); only ordered maps in anything that decides behaviour. The world holds
//! producers, an in-memory ledger, a `cursor::ManagedCursor` with its durable store (memory or
//! file; the store survives a broker restart, the dispatcher does not), the sans-IO
//! `dispatcher::Dispatcher` (the simulator executes its Read/Replay/Send/SetTimer commands and
//! acks through its `AckHandle`), a network with per-connection FIFO delay, and one
//! `client::Consumer` per consumer with an application that takes random time per message.
//!
//! Invariants: per-key order on Key_Shared, no loss, no stall, the cursor never passes an
//! un-acked and un-dropped position, and pending acks / draining refcounts equal a reference
//! model. See [`ViolationKind`] and [`Invariant`]. A run's event log can be drawn as a per-key
//! timeline ([`timeline_svg`]).
//!
//! Does not: re-implement any product crate (it drives them), or read the clock — except
//! [`run_threaded`], which runs the same workload on the dispatcher's threaded runtime with real
//! consumer threads and is checked afterwards from its event log. [`run_broker`] runs the same
//! workloads through the broker's stepped sans-IO core in Pulsar's binary protocol, as
//! deterministically as the world.
//!
//! ```
//! use tests::sim::{builtin, run_scenario, RunOptions};
//!
//! let s = builtin("f03-ack").expect("shipped scenario");
//! let r = run_scenario(&s, &RunOptions { seed: 1, ..RunOptions::default() }).unwrap();
//! assert!(r.violations.is_empty(), "{:?}", r.violations);
//! assert!(r.messages > 0);
//! ```

mod broker_run;
mod check;
mod library;
mod report;
mod rng;
mod scenario;
mod threads;
mod timeline;
mod world;

pub use broker_run::run_broker;
pub use check::{Violation, ViolationKind};
pub use library::{builtin, builtin_names, default_mix, load};
pub use report::{
    invariants_checked, json_report, repro_line, seed_ranges, summary_table, violation_report,
    Invariant, ReportStyle, SimRuntime, Summary,
};
pub use rng::{Purpose, Rng, Zipf};
pub use scenario::{ParseError, Scenario};
pub use threads::{describe_skipped, run_threaded, run_threaded_with, threads_cannot_run, Skipped};
pub use timeline::{check_well_formed, timeline_svg, xml_escape, TimelineOptions};
pub use world::{Legacy, RunOptions, RunResult, World};

/// Builds and runs one scenario for one seed.
pub fn run_scenario(s: &Scenario, opts: &RunOptions) -> Result<RunResult, String> {
    Ok(World::new(s, opts)?.run())
}

/// The one-line command that reproduces a run.
pub fn repro_command(scenario: &str, seed: u64, legacy: Option<Legacy>) -> String {
    let mut s = format!("cargo xtask sim --seed {seed} --scenario {scenario}");
    if let Some(l) = legacy {
        s.push_str(" --legacy ");
        s.push_str(l.as_str());
    }
    s
}
