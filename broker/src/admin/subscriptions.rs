//! `…/{topic}/subscription/{sub}…`: create and delete a subscription, and the operations on
//! one (skip, clear backlog, expire, reset cursor, and our `whyBlocked`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use cursor::Position;
use dispatcher::AdminOp;
use tracing::info;

use super::{json, no_content, parse_count, parse_query, topic_error, Request, Response};
use crate::state::BrokerState;
use crate::topic::{InitialPosition, SubKind, Subscription, Topic, TopicName};

/// `PUT …/{topic}/subscription/{sub}` with an optional message id (default: latest) creates a
/// durable subscription without consumers (it takes the type of its first subscribe);
/// `DELETE` (`?force=true` closes its consumers first) removes it. On a partitioned topic,
/// on every partition.
pub(super) fn create_or_delete(
    req: &Request,
    state: &BrokerState,
    name: &TopicName,
    sub: &str,
) -> Response {
    let topics = match topics_of(state, name) {
        Ok(t) => t,
        Err(r) => return r,
    };
    if req.method == "PUT" {
        let target = if req.body.iter().all(u8::is_ascii_whitespace) {
            Target::Latest
        } else {
            match message_id(&req.body) {
                Ok(t) => t,
                Err(r) => return r,
            }
        };
        if topics.iter().any(|t| t.get_subscription(sub).is_some()) {
            return Response::json_error(409, "Subscription already exists for topic");
        }
        for t in &topics {
            if let Err(r) = create(t, sub, &target) {
                return r;
            }
        }
        info!(topic = %name.full(), subscription = sub, "admin create subscription");
        return no_content();
    }
    let force = parse_query(&req.query)
        .get("force")
        .is_some_and(|v| v == "true");
    let subs: Vec<(&Arc<Topic>, Arc<Subscription>)> = topics
        .iter()
        .filter_map(|t| Some((t, t.get_subscription(sub)?)))
        .collect();
    if subs.is_empty() {
        return Response::json_error(404, "Subscription not found");
    }
    if !force
        && subs
            .iter()
            .any(|(_, s)| !crate::sync::lock(&s.consumers).is_empty())
    {
        return Response::json_error(412, "Subscription has active connected consumers");
    }
    for (t, s) in subs {
        state.kick_subscription(&s);
        drop(s);
        drop(t.remove_subscription(sub));
    }
    info!(topic = %name.full(), subscription = sub, "admin delete subscription");
    no_content()
}

/// The topic, or a partitioned topic's partitions (opened if need be).
fn topics_of(state: &BrokerState, name: &TopicName) -> Result<Vec<Arc<Topic>>, Response> {
    let n = state.partition_count(name).map_err(topic_error)?;
    if n == 0 {
        return state
            .existing_topic(&name.full())
            .map(|t| vec![t])
            .ok_or_else(|| Response::json_error(404, "Topic not found"));
    }
    (0..n)
        .map(|i| {
            let p = TopicName::parse(&name.partition(i))
                .map_err(|e| Response::json_error(500, &e.to_string()))?;
            state.topic_for_client(&p).map_err(topic_error)
        })
        .collect()
}

fn create(t: &Topic, sub: &str, target: &Target) -> Result<(), Response> {
    let initial = match target {
        Target::Earliest => InitialPosition::Earliest,
        _ => InitialPosition::Latest,
    };
    let s = t
        .subscription(sub, SubKind::Shared, initial)
        .map_err(|e| Response::json_error(500, &e.to_string()))?;
    if let Target::At(p) = target {
        t.reset(&s, *p);
    }
    Ok(())
}

pub(super) fn route(
    req: &Request,
    state: &BrokerState,
    t: &Topic,
    s: &Subscription,
    op: &[&str],
) -> Response {
    let get = req.method == "GET";
    let post = req.method == "POST";
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
        ["resetcursor"] if post => match message_id_target(t, &req.body) {
            Ok(target) => {
                reset_to(state, t, s, target);
                no_content()
            }
            Err(r) => r,
        },
        ["whyBlocked"] if get => why_blocked(req, s),
        ["position", n] if get => match parse_count(n) {
            Ok(n) => super::messages::peek(t, s, n),
            Err(r) => r,
        },
        _ => super::no_route(req),
    }
}

/// Where a message-id body points: `{"ledgerId": L, "entryId": E, "excluded": B}` (a
/// negative entry id is the ledger's start; an excluded id starts after it). Pulsar's
/// `MessageId.earliest` (ledger -1) and `MessageId.latest` (ledger `i64::MAX`) are the two
/// ends.
enum Target {
    Earliest,
    Latest,
    At(Position),
}

fn message_id(body: &[u8]) -> Result<Target, Response> {
    let v: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| Response::json_error(400, &format!("body is not JSON: {e}")))?;
    let (Some(l), Some(e)) = (
        v.get("ledgerId").and_then(serde_json::Value::as_i64),
        v.get("entryId").and_then(serde_json::Value::as_i64),
    ) else {
        return Err(Response::json_error(
            400,
            "body must be a message id: {\"ledgerId\": L, \"entryId\": E}",
        ));
    };
    // Pulsar's `ResetCursorData` serialises its `isExcluded` as `excluded`; both are read.
    let excluded = ["excluded", "isExcluded"]
        .iter()
        .find_map(|k| v.get(*k).and_then(serde_json::Value::as_bool))
        .unwrap_or(false);
    Ok(match (l, e) {
        (l, _) if l < 0 => Target::Earliest,
        (i64::MAX, _) => Target::Latest,
        (l, e) if e < 0 => Target::At(Position::new(l as u64, 0)),
        (l, e) if excluded => Target::At(Position::new(l as u64, e as u64).next()),
        (l, e) => Target::At(Position::new(l as u64, e as u64)),
    })
}

/// The position a reset-cursor body names.
fn message_id_target(t: &Topic, body: &[u8]) -> Result<Position, Response> {
    Ok(match message_id(body)? {
        Target::Earliest => Position::new(0, 0),
        Target::Latest => t.last_position().next(),
        Target::At(p) => p,
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
