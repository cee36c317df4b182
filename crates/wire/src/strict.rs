//! A strict reading of the commands a broker writes, as the strictest client reads them.
//!
//! prost, like the C++, Go and Python clients' protobuf code, merges a second occurrence of a
//! non-repeated message field into the first and fills absent required fields with defaults.
//! Pulsar's Java client (its LightProto code) does neither: a second occurrence starts the
//! field anew, and a required field left unset fails the whole command
//! (`IllegalStateException: Some required fields are missing`). A frame that every lenient
//! client reads can so be unreadable for Java. [`check_frame`] refuses exactly those frames:
//!
//! * a non-repeated field that occurs twice in one message ([`StrictError::Repeated`]);
//! * a required field that is absent ([`StrictError::MissingRequired`]);
//! * a command without the body its type names, say a PONG without its `pong` field, which
//!   Java's decoder checks for every type and answers by closing the connection
//!   ([`StrictError::MissingBody`]);
//! * a known field with another wire type than its declaration ([`StrictError::WireType`]);
//! * bytes that are not protobuf ([`StrictError::Malformed`]).
//!
//! Unknown fields are allowed (every client skips them), and so is a packed encoding of a
//! repeated scalar. The payload section of a MESSAGE (the producer's metadata, stored verbatim)
//! is not checked: the broker does not write it.
//!
//! ```
//! use wire::{commands, encode_command, strict};
//!
//! let mut frame = Vec::new();
//! encode_command(&commands::connected("broker", 21, 5 << 20), &mut frame);
//! assert_eq!(strict::check_frame(&frame), Ok(()));
//!
//! // The same CONNECTED followed by a second `connected` field: prost merges it, Java fails.
//! let mut twice = frame.clone();
//! twice.extend_from_slice(&[0x1a, 0x00]); // field 3 (connected), length 0
//! let n = (twice.len() - 4) as u32;
//! twice[..4].copy_from_slice(&n.to_be_bytes());
//! twice[4..8].copy_from_slice(&(n - 4).to_be_bytes());
//! assert!(matches!(strict::check_frame(&twice), Err(strict::StrictError::Repeated { .. })));
//! ```

/// How a field is labelled in the .proto.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Label {
    Required,
    Optional,
    Repeated,
}

/// The wire type a field is declared with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wire {
    Varint,
    Fixed64,
    Len,
    /// Pulsar's proto has no 32-bit fixed field today; the table would name one.
    #[allow(dead_code)]
    Fixed32,
}

/// One field of a message (generated into `proto/fields.rs`).
#[derive(Debug)]
pub(crate) struct FieldRule {
    pub(crate) number: u32,
    pub(crate) name: &'static str,
    pub(crate) label: Label,
    pub(crate) wire: Wire,
    /// The index of its message type in `MESSAGES`, for message fields.
    pub(crate) message: Option<usize>,
}

/// The fields of one message, sorted by number.
#[derive(Debug)]
pub(crate) struct MessageRules {
    pub(crate) name: &'static str,
    pub(crate) fields: &'static [FieldRule],
}

#[allow(clippy::all, clippy::pedantic, unreachable_pub)]
#[rustfmt::skip]
mod generated {
    include!("proto/fields.rs");
}
use crate::frame::be_u32;
use generated::{BASE_COMMAND, MESSAGES};

/// Nesting deeper than this is refused (Pulsar's messages nest three levels at most).
const MAX_DEPTH: usize = 16;

/// Why a strict reader refuses a frame.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StrictError {
    /// A non-repeated field occurs more than once in one message.
    #[error("{message}.{field} occurs more than once")]
    Repeated {
        /// The message that holds the field.
        message: &'static str,
        /// The field's name in the .proto.
        field: &'static str,
    },
    /// A required field is absent.
    #[error("required field {message}.{field} is missing")]
    MissingRequired {
        /// The message that lacks the field.
        message: &'static str,
        /// The field's name in the .proto.
        field: &'static str,
    },
    /// The command's type names a body field (its number is the type's value) that is absent.
    #[error("a {kind} command without its body (field {field})")]
    MissingBody {
        /// The type's name in the .proto.
        kind: String,
        /// The body field's number.
        field: u32,
    },
    /// A known field is encoded with another wire type than declared.
    #[error("{message}.{field} has wire type {got}")]
    WireType {
        /// The message that holds the field.
        message: &'static str,
        /// The field's name in the .proto.
        field: &'static str,
        /// The wire type found.
        got: u8,
    },
    /// The bytes are not a protobuf message (or the frame's sizes do not add up).
    #[error("malformed {message}: {what}")]
    Malformed {
        /// What was being read.
        message: &'static str,
        /// What is wrong.
        what: &'static str,
    },
}

/// Checks one whole frame (`[u32 total][u32 cmd_size][BaseCommand]…`, as written on the wire):
/// its `BaseCommand` and every message inside it. The payload section, if any, is not read.
pub fn check_frame(frame: &[u8]) -> Result<(), StrictError> {
    let malformed = |what| StrictError::Malformed {
        message: "frame",
        what,
    };
    let word = |at: usize| {
        be_u32(frame, at)
            .map(|w| w as usize)
            .ok_or(malformed("shorter than its header"))
    };
    let (total, cmd_size) = (word(0)?, word(4)?);
    if total.checked_add(4) != Some(frame.len()) || cmd_size > total.saturating_sub(4) {
        return Err(malformed("sizes do not match its length"));
    }
    check_command(&frame[8..8 + cmd_size])
}

/// Checks the bytes of one `BaseCommand`.
pub fn check_command(bytes: &[u8]) -> Result<(), StrictError> {
    check_message(BASE_COMMAND, bytes, 0)?;
    check_body(bytes)
}

/// A command's body is the field whose number is its type's value (true of every type in
/// Pulsar's .proto; a test holds it): that field must be present.
fn check_body(mut bytes: &[u8]) -> Result<(), StrictError> {
    let (mut kind, mut present) = (None, Vec::new());
    while !bytes.is_empty() {
        let Some(key) = varint(&mut bytes) else {
            break;
        };
        let wire = (key & 7) as u8;
        if key >> 3 == 1 && wire == 0 {
            kind = varint(&mut bytes);
            continue;
        }
        present.push(key >> 3);
        if take_value(wire, &mut bytes).is_none() {
            break;
        }
    }
    let Some(kind) = kind.and_then(|k| u32::try_from(k).ok()) else {
        return Ok(()); // the required `type` is checked with the other fields
    };
    let is_body = MESSAGES[BASE_COMMAND]
        .fields
        .binary_search_by_key(&kind, |f| f.number)
        .is_ok_and(|i| MESSAGES[BASE_COMMAND].fields[i].message.is_some());
    if !is_body || present.contains(&u64::from(kind)) {
        return Ok(());
    }
    let name = i32::try_from(kind)
        .ok()
        .and_then(|k| crate::proto::base_command::Type::try_from(k).ok())
        .map_or_else(|| kind.to_string(), |t| t.as_str_name().to_owned());
    Err(StrictError::MissingBody {
        kind: name,
        field: kind,
    })
}

/// Splits a buffer of whole frames (as a writer queue holds them) into frames; the last item is
/// an error when the sizes do not add up.
pub fn frames(mut buf: &[u8]) -> impl Iterator<Item = Result<&[u8], StrictError>> {
    std::iter::from_fn(move || {
        if buf.is_empty() {
            return None;
        }
        let Some(len) = be_u32(buf, 0)
            .map(|total| total as usize + 4)
            .filter(|&n| n <= buf.len())
        else {
            buf = &[];
            return Some(Err(StrictError::Malformed {
                message: "frame",
                what: "sizes do not match the buffer",
            }));
        };
        let (one, rest) = buf.split_at(len);
        buf = rest;
        Some(Ok(one))
    })
}

/// The `request_id` of the command in `bytes` (an encoded `BaseCommand`), whatever its type:
/// the first sub-command present whose message has a `request_id` field, read with the field
/// table. A broker answers a command it does not serve with an ERROR carrying this id, so the
/// client fails the pending request at once instead of waiting for its operation timeout (an
/// ERROR with id 0 could even fail an unrelated request 0). `None` when the command has no such
/// field (FLOW, SEND, …) or the bytes do not parse.
///
/// ```
/// use wire::{commands, strict};
/// use prost::Message;
/// let cmd = commands::get_last_message_id(7, 42);
/// assert_eq!(strict::request_id(&cmd.encode_to_vec()), Some(42));
/// assert_eq!(strict::request_id(&commands::flow(7, 10).encode_to_vec()), None);
/// ```
pub fn request_id(mut bytes: &[u8]) -> Option<u64> {
    let base = &MESSAGES[BASE_COMMAND];
    while !bytes.is_empty() {
        let key = varint(&mut bytes)?;
        let number = u32::try_from(key >> 3).ok()?;
        let body = take_value((key & 7) as u8, &mut bytes)?;
        let (Ok(i), Some(body)) = (
            base.fields.binary_search_by_key(&number, |f| f.number),
            body,
        ) else {
            continue;
        };
        let Some(inner) = base.fields[i].message else {
            continue;
        };
        let Some(id_field) = MESSAGES[inner]
            .fields
            .iter()
            .find(|f| f.name == "request_id")
        else {
            continue;
        };
        let mut sub = body;
        while !sub.is_empty() {
            let key = varint(&mut sub)?;
            if key >> 3 == u64::from(id_field.number) && key & 7 == 0 {
                return varint(&mut sub);
            }
            take_value((key & 7) as u8, &mut sub)?;
        }
    }
    None
}

/// [`request_id`] of a decoded command (it is encoded once to be read with the field table).
pub fn command_request_id(cmd: &crate::proto::BaseCommand) -> Option<u64> {
    use prost::Message;
    request_id(&cmd.encode_to_vec())
}

fn check_message(index: usize, mut bytes: &[u8], depth: usize) -> Result<(), StrictError> {
    let rules = &MESSAGES[index];
    let malformed = |what| StrictError::Malformed {
        message: rules.name,
        what,
    };
    if depth > MAX_DEPTH {
        return Err(malformed("nested too deep"));
    }
    let mut seen = vec![false; rules.fields.len()];
    while !bytes.is_empty() {
        let key = varint(&mut bytes).ok_or(malformed("truncated key"))?;
        let number = u32::try_from(key >> 3).map_err(|_| malformed("field number"))?;
        let wire = (key & 7) as u8;
        let body = take_value(wire, &mut bytes).ok_or(malformed("truncated value"))?;
        let Ok(i) = rules.fields.binary_search_by_key(&number, |f| f.number) else {
            continue; // unknown: skipped by every client
        };
        let f = &rules.fields[i];
        let expected = match f.wire {
            Wire::Varint => 0,
            Wire::Fixed64 => 1,
            Wire::Len => 2,
            Wire::Fixed32 => 5,
        };
        let packed = f.label == Label::Repeated && f.wire != Wire::Len && wire == 2;
        if wire != expected && !packed {
            return Err(StrictError::WireType {
                message: rules.name,
                field: f.name,
                got: wire,
            });
        }
        if seen[i] && f.label != Label::Repeated {
            return Err(StrictError::Repeated {
                message: rules.name,
                field: f.name,
            });
        }
        seen[i] = true;
        if let (Some(inner), Some(body)) = (f.message, body) {
            check_message(inner, body, depth + 1)?;
        }
    }
    match rules
        .fields
        .iter()
        .zip(&seen)
        .find(|(f, seen)| f.label == Label::Required && !**seen)
    {
        Some((f, _)) => Err(StrictError::MissingRequired {
            message: rules.name,
            field: f.name,
        }),
        None => Ok(()),
    }
}

/// Reads one base-128 varint.
fn varint(bytes: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for (i, &b) in bytes.iter().enumerate().take(10) {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            *bytes = &bytes[i + 1..];
            return Some(value);
        }
    }
    None
}

/// Skips one value of wire type `wire`; returns its bytes for a length-delimited one
/// (`Some(None)` for the others), `None` when the bytes end early or the type is unknown.
fn take_value<'a>(wire: u8, bytes: &mut &'a [u8]) -> Option<Option<&'a [u8]>> {
    let skip = |n: usize, bytes: &mut &'a [u8]| -> Option<&'a [u8]> {
        let (value, rest) = (bytes.get(..n)?, bytes.get(n..)?);
        *bytes = rest;
        Some(value)
    };
    match wire {
        0 => varint(bytes).map(|_| None),
        1 => skip(8, bytes).map(|_| None),
        2 => {
            let n = usize::try_from(varint(bytes)?).ok()?;
            skip(n, bytes).map(Some)
        }
        5 => skip(4, bytes).map(|_| None),
        _ => None, // groups (3, 4) are not used by Pulsar; 6 and 7 do not exist
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{commands, encode_command, pip493, proto};
    use prost::Message;

    /// Every command type's body is the BaseCommand field numbered as the type's value, a
    /// message field: what [`check_body`] relies on.
    #[test]
    fn every_type_names_its_body_by_number() {
        let base = &MESSAGES[BASE_COMMAND];
        for v in 2..=200 {
            let Ok(t) = proto::base_command::Type::try_from(v) else {
                continue;
            };
            let i = base
                .fields
                .binary_search_by_key(&(v as u32), |f| f.number)
                .unwrap_or_else(|_| panic!("{t:?}: no field {v}"));
            assert!(
                base.fields[i].message.is_some(),
                "{t:?}: field {v} is not a message"
            );
        }
    }

    /// A PONG or PING without its body is refused (the broker sent such PONGs, and Java's
    /// client closed its connection at its first keep-alive, 30 s in); with it, accepted.
    #[test]
    fn a_command_without_its_body_is_refused() {
        let bare = proto::BaseCommand {
            r#type: proto::base_command::Type::Pong as i32,
            ..Default::default()
        };
        let mut frame = Vec::new();
        encode_command(&bare, &mut frame);
        assert_eq!(
            check_frame(&frame),
            Err(StrictError::MissingBody {
                kind: "PONG".into(),
                field: 19
            })
        );
        for cmd in [commands::pong(), commands::ping()] {
            let mut ok = Vec::new();
            encode_command(&cmd, &mut ok);
            assert_eq!(check_frame(&ok), Ok(()));
        }
    }

    fn frame_of(cmd_bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&(cmd_bytes.len() as u32 + 4).to_be_bytes());
        out.extend_from_slice(&(cmd_bytes.len() as u32).to_be_bytes());
        out.extend_from_slice(cmd_bytes);
        out
    }

    /// Every sub-command whose message has a `request_id` gives it back, including the ones a
    /// broker does not serve (transactions, topic-list watchers, consumer stats).
    #[test]
    fn request_id_is_found_in_every_command_that_has_one() {
        let base = &MESSAGES[BASE_COMMAND];
        let mut with_id = 0;
        for f in base.fields {
            let Some(inner) = f.message else { continue };
            let Some(id) = MESSAGES[inner]
                .fields
                .iter()
                .find(|g| g.name == "request_id")
            else {
                continue;
            };
            // BaseCommand { type: 2, <f>: { request_id: 77 } } as raw bytes.
            let mut sub = Vec::new();
            prost::encoding::encode_key(id.number, prost::encoding::WireType::Varint, &mut sub);
            prost::encoding::encode_varint(77, &mut sub);
            let mut cmd = vec![0x08, 0x02];
            prost::encoding::encode_key(
                f.number,
                prost::encoding::WireType::LengthDelimited,
                &mut cmd,
            );
            prost::encoding::encode_varint(sub.len() as u64, &mut cmd);
            cmd.extend_from_slice(&sub);
            assert_eq!(request_id(&cmd), Some(77), "{}", f.name);
            with_id += 1;
        }
        assert!(with_id > 40, "only {with_id} commands with a request id");
        let txn = proto::BaseCommand {
            r#type: proto::base_command::Type::TcClientConnectRequest as i32,
            tc_client_connect_request: Some(Box::new(proto::CommandTcClientConnectRequest {
                request_id: 9,
                ..Default::default()
            })),
            ..Default::default()
        };
        assert_eq!(request_id(&txn.encode_to_vec()), Some(9));
        assert_eq!(request_id(&commands::ping().encode_to_vec()), None);
        assert_eq!(request_id(&[0xff]), None);
    }

    #[test]
    fn the_generated_table_matches_the_proto() {
        let base = &MESSAGES[BASE_COMMAND];
        assert_eq!(base.name, "BaseCommand");
        assert_eq!(base.fields[0].name, "type");
        assert_eq!(base.fields[0].label, Label::Required);
        let connected = base.fields.iter().find(|f| f.number == 3).unwrap();
        assert_eq!(
            MESSAGES[connected.message.unwrap()].name,
            "CommandConnected"
        );
        for m in MESSAGES {
            assert!(
                m.fields.windows(2).all(|w| w[0].number < w[1].number),
                "{}",
                m.name
            );
        }
    }

    #[test]
    fn every_constructor_passes() {
        let id = crate::convert::message_id(cursor::Position::new(3, 4));
        let cmds = [
            commands::connected("b", 21, 1 << 20),
            commands::pong(),
            commands::ping(),
            commands::lookup_response(1, "pulsar://x:1", true),
            commands::producer_success(2, "p", -1, Vec::new()),
            commands::send_receipt(1, 2, None, id.clone()),
            commands::message(1, id, 0, Some(vec![1])),
            commands::success(9),
        ];
        for c in cmds {
            let mut f = Vec::new();
            encode_command(&c, &mut f);
            assert_eq!(check_frame(&f), Ok(()), "{:?}", c.r#type());
        }
    }

    #[test]
    fn the_flagged_connected_is_one_message() {
        let c = commands::connected("b", 21, 1 << 20).connected.unwrap();
        let mut f = Vec::new();
        pip493::encode_connected_with_flag(*c, &mut f);
        assert_eq!(check_frame(&f), Ok(()));
        let mut c = Vec::new();
        pip493::encode_connect_with_flag(commands::connect("t", 21), &mut c);
        assert_eq!(check_frame(&c), Ok(()));
    }

    #[test]
    fn a_second_occurrence_and_a_missing_required_field_are_refused() {
        // What the broker once wrote: CONNECTED, then a second `connected` carrying only a flag.
        let mut cmd = commands::connected("b", 21, 1 << 20).encode_to_vec();
        cmd.extend_from_slice(&[0x1a, 0x04, 0x22, 0x02, 0x50, 0x01]);
        assert_eq!(
            check_frame(&frame_of(&cmd)),
            Err(StrictError::Repeated {
                message: "BaseCommand",
                field: "connected"
            })
        );
        // A CONNECTED without server_version.
        let bare = proto::BaseCommand {
            r#type: proto::base_command::Type::Connected as i32,
            ..Default::default()
        };
        let mut bytes = bare.encode_to_vec();
        bytes.extend_from_slice(&[0x1a, 0x02, 0x10, 0x15]); // connected { protocol_version: 21 }
        assert_eq!(
            check_command(&bytes),
            Err(StrictError::MissingRequired {
                message: "CommandConnected",
                field: "server_version"
            })
        );
        // A wire-type mismatch and garbage.
        assert!(matches!(
            check_command(&[0x0a, 0x00]),
            Err(StrictError::WireType { field: "type", .. })
        ));
        assert!(matches!(
            check_command(&[0x08]),
            Err(StrictError::Malformed { .. })
        ));
    }

    #[test]
    fn frames_splits_a_writer_buffer() {
        let mut buf = Vec::new();
        encode_command(&commands::ping(), &mut buf);
        encode_command(&commands::pong(), &mut buf);
        let all: Vec<_> = frames(&buf).collect();
        assert_eq!(all.len(), 2);
        assert!(all
            .iter()
            .all(|f| f.as_ref().is_ok_and(|f| check_frame(f).is_ok())));
        assert!(frames(&buf[..buf.len() - 1]).any(|f| f.is_err()));
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let n = (x % 40) as usize;
            let bytes: Vec<u8> = (0..n).map(|i| (x >> (i % 8 * 8)) as u8).collect();
            let _ = check_command(&bytes);
            let _ = check_frame(&bytes);
        }
    }
}
