//! Ordered nack end to end: the real client state machine (`client` crate, `ordered_nack`) in
//! front of the dispatcher core. The application must see a nacked message again before any
//! later message of its key, and other keys must keep flowing during the hold.

mod common;

use client::{Command as ClientCommand, Consumer, ConsumerConfig, IncomingMessage, MessageId};
use common::World;
use cursor::Position;
use dispatcher::ConsumerId;
use insta::assert_snapshot;

struct Pair {
    w: World,
    c: Consumer,
    id: ConsumerId,
    epoch: u64,
    seen: usize,
    /// What the application was handed: (entry id, key).
    app: Vec<(u64, String)>,
    log: Vec<String>,
}

fn pos(id: &client::EntryId) -> Position {
    Position::new(id.ledger_id, id.entry_id)
}

fn list(ps: &[Position]) -> String {
    ps.iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

impl Pair {
    fn new(ordered: bool) -> Pair {
        let mut w = common::run("key_shared\njoin A\n");
        w.quiet = true;
        let id = w.id("A");
        let mut c = Consumer::new(ConsumerConfig {
            receiver_queue_size: 10,
            ordered_nack: ordered,
            nack_delay: 1000,
            ..ConsumerConfig::default()
        })
        .unwrap();
        let epoch = c.connect(0);
        let mut p = Pair {
            w,
            c,
            id,
            epoch,
            seen: 0,
            app: Vec::new(),
            log: Vec::new(),
        };
        p.exchange();
        p
    }

    /// Client commands to the broker, broker sends to the client, until both are quiet.
    fn exchange(&mut self) {
        loop {
            let mut progressed = false;
            while let Some(cmd) = self.c.poll_command() {
                progressed = true;
                let now = self.w.now;
                match cmd {
                    ClientCommand::Flow(n) => {
                        self.w.d.handle_flow(now, self.id, n);
                    }
                    ClientCommand::Ack(ids) => {
                        for m in ids {
                            let p = Position::new(m.ledger_id, m.entry_id);
                            self.w.ack.ack(self.id, p).unwrap();
                        }
                    }
                    ClientCommand::Nack { entries, delay } => {
                        let ps: Vec<Position> = entries.iter().map(|e| pos(&e.entry)).collect();
                        self.log
                            .push(format!("client nack [{}] delay {delay}", list(&ps)));
                        self.w.d.handle_nack(now, self.id, &ps, Some(delay));
                    }
                    ClientCommand::Release(entries) => {
                        let ps: Vec<Position> = entries.iter().map(|e| pos(&e.entry)).collect();
                        self.log.push(format!("client release [{}]", list(&ps)));
                        self.w.d.handle_release(now, self.id, &ps);
                    }
                    ClientCommand::RedeliverUnacked(entries) => {
                        let ps: Vec<Position> = entries.iter().map(|e| pos(&e.entry)).collect();
                        self.log.push(format!("client redeliver [{}]", list(&ps)));
                        self.w.d.handle_redeliver(now, self.id, &ps);
                    }
                }
            }
            self.w.pump();
            let sends: Vec<_> = self.w.sends[self.seen..].to_vec();
            self.seen = self.w.sends.len();
            for (_, e) in sends {
                progressed = true;
                let key = e.meta.ordering_key.clone();
                self.log.push(format!(
                    "broker send {} ({})",
                    e.position,
                    String::from_utf8_lossy(key.as_deref().unwrap_or_default())
                ));
                let msg = IncomingMessage {
                    epoch: self.epoch,
                    id: MessageId::new(e.position.ledger_id, e.position.entry_id),
                    key,
                    redelivery_count: self.w.d.redelivery_count(e.position),
                    ..Default::default()
                };
                self.c.on_message(self.w.now, msg).unwrap();
            }
            if !progressed {
                return;
            }
        }
    }

    /// The application takes every queued message; `fail` decides whether it nacks one.
    fn app_round(&mut self, mut fail: impl FnMut(u64, u32) -> bool) {
        while let Some(m) = self.c.receive(self.w.now) {
            let key = String::from_utf8_lossy(m.key.as_deref().unwrap_or_default()).into_owned();
            self.log.push(format!("app got {} ({key})", m.id.entry_id));
            self.app.push((m.id.entry_id, key));
            if fail(m.id.entry_id, m.redelivery_count) {
                self.c.nack(self.w.now, m.id).unwrap();
            } else {
                self.c.ack(self.w.now, m.id).unwrap();
            }
            self.exchange();
        }
    }

    fn advance(&mut self, t: u64) {
        self.w.step(&format!("advance {t}"));
        self.c.on_timer(self.w.now);
        self.exchange();
    }
}

/// The scenario with the real client: 0..4 of one key, the application nacks 0 once.
/// It sees 0, 0, 1, 2, 3, 4 — never 1 before the second 0.
#[test]
fn application_sees_0_0_1_2_3_4() {
    let mut p = Pair::new(true);
    p.w.step("pub k*5");
    p.exchange();
    p.app_round(|e, redeliveries| e == 0 && redeliveries == 0);
    p.advance(2000);
    p.app_round(|_, _| false);
    let seen: Vec<u64> = p.app.iter().map(|(e, _)| *e).collect();
    assert_eq!(seen, vec![0, 0, 1, 2, 3, 4]);
    assert_eq!(p.w.d.stats().unacked, 0);
    assert_snapshot!(p.log.join("\n"));
}

/// Same script with the client's ordered mode off and the broker's plain redelivery (Pulsar's
/// behaviour): the application sees the later messages first — the bug this feature fixes.
#[test]
fn without_ordered_nack_the_application_sees_later_messages_first() {
    let mut p = Pair::new(false);
    p.w.step("pub k*5");
    p.exchange();
    p.app_round(|e, redeliveries| e == 0 && redeliveries == 0);
    p.advance(2000);
    p.app_round(|_, _| false);
    let seen: Vec<u64> = p.app.iter().map(|(e, _)| *e).collect();
    assert_eq!(seen, vec![0, 1, 2, 3, 4, 0]);
}

/// Two keys: while `k` is held, `j` keeps flowing through the same consumer.
#[test]
fn other_keys_flow_while_a_key_is_held() {
    let mut p = Pair::new(true);
    p.w.step("pub k k j k j j");
    p.exchange();
    p.app_round(|e, redeliveries| e == 0 && redeliveries == 0);
    p.w.step("pub j k j");
    p.exchange();
    p.app_round(|_, _| false);
    let before: Vec<(u64, String)> = p.app.clone();
    // Entries: k k j k j j | j k j. Before the delay: every j message, of k only the nacked
    // first one.
    let ks: Vec<u64> = before
        .iter()
        .filter(|(_, k)| k == "k")
        .map(|(e, _)| *e)
        .collect();
    let js: Vec<u64> = before
        .iter()
        .filter(|(_, k)| k == "j")
        .map(|(e, _)| *e)
        .collect();
    assert_eq!(ks, vec![0]);
    assert_eq!(js, vec![2, 4, 5, 6, 8]);
    p.advance(2000);
    p.app_round(|_, _| false);
    let ks: Vec<u64> = p
        .app
        .iter()
        .filter(|(_, k)| k == "k")
        .map(|(e, _)| *e)
        .collect();
    assert_eq!(ks, vec![0, 0, 1, 3, 7]);
    assert_eq!(p.w.d.stats().unacked, 0);
}
