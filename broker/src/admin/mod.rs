//! The admin REST API on `--admin`: which answer each request gets. A [`Request`] is a method,
//! a path, a query and a body, and [`route`] answers it; [`http`] cuts a connection's bytes
//! into requests and encodes answers (sans IO); the shell ([`crate::shell::http`]) owns the
//! sockets, threads and timeouts.
//!
//! Pulsar's admin v2 paths for the cluster, tenants and namespaces (`tenants.rs`), topics,
//! partitioned topics, their stats and their subscriptions' operations (`topics.rs`), our
//! `whyBlocked` extension, and Prometheus metrics at `/metrics`. Errors are JSON
//! `{"reason": …}` with Pulsar's status codes (the table in `docs/BROKER.md`).

use crate::state::{BrokerState, TopicError};

mod brokers;
pub(crate) mod http;
mod lookup;
mod messages;
mod schemas;
mod subscriptions;
mod tenants;
mod topics;

/// One parsed request.
#[derive(Debug)]
pub(crate) struct Request {
    pub method: String,
    pub path: String,
    pub query: String,
    pub body: Vec<u8>,
    /// When it arrived (ms since the Unix epoch): "now" for expiry.
    pub received_ms: u64,
    /// The local address the client reached, when the shell knows it: an HTTP lookup
    /// answers the service URL on that host when the broker listens on every address.
    pub reached: Option<std::net::IpAddr>,
}

/// One response.
#[derive(Debug, PartialEq, Eq)]
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

impl Request {
    /// A request for `target` (a path with an optional `?query`), received at `received_ms`.
    pub(crate) fn new(method: &str, target: &str, body: Vec<u8>, received_ms: u64) -> Request {
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        Request {
            method: method.to_owned(),
            path: path.to_owned(),
            query: query.to_owned(),
            body,
            received_ms,
            reached: None,
        }
    }
}

/// The answer to `bytes` as a whole connection's input (the client sent them and closed): the
/// first request's, a refusal's, or a 400 when no request is whole.
pub(crate) fn respond(bytes: &[u8], state: &BrokerState, now_ms: u64) -> Response {
    let mut framing = http::Framing::default();
    framing.push(bytes);
    loop {
        match framing.next() {
            http::Next::Request(p) => {
                return route(&Request::new(&p.method, &p.target, p.body, now_ms), state)
            }
            http::Next::Continue => {}
            http::Next::Refuse(r) => return r,
            http::Next::More => {
                return Response::json_error(
                    400,
                    "bad request: connection closed before the request was whole",
                )
            }
        }
    }
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
        ["lookup", "v2", "topic", rest @ ..] => lookup::route(req, state, rest),
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

/// A topic operation's refusal with the status Pulsar answers.
pub(super) fn topic_error(e: TopicError) -> Response {
    let status = match &e {
        TopicError::Metadata(m) => m.status(),
        TopicError::NotFound(_) => 404,
        TopicError::Partitioned(_) => 409,
        TopicError::IllegalPartition { .. } | TopicError::PartitionName => 412,
        TopicError::Storage(_) => 500,
    };
    Response::json_error(status, &e.to_string())
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
