//! A broker run's setup: the broker's configuration (delayed delivery as the world has it, the
//! dispatcher settings, the legacy switch) and the dispatcher runtimes' options (read delays,
//! persist cadence).

use crate::sim::scenario::{SubKind, WorldConfig};
use crate::sim::world::Legacy;

/// The broker's settings for a run of `c`: delayed delivery as the world has it (strict, 16 ms
/// buckets), the dispatcher limits as the world sets them, and the legacy switch.
pub(super) fn broker_config(c: &WorldConfig, legacy: Option<Legacy>) -> broker::BrokerConfig {
    let mut cfg = broker::BrokerConfig {
        delayed_delivery: dispatcher::DelayedDelivery {
            enabled: true,
            tick: 16,
            strict: true,
        },
        // A tenth of the broker's second after a failed write (the sim's producers back off
        // a tenth of a client's time too): the same refusals, in fewer simulated seconds.
        write_refusal_ms: 100,
        ..broker::BrokerConfig::default()
    };
    // The world's dispatcher settings, as the broker's flags.
    let d = crate::sim::world::dispatcher_config(c);
    cfg.dispatch = broker::DispatchLimits {
        max_unacked_per_consumer: d.max_unacked_per_consumer,
        max_unacked_per_subscription: d.max_unacked_per_subscription,
        look_ahead_per_consumer: d.look_ahead_per_consumer,
        look_ahead_per_subscription: d.look_ahead_per_subscription,
        unblocking_interval_ms: d.unblocking_interval,
        // `type=key_shared_autosplit`: AUTO_SPLIT with hash ranges instead of the ring.
        key_shared_use_consistent_hashing: c.sub != SubKind::KeySharedAutoSplit,
        ..cfg.dispatch
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
        Some(Legacy::EarlyReceipt) => cfg.legacy.early_receipt = true,
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
