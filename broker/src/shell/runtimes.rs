//! The dispatcher runtimes the shell starts for the broker's subscriptions: a thread each
//! (`--dispatch-threads 0`, and tests) or the broker's dispatch pool (the default). The core asks
//! through [`Runtimes`]; only here are the threads started.

use std::sync::Arc;

use cursor::{ManagedCursor, SharedLedger};
use dispatcher::{DispatchPool, DispatcherConfig, Runtime, RuntimeOptions};

use crate::topic::{Runtimes, SubStore};

/// One dispatcher thread per subscription.
#[derive(Debug, Default)]
pub(crate) struct ThreadRuntimes;

impl Runtimes for ThreadRuntimes {
    fn start(
        &self,
        cfg: DispatcherConfig,
        cursor: ManagedCursor<SubStore>,
        ledger: SharedLedger,
    ) -> Runtime {
        Runtime::start(cfg, cursor, ledger)
    }
}

/// Every subscription's loop on the pool's workers, stepped when it has something to do.
#[derive(Debug)]
pub(crate) struct PoolRuntimes(pub Arc<DispatchPool>);

impl Runtimes for PoolRuntimes {
    fn start(
        &self,
        cfg: DispatcherConfig,
        cursor: ManagedCursor<SubStore>,
        ledger: SharedLedger,
    ) -> Runtime {
        Runtime::start_pooled(cfg, cursor, ledger, RuntimeOptions::default(), &self.0)
    }
}
