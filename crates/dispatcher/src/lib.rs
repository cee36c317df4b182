#![doc = include_str!("../README.md")]

mod ack;
mod config;
mod core;
mod delayed;
pub mod driver;
mod error;
mod hash;
mod replay;
mod rng;
mod runtime;
mod selector;
mod shared;
mod sync;

pub use crate::hash::{
    key_hash31, murmur3_x86_32, slot, sticky_key_bytes, HashRange, KeyFields, CONSISTENT_RANGE,
    FULL_RANGE, NONE_KEY,
};
pub use crate::selector::{
    diff, ranges_contain, ring_point, Assignment, AutoSplitSelector, ConsistentHashingSelector,
    ConsumerInfo, ExclusiveRangeSelector, ImpactedConsumers, Ranges, SelectorError,
    StickyKeySelector, DEFAULT_POINTS_PER_CONSUMER,
};

pub use crate::ack::{AckEffect, AckHandle, BatchAck, ConsumerAckHandle, CursorAck, CursorCell};
pub use crate::config::{
    ActivePick, ConsumerId, ConsumerSpec, DeadLetterAction, DeadLetterPolicy, DispatcherConfig,
    FailoverConfig, InvalidConfig, KeySharedConfig, KeySharedMode, NackBackoff, SubscriptionType,
};
pub use crate::core::{BlockReason, ConsumerStats, DispatcherStats, DrainingHashStats};
pub use crate::core::{BoxedSelector, DispatchCommand, DispatchGate, Dispatcher, Verdict};
pub use crate::core::{Closed, ReturnedEntry};
pub use crate::core::{Holder, Holdings};
pub use crate::delayed::{DelayedDelivery, DelayedTracker};
pub use crate::driver::{AdminOp, DeliveryExtras, Driver, FlagWaker, Output, Persist};
pub use crate::error::{AckHandleError, AddConsumerError};
pub use crate::runtime::{
    ConsumerHandle, CursorView, Deliveries, Delivery, DeliverySink, Destination, DispatchPool,
    Event, EventSender, Livelock, ReadDelay, Refused, Runtime, RuntimeOptions, StepClock,
    WhyBlockedQuery,
};
pub use crate::shared::{NoopWaker, Waker};
