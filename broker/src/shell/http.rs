//! The admin HTTP shell: accepts on `--admin`, reads one request per connection with a
//! deadline and a size cap (a slow or hostile client cannot hold the thread), and writes the
//! response [`admin::route`](crate::admin) decides.

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::debug;

use crate::admin::{parse_request, route, Request, Response};
use crate::state::BrokerState;

/// How long one request may take to arrive.
const REQUEST_DEADLINE: Duration = Duration::from_secs(2);

/// Serves admin requests until the broker closes.
pub(crate) fn serve(listener: TcpListener, state: Arc<BrokerState>) {
    while !state.closing.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => {
                if let Err(e) = handle(stream, &state) {
                    debug!(error = %e, "admin request failed");
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => {
                debug!(error = %e, "admin accept failed");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

fn handle(mut stream: TcpStream, state: &BrokerState) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    let response = match read_request(&mut stream) {
        Ok(mut req) => {
            req.received_ms = crate::shell::wall_ms();
            route(&req, state)
        }
        Err(e) => Response::json_error(400, &format!("bad request: {e}")),
    };
    let reason = match response.status {
        200 => "OK",
        204 => "No Content",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        409 => "Conflict",
        412 => "Precondition Failed",
        422 => "Unprocessable Entity",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Error",
    };
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
        response.status,
        reason,
        response.content_type,
        response.body.len()
    );
    for (name, value) in &response.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    stream.write_all(&response.body)?;
    stream.flush()
}

/// Reads one request, within [`REQUEST_DEADLINE`].
fn read_request(stream: &mut TcpStream) -> io::Result<Request> {
    let started = Instant::now();
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(req) = parse_request(&buf)? {
            return Ok(req);
        }
        let left = REQUEST_DEADLINE.saturating_sub(started.elapsed());
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "request too slow"));
        }
        stream.set_read_timeout(Some(left))?;
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed before the request was whole",
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}
