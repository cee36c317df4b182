//! The admin HTTP server on `--admin`: HTTP/1.1, one request per connection.
//!
//! Pulsar's admin v2 paths for the cluster, tenants and namespaces (`tenants.rs`), topics,
//! partitioned topics, their stats and their subscriptions' operations (`topics.rs`), our
//! `whyBlocked` extension, and Prometheus metrics at `/metrics`. Errors are JSON
//! `{"reason": …}` with Pulsar's status codes (the table in `docs/BROKER.md`). Requests are read with
//! a deadline and a size cap, so a slow or hostile client cannot hold the thread; std only
//! (one request per connection, `Connection: close`): the admin surface is a handful of paths
//! and a dependency-free server is enough for it.

use std::io;

use crate::state::BrokerState;

mod brokers;
mod messages;
mod schemas;
mod subscriptions;
mod tenants;
mod topics;

/// Largest request head (and body) read.
const MAX_REQUEST: usize = 64 * 1024;

/// One parsed request.
#[derive(Debug)]
pub(crate) struct Request {
    pub method: String,
    pub path: String,
    pub query: String,
    pub body: Vec<u8>,
    /// When it arrived (ms since the Unix epoch; the shell sets it, 0 from [`parse_request`]).
    pub received_ms: u64,
}

/// One response.
#[derive(Debug)]
pub(crate) struct Response {
    pub status: u16,
    pub content_type: &'static str,
    /// Headers beyond the content type and length (a message read's `X-Pulsar-*`).
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// A response with no extra header.
    pub(crate) fn new(
        status: u16,
        content_type: &'static str,
        body: impl Into<Vec<u8>>,
    ) -> Response {
        Response {
            status,
            content_type,
            headers: Vec::new(),
            body: body.into(),
        }
    }

    pub(crate) fn json_error(status: u16, reason: &str) -> Response {
        let body = format!("{{\"reason\":{}}}", json_string(reason));
        Response::new(status, "application/json", body)
    }
}

/// A JSON string literal.
pub(crate) fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The response to `bytes` as a whole connection's input (the client sent them and closed):
/// an unfinished request is a 400, as a closed connection is in [`handle`].
pub(crate) fn respond(bytes: &[u8], state: &BrokerState, now_ms: u64) -> Response {
    match parse_request(bytes) {
        Ok(Some(mut req)) => {
            req.received_ms = now_ms;
            route(&req, state)
        }
        Ok(None) => Response::json_error(
            400,
            "bad request: connection closed before the request was whole",
        ),
        Err(e) => Response::json_error(400, &format!("bad request: {e}")),
    }
}

/// The request in `buf` once it is whole (`None`: read more), or why it never will be: a head
/// or body over [`MAX_REQUEST`], a head that is not UTF-8, a bad request line or a bad
/// `Content-Length`. Bytes past the declared body are ignored (one request per connection).
pub(crate) fn parse_request(buf: &[u8]) -> io::Result<Option<Request>> {
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_owned());
    let Some(head_end) = find(buf, b"\r\n\r\n") else {
        if buf.len() > MAX_REQUEST {
            return Err(bad("request head too large"));
        }
        return Ok(None);
    };
    if head_end > MAX_REQUEST {
        return Err(bad("request head too large"));
    }
    let head =
        std::str::from_utf8(&buf[..head_end]).map_err(|_| bad("request head is not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default();
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target)) = (parts.next(), parts.next()) else {
        return Err(bad("bad request line"));
    };
    let mut length = 0usize;
    for l in lines {
        if let Some((k, v)) = l.split_once(':') {
            if k.trim().eq_ignore_ascii_case("content-length") {
                length = v.trim().parse().map_err(|_| bad("bad Content-Length"))?;
            }
        }
    }
    if length > MAX_REQUEST {
        return Err(bad("request body too large"));
    }
    let Some(body) = buf.get(head_end + 4..head_end + 4 + length) else {
        return Ok(None);
    };
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p.to_owned(), q.to_owned()),
        None => (target.to_owned(), String::new()),
    };
    Ok(Some(Request {
        method: method.to_owned(),
        path,
        query,
        body: body.to_vec(),
        received_ms: 0,
    }))
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The response to one request; `req.received_ms` is "now" for expiry.
pub(crate) fn route(req: &Request, state: &BrokerState) -> Response {
    let segs: Vec<String> = req
        .path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(percent_decode)
        .collect();
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    if !matches!(req.method.as_str(), "GET" | "POST" | "PUT" | "DELETE") {
        return Response::json_error(405, "method not allowed");
    }
    let get = req.method == "GET";
    match segs.as_slice() {
        [] if get => Response::new(
            200,
            "text/plain",
            "key-ordered broker: Pulsar binary protocol on the service URL, admin v2 paths here\n",
        ),
        ["metrics"] if get => Response::new(
            200,
            "text/plain; version=0.0.4",
            crate::stats::metrics(state),
        ),
        ["admin", "v2", "clusters", rest @ ..] => tenants::clusters(req, state, rest),
        ["admin", "v2", "brokers", rest @ ..] => brokers::route(req, state, rest),
        ["admin", "v2", "schemas", rest @ ..] => schemas::route(req, state, rest),
        ["admin", "v2", "tenants", rest @ ..] => tenants::tenants(req, state, rest),
        ["admin", "v2", "namespaces", rest @ ..] => tenants::namespaces(req, state, rest),
        // The Java admin's topic list asks for non-persistent topics too: none are served.
        ["admin", "v2", "non-persistent", t, ns]
        | ["admin", "v2", "non-persistent", t, ns, "partitioned"]
            if get =>
        {
            match state.metadata().check_namespace(t, ns) {
                Ok(()) => json(200, &Vec::<String>::new()),
                Err(e) => Response::json_error(e.status(), &e.to_string()),
            }
        }
        ["admin", "v2", "persistent", rest @ ..] => topics::route(req, state, rest),
        _ => no_route(req),
    }
}

/// The answer to a path this server does not serve (with that method).
fn no_route(req: &Request) -> Response {
    Response::json_error(404, &format!("no such path: {} {}", req.method, req.path))
}

pub(super) fn no_content() -> Response {
    Response::new(204, "application/json", Vec::new())
}

pub(super) fn json<T: serde::Serialize>(status: u16, v: &T) -> Response {
    match serde_json::to_string_pretty(v) {
        Ok(body) => Response::new(status, "application/json", body),
        Err(e) => Response::json_error(500, &format!("cannot serialise: {e}")),
    }
}

/// A non-negative count or time from a path segment: 400 when it is not a number, 412 when it
/// is negative (Pulsar answers invalid values with Precondition Failed).
pub(super) fn parse_count(s: &str) -> Result<u64, Response> {
    match s.parse::<i64>() {
        Ok(n) if n >= 0 => Ok(n as u64),
        Ok(_) => Err(Response::json_error(
            412,
            &format!("`{s}` must not be negative"),
        )),
        Err(_) => Err(Response::json_error(400, &format!("`{s}` is not a number"))),
    }
}

/// A query string's pairs, form-decoded (`+` is a space), the last of a repeated key winning.
pub(super) fn parse_query(q: &str) -> std::collections::HashMap<String, String> {
    form_urlencoded::parse(q.as_bytes())
        .filter(|(k, _)| !k.is_empty())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// A path segment's `%XX` escapes decoded (a `+` stays a `+`, as in any URL path); malformed
/// escapes stay as they are, bytes that are not UTF-8 become U+FFFD.
fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decoding() {
        assert_eq!(percent_decode("a%2Fb+c"), "a/b+c", "a + in a path is a +");
        assert_eq!(parse_query("key=a+b%2Fc&hash=1")["key"], "a b/c");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz"), "%zz");
        assert_eq!(percent_decode("%4"), "%4");
        let q = parse_query("key=k%201&hash=7&flag");
        assert_eq!(q["key"], "k 1");
        assert_eq!(q["hash"], "7");
        assert!(q.contains_key("flag"));
    }

    #[test]
    fn counts() {
        assert_eq!(parse_count("12").unwrap(), 12);
        assert_eq!(parse_count("-1").unwrap_err().status, 412);
        assert_eq!(parse_count("x").unwrap_err().status, 400);
    }
}
