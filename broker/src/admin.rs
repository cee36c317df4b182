//! The admin HTTP server on `--admin`: HTTP/1.1, one request per connection.
//!
//! Pulsar's admin v2 paths for one topic's stats and its subscriptions' operations, our
//! `whyBlocked` extension, and Prometheus metrics at `/metrics`. Errors are JSON
//! `{"reason": …}` with Pulsar's status codes (404 unknown topic or subscription, 400 a value
//! that does not parse, 412 a value out of range, 405 a wrong method). Requests are read with
//! a deadline and a size cap, so a slow or hostile client cannot hold the thread; std only
//! (one request per connection, `Connection: close`): the admin surface is a handful of paths
//! and a dependency-free server is enough for it.

use std::io;
use std::sync::atomic::Ordering;

use cursor::Position;
use dispatcher::AdminOp;
use tracing::info;

use crate::state::BrokerState;
use crate::topic::{Subscription, Topic};

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
    pub body: String,
}

impl Response {
    pub(crate) fn json_error(status: u16, reason: &str) -> Response {
        Response {
            status,
            content_type: "application/json",
            body: format!("{{\"reason\":{}}}", json_string(reason)),
        }
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
    let get = req.method == "GET";
    let post = req.method == "POST";
    let put = req.method == "PUT";
    match segs.as_slice() {
        [] if get => Response {
            status: 200,
            content_type: "text/plain",
            body: "key-ordered broker: Pulsar binary protocol on the service URL, admin v2 paths here\n"
                .into(),
        },
        ["metrics"] if get => Response {
            status: 200,
            content_type: "text/plain; version=0.0.4",
            body: crate::stats::metrics(state),
        },
        ["admin", "v2", "persistent", tenant, ns] if get => {
            json(200, &state.topic_names_in(&format!("{tenant}/{ns}")))
        }
        // Readiness checks and admin clients ask these first: one cluster, no non-persistent
        // topics (they are not served), no partitioned topics (not served either).
        ["admin", "v2", "clusters"] if get => json(200, &["standalone"]),
        ["admin", "v2", "non-persistent", _, _] if get => json(200, &Vec::<String>::new()),
        ["admin", "v2", "persistent", _, _, "partitioned"] if get => {
            json(200, &Vec::<String>::new())
        }
        ["admin", "v2", "persistent", _, _, _, "partitions"] if put => Response::json_error(
            412,
            "partitioned topics are not supported by this broker (create a non-partitioned topic)",
        ),
        ["admin", "v2", "persistent", tenant, ns, topic] if put => {
            create_topic(state, &format!("persistent://{tenant}/{ns}/{topic}"))
        }
        ["admin", "v2", "persistent", tenant, ns, topic, rest @ ..] => {
            let full = format!("persistent://{tenant}/{ns}/{topic}");
            let Some(t) = state.existing_topic(&full) else {
                return Response::json_error(404, "Topic not found");
            };
            topic_route(req, state, &t, rest, get, post)
        }
        _ if !get && !post => Response::json_error(405, "method not allowed"),
        _ => Response::json_error(404, &format!("no such path: {} {}", req.method, req.path)),
    }
}

/// `PUT …/{topic}`: creates a non-partitioned topic; 409 when it exists, as Pulsar answers.
fn create_topic(state: &BrokerState, full: &str) -> Response {
    if state.existing_topic(full).is_some() {
        return Response::json_error(409, "This topic already exists");
    }
    let name = match crate::topic::TopicName::parse(full) {
        Ok(n) => n,
        Err(e) => return Response::json_error(412, &e.to_string()),
    };
    match state.topic(&name) {
        Ok(_) => Response {
            status: 204,
            content_type: "application/json",
            body: String::new(),
        },
        Err(e) => Response::json_error(500, &e.to_string()),
    }
}

fn topic_route(
    req: &Request,
    state: &BrokerState,
    t: &Topic,
    rest: &[&str],
    get: bool,
    post: bool,
) -> Response {
    match rest {
        ["stats"] if get => json(200, &crate::stats::topic_stats(t)),
        ["internalStats"] if get => json(200, &crate::stats::internal_stats(t)),
        ["subscriptions"] if get => {
            let names: Vec<String> = t.subscriptions().iter().map(|s| s.name.clone()).collect();
            json(200, &names)
        }
        ["subscription", sub, op @ ..] => {
            let Some(s) = t.get_subscription(sub) else {
                return Response::json_error(404, "Subscription not found");
            };
            subscription_route(req, state, t, &s, op, get, post)
        }
        _ if !get && !post => Response::json_error(405, "method not allowed"),
        _ => Response::json_error(404, &format!("no such path: {} {}", req.method, req.path)),
    }
}

fn subscription_route(
    req: &Request,
    state: &BrokerState,
    t: &Topic,
    s: &Subscription,
    op: &[&str],
    get: bool,
    post: bool,
) -> Response {
    match op {
        ["skip", n] if post => match parse_count(n) {
            Ok(n) => {
                let mv = t.move_cursor(s, AdminOp::Skip(n));
                info!(topic = %t.name, subscription = %s.name, skip = n, moved = mv.is_some(), "admin skip");
                no_content()
            }
            Err(r) => r,
        },
        ["skip_all"] if post => {
            let mv = t.move_cursor(s, AdminOp::ClearBacklog);
            info!(topic = %t.name, subscription = %s.name, moved = mv.is_some(), "admin clear backlog");
            no_content()
        }
        ["expireMessages", secs] if post => match parse_count(secs) {
            Ok(secs) => {
                let now = req.received_ms;
                let cutoff = now.saturating_sub(secs.saturating_mul(1000));
                let mv = t.move_cursor(s, AdminOp::Expire(cutoff));
                s.last_expire.store(now, Ordering::Relaxed);
                info!(topic = %t.name, subscription = %s.name, expire_secs = secs, moved = mv.is_some(), "admin expire");
                no_content()
            }
            Err(r) => r,
        },
        ["resetcursor", ts] if post => match parse_count(ts) {
            Ok(ts) => {
                let target = t.position_at_time(ts);
                reset_to(state, t, s, target);
                no_content()
            }
            Err(r) => r,
        },
        ["resetcursor"] if post => match message_id_target(&req.body) {
            Ok(target) => {
                reset_to(state, t, s, target);
                no_content()
            }
            Err(r) => r,
        },
        ["whyBlocked"] if get => why_blocked(req, s),
        _ if !get && !post => Response::json_error(405, "method not allowed"),
        _ => Response::json_error(404, &format!("no such path: {} {}", req.method, req.path)),
    }
}

/// The position a reset-cursor body names: `{"ledgerId": L, "entryId": E, "isExcluded": B}`
/// (a negative entry id is the ledger's start; an excluded id starts after it).
fn message_id_target(body: &[u8]) -> Result<Position, Response> {
    let v: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| Response::json_error(400, &format!("body is not JSON: {e}")))?;
    let (Some(l), Some(e)) = (
        v.get("ledgerId").and_then(serde_json::Value::as_u64),
        v.get("entryId").and_then(serde_json::Value::as_i64),
    ) else {
        return Err(Response::json_error(
            400,
            "body must be a message id: {\"ledgerId\": L, \"entryId\": E}",
        ));
    };
    let excluded = v
        .get("isExcluded")
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false);
    Ok(if e < 0 {
        Position::new(l, 0)
    } else if excluded {
        Position::new(l, e as u64).next()
    } else {
        Position::new(l, e as u64)
    })
}

/// `GET …/whyBlocked?key=K` or `?hash=H`: what holds the key's next entry back.
fn why_blocked(req: &Request, s: &Subscription) -> Response {
    let q = parse_query(&req.query);
    let (reason, hash) = if let Some(h) = q.get("hash") {
        match h.parse::<u32>() {
            Ok(h) if h <= 65_535 => (s.runtime.why_blocked(h), Some(h)),
            _ => return Response::json_error(400, "hash must be a number from 0 to 65535"),
        }
    } else if let Some(k) = q.get("key") {
        let range = match s.kind {
            crate::topic::SubKind::KeyShared(dispatcher::KeySharedConfig {
                mode: dispatcher::KeySharedMode::ConsistentHashing { .. },
                ..
            }) => dispatcher::CONSISTENT_RANGE,
            _ => dispatcher::FULL_RANGE,
        };
        let hash = dispatcher::slot(dispatcher::key_hash31(k.as_bytes()), range);
        (s.runtime.why_blocked_key(k.as_bytes()), Some(hash))
    } else {
        return Response::json_error(400, "give ?key=K or ?hash=H");
    };
    match reason {
        Some(r) => json(200, &crate::stats::why_blocked_json(r, hash)),
        None => Response::json_error(503, "the subscription's dispatcher is not running"),
    }
}

/// Seek the subscription, as Pulsar's reset-cursor does: the consumers are closed (their
/// clients subscribe again), then the cursor moves.
fn reset_to(state: &BrokerState, t: &Topic, s: &Subscription, target: Position) {
    state.kick_subscription(s);
    let mv = t.reset(s, target);
    info!(topic = %t.name, subscription = %s.name, to = %target, moved = mv.is_some(), "admin reset cursor");
}

fn no_content() -> Response {
    Response {
        status: 204,
        content_type: "application/json",
        body: String::new(),
    }
}

fn json<T: serde::Serialize>(status: u16, v: &T) -> Response {
    match serde_json::to_string_pretty(v) {
        Ok(body) => Response {
            status,
            content_type: "application/json",
            body,
        },
        Err(e) => Response::json_error(500, &format!("cannot serialise: {e}")),
    }
}

/// A non-negative count or time from a path segment: 400 when it is not a number, 412 when it
/// is negative (Pulsar answers invalid values with Precondition Failed).
fn parse_count(s: &str) -> Result<u64, Response> {
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
fn parse_query(q: &str) -> std::collections::HashMap<String, String> {
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
