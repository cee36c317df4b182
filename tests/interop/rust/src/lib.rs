//! The harness of the Rust `pulsar` crate interop suite.
//!
//! Every scenario (`tests/scenarios/`) starts its own broker ([`broker::Broker`]), talks to it
//! with the unmodified `pulsar` crate ([`client`]) and with plain HTTP for the admin API
//! ([`admin`]), and prints one summary line ([`scenario`]). Scenarios for broker features that
//! do not exist yet (or for a known broker bug) run through [`scenario::run_xfail`]: they must
//! fail the way the missing feature shows today, and a pass fails the suite with a message
//! saying to remove the marker.

pub mod admin;
pub mod broker;
pub mod chunks;
pub mod client;
pub mod clientlog;
pub mod order;
pub mod scenario;

pub use anyhow::{anyhow, bail, ensure, Context, Result};
