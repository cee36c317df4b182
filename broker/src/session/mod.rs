//! One client connection's protocol, sans-IO, in the shape of quinn-proto's `Connection`.
//!
//! The TCP shell feeds what it reads ([`Session::handle_bytes`]) and the time
//! ([`Session::handle_timeout`]) and writes what [`Session::poll_transmit`] returns, in order.
//! A consumer's MESSAGE frames do not pass through the session: its subscription's dispatcher
//! thread encodes them into the connection's [`Outbox`](crate::state::Outbox) (a
//! [`consume::DeliveryRoute`]), once the SUBSCRIBE's reply has been taken. Every protocol rule lives
//! here (or in the topic it calls): which reply a command gets, how a cumulative ack expands,
//! where a Reader starts, what a seek does first, which chunks a nack stands for, when a
//! keep-alive PING goes out and when a silent peer is dropped. The session never touches a
//! socket, a thread or the clock.
//!
//! Ids: producer, consumer and request ids are the client's, per connection, and request ids
//! repeat (the lookup and the subscribe counters are separate), so they are only echoed. Each
//! consumer gets a broker-wide [`dispatcher::ConsumerId`] for its subscription's dispatcher.
//! Acks run on the thread that calls the session, through the consumer's
//! [`dispatcher::ConsumerHandle`] (cursor, then pending acks), as the dispatcher's design
//! expects.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tracing::{debug, warn};
use wire::proto::{base_command::Type, BaseCommand, ServerError};

use crate::metadata::MetadataError;
use crate::state::{BrokerState, TopicError};

mod consume;
mod delivery;
mod discovery;
mod produce;
#[cfg(test)]
pub(crate) mod tests;
mod writes;

pub(crate) use writes::WriteRequest;

use consume::Consumer;
use produce::Producer;

/// The newest protocol version this broker speaks (Pulsar's `ProtocolVersion` v21).
pub const PROTOCOL_VERSION: i32 = 21;

/// Replies are queued in buffers of up to about this many bytes (see `Session::send`).
const OUT_BUFFER: usize = 64 * 1024;

/// The time, as the shell passes it in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Now {
    /// Milliseconds on a monotonic clock (keep-alive timing).
    pub ms: u64,
    /// Milliseconds since the Unix epoch (what stats show as `connectedSince`).
    pub wall_ms: u64,
}

/// Why the session wants its connection closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Close {
    /// The client broke the protocol (a frame before CONNECT, an undecodable frame). The
    /// queued ERROR should still be written.
    Protocol,
    /// No frame for two keep-alive intervals.
    Idle,
}

/// The error code a client gets when it cannot use a topic.
fn topic_error_code(e: &TopicError) -> ServerError {
    match e {
        TopicError::Metadata(MetadataError::Storage(_)) | TopicError::Storage(_) => {
            ServerError::PersistenceError
        }
        TopicError::Metadata(_) | TopicError::NotFound(_) => ServerError::TopicNotFound,
        TopicError::Partitioned(_)
        | TopicError::IllegalPartition { .. }
        | TopicError::PartitionName => ServerError::NotAllowedError,
    }
}

/// One connection's protocol state.
pub(crate) struct Session {
    state: Arc<BrokerState>,
    id: u64,
    peer: String,
    service_url: String,
    reader: wire::FrameReader,
    connected: bool,
    /// The client's version, from its CONNECT (shown in stats).
    client_version: String,
    producers: BTreeMap<u64, Producer>,
    consumers: BTreeMap<u64, Consumer>,
    /// Write requests, and the receipts (and later replies) waiting for them.
    writes: writes::Writes,
    out: VecDeque<Vec<u8>>,
    /// New consumers' delivery gates, opened once the frames queued before them (their
    /// SUBSCRIBE's SUCCESS) have been taken by the shell.
    unopened: Vec<Arc<AtomicBool>>,
    last_input_ms: u64,
    pinged: bool,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id)
            .field("peer", &self.peer)
            .finish_non_exhaustive()
    }
}

/// Encodes `cmd` at the end of `last` while it holds less than [`OUT_BUFFER`] bytes; else into
/// a new buffer, returned for the caller to queue.
fn encode_onto(last: Option<&mut Vec<u8>>, cmd: &BaseCommand) -> Option<Vec<u8>> {
    match last {
        Some(buf) if buf.len() < OUT_BUFFER => {
            wire::encode_command(cmd, buf);
            None
        }
        _ => {
            let mut buf = Vec::with_capacity(256);
            wire::encode_command(cmd, &mut buf);
            Some(buf)
        }
    }
}

impl Session {
    /// A session for connection `id` from `peer`; `service_url` is what LOOKUP answers (the
    /// address the client reached).
    pub(crate) fn new(
        state: Arc<BrokerState>,
        id: u64,
        peer: String,
        service_url: String,
        now: Now,
    ) -> Session {
        let reader = wire::FrameReader::new(state.cfg.max_frame_size());
        Session {
            state,
            id,
            peer,
            service_url,
            reader,
            connected: false,
            client_version: String::new(),
            producers: BTreeMap::new(),
            consumers: BTreeMap::new(),
            writes: writes::Writes::default(),
            out: VecDeque::new(),
            unopened: Vec::new(),
            last_input_ms: now.ms,
            pinged: false,
        }
    }

    /// Bytes read from the socket: runs every whole frame they complete; the topics its SENDs
    /// wrote become write requests ([`poll_write`](Self::poll_write)), and their receipts wait
    /// for them. `Err` when the connection must close (after writing what is queued).
    pub(crate) fn handle_bytes(&mut self, now: Now, bytes: &[u8]) -> Result<(), Close> {
        self.last_input_ms = now.ms;
        self.pinged = false;
        self.reader.feed(bytes);
        let result = self.drain_frames(now);
        self.requests_ready();
        result
    }

    /// Time passed without input: PING after one keep-alive interval, close after two.
    pub(crate) fn handle_timeout(&mut self, now: Now) -> Result<(), Close> {
        let idle = now.ms.saturating_sub(self.last_input_ms);
        let keep_alive = self.state.cfg.keep_alive_ms;
        if idle >= keep_alive.saturating_mul(2) {
            tracing::info!(conn = self.id, peer = %self.peer, idle_ms = idle, "no frame for two keep-alive intervals; closing");
            return Err(Close::Idle);
        }
        if idle >= keep_alive && !self.pinged && self.connected {
            self.pinged = true;
            self.send(&wire::commands::ping());
        }
        Ok(())
    }

    /// The next encoded frame (or frames) to write, in order.
    pub(crate) fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        let frame = self.out.pop_front();
        if frame.is_none() && !self.writes.holding() {
            // Everything queued so far is in the shell's hands (and, as the shell writes in
            // order, ahead of any MESSAGE): new consumers' deliveries may start.
            for ready in self.unopened.drain(..) {
                ready.store(true, Ordering::Release);
            }
        }
        frame
    }

    /// Broker shutdown: queues CLOSE_PRODUCER and CLOSE_CONSUMER for everything the client
    /// has open, so it reconnects elsewhere (or later) instead of waiting for a timeout.
    pub(crate) fn handle_shutdown(&mut self) {
        let cmds: Vec<BaseCommand> = self
            .producers
            .keys()
            .map(|&id| wire::commands::close_producer(id, 0))
            .chain(
                self.consumers
                    .keys()
                    .map(|&id| wire::commands::close_consumer(id, 0)),
            )
            .collect();
        for cmd in &cmds {
            self.send(cmd);
        }
    }

    /// The connection is gone: its consumers leave their subscriptions (their unacked
    /// entries go back to the others) and its producers leave their topics.
    pub(crate) fn close(&mut self) {
        let consumers: Vec<_> = std::mem::take(&mut self.consumers).into_values().collect();
        for c in consumers {
            self.drop_consumer(c);
        }
        let producers: Vec<_> = std::mem::take(&mut self.producers).into_iter().collect();
        for (id, p) in producers {
            self.producer_gone(&p.topic, id);
        }
    }

    /// Runs every whole frame buffered.
    fn drain_frames(&mut self, now: Now) -> Result<(), Close> {
        loop {
            match self.reader.next_frame() {
                Ok(Some(frame)) => self.handle_frame(now, frame)?,
                Ok(None) => return Ok(()),
                Err(e) => {
                    warn!(conn = self.id, peer = %self.peer, error = %e, "undecodable frame; closing the connection");
                    self.send_error(0, ServerError::UnknownError, &format!("bad frame: {e}"));
                    return Err(Close::Protocol);
                }
            }
        }
    }

    /// Queues one reply. Replies share buffers of up to [`OUT_BUFFER`] bytes, so the receipts
    /// of a read's SENDs reach the shell as one buffer (one hand-over to the writer thread).
    fn send(&mut self, cmd: &BaseCommand) {
        if self.writes.holding() {
            // Behind a receipt that still waits.
            let held = &mut self.writes.held;
            let last = match held.back_mut() {
                Some(writes::Held::Frames(buf)) => Some(buf),
                _ => None,
            };
            if let Some(buf) = encode_onto(last, cmd) {
                held.push_back(writes::Held::Frames(buf));
            }
        } else if let Some(buf) = encode_onto(self.out.back_mut(), cmd) {
            self.out.push_back(buf);
        }
    }

    fn send_error(&mut self, request_id: u64, error: ServerError, message: &str) {
        self.send(&wire::commands::error(request_id, error, message));
    }

    fn send_success(&mut self, request_id: u64) {
        self.send(&wire::commands::success(request_id));
    }

    /// Runs one command.
    fn handle_frame(&mut self, now: Now, frame: wire::Frame) -> Result<(), Close> {
        if frame.command.r#type == wire::pip493::NEGATIVE_ACK && self.connected {
            self.on_negative_ack(frame.negative_ack);
            return Ok(());
        }
        let wire::Frame {
            command: cmd,
            payload,
            ..
        } = frame;
        let t = cmd.r#type();
        if !self.connected && t != Type::Connect {
            warn!(conn = self.id, command = ?t, "command before CONNECT; closing");
            self.send_error(0, ServerError::NotAllowedError, "CONNECT must come first");
            return Err(Close::Protocol);
        }
        match t {
            Type::Connect => self.on_connect(&cmd),
            Type::Ping => self.send(&wire::commands::pong()),
            Type::Pong => {}
            Type::PartitionedMetadata => self.on_partitioned_metadata(&cmd),
            Type::Lookup => self.on_lookup(&cmd),
            Type::Producer => self.on_producer(now, &cmd),
            Type::Send => self.on_send(&cmd, payload),
            Type::CloseProducer => self.on_close_producer(&cmd),
            Type::Subscribe => self.on_subscribe(now, &cmd),
            Type::Flow => self.on_flow(&cmd),
            Type::Ack => self.on_ack(&cmd),
            Type::RedeliverUnacknowledgedMessages => self.on_redeliver(&cmd),
            Type::CloseConsumer => self.on_close_consumer(&cmd),
            Type::Unsubscribe => self.on_unsubscribe(&cmd),
            Type::Seek => self.on_seek(&cmd),
            Type::GetLastMessageId => self.on_get_last_message_id(&cmd),
            Type::GetSchema => self.on_get_schema(&cmd),
            Type::GetTopicsOfNamespace => self.on_get_topics_of_namespace(&cmd),
            Type::GetOrCreateSchema => self.on_get_or_create_schema(&cmd),
            Type::ConsumerStats => self.on_consumer_stats(&cmd),
            other => {
                debug!(conn = self.id, command = ?other, "unsupported command");
                let message = format!(
                    "command {} is not supported by this broker",
                    other.as_str_name()
                );
                self.send_error(
                    wire::strict::command_request_id(&cmd).unwrap_or(0),
                    ServerError::NotAllowedError,
                    &message,
                );
            }
        }
        Ok(())
    }
}
