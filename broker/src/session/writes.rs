//! Write requests and the receipts that wait for them.
//!
//! A read's SENDs push their entries into their topics ([`Topic::push`]); at the end of the
//! read the session asks for one write per topic written ([`Session::poll_write`]). The shell
//! runs it ([`WriteRequest::run`]: the store's IO happens there, on the shell's thread, now or
//! later) and hands the outcome back ([`Session::handle_written`]). Each SEND's receipt waits
//! in order: once it is held, every reply queued after it waits behind it too, so a client
//! reads its receipts in sequence order and before, say, its CLOSE_PRODUCER's SUCCESS. A failed
//! write turns its receipts into SEND_ERRORs (`PersistenceError`); Pulsar's clients then resend
//! on a new connection.

use std::sync::Arc;

use cursor::Position;
use wire::proto::ServerError;

use super::Session;
use crate::topic::{Topic, Written};

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
    /// thread. Shells and simulators call this; the session never does.
    pub(crate) fn run(&self) -> Written {
        self.topic.write_through(self.through)
    }

    /// The topic written.
    #[cfg(test)]
    pub(crate) fn topic(&self) -> &str {
        &self.topic.name
    }

    /// Runs every write `session` asks for, here and now, handing each outcome back: what a
    /// shell that does not keep writes waiting does (the TCP shell after each read).
    pub(crate) fn run_all(session: &mut Session) {
        while let Some(w) = session.poll_write() {
            let outcome = w.run();
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

    /// Write `id` completed: its receipts (or, if it failed, SEND_ERRORs) go out, with every
    /// reply that waited behind them up to the next receipt still waiting.
    pub(crate) fn handle_written(&mut self, id: u64, outcome: &Written) {
        for h in self.writes.held.iter_mut() {
            let Held::Receipts { request, ok, sends } = h else {
                continue;
            };
            if *request != id {
                continue;
            }
            let frames = match outcome {
                Ok(()) => std::mem::take(ok),
                Err(e) => {
                    tracing::warn!(conn = self.id, error = %e, sends = sends.len(), "a write failed; its SENDs get SEND_ERROR");
                    let message = format!("not stored: {e}");
                    let mut buf = Vec::new();
                    for &(producer, sequence) in sends.iter() {
                        let cmd = wire::commands::send_error(
                            producer,
                            sequence,
                            ServerError::PersistenceError,
                            &message,
                        );
                        wire::encode_command(&cmd, &mut buf);
                    }
                    buf
                }
            };
            *h = Held::Frames(frames);
        }
        while let Some(Held::Frames(_)) = self.writes.held.front() {
            if let Some(Held::Frames(f)) = self.writes.held.pop_front() {
                self.out.push_back(f);
            }
        }
    }
}
