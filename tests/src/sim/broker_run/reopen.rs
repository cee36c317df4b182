//! Producers the broker closed after a failed write (`store_faults=on`): the sim reopens them
//! as Pulsar's clients do, on the same connection at once and then backing off while the
//! broker refuses them (`ProducerBlockedQuotaExceededException`), and sends their messages
//! that were not receipted again once they are open. (A client fails the messages it holds to
//! the application on that refusal; the sim's application sends them again.)

use std::collections::VecDeque;

use wire::proto::{BaseCommand, MessageMetadata, ServerError};

use super::{Run, TOPIC};
use crate::sim::check::ViolationKind;

/// The first wait after a refused reopen, doubled per refusal up to [`REOPEN_MAX_MS`]: a
/// tenth of the clients' (100 ms, doubling), as the sim's broker refuses for a tenth of the
/// broker's default time.
const REOPEN_FIRST_MS: u64 = 10;
const REOPEN_MAX_MS: u64 = 320;

/// Request ids of reopening PRODUCERs start here (a first PRODUCER's is the producer id + 1).
pub(super) const REOPEN_REQUESTS: u64 = 1_000_000;

type Pending = VecDeque<(u64, MessageMetadata, u32)>;

/// `queue` split into producer `pid`'s messages and the others, each in order.
fn split_off(queue: &mut Pending, pid: u64) -> Pending {
    let (mine, rest): (Pending, Pending) = std::mem::take(queue)
        .into_iter()
        .partition(|(p, _, _)| *p == pid);
    *queue = rest;
    mine
}

impl Run {
    /// CLOSE_PRODUCER for `pid`: its messages not yet receipted wait, in order, for it to be
    /// open again, which is tried at once.
    pub(super) fn producer_closed(&mut self, pid: u64) {
        self.closed_seen = true;
        self.producers_open.remove(&(pid as u32));
        let mine = split_off(&mut self.unreceipted, pid);
        self.log(format!(
            "producer {pid}: closed by the broker after a failed write, {} message(s) wait",
            mine.len()
        ));
        self.held_back.extend(mine);
        self.open_later(pid);
    }

    /// Producer `pid` is opened by the next [`due_reopens`](Self::due_reopens).
    pub(super) fn open_later(&mut self, pid: u64) {
        self.reopen
            .entry(pid)
            .or_insert((self.now, REOPEN_FIRST_MS));
    }

    /// Sends the PRODUCERs that are due, and sends again the held-back messages of every
    /// producer that is open again.
    pub(super) fn due_reopens(&mut self) {
        let due: Vec<u64> = self
            .reopen
            .iter()
            .filter(|(pid, (at, _))| *at <= self.now && !self.reopening.values().any(|p| p == *pid))
            .map(|(pid, _)| *pid)
            .collect();
        for pid in due {
            self.next_request += 1;
            let request = REOPEN_REQUESTS + self.next_request;
            self.reopening.insert(request, pid);
            let name = format!("producer-{pid}");
            let mut bytes = Vec::new();
            let cmd = wire::commands::producer(TOPIC, pid, request, Some(&name));
            wire::encode_command(&cmd, &mut bytes);
            if let Err(e) = self.producer.handle_bytes(&bytes) {
                let d = format!("the producer's connection closed on a PRODUCER: {e:?}");
                self.simple(ViolationKind::Model, d);
            }
        }
        self.producer_frames();
        for pid in std::mem::take(&mut self.reopened) {
            self.producers_open.insert(pid as u32);
            let mine = split_off(&mut self.held_back, pid);
            self.log(format!(
                "producer {pid}: open again, sends {} message(s) again",
                mine.len()
            ));
            for (p, m, n) in mine {
                self.send(p as u32, m, n);
            }
        }
    }

    /// PRODUCER_SUCCESS for request `request`: a reopened producer, if it was one.
    pub(super) fn producer_reopened(&mut self, request: u64) {
        if let Some(pid) = self.reopening.remove(&request) {
            self.reopen.remove(&pid);
            self.reopened.push(pid);
        }
    }

    /// Whether `c` is the refusal of a reopening PRODUCER while the topic's storage refuses
    /// writes: the producer then tries again after its backoff.
    pub(super) fn reopen_refused(&mut self, c: &BaseCommand) -> bool {
        let Some(e) = &c.error else {
            return false;
        };
        if e.error != ServerError::ProducerBlockedQuotaExceededException as i32 {
            return false;
        }
        let Some(pid) = self.reopening.remove(&e.request_id) else {
            return false;
        };
        let now = self.now;
        if let Some((at, backoff)) = self.reopen.get_mut(&pid) {
            *at = now + *backoff;
            *backoff = (*backoff * 2).min(REOPEN_MAX_MS);
        }
        self.log(format!(
            "producer {pid}: refused while the store refuses writes, tries again later"
        ));
        true
    }

    /// Whether no producer waits to be open again.
    pub(super) fn producers_settled(&self) -> bool {
        self.reopen.is_empty() && self.held_back.is_empty() && self.reopened.is_empty()
    }

    /// When the next reopen is due.
    pub(super) fn next_reopen(&self) -> Option<u64> {
        self.reopen.values().map(|(at, _)| *at).min()
    }
}
