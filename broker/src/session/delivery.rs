//! How one consumer's deliveries reach its connection: the subscription's dispatcher (on a
//! dispatch worker) encodes each send as MESSAGE frames straight into the connection's write queue, and tells
//! a Failover consumer whether it is active.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use dispatcher::{Delivery, DeliverySink, Refused};
use tracing::{debug, info, warn};

use crate::state::{Offer, Outbox};
use crate::topic::{OutCounters, Topic};

/// How one consumer's deliveries become MESSAGE frames: the subscription's dispatcher (on a
/// dispatch worker) encodes each send straight into the connection's write queue (a [`DeliverySink`]).
pub(crate) struct DeliveryRoute {
    /// The consumer id the client chose.
    pub(super) consumer_id: u64,
    pub(super) counters: Arc<OutCounters>,
    pub(super) topic: Arc<Topic>,
    pub(super) out: Arc<dyn Outbox>,
    /// Set once the SUBSCRIBE's SUCCESS is in the write queue (see `Session::poll_transmit`):
    /// no MESSAGE overtakes it.
    pub(super) ready: Arc<AtomicBool>,
    /// Set when the session closed the consumer: a send its dispatcher makes before it handles
    /// the removal is refused as [`Refused::Closed`] (not written; its entries come back with
    /// the removal, and a first chunk's pin moves back).
    pub(super) closed: Arc<AtomicBool>,
    /// Whether a partly acked batch carries its `ack_set` (off only under `--legacy
    /// no-batch-ack-set`).
    pub(super) send_ack_set: bool,
    /// Payload reads that failed in a row (0: the last one succeeded).
    pub(super) read_failures: Cell<u32>,
    /// Looks at [`DeliverySink::has_room`] still to answer "no" before the next try after a
    /// failed read.
    pub(super) backoff: Cell<u32>,
}

/// After a payload read failed, how many of the dispatcher's looks at a paused consumer
/// ([`DeliverySink::has_room`], every few milliseconds) pass before it tries again, at most:
/// the wait doubles per failure in a row up to this (about a second at the runtime's 5 ms).
const MAX_READ_BACKOFF: u32 = 256;

impl DeliveryRoute {
    /// Appends one MESSAGE frame per delivered entry to `frames`: the stored payload section
    /// after the command, the redelivery count, and for a batch entry with acked messages the
    /// `ack_set` (a set bit = still unacked). Returns the messages and bytes encoded and, when
    /// an entry's payload could not be read, that entry's index: it and the entries after it
    /// are not encoded.
    fn encode(&self, batch: &[Delivery], frames: &mut Vec<u8>) -> (u64, u64, Option<usize>) {
        let (mut messages_out, mut bytes_out) = (0, 0);
        for (i, d) in batch.iter().enumerate() {
            let section = match self.topic.payload(d.position) {
                Ok(Some(section)) => section,
                // Gone from the store: trimmed below every cursor, nothing to deliver.
                Ok(None) => {
                    tracing::warn!(position = %d.position, "no stored payload for a delivered entry");
                    continue;
                }
                Err(e) => {
                    self.read_failed(d, &e);
                    return (messages_out, bytes_out, Some(i));
                }
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
        (messages_out, bytes_out, None)
    }

    /// Counts a payload read that failed and sets the wait before the next try; the first
    /// failure in a row is a WARN, the others are counted (`readFailures` in the stats).
    fn read_failed(&self, d: &Delivery, e: &crate::storage::StorageError) {
        let failures = self.read_failures.get().saturating_add(1);
        self.read_failures.set(failures);
        self.backoff
            .set(1u32 << failures.min(MAX_READ_BACKOFF.trailing_zeros()));
        self.counters.read_failures.fetch_add(1, Ordering::Relaxed);
        if failures == 1 {
            warn!(consumer_id = self.consumer_id, position = %d.position, error = %e,
                "an entry's payload could not be read: it stays pending for this consumer's dispatcher and is tried again");
        } else {
            debug!(consumer_id = self.consumer_id, position = %d.position, failures, error = %e, "payload read failed again");
        }
    }
}

impl DeliverySink for DeliveryRoute {
    /// Encodes the send into the write queue. An entry whose payload cannot be read now is
    /// given back with the ones after it ([`Refused::Full`]: the dispatcher takes them back
    /// and pauses this consumer until [`has_room`](DeliverySink::has_room), which waits
    /// longer after each failure in a row); the ones before it are sent.
    fn deliver(&mut self, mut batch: Vec<Delivery>) -> Result<(), Refused> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Refused::Closed);
        }
        if !self.ready.load(Ordering::Acquire) {
            return Err(Refused::Full(batch));
        }
        let mut frames = Vec::with_capacity(batch.len() * 128);
        let (messages, bytes, failed_at) = self.encode(&batch, &mut frames);
        if failed_at.is_none() && self.read_failures.replace(0) > 0 {
            info!(
                consumer_id = self.consumer_id,
                "payload reads succeed again"
            );
        }
        if !frames.is_empty() {
            match self.out.offer(frames) {
                Offer::Taken => {
                    self.counters
                        .messages
                        .fetch_add(messages, Ordering::Relaxed);
                    self.counters.bytes.fetch_add(bytes, Ordering::Relaxed);
                }
                Offer::Full => return Err(Refused::Full(batch)),
                Offer::Closed => return Err(Refused::Closed),
            }
        }
        match failed_at {
            Some(i) => Err(Refused::Full(batch.split_off(i))),
            None => Ok(()),
        }
    }

    fn has_room(&self) -> bool {
        let waiting = self.backoff.get();
        if waiting > 0 {
            self.backoff.set(waiting - 1);
            return false;
        }
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
