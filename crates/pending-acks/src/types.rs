//! Values, causes, outcomes and handler traits of the map.

/// What the map stores per position: the count of messages of the entry still unacknowledged
/// and the entry's sticky-key hash.
///
/// `hash == 0` means "no hash" (Shared subscriptions); the map does not validate hashes.
/// `remaining` counts the messages of a batch entry not yet acknowledged (1 for a plain message);
/// [`PendingAcks::update_remaining`](crate::PendingAcks::update_remaining) lowers it on
/// batch-index acks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PendingAck {
    /// Messages of the entry not yet acknowledged.
    pub remaining: u32,
    /// Sticky-key hash of the entry, 0 for none.
    pub hash: u32,
}

/// Why an entry left the map; passed to [`RemoveHandler::on_removed`] with every removal.
///
/// Pulsar only tells its handler whether the map is closing; keeping the cause lets a draining
/// tracker, stats and logs tell an ack from a mark-delete cleanup (on Key_Shared, Pulsar's cleanup of pending acks on skip/clear/expiry ends draining early).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RemovalCause {
    /// The consumer acknowledged the entry (all its messages).
    Acked,
    /// The consumer negatively acknowledged the entry; it will be redelivered.
    Nacked,
    /// The consumer asked for redelivery (by id or all unacked).
    RedeliveryRequested,
    /// The consumer closed or disconnected; its entries go back for redelivery.
    ConsumerClosed,
    /// The subscription's mark-delete position moved past the entry without an ack
    /// (skip, clear-backlog, expiry, backlog-quota eviction).
    MarkDeleteAdvanced,
}

impl RemovalCause {
    /// A stable lowercase name, for logs and metrics labels.
    pub fn as_str(self) -> &'static str {
        match self {
            RemovalCause::Acked => "acked",
            RemovalCause::Nacked => "nacked",
            RemovalCause::RedeliveryRequested => "redelivery_requested",
            RemovalCause::ConsumerClosed => "consumer_closed",
            RemovalCause::MarkDeleteAdvanced => "mark_delete_advanced",
        }
    }
}

impl core::fmt::Display for RemovalCause {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A successful [`PendingAcks::add_if_allowed`](crate::PendingAcks::add_if_allowed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddOutcome {
    /// The position was not in the map; it is now.
    Inserted,
    /// The position was already in the map (a re-send); its value was overwritten. The old
    /// value is returned. Overwriting is not a removal: the remove handler is not called.
    Replaced(PendingAck),
}

/// Why [`PendingAcks::add_if_allowed`](crate::PendingAcks::add_if_allowed) refused an entry.
/// The caller must not send the entry (typically it goes back to the replay set).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AddRefused {
    /// The map was closed by `for_each_and_close`; a closed map refuses every add forever.
    #[error("pending-acks map is closed")]
    Closed,
    /// The installed [`AddHandler`] returned false (e.g. the hash is draining on another
    /// consumer).
    #[error("add handler vetoed the entry")]
    Vetoed,
}

/// Why [`PendingAcks::try_update_remaining`](crate::PendingAcks::try_update_remaining) did not
/// lower an entry's remaining count. The map is unchanged when one is returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RemainingError {
    /// The position is not in the map (never sent to this consumer, or already removed).
    #[error("position not in the pending-acks map")]
    Absent,
    /// More messages were acked than remain: an over-ack, distinct from an exact final ack
    /// (`Ok(0)`). The entry keeps `remaining`.
    #[error("over-ack: {acked_delta} messages acked but only {remaining} remain")]
    Underflow {
        /// The count still stored for the entry.
        remaining: u32,
        /// The count the caller tried to subtract.
        acked_delta: u32,
    },
}

/// Decides whether an entry may be added; installed with
/// [`PendingAcks::set_add_handler`](crate::PendingAcks::set_add_handler).
///
/// Runs **inside the map's write lock**, so a veto and the map's content are one atomic view.
/// It must not call back into the same map (that deadlocks); it may call into other structures
/// that come later in the lock order (pending-acks → draining-hashes).
pub trait AddHandler<P, C>: Send + Sync {
    /// Returns true to let `consumer` record `pos` with `hash`, false to veto.
    fn allow_add(&self, consumer: C, pos: P, hash: u32) -> bool;
}

/// Told about every removal from the map, exactly once per removed entry, with its cause;
/// installed with [`PendingAcks::set_remove_handler`](crate::PendingAcks::set_remove_handler).
///
/// Runs **inside the map's write lock**. It must not call back into the same map (that
/// deadlocks); it may call into structures later in the lock order (pending-acks →
/// draining-hashes). Bulk removals (`remove_all_up_to`, `for_each_and_clear`,
/// `for_each_and_close`) bracket their calls with [`start_batch`](Self::start_batch) and
/// [`end_batch`](Self::end_batch), only when at least one entry is removed.
pub trait RemoveHandler<P, C>: Send + Sync {
    /// `ack` at `pos` left `consumer`'s map because of `cause`. `closing` is true iff the map is
    /// closed (during `for_each_and_close` and any removal after it).
    fn on_removed(&self, consumer: C, pos: P, ack: PendingAck, cause: RemovalCause, closing: bool);
    /// A bulk removal starts; the default does nothing.
    fn start_batch(&self) {}
    /// The bulk removal that last called `start_batch` ended; the default does nothing.
    fn end_batch(&self) {}
}
