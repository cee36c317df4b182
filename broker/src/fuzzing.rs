//! Entry points for the coverage-guided fuzz targets in the repository's `fuzz/` directory
//! (`cargo xtask fuzz`). Not a stable API: hidden from the docs, and only the fuzz targets and
//! their regression tests call it.
//!
//! Each function builds fresh broker state per call (no socket; a subscription's dispatcher
//! thread is stopped when the call returns), so a crashing input reproduces on its own.

use std::path::Path;

use bytes::Bytes;
use wire::proto::MessageMetadata;

use crate::config::BrokerConfig;
use crate::state::BrokerState;
use crate::storage::StorageError;
use crate::topic::{InitialPosition, SubKind, TopicName};

/// The topic [`admin_request`] serves: `persistent://public/default/t`, with six entries
/// (two keys, one keyless) and three subscriptions: `ks` (Key_Shared), `sh` (Shared) and
/// `ex` (Exclusive), all from the earliest entry.
pub const ADMIN_TOPIC: &str = "persistent://public/default/t";

/// Dispatchers that run only when stepped: a fuzz input never starts a thread, and an admin
/// request that asks a dispatcher runs its loop inline.
fn no_threads() -> std::sync::Arc<crate::topic::SteppedRuntimes> {
    std::sync::Arc::new(crate::topic::SteppedRuntimes::default())
}

/// Answers one admin HTTP request given as the raw bytes a client sent (the connection closes
/// after them), against a fresh in-memory broker holding [`ADMIN_TOPIC`]: the server's own
/// framing (head, `Content-Length` or chunked body) and then its routing. Returns the status
/// and the body. Every input must get a status (400 for bytes that are not a whole request),
/// never a panic or a hang.
pub fn admin_request(bytes: &[u8]) -> (u16, String) {
    let state = BrokerState::new(
        BrokerConfig::default(),
        "pulsar://127.0.0.1:6650".into(),
        no_threads(),
    );
    let name = TopicName::parse(ADMIN_TOPIC).expect("a valid topic name");
    let topic = state.topic(&name).expect("an in-memory topic");
    publish_samples(&topic);
    for (sub, kind) in [
        ("ks", SubKind::KeyShared(Default::default())),
        ("sh", SubKind::Shared),
        ("ex", SubKind::Exclusive),
        ("fo", SubKind::Failover),
    ] {
        topic
            .subscription(sub, kind, InitialPosition::Earliest)
            .expect("a new subscription");
    }
    let r = crate::admin::respond(bytes, &state, 1_764_000_000_000);
    (r.status, String::from_utf8_lossy(&r.body).into_owned())
}

/// The admin server's framing of `bytes` fed whole and fed in pieces (of 1 to 16 bytes, the
/// size taken from the first byte) must agree: the same requests, or the same refusal, in
/// the same order (a `100 Continue` asked for only when a body is still to come is left out
/// of the comparison). Returns how they differ, `None` when they agree.
pub fn admin_framing_differs(bytes: &[u8]) -> Option<String> {
    crate::admin::http::pieces_differ(bytes)
}

/// Six entries: keys `a`, `b`, `a`, none, `b`, `a`.
fn publish_samples(topic: &crate::topic::Topic) {
    for (i, key) in ["a", "b", "a", "", "b", "a"].iter().enumerate() {
        let md = MessageMetadata {
            producer_name: "p".into(),
            sequence_id: i as u64,
            publish_time: 1_700_000_000_000 + i as u64,
            partition_key: (!key.is_empty()).then(|| key.to_string()),
            ..Default::default()
        };
        let body = format!("m{i}");
        let info = wire::convert::message_info(&md, body.len()).expect("valid metadata");
        let section: Bytes = wire::encode_section(&md, body.as_bytes()).into();
        topic
            .publish(info.meta, section)
            .expect("an in-memory publish")
            .expect("a topic that is not terminated");
    }
}

/// Writes a small `--data-dir` at `dir` as the broker leaves it: [`ADMIN_TOPIC`] with six
/// entries and a Key_Shared subscription `s` (its type file and cursor file). The seeds of the
/// data-directory fuzz target are made from it.
pub fn write_sample_data_dir(dir: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let cfg = BrokerConfig {
        data_dir: Some(dir.to_path_buf()),
        ..BrokerConfig::default()
    };
    let state = BrokerState::new(cfg, "pulsar://127.0.0.1:6650".into(), no_threads());
    let name = TopicName::parse(ADMIN_TOPIC).expect("a valid topic name");
    let topic = state.topic(&name)?;
    publish_samples(&topic);
    topic.sync()?;
    topic.subscription(
        "s",
        SubKind::KeyShared(Default::default()),
        InitialPosition::Earliest,
    )?;
    Ok(())
}

/// Recovers a `--data-dir` as the broker does at start (every topic's ledger files,
/// subscription files and cursors), then drops it. Returns the number of topics recovered,
/// or the typed error the broker would refuse to start with.
pub fn recover_data_dir(dir: &Path) -> Result<usize, StorageError> {
    let cfg = BrokerConfig {
        data_dir: Some(dir.to_path_buf()),
        ..BrokerConfig::default()
    };
    BrokerState::new(cfg, "pulsar://127.0.0.1:6650".into(), no_threads()).recover_topics()
}

/// The directory name a topic's files live under in a `--data-dir` (`topics/<this>`).
pub fn topic_dir_name(topic: &str) -> String {
    crate::storage::encode_name(topic)
}
