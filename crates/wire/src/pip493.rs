//! PIP-493's proposed key-ordered negative acknowledgement, which the published
//! `PulsarApi.proto` does not have yet: `CommandNegativeAck` as `BaseCommand` type and field 82,
//! and the feature flag `supports_key_ordered_negative_ack` as `FeatureFlags` field 10.
//!
//! ```text
//! message CommandNegativeAck {
//!     required uint64 consumer_id    = 1;
//!     repeated MessageIdData negative_acked = 2;  // nacked: re-send later, hold the key
//!     repeated MessageIdData returned       = 3;  // handed back unprocessed: re-send, no count
//! }
//! ```
//!
//! Both extensions are unknown fields to a peer that does not know them, and every client skips
//! unknown fields. Each is written inside the one message it belongs to: field 82 once in the
//! `BaseCommand`, and field 10 inside the one `FeatureFlags` of the one `CommandConnected`
//! (or `CommandConnect`). Never as a second occurrence of a message field relying on
//! protobuf's merge rule: Pulsar's Java protocol code (LightProto) starts a new message on a
//! second occurrence instead of merging, and then misses every required field of the first.
//! [`decode_frame`](crate::decode_frame) accepts type 82 and puts the decoded command in
//! [`Frame::negative_ack`](crate::Frame::negative_ack). The proposal is open (apache/pulsar pull
//! request 26418); no released client sends it yet.

use prost::Message;

use crate::proto::{base_command, BaseCommand, CommandConnected, FeatureFlags, MessageIdData};

/// `BaseCommand.type` and field number of `CommandNegativeAck`.
pub const NEGATIVE_ACK: i32 = 82;

/// `FeatureFlags` field number of `supports_key_ordered_negative_ack`.
pub const FEATURE_FLAG_FIELD: u32 = 10;

/// PIP-493's `CommandNegativeAck`.
#[derive(Clone, PartialEq, Message)]
pub struct CommandNegativeAck {
    /// The consumer (per connection, as in every consumer command).
    #[prost(uint64, required, tag = "1")]
    pub consumer_id: u64,
    /// Messages the application negatively acknowledged: re-sent later, their key held until.
    #[prost(message, repeated, tag = "2")]
    pub negative_acked: Vec<MessageIdData>,
    /// Messages the client gives back without handing them to the application (later messages
    /// of a nacked key): re-sent without counting a redelivery.
    #[prost(message, repeated, tag = "3")]
    pub returned: Vec<MessageIdData>,
}

/// Field 82 of `BaseCommand`, alone.
#[derive(Clone, PartialEq, Message)]
struct NegativeAckField {
    #[prost(message, optional, tag = "82")]
    negative_ack: Option<CommandNegativeAck>,
}

#[derive(Clone, PartialEq, Message)]
struct FlagField {
    #[prost(bool, optional, tag = "10")]
    supports_key_ordered_negative_ack: Option<bool>,
}

/// `CommandConnect.feature_flags` (field 10), alone.
#[derive(Clone, PartialEq, Message)]
struct ConnectFlags {
    #[prost(message, optional, tag = "10")]
    flags: Option<FlagField>,
}

/// `CommandConnected.feature_flags` (field 4), alone.
#[derive(Clone, PartialEq, Message)]
struct ConnectedFlags {
    #[prost(message, optional, tag = "4")]
    flags: Option<FlagField>,
}

#[derive(Clone, PartialEq, Message)]
struct CommandWithFlags {
    #[prost(message, optional, tag = "2")]
    connect: Option<ConnectFlags>,
    #[prost(message, optional, tag = "3")]
    connected: Option<ConnectedFlags>,
}

/// The `CommandNegativeAck` carried in a command's bytes, if any.
pub(crate) fn decode_negative_ack(cmd_bytes: &[u8]) -> Option<CommandNegativeAck> {
    NegativeAckField::decode(cmd_bytes).ok()?.negative_ack
}

/// Whether a CONNECT or CONNECTED command's bytes carry `supports_key_ordered_negative_ack`.
pub fn supports_negative_ack(cmd_bytes: &[u8]) -> bool {
    let Ok(c) = CommandWithFlags::decode(cmd_bytes) else {
        return false;
    };
    let set = |f: Option<&FlagField>| {
        f.is_some_and(|x| x.supports_key_ordered_negative_ack == Some(true))
    };
    set(c.connect.as_ref().and_then(|c| c.flags.as_ref()))
        || set(c.connected.as_ref().and_then(|c| c.flags.as_ref()))
}

fn frame(parts: &[&[u8]], out: &mut Vec<u8>) {
    let cmd_size: usize = parts.iter().map(|p| p.len()).sum();
    let total = 4 + cmd_size;
    let (Ok(total), Ok(cmd)) = (u32::try_from(total), u32::try_from(cmd_size)) else {
        panic!("frame of {total} bytes does not fit Pulsar's 32-bit size fields");
    };
    out.extend_from_slice(&total.to_be_bytes());
    out.extend_from_slice(&cmd.to_be_bytes());
    for p in parts {
        out.extend_from_slice(p);
    }
}

/// Appends a `CommandNegativeAck` frame (a PIP-493 client's side; this workspace's tests).
pub fn encode_negative_ack(cmd: &CommandNegativeAck, out: &mut Vec<u8>) {
    let base = BaseCommand {
        r#type: NEGATIVE_ACK,
        ..Default::default()
    }
    .encode_to_vec();
    let field = NegativeAckField {
        negative_ack: Some(cmd.clone()),
    }
    .encode_to_vec();
    frame(&[&base, &field], out);
}

/// Appends a CONNECTED frame that also advertises `supports_key_ordered_negative_ack`, inside
/// the command's one `FeatureFlags` (any flags already set in `connected` are kept).
pub fn encode_connected_with_flag(mut connected: CommandConnected, out: &mut Vec<u8>) {
    let flags = connected.feature_flags.take().unwrap_or_default();
    let base = BaseCommand {
        r#type: base_command::Type::Connected as i32,
        ..Default::default()
    }
    .encode_to_vec();
    let mut cmd = base;
    let inner = with_flag_inside(&connected.encode_to_vec(), CONNECTED_FLAGS_FIELD, &flags);
    push_message_field(CONNECTED_FIELD, &inner, &mut cmd);
    frame(&[&cmd], out);
}

/// Appends a CONNECT frame that advertises `supports_key_ordered_negative_ack` (a PIP-493
/// client's side; tests), inside the command's one `FeatureFlags`.
pub fn encode_connect_with_flag(mut connect: BaseCommand, out: &mut Vec<u8>) {
    let mut body = connect.connect.take().map(|b| *b).unwrap_or_default();
    let flags = body.feature_flags.take().unwrap_or_default();
    let inner = with_flag_inside(&body.encode_to_vec(), CONNECT_FLAGS_FIELD, &flags);
    let mut cmd = connect.encode_to_vec();
    push_message_field(CONNECT_FIELD, &inner, &mut cmd);
    frame(&[&cmd], out);
}

/// `BaseCommand.connect` and `BaseCommand.connected`.
const CONNECT_FIELD: u32 = 2;
const CONNECTED_FIELD: u32 = 3;
/// `CommandConnect.feature_flags` and `CommandConnected.feature_flags`.
const CONNECT_FLAGS_FIELD: u32 = 10;
const CONNECTED_FLAGS_FIELD: u32 = 4;

/// `body` (encoded without feature flags) followed by its one feature-flags field: `flags`
/// with `supports_key_ordered_negative_ack` set.
fn with_flag_inside(body: &[u8], flags_field: u32, flags: &FeatureFlags) -> Vec<u8> {
    let mut flag_bytes = flags.encode_to_vec();
    flag_bytes.extend(
        FlagField {
            supports_key_ordered_negative_ack: Some(true),
        }
        .encode_to_vec(),
    );
    let mut out = body.to_vec();
    push_message_field(flags_field, &flag_bytes, &mut out);
    out
}

/// Appends one length-delimited field.
fn push_message_field(field: u32, bytes: &[u8], out: &mut Vec<u8>) {
    prost::encoding::encode_key(field, prost::encoding::WireType::LengthDelimited, out);
    prost::encoding::encode_varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::message_id;
    use cursor::Position;

    #[test]
    fn negative_ack_round_trips_through_decode_frame() {
        let cmd = CommandNegativeAck {
            consumer_id: 3,
            negative_acked: vec![message_id(Position::new(1, 4))],
            returned: vec![
                message_id(Position::new(1, 5)),
                message_id(Position::new(1, 6)),
            ],
        };
        let mut out = Vec::new();
        encode_negative_ack(&cmd, &mut out);
        let f = crate::decode_frame(&out).unwrap();
        assert_eq!(f.command.r#type, NEGATIVE_ACK);
        assert_eq!(f.negative_ack, Some(cmd));
    }

    #[test]
    fn the_feature_flag_merges_into_connected_and_connect() {
        let connected = crate::commands::connected("b", 21, 5 << 20)
            .connected
            .unwrap();
        let mut out = Vec::new();
        encode_connected_with_flag((*connected).clone(), &mut out);
        let f = crate::decode_frame(&out).unwrap();
        // A peer that does not know field 10 sees a normal CONNECTED.
        assert_eq!(f.command.connected.as_ref().unwrap().server_version, "b");
        assert!(supports_negative_ack(&out[8..]));
        let mut plain = Vec::new();
        crate::encode_command(&crate::commands::connected("b", 21, 5 << 20), &mut plain);
        assert!(!supports_negative_ack(&plain[8..]));
        let mut c = Vec::new();
        encode_connect_with_flag(crate::commands::connect("t", 21), &mut c);
        assert!(supports_negative_ack(&c[8..]));
        assert!(crate::decode_frame(&c).unwrap().command.connect.is_some());
    }
}
