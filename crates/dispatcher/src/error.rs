//! Typed errors, one small enum per operation.

use cursor::Position;

use crate::config::{ConsumerId, KeySharedMode};
use crate::selector::SelectorError;

/// Why [`Dispatcher::handle_consumer_added`](crate::Dispatcher::handle_consumer_added) refused
/// a consumer. The dispatcher is unchanged after an error.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AddConsumerError {
    /// A consumer with this id is already connected.
    #[error("consumer {0} is already connected")]
    DuplicateConsumer(ConsumerId),
    /// The Key_Shared selector refused it (exclusive range conflict, no range left, …).
    #[error("selector refused the consumer: {0}")]
    Selector(#[from] SelectorError<ConsumerId>),
    /// The runtime's dispatcher thread is not running (shut down, or could not start).
    #[error("the dispatcher thread is not running")]
    DispatcherStopped,
    /// The consumer asks for a Key_Shared mode other than the subscription's, while other
    /// consumers are connected (with none connected, the subscription adopts it).
    #[error("consumer {consumer} asks for Key_Shared mode {requested:?}, the subscription uses {subscription:?}")]
    ModeMismatch {
        /// The subscription's mode.
        subscription: KeySharedMode,
        /// The refused consumer.
        consumer: ConsumerId,
        /// The mode it asked for.
        requested: KeySharedMode,
    },
    /// The dispatcher was closed ([`Dispatcher::handle_close`](crate::Dispatcher::handle_close)).
    #[error("the dispatcher is closed")]
    Closed,
}

/// Why an ack through an [`AckHandle`](crate::AckHandle) failed. Nothing changed: the pending
/// ack (if any) is still there.
#[derive(Debug, thiserror::Error)]
pub enum AckHandleError {
    /// The cursor refused the ack (position beyond the ledger, unknown ledger, bad batch
    /// index, store failure).
    #[error("cursor refused the ack of {position}: {source}")]
    Cursor {
        /// The acked position.
        position: Position,
        /// The cursor's error.
        #[source]
        source: cursor::CursorError,
    },
}
