//! The TCP shell of one client connection: a reader thread that feeds the socket's bytes and
//! the time to the connection's [`Session`] and writes what it returns, and a writer thread
//! that drains a bounded queue of encoded frames into the socket. The subscriptions'
//! dispatchers (on the dispatch pool's workers) put their consumers' MESSAGE frames into the same queue through the
//! connection's [`Outbox`]. Every protocol decision is the session's.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, Sender, TrySendError};
use tracing::{debug, error, warn};

use crate::session::{Now, Session};
use crate::state::{BrokerState, Offer, Outbox};

/// Buffers of frames queued for the writer before the reader waits.
const WRITE_QUEUE: usize = 1024;

/// Consumers' deliveries fill the writer queue up to here; the rest is kept for the session's
/// replies (a dispatcher refused here pauses its consumer until the queue drains to half).
const DELIVERIES_UP_TO: usize = WRITE_QUEUE * 3 / 4;

/// Consumers' deliveries also stop while this many bytes wait in the queue (and resume at
/// half): a dispatcher that wakes rarely queues big buffers, and a consumer that does not read
/// would otherwise hold up to [`DELIVERIES_UP_TO`] of them in the broker's memory.
const DELIVERY_BYTES: usize = 2 << 20;

/// How often a blocked read wakes up to look at the shutdown flag and the keep-alive.
const READ_TICK: Duration = Duration::from_millis(100);

/// How long a closing connection waits for its queued frames to be written.
const CLOSE_FLUSH: Duration = Duration::from_millis(500);

/// The sending side of a connection's writer queue, counting the bytes queued (the writer
/// thread subtracts what it takes).
#[derive(Clone)]
struct WriteQueue {
    tx: Sender<Vec<u8>>,
    bytes: Arc<AtomicUsize>,
}

impl WriteQueue {
    /// Queues `buf` through `send` (one of the channel's sends), counting its bytes meanwhile.
    fn send<E>(&self, buf: Vec<u8>, send: impl FnOnce(Vec<u8>) -> Result<(), E>) -> Result<(), E> {
        let n = buf.len();
        self.bytes.fetch_add(n, Ordering::Relaxed);
        let r = send(buf);
        if r.is_err() {
            self.bytes.fetch_sub(n, Ordering::Relaxed);
        }
        r
    }
}

/// The writer thread took `frames` off the queue: their bytes no longer count.
fn taken(queued: &AtomicUsize, frames: &[u8]) {
    queued.fetch_sub(frames.len(), Ordering::Relaxed);
}

/// A connection's writer queue, as the broker state reaches it (broker-initiated frames).
struct WriterOutbox(WriteQueue);

impl Outbox for WriterOutbox {
    fn push(&self, frame: Vec<u8>) {
        let q = &self.0;
        if q.send(frame, |f| q.tx.send_timeout(f, CLOSE_FLUSH))
            .is_err()
        {
            warn!("a connection's write queue stayed full; a broker-initiated frame was dropped");
        }
    }

    fn offer(&self, frames: Vec<u8>) -> Offer {
        let q = &self.0;
        if q.tx.len() >= DELIVERIES_UP_TO || q.bytes.load(Ordering::Relaxed) >= DELIVERY_BYTES {
            return Offer::Full;
        }
        match q.send(frames, |f| q.tx.try_send(f)) {
            Ok(()) => Offer::Taken,
            Err(TrySendError::Full(_)) => Offer::Full,
            Err(TrySendError::Disconnected(_)) => Offer::Closed,
        }
    }

    fn drained(&self) -> bool {
        self.0.tx.len() <= WRITE_QUEUE / 2
            && self.0.bytes.load(Ordering::Relaxed) <= DELIVERY_BYTES / 2
    }
}

/// The shell's clock: monotonic milliseconds since the connection started, and the wall time.
struct Clock(Instant);

impl Clock {
    fn now(&self) -> Now {
        Now {
            ms: u64::try_from(self.0.elapsed().as_millis()).unwrap_or(u64::MAX),
            wall_ms: super::wall_ms(),
        }
    }
}

/// Runs one accepted connection to its end (socket closed, protocol error or shutdown).
pub(crate) fn serve(state: Arc<BrokerState>, conn_id: u64, stream: TcpStream) {
    let peer = stream
        .peer_addr()
        .map_or_else(|_| "?".to_owned(), |a| a.to_string());
    let service_url = stream
        .local_addr()
        .map_or_else(|_| state.service_url.clone(), |a| format!("pulsar://{a}"));
    let _ = stream.set_nodelay(true);
    if stream.set_read_timeout(Some(READ_TICK)).is_err() {
        warn!(peer, "cannot set a read timeout; closing");
        return;
    }
    let Ok(write_half) = stream.try_clone() else {
        warn!(peer, "cannot clone the socket; closing");
        return;
    };
    let (tx, rx) = bounded::<Vec<u8>>(WRITE_QUEUE);
    let queue = WriteQueue {
        tx,
        bytes: Arc::new(AtomicUsize::new(0)),
    };
    state.register_outbox(conn_id, Arc::new(WriterOutbox(queue.clone())));
    let check = state.cfg.check_frames;
    let bytes = queue.bytes.clone();
    let writer = std::thread::Builder::new()
        .name(format!("conn-{conn_id}-write"))
        .spawn(move || write_loop(write_half, rx, &bytes, check));
    let Ok(writer) = writer else {
        warn!(peer, "cannot spawn the writer thread; closing");
        state.unregister_outbox(conn_id);
        return;
    };
    let clock = Clock(Instant::now());
    let session = Session::new(
        state.clone(),
        conn_id,
        peer.clone(),
        service_url,
        clock.now(),
    );
    let mut conn = Conn {
        state,
        id: conn_id,
        peer,
        stream,
        out: queue,
        session,
        clock,
    };
    conn.run();
    conn.session.close();
    conn.state.unregister_outbox(conn_id);
    let Conn { out, stream, .. } = conn;
    drop(out);
    // Let the writer flush what is queued (CLOSE_* at shutdown), but not forever: a peer that
    // does not read would block it in `write_all` (and the dispatchers find the queue full)
    // for good. Cutting the socket makes the write fail, which ends the writer and them.
    let until = Instant::now() + CLOSE_FLUSH;
    while !writer.is_finished() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = stream.shutdown(Shutdown::Both);
    let _ = writer.join();
}

struct Conn {
    state: Arc<BrokerState>,
    id: u64,
    peer: String,
    stream: TcpStream,
    out: WriteQueue,
    session: Session,
    clock: Clock,
}

/// How the reader hands queued frames to the writer.
#[derive(Clone, Copy)]
enum Pump {
    /// Wait for room: back-pressure on a client that sends faster than it reads.
    Wait,
    /// Never wait: a full queue means the peer does not read, and a reader blocked here
    /// would never notice the keep-alive timeout or the shutdown.
    NoWait,
    /// Wait a little (broker shutdown), then give up.
    Deadline,
}

impl Conn {
    fn run(&mut self) {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            if self.state.closing.load(Ordering::SeqCst) {
                self.session.handle_shutdown();
                self.pump(Pump::Deadline);
                return;
            }
            let result = match self.stream.read(&mut buf) {
                Ok(0) => {
                    debug!(conn = self.id, peer = %self.peer, "connection closed by the client");
                    return;
                }
                Ok(n) => {
                    let r = self.session.handle_bytes(self.clock.now(), &buf[..n]);
                    self.run_writes();
                    self.pump(Pump::Wait);
                    r
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    let r = self.session.handle_timeout(self.clock.now());
                    self.pump(Pump::NoWait);
                    r
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => Ok(()),
                Err(e) => {
                    debug!(conn = self.id, error = %e, "read failed");
                    return;
                }
            };
            if let Err(reason) = result {
                debug!(conn = self.id, peer = %self.peer, ?reason, "connection closed by the broker");
                return;
            }
        }
    }

    /// Runs the session's write requests here, on the connection's thread (the store's IO:
    /// a buffered write, and an `fsync` with `--sync always`), and hands back the outcomes:
    /// the receipts that waited for them are then queued.
    fn run_writes(&mut self) {
        crate::session::WriteRequest::run_all(&mut self.session, super::wall_ms());
    }

    /// Moves the session's queued frames to the writer.
    fn pump(&mut self, how: Pump) {
        while let Some(frame) = self.session.poll_transmit() {
            let q = &self.out;
            let sent = match how {
                Pump::Wait => q.send(frame, |f| q.tx.send(f)).is_ok(),
                Pump::NoWait => q.send(frame, |f| q.tx.try_send(f)).is_ok(),
                Pump::Deadline => q.send(frame, |f| q.tx.send_timeout(f, CLOSE_FLUSH)).is_ok(),
            };
            if !sent {
                debug!(conn = self.id, peer = %self.peer, "write queue full or closed; frames dropped");
                while self.session.poll_transmit().is_some() {}
                return;
            }
        }
    }
}

fn write_loop(mut stream: TcpStream, rx: Receiver<Vec<u8>>, queued: &AtomicUsize, check: bool) {
    let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
    while let Ok(first) = rx.recv() {
        taken(queued, &first);
        if check && !frames_pass(&first) {
            let _ = stream.shutdown(Shutdown::Both);
            return;
        }
        buf.extend_from_slice(&first);
        while buf.len() < 256 * 1024 {
            match rx.try_recv() {
                Ok(more) if check && !frames_pass(&more) => {
                    let _ = stream.shutdown(Shutdown::Both);
                    return;
                }
                Ok(more) => {
                    taken(queued, &more);
                    buf.extend_from_slice(&more);
                }
                Err(_) => break,
            }
        }
        if let Err(e) = stream.write_all(&buf) {
            debug!(error = %e, "write failed; closing the connection");
            let _ = stream.shutdown(Shutdown::Both);
            return;
        }
        buf.clear();
    }
    let _ = stream.flush();
}

/// `--check-frames`: whether every frame of a queued buffer reads as the strictest client
/// reads it; a failure is logged with the frame's command type.
fn frames_pass(buf: &[u8]) -> bool {
    for frame in wire::strict::frames(buf) {
        let failed = match frame {
            Ok(f) => wire::strict::check_frame(f).err().map(|e| (e, Some(f))),
            Err(e) => Some((e, None)),
        };
        if let Some((e, f)) = failed {
            let command = f
                .and_then(|f| wire::decode_frame(f).ok())
                .map(|f| f.command.r#type());
            error!(error = %e, ?command, "--check-frames: a frame a strict client cannot read; closing the connection");
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deliveries stop once the queued bytes reach the budget (however few the buffers) and
    /// resume when the writer has taken them down to half; the session's replies still queue.
    #[test]
    fn deliveries_stop_at_the_byte_budget_and_resume_at_half() {
        let (tx, rx) = bounded::<Vec<u8>>(WRITE_QUEUE);
        let bytes = Arc::new(AtomicUsize::new(0));
        let outbox = WriterOutbox(WriteQueue {
            tx,
            bytes: bytes.clone(),
        });
        let big = DELIVERY_BYTES / 4;
        for _ in 0..4 {
            assert_eq!(outbox.offer(vec![0; big]), Offer::Taken);
        }
        assert_eq!(
            outbox.offer(vec![0; 1]),
            Offer::Full,
            "4 buffers hold the budget"
        );
        assert!(!outbox.drained());
        outbox.push(vec![0; 8]);
        assert_eq!(rx.len(), 5, "a reply still queues");
        // What the writer does with each buffer it takes.
        let take = || taken(&bytes, &rx.try_recv().unwrap());
        take();
        take();
        assert!(
            !outbox.drained(),
            "half the budget and the reply still queued"
        );
        take();
        assert!(outbox.drained(), "a quarter and the reply");
        assert_eq!(outbox.offer(vec![0; 1]), Offer::Taken);
    }
}
