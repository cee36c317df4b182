//! A broker run's setup: the broker's configuration (delayed delivery as the world has it, the
//! legacy switch), the dispatcher runtimes' options (read delays, persist cadence), and the
//! scenario settings the broker has no equivalent for (reported).

use crate::sim::scenario::{SubKind, WorldConfig};
use crate::sim::threads::Skipped;
use crate::sim::world::Legacy;

/// The broker's settings for a run: delayed delivery as the world has it (strict, 16 ms
/// buckets) and the legacy switch.
pub(super) fn broker_config(legacy: Option<Legacy>) -> broker::BrokerConfig {
    let mut cfg = broker::BrokerConfig {
        delayed_delivery: dispatcher::DelayedDelivery {
            enabled: true,
            tick: 16,
            strict: true,
        },
        ..broker::BrokerConfig::default()
    };
    match legacy {
        None => {}
        Some(Legacy::MarkDeleteCleanup) => cfg.legacy.mark_delete_cleanup = true,
        Some(Legacy::OrphanChunkReplay) => cfg.legacy.orphan_chunk_replay = true,
        Some(Legacy::UnorderedNack) => cfg.legacy.unordered_nack = true,
        // The broker's `--delayed-delivery-enabled false`.
        Some(Legacy::NoDelayedDelivery) => cfg.delayed_delivery.enabled = false,
        Some(Legacy::NoBatchAckSet) => cfg.legacy.no_batch_ack_set = true,
        Some(Legacy::ReplaySettle) => cfg.legacy.replay_settle = true,
    }
    cfg
}

/// The dispatcher runtimes' options for a run of `c`: reads that take `reads=` ms (the
/// delays seeded by `seed`), and the cursor persisted every `persist=` ms when the scenario
/// sets it (otherwise the broker's default, Pulsar's one second).
pub(super) fn runtime_options(c: &WorldConfig, seed: u64) -> dispatcher::RuntimeOptions {
    let d = WorldConfig::default();
    let mut o = dispatcher::RuntimeOptions::default();
    if c.read_delay != (0, 0) {
        o.read_delay = Some(dispatcher::ReadDelay {
            min_ms: c.read_delay.0,
            max_ms: c.read_delay.1,
            seed,
        });
    }
    if c.persist_interval != d.persist_interval {
        o.persist_every = Some(std::time::Duration::from_millis(c.persist_interval.max(1)));
    }
    o
}

/// Settings of `c` the broker has no equivalent for (left at its defaults), for the report.
/// (`store=file` is honoured: such a run's broker stores in a data directory.)
pub(super) fn config_notes(c: &WorldConfig) -> Skipped {
    let d = WorldConfig::default();
    let mut out = Skipped::new();
    let notes: [(bool, &'static str); 5] = [
        (c.max_unacked_consumer.is_some(), "config max_unacked"),
        (c.max_unacked_sub.is_some(), "config max_unacked_sub"),
        (c.look_ahead.is_some(), "config look_ahead"),
        (
            c.unblocking_interval != d.unblocking_interval,
            "config interval",
        ),
        (
            c.sub == SubKind::KeySharedAutoSplit,
            "config key_shared_autosplit (the broker's AUTO_SPLIT is its ring)",
        ),
    ];
    for (on, name) in notes {
        if on {
            out.insert(name, 1);
        }
    }
    out
}
