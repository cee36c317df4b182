//! The WARN events carry the documented fields (captured with a minimal in-test subscriber).

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

use super::*;
use crate::{AssignorConfig, ChunkAssignor};

/// Records `LEVEL message k=v …` for every event at WARN or above.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<String>>>);

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

impl Subscriber for Capture {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        *m.level() <= Level::WARN
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, e: &Event<'_>) {
        let mut line = Line(e.metadata().level().to_string());
        e.record(&mut line);
        if let Ok(mut v) = self.0.lock() {
            v.push(line.0);
        }
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[test]
fn anomalies_are_logged_at_warn_with_their_fields() {
    let cap = Capture::default();
    tracing::subscriber::with_default(cap.clone(), || {
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
    });
    let lines = cap.0.lock().map(|v| v.join("\n")).unwrap_or_default();
    insta::assert_snapshot!(lines);
}
