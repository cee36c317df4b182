//! The admin HTTP shell, on `tiny_http`: HTTP/1.1 with keep-alive, pipelining, chunked request
//! bodies and `Expect: 100-continue`. `tiny_http` reads each connection's requests on a thread
//! of its pool; each request is answered on a handler thread of its own (at most
//! [`MAX_HANDLERS`] at once; a 503 beyond), and [`admin::route`](crate::admin::route) decides
//! the answer.
//!
//! A silent or stalled client holds nothing for long: every read on an admin connection gives
//! up after [`IDLE`] (the listener's receive timeout, which Linux copies to every accepted
//! socket), which closes the connection, whether it is an idle keep-alive connection or a
//! request that stopped half way; and a body must arrive whole within [`BODY_DEADLINE`].
//!
//! `tiny_http` writes header names as given (Pulsar's admin clients look for `X-Pulsar-PROPERTY`
//! in that case; `hyper` and the other servers on the `http` crate write them in lower case).

use std::io;
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tracing::{debug, warn};

use crate::admin::{route, Request, Response};
use crate::state::BrokerState;

/// How long one read on an admin connection may wait: an idle keep-alive connection is closed
/// after it, as is a request whose head or body stops arriving.
pub(crate) const IDLE: Duration = Duration::from_secs(5);

/// How long a request's body may take to arrive, however it trickles.
const BODY_DEADLINE: Duration = Duration::from_secs(10);

/// Largest request body read (a 413 beyond).
const MAX_BODY: usize = 1024 * 1024;

/// Requests answered at once; one more gets a 503 at once.
const MAX_HANDLERS: usize = 16;

/// How often the server loop looks at the shutdown flag.
const POLL: Duration = Duration::from_millis(50);

/// The admin listener as the shell needs it: blocking accepts (`tiny_http`'s accept thread
/// waits in `accept`), and [`IDLE`] as the receive timeout accepted sockets inherit.
pub(crate) fn prepare(listener: TcpListener) -> io::Result<TcpListener> {
    listener.set_nonblocking(false)?;
    let socket = socket2::Socket::from(listener);
    socket.set_read_timeout(Some(IDLE))?;
    Ok(socket.into())
}

/// Serves admin requests until the broker closes, then waits (at most [`BODY_DEADLINE`]) for
/// the requests being answered.
///
/// `tiny_http`'s accept thread ends at the first failed `accept`, and the receive timeout
/// makes `accept` fail after [`IDLE`] without a new connection; the loop then starts a new
/// server on the same listening socket (connections arriving meanwhile wait in its backlog).
pub(crate) fn serve(listener: TcpListener, state: Arc<BrokerState>) {
    let busy = Arc::new(AtomicUsize::new(0));
    let mut handlers: Vec<JoinHandle<()>> = Vec::new();
    while !state.closing.load(Ordering::SeqCst) {
        let server = match listener.try_clone() {
            Ok(l) => tiny_http::Server::from_listener(l, None),
            Err(e) => Err(e.into()),
        };
        let server = match server {
            Ok(s) => s,
            Err(e) => {
                warn!(error = %e, "the admin server cannot start; retrying");
                std::thread::sleep(IDLE);
                continue;
            }
        };
        while !state.closing.load(Ordering::SeqCst) {
            match server.recv_timeout(POLL) {
                Ok(Some(rq)) => {
                    handlers.retain(|h| !h.is_finished());
                    handlers.extend(dispatch(rq, &state, &busy));
                }
                Ok(None) => {}
                Err(e) => {
                    if e.kind() != io::ErrorKind::WouldBlock {
                        debug!(error = %e, "admin accept failed");
                        std::thread::sleep(POLL);
                    }
                    break;
                }
            }
        }
    }
    let until = Instant::now() + BODY_DEADLINE;
    for h in handlers {
        while !h.is_finished() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        if h.is_finished() {
            let _ = h.join();
        }
    }
}

/// Answers `rq` on a thread of its own, or with a 503 here when [`MAX_HANDLERS`] are busy.
fn dispatch(
    rq: tiny_http::Request,
    state: &Arc<BrokerState>,
    busy: &Arc<AtomicUsize>,
) -> Option<JoinHandle<()>> {
    if busy.fetch_add(1, Ordering::SeqCst) >= MAX_HANDLERS {
        busy.fetch_sub(1, Ordering::SeqCst);
        reply(
            rq,
            Response::json_error(503, "too many admin requests at once"),
        );
        return None;
    }
    let (state, done) = (state.clone(), busy.clone());
    let spawned = std::thread::Builder::new()
        .name("admin-request".into())
        .spawn(move || {
            answer(rq, &state);
            done.fetch_sub(1, Ordering::SeqCst);
        });
    match spawned {
        Ok(h) => Some(h),
        Err(e) => {
            busy.fetch_sub(1, Ordering::SeqCst);
            warn!(error = %e, "cannot start an admin request thread");
            None
        }
    }
}

/// Reads `rq`'s body, routes it and writes the answer.
fn answer(mut rq: tiny_http::Request, state: &BrokerState) {
    let received_ms = crate::shell::wall_ms();
    let response = match read_body(&mut rq) {
        Ok(body) => route(
            &Request::new(rq.method().as_str(), rq.url(), body, received_ms),
            state,
        ),
        Err(refusal) => refusal,
    };
    reply(rq, response);
}

/// The whole body, or the answer that refuses it: 413 when it is over [`MAX_BODY`], 400 when
/// it does not arrive whole within [`BODY_DEADLINE`].
fn read_body(rq: &mut tiny_http::Request) -> Result<Vec<u8>, Response> {
    if rq.body_length().is_some_and(|n| n > MAX_BODY) {
        return Err(too_large());
    }
    let started = Instant::now();
    let mut body = Vec::with_capacity(rq.body_length().unwrap_or(0));
    let mut chunk = [0u8; 8192];
    let reader = rq.as_reader();
    loop {
        if started.elapsed() > BODY_DEADLINE {
            return Err(Response::json_error(
                400,
                "bad request: the body is too slow",
            ));
        }
        match reader.read(&mut chunk) {
            Ok(0) => return Ok(body),
            Ok(n) if body.len() + n > MAX_BODY => return Err(too_large()),
            Ok(n) => body.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(Response::json_error(
                    400,
                    &format!("bad request: the body did not arrive whole: {e}"),
                ))
            }
        }
    }
}

fn too_large() -> Response {
    Response::json_error(413, &format!("request body over {MAX_BODY} bytes"))
}

/// Writes `r` as `rq`'s answer, always with a `Content-Length` (never chunked).
fn reply(rq: tiny_http::Request, r: Response) {
    let mut out = tiny_http::Response::from_data(r.body)
        .with_status_code(r.status)
        .with_chunked_threshold(usize::MAX);
    let headers = std::iter::once(("Content-Type", r.content_type.to_owned()))
        .chain(r.headers.iter().map(|(k, v)| (k.as_str(), header_value(v))));
    for (name, value) in headers {
        match tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes()) {
            Ok(h) => out.add_header(h),
            Err(()) => debug!(
                header = name,
                "an admin response header is not ASCII; left out"
            ),
        }
    }
    if let Err(e) = rq.respond(out) {
        debug!(error = %e, "the admin response could not be written");
    }
}

/// A header value as HTTP can carry it: control characters (CR and LF, which would end the
/// header and let a message's key or property forge more) become spaces; characters beyond
/// ASCII become `?` (`tiny_http` writes ASCII headers only).
fn header_value(v: &str) -> String {
    v.chars()
        .map(|c| match c {
            c if c.is_ascii_control() => ' ',
            c if c.is_ascii() => c,
            _ => '?',
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::header_value;

    #[test]
    fn header_values_cannot_end_the_header() {
        assert_eq!(header_value("a\r\nX-Evil: 1"), "a  X-Evil: 1");
        assert_eq!(header_value("clé"), "cl?");
        assert_eq!(header_value("plain-1"), "plain-1");
    }
}
