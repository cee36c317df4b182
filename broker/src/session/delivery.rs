//! How one consumer's deliveries reach its connection: the subscription's dispatcher thread
//! encodes each send as MESSAGE frames straight into the connection's write queue, and tells
//! a Failover consumer whether it is active.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use dispatcher::{Delivery, DeliverySink, Refused};
use tracing::debug;

use crate::state::{Offer, Outbox};
use crate::topic::{OutCounters, Topic};

/// How one consumer's deliveries become MESSAGE frames: the subscription's dispatcher thread
/// encodes each send straight into the connection's write queue (a [`DeliverySink`]).
pub(crate) struct DeliveryRoute {
    /// The consumer id the client chose.
    pub(super) consumer_id: u64,
    pub(super) counters: Arc<OutCounters>,
    pub(super) topic: Arc<Topic>,
    pub(super) out: Arc<dyn Outbox>,
    /// Set once the SUBSCRIBE's SUCCESS is in the write queue (see `Session::poll_transmit`):
    /// no MESSAGE overtakes it.
    pub(super) ready: Arc<AtomicBool>,
    /// Whether a partly acked batch carries its `ack_set` (off only under `--legacy
    /// no-batch-ack-set`).
    pub(super) send_ack_set: bool,
}

impl DeliveryRoute {
    /// Appends one MESSAGE frame per delivered entry to `frames`: the stored payload section
    /// after the command, the redelivery count, and for a batch entry with acked messages the
    /// `ack_set` (a set bit = still unacked). Returns the messages and bytes encoded.
    fn encode(&self, batch: &[Delivery], frames: &mut Vec<u8>) -> (u64, u64) {
        let (mut messages_out, mut bytes_out) = (0, 0);
        for d in batch {
            let Some(section) = self.topic.payload(d.position) else {
                tracing::warn!(position = %d.position, "no stored payload for a delivered entry");
                continue;
            };
            let messages = d.meta.messages();
            let ack_set = (self.send_ack_set && !d.acked_indexes.is_empty())
                .then(|| wire::convert::ack_set_from_acked(&d.acked_indexes, messages));
            let cmd = wire::commands::message_body(
                self.consumer_id,
                wire::convert::message_id(d.position),
                d.redelivery_count,
                ack_set,
            );
            wire::encode_message_with_section(&cmd, &section, frames);
            let unacked = messages as usize - d.acked_indexes.len().min(messages as usize);
            messages_out += unacked as u64;
            bytes_out += u64::from(d.meta.size);
        }
        (messages_out, bytes_out)
    }
}

impl DeliverySink for DeliveryRoute {
    fn deliver(&mut self, batch: Vec<Delivery>) -> Result<(), Refused> {
        if !self.ready.load(Ordering::Acquire) {
            return Err(Refused::Full(batch));
        }
        let mut frames = Vec::with_capacity(batch.len() * 128);
        let (messages, bytes) = self.encode(&batch, &mut frames);
        if frames.is_empty() {
            return Ok(());
        }
        match self.out.offer(frames) {
            Offer::Taken => {
                self.counters
                    .messages
                    .fetch_add(messages, Ordering::Relaxed);
                self.counters.bytes.fetch_add(bytes, Ordering::Relaxed);
                Ok(())
            }
            Offer::Full => Err(Refused::Full(batch)),
            Offer::Closed => Err(Refused::Closed),
        }
    }

    fn has_room(&self) -> bool {
        self.ready.load(Ordering::Acquire) && self.out.drained()
    }

    /// Failover: ACTIVE_CONSUMER_CHANGE. Pushed with the session's own replies (room is kept
    /// for them), so a full delivery queue does not lose it.
    fn active_changed(&mut self, active: bool) {
        debug!(
            consumer_id = self.consumer_id,
            active, "active consumer change"
        );
        let mut frame = Vec::with_capacity(32);
        wire::encode_command(
            &wire::commands::active_consumer_change(self.consumer_id, active),
            &mut frame,
        );
        self.out.push(frame);
    }
}
