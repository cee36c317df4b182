//! The IO shells: the listener and its connection threads ([`tcp`]), the admin HTTP server
//! ([`http`]), the housekeeping thread (log sync, retention, rates) and shutdown. They own the
//! sockets, the threads and the clock; the broker's state and each connection's
//! [`Session`](crate::session::Session) decide.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use dispatcher::DispatchPool;
use tracing::{info, warn};

use crate::config::BrokerConfig;
use crate::state::BrokerState;
use crate::sync::lock;

pub(crate) mod http;
mod runtimes;
mod tcp;

pub(crate) use runtimes::ShellRuntimes;

/// Milliseconds since the Unix epoch, from the system clock.
pub(crate) fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Why [`Broker::start`] failed.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A listener could not be bound (the address is in use, or not this machine's).
    #[error("cannot listen on {addr} ({what}): {source}")]
    Bind {
        /// The flag that names the address.
        what: &'static str,
        /// The address.
        addr: SocketAddr,
        /// The operating system's error.
        source: io::Error,
    },
    /// The data directory could not be read back.
    #[error("cannot recover the data directory: {0}")]
    Recover(#[from] crate::storage::StorageError),
    /// A thread could not be started.
    #[error("cannot start the {0} thread: {1}")]
    Thread(&'static str, io::Error),
}

/// A running broker: the listener thread, its connections and the admin server.
///
/// ```no_run
/// let cfg = broker::BrokerConfig::parse_args(["--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"]).unwrap();
/// let b = broker::Broker::start(cfg).unwrap();
/// println!("{}", b.service_url());
/// b.shutdown(std::time::Duration::from_secs(5));
/// ```
pub struct Broker {
    state: Arc<BrokerState>,
    service_addr: SocketAddr,
    admin_addr: SocketAddr,
    acceptor: Option<JoinHandle<()>>,
    admin: Option<JoinHandle<()>>,
    housekeeping: Option<JoinHandle<()>>,
    conns: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker")
            .field("service", &self.service_addr)
            .field("admin", &self.admin_addr)
            .finish_non_exhaustive()
    }
}

impl Broker {
    /// Binds both listeners and starts serving. Port 0 binds an OS-chosen port; the URLs say
    /// which.
    pub fn start(cfg: BrokerConfig) -> Result<Broker, StartError> {
        let bind = |what, addr| {
            let l = TcpListener::bind(addr)
                .and_then(|l| l.set_nonblocking(true).map(|()| l))
                .map_err(|source| StartError::Bind { what, addr, source })?;
            let local = l
                .local_addr()
                .map_err(|source| StartError::Bind { what, addr, source })?;
            Ok::<_, StartError>((l, local))
        };
        let (listener, service_addr) = bind("--listen", cfg.listen)?;
        let (admin_listener, admin_addr) = bind("--admin", cfg.admin)?;
        let service_url = format!("pulsar://{service_addr}");
        // The dispatch pool: every subscription's dispatcher runs on its workers (0: a thread
        // per subscription).
        let workers = cfg.dispatch_threads.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get)
        });
        let runtimes: Arc<dyn crate::topic::Runtimes> = match workers {
            0 => Arc::new(ShellRuntimes::threads()),
            n => Arc::new(ShellRuntimes::pooled(Arc::new(DispatchPool::new(n)))),
        };
        let state = BrokerState::new(cfg, service_url, runtimes);
        let state = Arc::new(state.with_admin_url(format!("http://{admin_addr}")));
        let started = Instant::now();
        let recovered = state.recover_topics()?;
        if recovered > 0 {
            info!(
                topics = recovered,
                ms = started.elapsed().as_millis() as u64,
                "recovered from the data directory"
            );
        }
        let conns: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::new(Mutex::new(Vec::new()));
        let acceptor = {
            let state = state.clone();
            let conns = conns.clone();
            std::thread::Builder::new()
                .name("acceptor".into())
                .spawn(move || accept_loop(listener, state, conns))
                .map_err(|e| StartError::Thread("acceptor", e))?
        };
        let housekeeping = {
            let state = state.clone();
            std::thread::Builder::new()
                .name("housekeeping".into())
                .spawn(move || housekeeping_loop(state))
                .map_err(|e| StartError::Thread("housekeeping", e))?
        };
        let admin = {
            let state = state.clone();
            std::thread::Builder::new()
                .name("admin".into())
                .spawn(move || http::serve(admin_listener, state))
                .map_err(|e| StartError::Thread("admin", e))?
        };
        info!(service = %service_addr, admin = %admin_addr, "broker started");
        Ok(Broker {
            state,
            service_addr,
            admin_addr,
            acceptor: Some(acceptor),
            admin: Some(admin),
            housekeeping: Some(housekeeping),
            conns,
        })
    }

    /// `pulsar://IP:PORT`, what clients connect to.
    pub fn service_url(&self) -> String {
        format!("pulsar://{}", self.service_addr)
    }

    /// `http://IP:PORT`, the admin server.
    pub fn admin_url(&self) -> String {
        format!("http://{}", self.admin_addr)
    }

    /// Graceful shutdown: every connection's producers and consumers get CLOSE_PRODUCER /
    /// CLOSE_CONSUMER, connections close, subscriptions stop. Waits at most `deadline` for
    /// connection threads.
    pub fn shutdown(mut self, deadline: Duration) {
        self.stop(deadline);
    }

    fn stop(&mut self, deadline: Duration) {
        if self.state.closing.swap(true, Ordering::SeqCst) {
            return;
        }
        let until = Instant::now() + deadline;
        let threads = [
            self.acceptor.take(),
            self.admin.take(),
            self.housekeeping.take(),
        ];
        for t in threads.into_iter().flatten() {
            let _ = t.join();
        }
        let conns: Vec<_> = std::mem::take(&mut *lock(&self.conns));
        for c in conns {
            while !c.is_finished() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(10));
            }
            if c.is_finished() {
                let _ = c.join();
            } else {
                warn!("a connection did not close before the shutdown deadline");
            }
        }
        self.state.sync_topics();
        for t in self.state.topics() {
            t.close();
        }
        info!("broker stopped");
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(5));
    }
}

/// How often the `interval` sync policy syncs the logs.
const SYNC_INTERVAL: Duration = Duration::from_millis(100);

/// How often retention looks for ledgers every subscription has consumed. Often enough that
/// each pass has about one ledger to drop (50,000 entries fill in a quarter of a second at
/// 200k msg/s), and cheap when there is none (a mark-delete read per subscription).
const RETENTION_INTERVAL: Duration = Duration::from_millis(100);

/// How often the rate meters are fed.
const RATES_INTERVAL: Duration = Duration::from_secs(1);
/// How often consumers of terminated topics are checked for REACHED_END_OF_TOPIC.
const END_OF_TOPIC_INTERVAL: Duration = Duration::from_millis(100);

/// When `every` has passed since `*last`: restarts the period and returns the seconds it
/// lasted.
fn due(last: &mut Instant, every: Duration) -> Option<f64> {
    let elapsed = last.elapsed();
    (elapsed >= every).then(|| {
        *last = Instant::now();
        elapsed.as_secs_f64()
    })
}

fn housekeeping_loop(state: Arc<BrokerState>) {
    let (mut last_sync, mut last_trim, mut last_rates) =
        (Instant::now(), Instant::now(), Instant::now());
    let (mut last_expiry, mut last_quota, mut last_end) =
        (Instant::now(), Instant::now(), Instant::now());
    let expiry = Duration::from_millis(state.cfg.message_expiry_check_ms);
    let quota = Duration::from_millis(state.cfg.backlog_quota_check_ms);
    while !state.closing.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(20));
        if state.cfg.data_dir.is_some() && due(&mut last_sync, SYNC_INTERVAL).is_some() {
            state.sync_topics();
        }
        if due(&mut last_trim, RETENTION_INTERVAL).is_some() {
            let now = wall_ms();
            state.trim_topics(now);
        }
        if let Some(secs) = due(&mut last_rates, RATES_INTERVAL) {
            crate::stats::update_rates(&state, secs);
        }
        if due(&mut last_expiry, expiry).is_some() {
            state.expire_by_ttl(wall_ms());
        }
        if due(&mut last_quota, quota).is_some() {
            state.enforce_backlog_quotas(wall_ms());
        }
        if due(&mut last_end, END_OF_TOPIC_INTERVAL).is_some() {
            state.notify_end_of_topics();
        }
    }
}

fn accept_loop(
    listener: TcpListener,
    state: Arc<BrokerState>,
    conns: Arc<Mutex<Vec<JoinHandle<()>>>>,
) {
    let mut next_conn = 0u64;
    while !state.closing.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, peer)) => {
                next_conn += 1;
                let id = next_conn;
                if let Err(e) = start_connection(&state, &conns, id, stream) {
                    warn!(peer = %peer, error = %e, "cannot start a connection thread");
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => {
                warn!(error = %e, "accept failed");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

fn start_connection(
    state: &Arc<BrokerState>,
    conns: &Arc<Mutex<Vec<JoinHandle<()>>>>,
    id: u64,
    stream: TcpStream,
) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    let state = state.clone();
    let t = std::thread::Builder::new()
        .name(format!("conn-{id}"))
        .spawn(move || tcp::serve(state, id, stream))?;
    let mut list = lock(conns);
    list.retain(|h| !h.is_finished());
    list.push(t);
    Ok(())
}
