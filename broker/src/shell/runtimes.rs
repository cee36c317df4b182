//! The dispatcher runtimes the shell starts for the broker's subscriptions: a thread each
//! (`--dispatch-threads 0`, and tests) or the broker's dispatch pool (the default), and the
//! reader thread that runs the read requests of deliveries whose entries are not in memory.
//! The core asks through [`Runtimes`]; only here are the threads started.

use std::sync::Arc;

use crossbeam_channel::Sender;
use cursor::{ManagedCursor, SharedLedger};
use dispatcher::{DispatchPool, DispatcherConfig, Runtime, RuntimeOptions};
use tracing::warn;

use crate::topic::{ReadRequest, Runtimes, SubStore};

/// The storage reader thread: runs read requests in the order they come (each reads its
/// entries into the read cache and completes). It ends when its last sender is dropped.
#[derive(Debug)]
struct Reader(Sender<ReadRequest>);

impl Reader {
    fn start() -> Reader {
        let (tx, rx) = crossbeam_channel::unbounded::<ReadRequest>();
        let spawned = std::thread::Builder::new()
            .name("storage-reader".into())
            .spawn(move || rx.into_iter().for_each(ReadRequest::run));
        if let Err(e) = spawned {
            warn!(error = %e, "no storage reader thread: reads run on the dispatch workers");
        }
        Reader(tx)
    }

    fn read(&self, request: ReadRequest) {
        if let Err(e) = self.0.send(request) {
            // No reader thread: read here rather than never.
            e.into_inner().run();
        }
    }
}

/// The subscriptions' dispatchers: a thread each, or every loop on a dispatch pool's workers
/// (stepped when it has something to do); and the reader thread.
#[derive(Debug)]
pub(crate) struct ShellRuntimes {
    pool: Option<Arc<DispatchPool>>,
    reader: Reader,
}

impl ShellRuntimes {
    /// A dispatcher thread per subscription (`--dispatch-threads 0`, and tests); starts the
    /// reader thread.
    pub(crate) fn threads() -> ShellRuntimes {
        ShellRuntimes {
            pool: None,
            reader: Reader::start(),
        }
    }

    /// Every loop on `pool`; starts the reader thread.
    pub(crate) fn pooled(pool: Arc<DispatchPool>) -> ShellRuntimes {
        ShellRuntimes {
            pool: Some(pool),
            reader: Reader::start(),
        }
    }
}

impl Runtimes for ShellRuntimes {
    fn start(
        &self,
        cfg: DispatcherConfig,
        cursor: ManagedCursor<SubStore>,
        ledger: SharedLedger,
    ) -> Runtime {
        match &self.pool {
            Some(pool) => {
                Runtime::start_pooled(cfg, cursor, ledger, RuntimeOptions::default(), pool)
            }
            None => Runtime::start(cfg, cursor, ledger),
        }
    }

    fn read(&self, request: ReadRequest) {
        self.reader.read(request);
    }
}
