//! Reading messages through the admin API (`pulsar-admin topics get-message-by-id`,
//! `peek-messages`, `examine-message`, `get-message-id`, `last-message-id`): a stored entry is
//! answered as Pulsar answers it, its payload as the body and its metadata in `X-Pulsar-*`
//! headers, which Pulsar's admin client turns back into messages (splitting a batch itself).

use base64::Engine as _;
use cursor::Position;
use wire::proto::CompressionType;

use super::{json, Response};
use crate::stats::rfc3339;
use crate::topic::{Subscription, Topic};

/// The entry at `p` as a message response; 404 when there is none.
pub(super) fn entry(t: &Topic, p: Position) -> Response {
    let section = match t.payload(p) {
        Ok(Some(section)) => section,
        Ok(None) => return Response::json_error(404, "Message not found"),
        Err(e) => return Response::json_error(500, &format!("entry {p} could not be read: {e}")),
    };
    let payload = match wire::parse_section(&section) {
        Ok(m) => m,
        Err(e) => return Response::json_error(500, &format!("entry {p} does not parse: {e}")),
    };
    let mut h = headers(p, &payload.metadata);
    // A header carries neither a line break nor a name that is not a token.
    h.retain(|(name, _)| {
        !name.is_empty() && name.bytes().all(|b| b.is_ascii_graphic() && b != b':')
    });
    for (_, value) in &mut h {
        value.retain(|c| !c.is_control());
    }
    let mut r = Response::new(200, "application/octet-stream", payload.body().to_vec());
    r.headers = h;
    r
}

/// The `X-Pulsar-*` headers of the message at `p` with metadata `m` (Pulsar's names).
fn headers(p: Position, m: &wire::proto::MessageMetadata) -> Vec<(String, String)> {
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let mut h: Vec<(String, String)> = vec![
        (
            "X-Pulsar-Message-ID".into(),
            format!("{}:{}", p.ledger_id, p.entry_id),
        ),
        ("X-Pulsar-publish-time".into(), rfc3339(m.publish_time)),
        ("X-Pulsar-producer-name".into(), m.producer_name.clone()),
        ("X-Pulsar-sequence-id".into(), m.sequence_id.to_string()),
    ];
    let mut add = |name: &str, value: Option<String>| {
        if let Some(v) = value {
            h.push((name.to_owned(), v));
        }
    };
    add(
        "X-Pulsar-event-time",
        m.event_time.filter(|t| *t > 0).map(rfc3339),
    );
    add(
        "X-Pulsar-deliver-at-time",
        m.deliver_at_time.map(|t| rfc3339(t.max(0) as u64)),
    );
    add("X-Pulsar-partition-key", m.partition_key.clone());
    add(
        "X-Pulsar-partition-key-b64-encoded",
        m.partition_key_b64_encoded
            .filter(|b| *b)
            .map(|b| b.to_string()),
    );
    add(
        "X-Pulsar-Base64-ordering-key",
        m.ordering_key.as_deref().map(b64),
    );
    add(
        "X-Pulsar-Base64-schema-version-b64encoded",
        m.schema_version.as_deref().map(b64),
    );
    let compression = m.compression();
    if compression != CompressionType::None {
        add(
            "X-Pulsar-compression",
            Some(compression.as_str_name().to_owned()),
        );
        add(
            "X-Pulsar-uncompressed-size",
            m.uncompressed_size.map(|n| n.to_string()),
        );
    }
    add(
        "X-Pulsar-num-batch-message",
        m.num_messages_in_batch.map(|n| n.to_string()),
    );
    add("X-Pulsar-uuid", m.uuid.clone());
    add(
        "X-Pulsar-num-chunks-from-msg",
        m.num_chunks_from_msg.map(|n| n.to_string()),
    );
    add(
        "X-Pulsar-total-chunk-msg-size",
        m.total_chunk_msg_size.map(|n| n.to_string()),
    );
    add("X-Pulsar-chunk-id", m.chunk_id.map(|n| n.to_string()));
    add(
        "X-Pulsar-null-value",
        m.null_value.filter(|b| *b).map(|b| b.to_string()),
    );
    h.extend(property_headers(m));
    h
}

/// A message's properties as headers: one JSON object (`X-Pulsar-PROPERTY`, what Pulsar's 4.x
/// admin clients read) and one header per property (what older ones read).
fn property_headers(m: &wire::proto::MessageMetadata) -> Vec<(String, String)> {
    if m.properties.is_empty() {
        return Vec::new();
    }
    let all: serde_json::Map<String, serde_json::Value> = m
        .properties
        .iter()
        .map(|kv| (kv.key.clone(), serde_json::Value::String(kv.value.clone())))
        .collect();
    let mut h = vec![(
        "X-Pulsar-PROPERTY".to_owned(),
        serde_json::Value::Object(all).to_string(),
    )];
    for kv in &m.properties {
        h.push((format!("X-Pulsar-PROPERTY-{}", kv.key), kv.value.clone()));
    }
    h
}

/// `…/subscription/{sub}/position/{n}`: the `n`th (from 1) entry of the subscription's
/// backlog that is not acknowledged.
pub(super) fn peek(t: &Topic, s: &Subscription, n: u64) -> Response {
    if n == 0 {
        return Response::json_error(412, "messagePosition must be at least 1");
    }
    let view = s.runtime.cursor_view();
    let acked = s.runtime.acked_ranges();
    let nth = t
        .positions_between(Some(view.mark_delete), t.last_position())
        .into_iter()
        .filter(|p| !acked.iter().any(|(a, b)| a <= p && p <= b))
        .nth((n - 1) as usize);
    match nth {
        Some(p) => entry(t, p),
        None => Response::json_error(404, "No message found at that position"),
    }
}

/// `…/examinemessage?initialPosition=earliest|latest&messagePosition=N`: the `N`th (from 1)
/// entry counted from the first, or back from the last.
pub(super) fn examine(t: &Topic, latest: bool, n: u64) -> Response {
    if n == 0 {
        return Response::json_error(412, "messagePosition must be at least 1");
    }
    let all = t.positions_between(None, t.last_position());
    let i = (n - 1) as usize;
    let p = if latest {
        all.len().checked_sub(i + 1).map(|j| all[j])
    } else {
        all.get(i).copied()
    };
    match p {
        Some(p) => entry(t, p),
        None => Response::json_error(404, "No message found at that position"),
    }
}

/// A position as Pulsar's `MessageIdImpl` JSON.
pub(super) fn message_id(p: Position) -> serde_json::Value {
    serde_json::json!({
        "ledgerId": p.ledger_id as i64,
        "entryId": if p.entry_id == u64::MAX { -1 } else { p.entry_id as i64 },
        "partitionIndex": -1,
        "batchIndex": -1,
    })
}

/// `…/lastMessageId`: the last entry (the position before the first when there is none).
pub(super) fn last_message_id(t: &Topic) -> Response {
    json(200, &message_id(t.last_position()))
}

/// `…/messageid/{timestamp}`: the first entry published at or after `ms`.
pub(super) fn at_time(t: &Topic, ms: u64) -> Response {
    let p = t.position_at_time(ms);
    if p > t.last_position() {
        return Response::json_error(404, "Message ID not found");
    }
    json(200, &message_id(p))
}
