//! The project's end-to-end harness (a `publish = false` package).
//!
//! * [`bench`](mod@bench): the benchmark workloads of docs/BENCHMARKS.md and a small harness
//!   (warm-up, rounds, medians) run by `cargo xtask bench`.
//! * [`loadgen`]: a load generator for the broker on the `wire` codec (the B rows of the bench).
//! * [`sim`]: the deterministic simulator run by `cargo xtask sim` (`docs/SIMULATOR.md`).
//!
//! Does not: ship anything a broker would link; it only drives the product crates.

pub mod bench;
pub mod loadgen;
pub mod sim;
