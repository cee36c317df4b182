//! The listener, the broker-wide registry and shutdown.

use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use dispatcher::Event;
use tracing::{info, warn};

use crate::config::BrokerConfig;
use crate::storage::{decode_name, encode_name, StorageError};
use crate::topic::{lock, Subscription, Topic, TopicName};

/// What every connection thread shares.
pub(crate) struct Shared {
    pub cfg: BrokerConfig,
    pub service_url: String,
    pub server_version: String,
    pub closing: AtomicBool,
    pub next_consumer: AtomicU64,
    next_producer: AtomicU64,
    name_prefix: String,
    topics: Mutex<HashMap<String, Arc<Topic>>>,
    /// Per live connection: a sender into its writer (for broker-initiated frames).
    writers: Mutex<HashMap<u64, crossbeam_channel::Sender<Vec<u8>>>>,
}

impl Shared {
    /// The broker's state with no topic loaded yet (no socket, no thread).
    pub(crate) fn new(cfg: BrokerConfig, service_url: String) -> Shared {
        Shared {
            service_url,
            server_version: format!("key-ordered-broker-{}", env!("CARGO_PKG_VERSION")),
            closing: AtomicBool::new(false),
            next_consumer: AtomicU64::new(1),
            next_producer: AtomicU64::new(0),
            name_prefix: format!("standalone-{}", std::process::id()),
            topics: Mutex::new(HashMap::new()),
            writers: Mutex::new(HashMap::new()),
            cfg,
        }
    }

    /// The topic, created on first use (with its directory under `--data-dir`).
    pub(crate) fn topic(&self, name: &TopicName) -> Result<Arc<Topic>, StorageError> {
        let full = name.full();
        let mut topics = lock(&self.topics);
        if let Some(t) = topics.get(&full) {
            return Ok(t.clone());
        }
        let defaults = crate::topic::SubscriptionDefaults {
            legacy: self.cfg.legacy,
            max_unacked_per_key: self.cfg.key_shared_max_unacked_per_key,
            delayed_delivery: self.cfg.delayed_delivery,
        };
        let t = match &self.cfg.data_dir {
            None => {
                let mut t = Topic::new(full.clone(), self.cfg.entries_per_ledger);
                t.defaults = defaults;
                t
            }
            Some(d) => Topic::open(
                full.clone(),
                d.join("topics").join(encode_name(&full)),
                self.cfg.entries_per_ledger,
                self.cfg.sync,
                defaults,
            )?,
        };
        if self.cfg.legacy != crate::config::Legacy::default() {
            warn!(topic = %full, legacy = ?self.cfg.legacy, "Pulsar-bug switches are on for this topic's subscriptions");
        }
        info!(topic = %full, "topic created");
        let t = Arc::new(t);
        topics.insert(full, t.clone());
        Ok(t)
    }

    /// Reads every topic under `--data-dir` back (before the listener accepts anyone).
    pub(crate) fn recover_topics(&self) -> Result<usize, StorageError> {
        let Some(d) = &self.cfg.data_dir else {
            return Ok(0);
        };
        let dir = d.join("topics");
        std::fs::create_dir_all(&dir).map_err(|source| StorageError::Io {
            op: "create",
            path: dir.clone(),
            source,
        })?;
        let list = std::fs::read_dir(&dir).map_err(|source| StorageError::Io {
            op: "list",
            path: dir.clone(),
            source,
        })?;
        let mut n = 0;
        for e in list.flatten() {
            let fname = e.file_name().to_string_lossy().into_owned();
            let Some(full) = decode_name(&fname) else {
                warn!(dir = %e.path().display(), "not a topic directory; skipped");
                continue;
            };
            let Ok(name) = TopicName::parse(&full) else {
                warn!(dir = %e.path().display(), "not a topic directory; skipped");
                continue;
            };
            self.topic(&name)?;
            n += 1;
        }
        Ok(n)
    }

    /// Syncs every topic's log (the `interval` policy's timer).
    fn sync_topics(&self) {
        for t in self.topics() {
            if let Err(e) = t.sync() {
                warn!(topic = %t.name, error = %e, "log sync failed");
            }
        }
    }

    /// The topic, if it exists.
    pub(crate) fn existing_topic(&self, full: &str) -> Option<Arc<Topic>> {
        lock(&self.topics).get(full).cloned()
    }

    /// The full names of the persistent topics of `namespace` (`tenant/ns`), sorted: the admin
    /// topic list and GET_TOPICS_OF_NAMESPACE.
    pub(crate) fn topic_names_in(&self, namespace: &str) -> Vec<String> {
        let prefix = format!("persistent://{namespace}/");
        let mut names: Vec<String> = lock(&self.topics)
            .keys()
            .filter(|n| n.starts_with(&prefix))
            .cloned()
            .collect();
        names.sort();
        names
    }

    /// Every topic.
    pub(crate) fn topics(&self) -> Vec<Arc<Topic>> {
        lock(&self.topics).values().cloned().collect()
    }

    /// A producer name unique in this broker's life (clients build chunk uuids from it).
    pub(crate) fn producer_name(&self) -> String {
        let n = self.next_producer.fetch_add(1, Ordering::SeqCst);
        format!("{}-{n}", self.name_prefix)
    }

    pub(crate) fn register_writer(&self, conn: u64, tx: crossbeam_channel::Sender<Vec<u8>>) {
        lock(&self.writers).insert(conn, tx);
    }

    pub(crate) fn unregister_writer(&self, conn: u64) {
        lock(&self.writers).remove(&conn);
    }

    /// Closes every consumer of `sub` from the broker side: the dispatcher lets them go (their
    /// unacked entries return to replay) and each client gets CLOSE_CONSUMER, after which it
    /// subscribes again. Pulsar does this on seek and reset-cursor.
    pub(crate) fn kick_subscription(&self, sub: &Subscription) {
        let consumers: Vec<_> = lock(&sub.consumers)
            .iter()
            .map(|(id, c)| (*id, c.clone()))
            .collect();
        let events = sub.runtime.events();
        let writers = lock(&self.writers);
        for (id, c) in consumers {
            let _ = events.send(Event::ConsumerRemoved(id));
            if let Some(w) = writers.get(&c.conn) {
                let mut out = Vec::new();
                wire::encode_command(&wire::commands::close_consumer(c.client_id, 0), &mut out);
                let _ = w.send(out);
            }
        }
        lock(&sub.consumers).clear();
    }
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
    shared: Arc<Shared>,
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
    pub fn start(cfg: BrokerConfig) -> io::Result<Broker> {
        let listener = TcpListener::bind(cfg.listen)?;
        let service_addr = listener.local_addr()?;
        let admin_listener = TcpListener::bind(cfg.admin)?;
        let admin_addr = admin_listener.local_addr()?;
        listener.set_nonblocking(true)?;
        admin_listener.set_nonblocking(true)?;
        let shared = Arc::new(Shared::new(cfg, format!("pulsar://{service_addr}")));
        let started = Instant::now();
        let recovered = shared
            .recover_topics()
            .map_err(|e| io::Error::other(e.to_string()))?;
        if recovered > 0 {
            info!(
                topics = recovered,
                ms = started.elapsed().as_millis() as u64,
                "recovered from the data directory"
            );
        }
        let conns: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::new(Mutex::new(Vec::new()));
        let acceptor = {
            let shared = shared.clone();
            let conns = conns.clone();
            std::thread::Builder::new()
                .name("acceptor".into())
                .spawn(move || accept_loop(listener, shared, conns))?
        };
        let housekeeping = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("housekeeping".into())
                .spawn(move || housekeeping_loop(shared))?
        };
        let admin = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("admin".into())
                .spawn(move || crate::admin::serve(admin_listener, shared))?
        };
        info!(service = %service_addr, admin = %admin_addr, "broker started");
        Ok(Broker {
            shared,
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
        if self.shared.closing.swap(true, Ordering::SeqCst) {
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
        self.shared.sync_topics();
        for t in self.shared.topics() {
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

/// When `every` has passed since `*last`: restarts the period and returns the seconds it
/// lasted.
fn due(last: &mut Instant, every: Duration) -> Option<f64> {
    let elapsed = last.elapsed();
    (elapsed >= every).then(|| {
        *last = Instant::now();
        elapsed.as_secs_f64()
    })
}

fn housekeeping_loop(shared: Arc<Shared>) {
    let (mut last_sync, mut last_trim, mut last_rates) =
        (Instant::now(), Instant::now(), Instant::now());
    while !shared.closing.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(20));
        if shared.cfg.data_dir.is_some() && due(&mut last_sync, SYNC_INTERVAL).is_some() {
            shared.sync_topics();
        }
        if due(&mut last_trim, RETENTION_INTERVAL).is_some() {
            for t in shared.topics() {
                t.trim();
            }
        }
        if let Some(secs) = due(&mut last_rates, RATES_INTERVAL) {
            crate::stats::update_rates(&shared, secs);
        }
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>, conns: Arc<Mutex<Vec<JoinHandle<()>>>>) {
    let mut next_conn = 0u64;
    while !shared.closing.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, peer)) => {
                next_conn += 1;
                let id = next_conn;
                if let Err(e) = start_connection(&shared, &conns, id, stream) {
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
    shared: &Arc<Shared>,
    conns: &Arc<Mutex<Vec<JoinHandle<()>>>>,
    id: u64,
    stream: TcpStream,
) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    let shared = shared.clone();
    let t = std::thread::Builder::new()
        .name(format!("conn-{id}"))
        .spawn(move || crate::conn::serve(shared, id, stream))?;
    let mut list = lock(conns);
    list.retain(|h| !h.is_finished());
    list.push(t);
    Ok(())
}
