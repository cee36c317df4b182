//! Write requests and the receipts that wait for them.
//!
//! A read's SENDs push their entries into their topics ([`Topic::push`]); at the end of the
//! read the session asks for one write per topic written ([`Session::poll_write`]). The shell
//! runs it ([`WriteRequest::run`]: the store's IO happens there, on the shell's thread, now or
//! later) and hands the outcome back ([`Session::handle_written`]). Each SEND's receipt waits
//! in order: once it is held, every reply queued after it waits behind it too, so a client
//! reads its receipts in sequence order and before, say, its CLOSE_PRODUCER's SUCCESS. A failed
//! write closes its SENDs' producers instead (CLOSE_PRODUCER): the clients reopen them on the
//! same connection and resend what was not receipted.

use std::sync::Arc;

use super::Session;
use crate::topic::{Topic, Written};
use cursor::Position;

/// A write the session asks its shell to run: the topic's queued entries, through `through`.
#[derive(Debug)]
pub(crate) struct WriteRequest {
    /// Hand it back with the outcome ([`Session::handle_written`]).
    pub id: u64,
    topic: Arc<Topic>,
    through: Position,
}

impl WriteRequest {
    /// Runs the write: the store's IO (an `fsync` with `--sync always`), on the caller's
    /// thread, at `now_ms` (ms since the Unix epoch: a failure refuses new producers for a
    /// while from then). Shells and simulators call this; the session never does.
    pub(crate) fn run(&self, now_ms: u64) -> Written {
        self.topic.write_through(self.through, now_ms)
    }

    /// The topic written.
    #[cfg(test)]
    pub(crate) fn topic(&self) -> &str {
        &self.topic.name
    }

    /// Runs every write `session` asks for, here and now, handing each outcome back: what a
    /// shell that does not keep writes waiting does (the TCP shell after each read).
    pub(crate) fn run_all(session: &mut Session, now_ms: u64) {
        while let Some(w) = session.poll_write() {
            let outcome = w.run(now_ms);
            session.handle_written(w.id, &outcome);
        }
    }
}

/// Replies that wait behind a write request.
#[derive(Debug)]
pub(super) enum Held {
    /// Ready frames, queued after a receipt that still waits.
    Frames(Vec<u8>),
    /// SEND_RECEIPTs encoded in `ok`, for `(producer id, sequence id)`s `sends`, waiting for
    /// write `request`.
    Receipts {
        request: u64,
        ok: Vec<u8>,
        sends: Vec<(u64, u64)>,
    },
}

/// A session's write requests: those being filled by the current read, those handed out, and
/// the replies waiting for them.
#[derive(Debug, Default)]
pub(super) struct Writes {
    next_id: u64,
    /// Requests of the read being handled: one per topic, through its last pushed position.
    filling: Vec<WriteRequest>,
    /// Requests ready for the shell.
    ready: std::collections::VecDeque<WriteRequest>,
    pub(super) held: std::collections::VecDeque<Held>,
    /// Producers the broker closed after a failed write, until the client opens or closes
    /// the id again: their SENDs still on the way are dropped (the client resends them).
    pub(super) closed: std::collections::BTreeSet<u64>,
}

impl Writes {
    /// The request that will write `topic` through `pos` (one per topic per read).
    fn request_for(&mut self, topic: &Arc<Topic>, pos: Position) -> u64 {
        if let Some(r) = self
            .filling
            .iter_mut()
            .find(|r| Arc::ptr_eq(&r.topic, topic))
        {
            r.through = r.through.max(pos);
            return r.id;
        }
        self.next_id += 1;
        self.filling.push(WriteRequest {
            id: self.next_id,
            topic: topic.clone(),
            through: pos,
        });
        self.next_id
    }

    /// Whether replies must wait behind a receipt.
    pub(super) fn holding(&self) -> bool {
        !self.held.is_empty()
    }
}

impl Session {
    /// Holds the receipt of a SEND pushed at `pos` until its write completes.
    pub(super) fn hold_receipt(
        &mut self,
        topic: &Arc<Topic>,
        pos: Position,
        receipt: &wire::proto::BaseCommand,
        send: (u64, u64),
    ) {
        let request = self.writes.request_for(topic, pos);
        if self.state.cfg.legacy.early_receipt {
            return self.send(receipt);
        }
        let held = &mut self.writes.held;
        match held.back_mut() {
            Some(Held::Receipts {
                request: r,
                ok,
                sends,
            }) if *r == request => {
                wire::encode_command(receipt, ok);
                sends.push(send);
            }
            _ => held.push_back(Held::Receipts {
                request,
                ok: super::encode_onto(None, receipt).unwrap_or_default(),
                sends: vec![send],
            }),
        }
    }

    /// The read is handled: its write requests are ready for the shell.
    pub(super) fn requests_ready(&mut self) {
        let w = &mut self.writes;
        w.ready.extend(w.filling.drain(..));
    }

    /// The next write for the shell to run ([`WriteRequest::run`]), then to hand back with
    /// [`handle_written`](Self::handle_written). The receipts of the read wait until then.
    pub(crate) fn poll_write(&mut self) -> Option<WriteRequest> {
        self.writes.ready.pop_front()
    }

    /// Write `id` completed: its receipts go out, with every reply that waited behind them up
    /// to the next receipt still waiting. If it failed, the producers of its SENDs are closed
    /// instead (see [`close_after_failed_write`](Self::close_after_failed_write)).
    pub(crate) fn handle_written(&mut self, id: u64, outcome: &Written) {
        let mut failed = Vec::new();
        for (i, h) in self.writes.held.iter_mut().enumerate() {
            let Held::Receipts { request, ok, sends } = h else {
                continue;
            };
            if *request != id {
                continue;
            }
            *h = match outcome {
                Ok(()) => Held::Frames(std::mem::take(ok)),
                Err(_) => {
                    failed.push((i, std::mem::take(sends)));
                    Held::Frames(Vec::new())
                }
            };
        }
        if let Err(e) = outcome {
            for (i, sends) in failed {
                let frames = self.close_after_failed_write(&sends, e);
                self.writes.held[i] = Held::Frames(frames);
            }
        }
        while let Some(Held::Frames(_)) = self.writes.held.front() {
            if let Some(Held::Frames(f)) = self.writes.held.pop_front() {
                if !f.is_empty() {
                    self.out.push_back(f);
                }
            }
        }
    }

    /// The SENDs `sends` were not stored: their producers are closed (CLOSE_PRODUCER, in place
    /// of the receipts), as Pulsar closes producers over a backlog quota. The clients keep the
    /// connection (and its consumers), reopen the producer, and resend what was not
    /// receipted; while the topic refuses producers ([`Topic::refuses_producers`]) the reopen
    /// is refused with `ProducerBlockedQuotaExceededException`, which every client family
    /// backs off from, failing the messages it holds to the application. A SEND_ERROR would
    /// have closed the whole connection (every client does that on `PersistenceError`) and
    /// retried at once. SENDs still arriving for a closed producer are dropped: they are
    /// resent. Returns the frames to queue.
    fn close_after_failed_write(
        &mut self,
        sends: &[(u64, u64)],
        e: &crate::storage::StorageError,
    ) -> Vec<u8> {
        let mut frames = Vec::new();
        // A producer closes once: its later SENDs find it gone.
        for &(producer_id, _) in sends {
            if self.close_failed_producer(producer_id, &e.to_string()) {
                let cmd = wire::commands::close_producer(producer_id, 0);
                wire::encode_command(&cmd, &mut frames);
            }
        }
        frames
    }

    /// Forgets producer `producer_id`, whose entries a write failed, and drops its SENDs until
    /// the client opens or closes it again; whether it was open (then the caller queues its
    /// CLOSE_PRODUCER).
    pub(super) fn close_failed_producer(&mut self, producer_id: u64, why: &str) -> bool {
        let Some(p) = self.producers.remove(&producer_id) else {
            return false;
        };
        tracing::warn!(conn = self.id, topic = %p.topic.name, producer_id, error = why,
            "a write failed: the producer is closed, and its client resends what was not receipted");
        self.producer_gone(&p.topic, producer_id);
        self.writes.closed.insert(producer_id);
        true
    }
}
