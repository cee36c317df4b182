//! Closing the core: every entry it holds is handed back, further input is refused.

use super::*;

/// An entry the core held when it was closed ([`Dispatcher::handle_close`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReturnedEntry {
    /// The entry's position.
    pub position: Position,
    /// Its sticky-key hash (0 on Shared).
    pub hash: u32,
    /// The consumer it was pending on (sent, not acked); `None`: it waited in replay.
    pub consumer: Option<ConsumerId>,
}

/// The dispatcher is closed: [`Dispatcher::handle_close`] already ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the dispatcher is closed")]
pub struct Closed;

impl Dispatcher {
    /// Closes the dispatcher (the subscription is deleted or the broker unloads it): every
    /// pending entry of every consumer and every replay entry is returned, ascending by
    /// position, so the shell can hand them to whoever takes the subscription over. The
    /// consumers' pending-ack maps are closed (a late ack on a consumer's thread still acks
    /// the cursor; a late send is refused), the consumers are removed, queued commands and
    /// timers are dropped. Afterwards [`handle_consumer_added`](Self::handle_consumer_added)
    /// is refused with [`AddConsumerError::Closed`], every other input is a no-op, and
    /// `poll_command`, `poll_timeout` and `poll_dead_letter` return nothing. A second close is
    /// `Err(Closed)`.
    pub fn handle_close(&mut self, now: u64) -> Result<Vec<ReturnedEntry>, Closed> {
        if self.closed {
            return Err(Closed);
        }
        self.closed = true;
        let mut out: Vec<ReturnedEntry> = Vec::new();
        for c in &self.consumers {
            let id = c.id;
            c.shared.pending.for_each_and_close(|pos, ack| {
                out.push(ReturnedEntry {
                    position: position_of(pos),
                    hash: ack.hash,
                    consumer: Some(id),
                });
            });
        }
        out.extend(
            self.replay
                .iter_all()
                .into_iter()
                .map(|(position, e)| ReturnedEntry {
                    position,
                    hash: e.hash,
                    consumer: None,
                }),
        );
        out.sort_by_key(|e| e.position);
        self.replay.clear();
        self.consumers.clear();
        self.ids.clear();
        self.publish_registry();
        self.commands.clear();
        self.dead_letters.clear();
        self.timers = Timers::default();
        debug!(now, returned = out.len(), "dispatcher closed");
        Ok(out)
    }

    /// Whether [`handle_close`](Self::handle_close) ran.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// `Err(Closed)` once the dispatcher is closed: for shells that want to refuse input
    /// themselves rather than rely on the no-op.
    pub fn ensure_open(&self) -> Result<(), Closed> {
        match self.closed {
            true => Err(Closed),
            false => Ok(()),
        }
    }
}
