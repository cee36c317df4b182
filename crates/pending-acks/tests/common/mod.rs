//! Shared test helpers: a handler that records every call, and SplitMix64.
#![allow(dead_code)]

use std::fmt;
use std::sync::Mutex;

use pending_acks::{AddHandler, PendingAck, RemovalCause, RemoveHandler};

/// One handler call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ev {
    Start,
    End,
    Removed {
        consumer: u32,
        pos: (u64, u64),
        ack: PendingAck,
        cause: RemovalCause,
        closing: bool,
    },
    /// A callback passed to a bulk operation saw this position.
    Callback((u64, u64)),
}

impl fmt::Display for Ev {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ev::Start => write!(f, "  start_batch"),
            Ev::End => write!(f, "  end_batch"),
            Ev::Removed {
                consumer,
                pos,
                ack,
                cause,
                closing,
            } => write!(
                f,
                "  removed c{consumer} {}:{} remaining={} hash={} cause={cause}{}",
                pos.0,
                pos.1,
                ack.remaining,
                ack.hash,
                if *closing { " closing" } else { "" }
            ),
            Ev::Callback(p) => write!(f, "  callback {}:{}", p.0, p.1),
        }
    }
}

/// Records every call, in order, into one log shared with the bulk-operation callbacks.
#[derive(Default)]
pub struct Recorder {
    pub log: Mutex<Vec<Ev>>,
}

impl Recorder {
    pub fn push(&self, e: Ev) {
        self.log.lock().unwrap().push(e);
    }
    pub fn take(&self) -> Vec<Ev> {
        std::mem::take(&mut *self.log.lock().unwrap())
    }
}

impl RemoveHandler<(u64, u64), u32> for Recorder {
    fn on_removed(
        &self,
        consumer: u32,
        pos: (u64, u64),
        ack: PendingAck,
        cause: RemovalCause,
        closing: bool,
    ) {
        self.push(Ev::Removed {
            consumer,
            pos,
            ack,
            cause,
            closing,
        });
    }
    fn start_batch(&self) {
        self.push(Ev::Start);
    }
    fn end_batch(&self) {
        self.push(Ev::End);
    }
}

/// One `allow_add` call: (consumer, position, hash).
pub type AddCall = (u32, (u64, u64), u32);

/// Vetoes hashes divisible by `modulus`; records its calls.
pub struct VetoMultiples {
    pub modulus: u32,
    pub calls: Mutex<Vec<AddCall>>,
}

impl VetoMultiples {
    pub fn new(modulus: u32) -> Self {
        VetoMultiples {
            modulus,
            calls: Mutex::new(Vec::new()),
        }
    }
    pub fn vetoes(&self, hash: u32) -> bool {
        hash.is_multiple_of(self.modulus)
    }
}

impl AddHandler<(u64, u64), u32> for VetoMultiples {
    fn allow_add(&self, consumer: u32, pos: (u64, u64), hash: u32) -> bool {
        self.calls.lock().unwrap().push((consumer, pos, hash));
        !self.vetoes(hash)
    }
}

/// SplitMix64.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

pub fn ack(remaining: u32, hash: u32) -> PendingAck {
    PendingAck { remaining, hash }
}
