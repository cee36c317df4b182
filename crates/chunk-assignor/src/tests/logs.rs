//! The WARN events carry the documented fields (captured with a minimal in-test subscriber).

use std::fmt::Write as _;
use std::sync::Mutex;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

use super::*;
use crate::{AssignorConfig, ChunkAssignor};

/// Records `LEVEL message k=v …` for every event at WARN or above on the thread that asked.
///
/// Installed once as the global default: a subscriber scoped with `with_default` races with the
/// other tests of this binary, whose threads hit the same callsites with no subscriber and can
/// leave them cached as disabled (the capture then comes back empty now and then).
#[derive(Default)]
struct Capture {
    thread: Mutex<Option<std::thread::ThreadId>>,
    lines: Mutex<Vec<String>>,
}

fn capture() -> &'static Capture {
    static CAPTURE: std::sync::OnceLock<&'static Capture> = std::sync::OnceLock::new();
    CAPTURE.get_or_init(|| {
        let c: &'static Capture = Box::leak(Box::default());
        let _ = tracing::subscriber::set_global_default(Forward(c));
        c
    })
}

/// The global subscriber: forwards to the capture.
struct Forward(&'static Capture);

struct Line(String);

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, " {value:?}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }
}

impl Subscriber for Forward {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        *m.level() <= Level::WARN
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, e: &Event<'_>) {
        let mine = self
            .0
            .thread
            .lock()
            .is_ok_and(|t| *t == Some(std::thread::current().id()));
        if !mine {
            return;
        }
        let mut line = Line(e.metadata().level().to_string());
        e.record(&mut line);
        if let Ok(mut v) = self.0.lines.lock() {
            v.push(line.0);
        }
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[test]
fn anomalies_are_logged_at_warn_with_their_fields() {
    let cap = capture();
    if let Ok(mut t) = cap.thread.lock() {
        *t = Some(std::thread::current().id());
    }
    {
        let mut a = ChunkAssignor::new(AssignorConfig {
            max_pins: 1,
            max_pin_age: 5,
            ..AssignorConfig::default()
        });
        let consumers = cs(&[(7, 10, 0)]);
        a.assign(0, vec![ch(1, "orphan", 2, 4), ch(2, "", 0, 1)], &consumers);
        a.assign(0, vec![ch(3, "a", 0, 2), ch(4, "b", 0, 2)], &consumers); // "a" evicted by count
        a.assign(10, vec![plain(5)], &consumers); // "b" evicted by age
        a.assign(10, vec![ch(6, "c", 0, 2)], &consumers);
        a.assign(11, vec![ch(7, "c", 1, 2)], &cs(&[(8, 10, 0)])); // stale pin, then orphan
    }
    let lines = cap
        .lines
        .lock()
        .map(|mut v| std::mem::take(&mut *v).join("\n"))
        .unwrap_or_default();
    insta::assert_snapshot!(lines);
}
