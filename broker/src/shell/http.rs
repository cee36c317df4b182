//! The admin HTTP shell: accepts on `--admin` and gives each connection a thread of its own
//! (at most [`MAX_CONNECTIONS`]; one more gets a 503 and is closed), which pumps the socket's
//! bytes through the sans-IO [`Framing`](crate::admin::http::Framing) and writes the answers
//! [`admin::route`](crate::admin::route) decides: keep-alive, pipelining, chunked bodies and
//! `Expect: 100-continue`, with no request waiting on another connection's.
//!
//! A silent or stalled client holds its own thread only, and not for long: a connection with
//! no byte for [`IDLE`] is closed (a 408 first if a request was under way), and a request must
//! arrive whole within [`REQUEST_DEADLINE`] of its first byte (a 408 otherwise).

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::debug;

use crate::admin::http::{encode, Framing, Next, CONTINUE};
use crate::admin::{route, Request, Response};
use crate::state::BrokerState;

/// How long a connection may send nothing (between requests, or within one).
const IDLE: Duration = Duration::from_secs(5);

/// How long a request may take to arrive, from its first byte to its last.
const REQUEST_DEADLINE: Duration = Duration::from_secs(10);

/// Admin connections served at once.
const MAX_CONNECTIONS: usize = 64;

/// How often the accept loop looks at the shutdown flag when nothing arrives.
const POLL: Duration = Duration::from_millis(10);

/// Serves admin connections until the broker closes (`listener` is non-blocking).
pub(crate) fn serve(listener: TcpListener, state: Arc<BrokerState>) {
    let open = Arc::new(AtomicUsize::new(0));
    while !state.closing.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => start(stream, &state, &open),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::sleep(POLL),
            Err(e) => {
                debug!(error = %e, "admin accept failed");
                std::thread::sleep(POLL * 5);
            }
        }
    }
}

/// Gives `stream` a thread, or a 503 when [`MAX_CONNECTIONS`] are open.
fn start(mut stream: TcpStream, state: &Arc<BrokerState>, open: &Arc<AtomicUsize>) {
    if open.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
        open.fetch_sub(1, Ordering::SeqCst);
        let busy = Response::json_error(503, "too many admin connections");
        let _ = stream.write_all(&encode(&busy, true));
        return;
    }
    let (state, open) = (state.clone(), open.clone());
    let spawned = std::thread::Builder::new()
        .name("admin-conn".into())
        .spawn(move || {
            if let Err(e) = connection(stream, &state) {
                debug!(error = %e, "admin connection ended");
            }
            open.fetch_sub(1, Ordering::SeqCst);
        });
    if let Err(e) = spawned {
        debug!(error = %e, "cannot start an admin connection thread");
    }
}

/// One connection: requests in, answers out, until the client closes, asks to close, goes
/// quiet, breaks the protocol or the broker closes.
fn connection(mut stream: TcpStream, state: &BrokerState) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(IDLE))?;
    stream.set_write_timeout(Some(IDLE))?;
    let mut framing = Framing::default();
    let mut chunk = [0u8; 8192];
    let mut request_started: Option<Instant> = None;
    loop {
        match framing.next() {
            Next::Request(p) => {
                request_started = None;
                let mut req = Request::new(&p.method, &p.target, p.body, crate::shell::wall_ms());
                req.reached = stream.local_addr().ok().map(|a| a.ip());
                let close = p.close || state.closing.load(Ordering::SeqCst);
                stream.write_all(&encode(&route(&req, state), close))?;
                if close {
                    return Ok(());
                }
                continue;
            }
            Next::Continue => {
                stream.write_all(CONTINUE)?;
                continue;
            }
            Next::Refuse(r) => return stream.write_all(&encode(&r, true)),
            Next::More => {}
        }
        if request_started.is_some_and(|t| t.elapsed() > REQUEST_DEADLINE) {
            return timed_out(&mut stream, &framing);
        }
        match stream.read(&mut chunk) {
            Ok(0) => return Ok(()),
            Ok(n) => {
                request_started.get_or_insert_with(Instant::now);
                framing.push(&chunk[..n]);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return timed_out(&mut stream, &framing);
            }
            Err(e) => return Err(e),
        }
    }
}

/// Closes a connection that went quiet: with a 408 if a request was under way.
fn timed_out(stream: &mut TcpStream, framing: &Framing) -> io::Result<()> {
    if framing.idle() {
        return Ok(());
    }
    let r = Response::json_error(408, "the request did not arrive in time");
    stream.write_all(&encode(&r, true))
}
