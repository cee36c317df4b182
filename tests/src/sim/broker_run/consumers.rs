//! The consumers of a broker run: joins, graceful leaves (CLOSE_CONSUMER), crashes (the broker
//! notices after `notice=`), broker restarts and reconnects, and the applications that take
//! messages from their `client::Consumer` and ack or nack them.

use std::collections::{BTreeMap, VecDeque};

use client::Consumer;
use cursor::Position;

use super::frames::key_text;
use super::{CState, Cons, Run, Task, Up, TOPIC};
use crate::sim::check::{msg_str, MsgRef, ViolationKind};
use crate::sim::scenario::ConsumerOpts;
use crate::sim::world::client_config;

impl Run {
    pub(super) fn join(&mut self, name: &str, o: ConsumerOpts) {
        let live = |c: &Cons| matches!(c.state, CState::Connected | CState::Leaving);
        if self.cons.get(name).is_some_and(live) {
            let d = format!("scenario joins {name}, which is already connected");
            return self.simple(ViolationKind::Expectation, d);
        }
        let client = match Consumer::new(client_config(&o, self.ordered_nack)) {
            Ok(c) => c,
            Err(e) => {
                let d = format!("bad consumer options for {name}: {e}");
                return self.simple(ViolationKind::Expectation, d);
            }
        };
        self.log(format!(
            "join {name} queue={} proc={}-{} nack={} manual={}",
            o.queue, o.proc.0, o.proc.1, o.nack, o.manual
        ));
        let c = Cons {
            opts: o,
            client,
            conn: None,
            state: CState::Connected,
            epoch: 0,
            busy: None,
            up: VecDeque::new(),
            down: VecDeque::new(),
            up_last: 0,
            down_last: 0,
            next_rid: 1,
            acks: BTreeMap::new(),
            sizes: BTreeMap::new(),
            close_sent: false,
            reconnect_at: None,
        };
        self.cons.insert(name.to_string(), c);
        self.connect(name);
    }

    /// A new connection for `name`: CONNECT and SUBSCRIBE at once, then the client connects.
    pub(super) fn connect(&mut self, name: &str) {
        use wire::proto::command_subscribe::{InitialPosition, SubType};
        let mut conn = self.b.connect(name);
        let mut bytes = Vec::new();
        let hello = wire::commands::connect("sim", broker::PROTOCOL_VERSION);
        if self.ordered_nack {
            wire::pip493::encode_connect_with_flag(hello, &mut bytes);
        } else {
            wire::encode_command(&hello, &mut bytes);
        }
        let (t, meta) = if self.key_shared {
            let m = wire::proto::KeySharedMeta {
                key_shared_mode: wire::proto::KeySharedMode::AutoSplit as i32,
                ..Default::default()
            };
            (SubType::KeyShared, Some(m))
        } else {
            (SubType::Shared, None)
        };
        let mut sub =
            wire::commands::subscribe(TOPIC, "sim", 1, 1, t, meta, InitialPosition::Earliest);
        if let (Some(s), Some(c)) = (sub.subscribe.as_mut(), self.cons.get(name)) {
            s.consumer_name = Some(name.to_string());
            s.priority_level = Some(c.opts.prio);
        }
        wire::encode_command(&sub, &mut bytes);
        let r = conn.handle_bytes(&bytes);
        let (now, id) = (self.now, conn.id());
        let Some(c) = self.cons.get_mut(name) else {
            return;
        };
        c.conn = Some(conn);
        c.next_rid = 2;
        c.up.clear();
        c.down.clear();
        c.acks.clear();
        c.reconnect_at = None;
        c.epoch = c.client.connect(now);
        self.model.subscribed((name.to_string(), id));
        self.log(format!("connect {name} conn={id}"));
        if let Err(e) = r {
            self.simple(
                ViolationKind::Model,
                format!("the broker closed {name}'s new connection: {e:?}"),
            );
        }
        self.poll_one(name);
        self.pump(name);
        self.try_start(name);
        self.maybe_close(name);
    }

    pub(super) fn leave(&mut self, name: &str) {
        match self.cons.get_mut(name) {
            Some(c) if c.state == CState::Connected => c.state = CState::Leaving,
            _ => return,
        }
        self.log(format!("leave {name} (graceful)"));
        self.maybe_close(name);
    }

    /// A leaving consumer whose application is idle sends CLOSE_CONSUMER (then disconnects).
    pub(super) fn maybe_close(&mut self, name: &str) {
        let Some(c) = self.cons.get_mut(name) else {
            return;
        };
        if c.state != CState::Leaving || c.busy.is_some() || c.close_sent || c.conn.is_none() {
            return;
        }
        c.close_sent = true;
        let mut bytes = Vec::new();
        wire::encode_command(&wire::commands::close_consumer(1, c.next_rid), &mut bytes);
        c.next_rid += 1;
        self.push_up(name, bytes, true);
    }

    pub(super) fn crash(&mut self, name: &str) {
        let conn = match self.cons.get_mut(name) {
            Some(c) if matches!(c.state, CState::Connected | CState::Leaving) => {
                c.state = CState::Crashed;
                c.reconnect_at = None;
                c.busy = None;
                c.up.clear();
                c.down.clear();
                c.conn.take()
            }
            _ => return,
        };
        self.order.abandon(name);
        self.log(format!("crash {name}"));
        if let Some(conn) = conn {
            self.dying
                .push((self.now + self.cfg.notice, name.to_string(), conn));
        }
    }

    /// A broker restart loses every consumer connection (crashed ones the broker had not
    /// noticed yet too): the applications lose their work, the clients of connected consumers
    /// start afresh and reconnect after 10-100 ms (as in the world); leaving and crashed
    /// consumers are gone. Nacks the broker held are gone with it.
    pub(super) fn lose_consumer_connections(&mut self) {
        self.dying.clear();
        self.nacked_by.clear();
        self.model.clear();
        let names: Vec<String> = self.cons.keys().cloned().collect();
        for name in names {
            self.order.abandon(&name);
            let ordered = self.ordered_nack;
            let Some(c) = self.cons.get_mut(&name) else {
                continue;
            };
            c.conn = None;
            c.busy = None;
            c.up.clear();
            c.down.clear();
            c.acks.clear();
            if c.state != CState::Connected {
                c.state = CState::Gone;
                continue;
            }
            let Ok(fresh) = Consumer::new(client_config(&c.opts, ordered)) else {
                continue;
            };
            c.client = fresh;
            let at = self.now + self.rng_net.range(10, 100);
            if let Some(c) = self.cons.get_mut(&name) {
                c.reconnect_at = Some(at);
            }
        }
    }

    /// Crashed connections the broker now notices, and reconnections due.
    pub(super) fn due_connections(&mut self) {
        let now = self.now;
        let (gone, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.dying)
            .into_iter()
            .partition(|d| d.0 <= now);
        self.dying = keep;
        for (_, name, conn) in gone {
            self.model.gone(&(name.clone(), conn.id()));
            drop(conn);
            self.log(format!("broker notices {name} is gone"));
        }
        let due: Vec<String> = self
            .cons
            .iter()
            .filter(|(_, c)| c.reconnect_at.is_some_and(|t| t <= now))
            .map(|(n, _)| n.clone())
            .collect();
        for n in due {
            self.connect(&n);
        }
    }

    /// Bytes from `name`'s client on their way (`close`: a CLOSE_CONSUMER).
    pub(super) fn push_up(&mut self, name: &str, bytes: Vec<u8>, close: bool) {
        self.push_up_returning(name, bytes, close, Vec::new());
    }

    /// [`push_up`](Self::push_up) of a REDELIVER or NEGATIVE_ACK that hands back `returns`.
    pub(super) fn push_up_returning(
        &mut self,
        name: &str,
        bytes: Vec<u8>,
        close: bool,
        returns: Vec<Position>,
    ) {
        let at = self.now + self.net();
        if let Some(c) = self.cons.get_mut(name) {
            c.up_last = at.max(c.up_last);
            c.up.push_back(Up {
                at: c.up_last,
                bytes,
                close,
                returns,
            });
        }
    }

    pub(super) fn try_start(&mut self, name: &str) {
        let now = self.now;
        let d = match self.cons.get_mut(name) {
            Some(c) if c.state == CState::Connected && c.busy.is_none() && c.conn.is_some() => {
                c.client.receive(now)
            }
            _ => None,
        };
        if let Some(d) = d {
            let msg: MsgRef = (
                Position::new(d.id.ledger_id, d.id.entry_id),
                d.id.batch_index,
            );
            let first = d.chunk_ids.first().map_or(msg, |c| {
                (Position::new(c.ledger_id, c.entry_id), c.batch_index)
            });
            self.log(format!(
                "app {name} starts {} key={} redelivery={}",
                msg_str(msg),
                key_text(d.key.as_deref()),
                d.redelivery_count
            ));
            for v in self
                .order
                .start_span(now, name, d.key.as_deref(), first, msg)
            {
                self.log(format!("VIOLATION {v}"));
                self.violations.push(v);
            }
            let (manual, (a, b)) = self
                .cons
                .get(name)
                .map_or((true, (0, 0)), |c| (c.opts.manual, c.opts.proc));
            let done_at = (!manual).then(|| now + self.rng_time.range(a, b));
            if let Some(c) = self.cons.get_mut(name) {
                c.busy = Some(Task {
                    id: d.id,
                    msg,
                    done_at,
                });
            }
        }
        self.pump(name);
    }

    /// The application finishes what it holds: an ack, or a nack.
    pub(super) fn finish(&mut self, name: &str, nack: bool) {
        let now = self.now;
        let Some(c) = self.cons.get_mut(name) else {
            return;
        };
        let Some(t) = c.busy.take() else { return };
        let line = crate::sim::world::hand_back(
            &mut c.client,
            &mut self.order,
            now,
            name,
            (t.id, t.msg),
            nack,
        );
        self.log(line);
        self.pump(name);
        self.maybe_close(name);
        self.try_start(name);
    }

    pub(super) fn manual_finish(&mut self, name: &str, p: Option<Position>, nack: bool) {
        match (self.cons.get(name).and_then(|c| c.busy), p) {
            (None, _) => {
                let d = format!("script: {name} holds no message to finish");
                self.simple(ViolationKind::Expectation, d);
            }
            (Some(t), Some(p)) if t.msg.0 != p => {
                let d = format!("script: {name} holds {}, not {p}", msg_str(t.msg));
                self.simple(ViolationKind::Expectation, d);
            }
            _ => self.finish(name, nack),
        }
    }

    pub(super) fn auto(&mut self, name: &str) {
        let now = self.now;
        let Some(c) = self.cons.get_mut(name) else {
            return;
        };
        c.opts.manual = false;
        let (a, b) = c.opts.proc;
        if c.busy.is_some() {
            let at = now + self.rng_time.range(a, b);
            if let Some(t) = self.cons.get_mut(name).and_then(|c| c.busy.as_mut()) {
                t.done_at = Some(at);
            }
        } else {
            self.try_start(name);
        }
    }
}
