//! A chunked message, written with the `pulsar` crate's own wire layer.
//!
//! The crate's `Producer` cannot chunk (it has no chunking option, and its consumer does not
//! reassemble chunks). The orphan-chunk incident needs a chunked message in the topic, so this
//! module sends one the way Pulsar's Java and C++ producers do: one SEND per chunk, every
//! chunk with the message's `uuid`, `chunk_id`, `num_chunks_from_msg` and
//! `total_chunk_msg_size`. It uses only the crate's public codec (`pulsar::message::Codec`,
//! framing and CRC32C) and its protobuf types (`pulsar::proto`).

use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use futures::{SinkExt, StreamExt};
use pulsar::{
    message::{Codec, Message, Payload},
    proto::{self, base_command::Type, BaseCommand},
};
use tokio::net::TcpStream;
use tokio_util::codec::Framed;

use crate::client::now_ms;

const WAIT: Duration = Duration::from_secs(5);

/// The ids `(ledger, entry)` of the chunks sent.
pub type ChunkIds = Vec<(u64, u64)>;

async fn next_reply(f: &mut Framed<TcpStream, Codec>, what: &str) -> Result<BaseCommand> {
    loop {
        let m = tokio::time::timeout(WAIT, f.next())
            .await
            .map_err(|_| anyhow!("{what}: no answer within {WAIT:?}"))?
            .ok_or_else(|| anyhow!("{what}: the broker closed the connection"))?
            .map_err(|e| anyhow!("{what}: {e}"))?;
        if m.command.r#type == Type::Ping as i32 {
            let pong = BaseCommand {
                r#type: Type::Pong as i32,
                pong: Some(proto::CommandPong {}),
                ..Default::default()
            };
            f.send(Message {
                command: pong,
                payload: None,
            })
            .await
            .map_err(|e| anyhow!("pong: {e}"))?;
            continue;
        }
        if let Some(e) = &m.command.error {
            bail!("{what}: ERROR {:?} {}", e.error, e.message);
        }
        return Ok(m.command);
    }
}

/// Sends `body` to `topic` on the broker at `addr` (`host:port`) as a chunked message of
/// chunks of at most `chunk_size` bytes. Returns the chunks' ids.
pub async fn send_chunked(
    addr: &str,
    topic: &str,
    body: &[u8],
    chunk_size: usize,
) -> Result<ChunkIds> {
    let stream = TcpStream::connect(addr)
        .await
        .with_context(|| format!("connecting to {addr}"))?;
    let mut f = Framed::new(stream, Codec);
    let connect = BaseCommand {
        r#type: Type::Connect as i32,
        connect: Some(proto::CommandConnect {
            client_version: "pulsar-rs-interop chunk writer".to_owned(),
            protocol_version: Some(21),
            ..Default::default()
        }),
        ..Default::default()
    };
    f.send(Message {
        command: connect,
        payload: None,
    })
    .await
    .map_err(|e| anyhow!("CONNECT: {e}"))?;
    let c = next_reply(&mut f, "CONNECT").await?;
    if c.connected.is_none() {
        bail!("CONNECT answered with {:?}", Type::try_from(c.r#type));
    }
    let producer = BaseCommand {
        r#type: Type::Producer as i32,
        producer: Some(proto::CommandProducer {
            topic: topic.to_owned(),
            producer_id: 1,
            request_id: 1,
            ..Default::default()
        }),
        ..Default::default()
    };
    f.send(Message {
        command: producer,
        payload: None,
    })
    .await
    .map_err(|e| anyhow!("PRODUCER: {e}"))?;
    let name = loop {
        let r = next_reply(&mut f, "PRODUCER").await?;
        if let Some(s) = r.producer_success {
            if s.producer_ready != Some(false) {
                break s.producer_name;
            }
        }
    };
    let chunks: Vec<&[u8]> = body.chunks(chunk_size).collect();
    let uuid = format!("{name}-0");
    let publish_time = now_ms();
    for (i, chunk) in chunks.iter().enumerate() {
        let send = BaseCommand {
            r#type: Type::Send as i32,
            send: Some(proto::CommandSend {
                producer_id: 1,
                sequence_id: 0,
                num_messages: Some(1),
                is_chunk: Some(true),
                ..Default::default()
            }),
            ..Default::default()
        };
        let metadata = proto::MessageMetadata {
            producer_name: name.clone(),
            sequence_id: 0,
            publish_time,
            uncompressed_size: Some(body.len() as u32),
            uuid: Some(uuid.clone()),
            chunk_id: Some(i as i32),
            num_chunks_from_msg: Some(chunks.len() as i32),
            total_chunk_msg_size: Some(body.len() as i32),
            ..Default::default()
        };
        let payload = Payload {
            metadata,
            data: chunk.to_vec(),
        };
        f.send(Message {
            command: send,
            payload: Some(payload),
        })
        .await
        .map_err(|e| anyhow!("SEND chunk {i}: {e}"))?;
    }
    let mut ids = Vec::new();
    while ids.len() < chunks.len() {
        let r = next_reply(&mut f, "SEND_RECEIPT").await?;
        if let Some(e) = r.send_error {
            bail!("chunk refused: {:?} {}", e.error, e.message);
        }
        if let Some(rc) = r.send_receipt {
            let id = rc
                .message_id
                .ok_or_else(|| anyhow!("a receipt without a message id"))?;
            ids.push((id.ledger_id, id.entry_id));
        }
    }
    let close = BaseCommand {
        r#type: Type::CloseProducer as i32,
        close_producer: Some(proto::CommandCloseProducer {
            producer_id: 1,
            request_id: 2,
        }),
        ..Default::default()
    };
    f.send(Message {
        command: close,
        payload: None,
    })
    .await
    .map_err(|e| anyhow!("CLOSE_PRODUCER: {e}"))?;
    let _ = next_reply(&mut f, "CLOSE_PRODUCER").await?;
    Ok(ids)
}

/// `n` bytes of a reproducible pattern.
pub fn body(n: usize, salt: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(salt) ^ (i >> 8) as u8)
        .collect()
}
