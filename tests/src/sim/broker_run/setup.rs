//! A broker run's setup: the broker's configuration (delayed delivery as the world has it, the
//! legacy switch), the scenario settings it has no equivalent for (reported), and the mix's
//! random joins made concrete.

use crate::sim::scenario::{SubKind, WorldConfig};
use crate::sim::threads::Skipped;
use crate::sim::world::Legacy;

/// The broker's settings for a run: delayed delivery as the world has it (strict, 16 ms
/// buckets) and the legacy switch, if the broker has it.
pub(super) fn broker_config(legacy: Option<Legacy>) -> Result<broker::BrokerConfig, String> {
    let mut cfg = broker::BrokerConfig {
        delayed_delivery: dispatcher::DelayedDelivery {
            enabled: true,
            tick: 16,
            strict: true,
        },
        ..broker::BrokerConfig::default()
    };
    let no = |l: Legacy, why: &str| {
        Err(format!(
            "--legacy {} is not available with --runtime broker: {why}",
            l.as_str()
        ))
    };
    match legacy {
        None => {}
        Some(Legacy::MarkDeleteCleanup) => cfg.legacy.mark_delete_cleanup = true,
        Some(Legacy::OrphanChunkReplay) => cfg.legacy.orphan_chunk_replay = true,
        Some(Legacy::UnorderedNack) => cfg.legacy.unordered_nack = true,
        // The broker's `--delayed-delivery-enabled false`.
        Some(Legacy::NoDelayedDelivery) => cfg.delayed_delivery.enabled = false,
        Some(l @ Legacy::NoBatchAckSet) => {
            return no(l, "the broker always sends a redelivered batch's ack_set and has no switch to leave it out")
        }
        Some(l @ Legacy::ReplaySettle) => {
            return no(l, "it restores a dispatcher regression under deferred reads (`reads=`); the broker's in-memory reads complete at once and it has no such switch")
        }
    }
    Ok(cfg)
}

/// Settings of `c` the broker has no equivalent for (left at its defaults), for the report.
/// (`store=file` is honoured: such a run's broker stores in a data directory.)
pub(super) fn config_notes(c: &WorldConfig) -> Skipped {
    let d = WorldConfig::default();
    let mut out = Skipped::new();
    let notes: [(bool, &'static str); 7] = [
        (c.max_unacked_consumer.is_some(), "config max_unacked"),
        (c.max_unacked_sub.is_some(), "config max_unacked_sub"),
        (c.look_ahead.is_some(), "config look_ahead"),
        (c.read_delay != (0, 0), "config reads"),
        (
            c.unblocking_interval != d.unblocking_interval,
            "config interval",
        ),
        (c.persist_interval != d.persist_interval, "config persist"),
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
