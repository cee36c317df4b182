//! Delayed delivery: entries with a deliver-at time are not dispatched before it, on Shared and
//! on Key_Shared; on Key_Shared a delayed entry holds no key, and when due it follows its key's
//! routing and draining rules.

mod common;

use common::{check, run};
use insta::assert_snapshot;

/// The log from the line `from` on (the first line starting with it).
fn after<'a>(log: &'a str, from: &str) -> &'a str {
    let i = log
        .find(from)
        .unwrap_or_else(|| panic!("no {from:?} in\n{log}"));
    &log[i..]
}

#[test]
fn shared_holds_a_delayed_entry_until_its_time() {
    let log = check(
        "shared\ndelay 0\njoin A\nflow A 10\npubat 100 k1\npub k2\nadvance 99\nstate\nadvance 1\nstate\n",
    );
    let before = &log[..log.find("> advance 1\n").unwrap()];
    assert!(before.contains("send A: 1:1(k2)"), "{log}");
    assert!(!before.contains("1:0(k1)"), "sent before its time:\n{log}");
    assert!(
        after(&log, "> advance 1\n").contains("send A: 1:0(k1)"),
        "{log}"
    );
    assert_snapshot!(log);
}

#[test]
fn key_shared_later_entries_of_the_key_pass_a_delayed_one() {
    let log = check(
        "key_shared\ndelay 0\njoin A\nflow A 10\npubat 100 k1\npub k1 k1\nadvance 100\nstate\n",
    );
    let before = &log[..log.find("> advance 100").unwrap()];
    assert!(before.contains("send A: 1:1(k1) 1:2(k1)"), "{log}");
    assert!(
        after(&log, "> advance 100").contains("send A: 1:0(k1)"),
        "{log}"
    );
    assert_snapshot!(log);
}

#[test]
fn key_shared_a_due_entry_waits_for_its_key_to_drain() {
    // A holds 1:0 (k1); B joins and k1 moves to B, draining on A. 1:1 (k1, due at 100) comes
    // due while A still holds 1:0: it must not go to B before A acks.
    let w = run("key_shared\ndelay 0\njoin A\nflow A 10\npub k1\npubat 100 k1\njoin B\nflow B 10\nadvance 150\nexplain k1\nstate\nack A 1:0\nadvance 20\nstate\n");
    let log = &w.out;
    let held = &log[..log.find("> ack A 1:0").unwrap()];
    assert!(
        !held.contains("1:1(k1)"),
        "sent while its key drains:\n{log}"
    );
    assert!(
        after(log, "> ack A 1:0").contains("send B: 1:1(k1)"),
        "{log}"
    );
    assert_snapshot!(w.out);
}

#[test]
fn strict_rounds_up_to_the_tick_precision_and_lenient_goes_early() {
    // tick 1000: buckets of 512. Strict: 1001 → 1024. Lenient: within one tick → at once.
    let strict = check("shared\ndelay 1000 strict\njoin A\nflow A 10\npubat 1001 k1\nadvance 1023\nstate\nadvance 1\n");
    assert!(
        !after(&strict, "> pubat")
            .split("> advance 1\n")
            .next()
            .unwrap()
            .contains("send A"),
        "{strict}"
    );
    assert!(
        after(&strict, "> advance 1\n").contains("send A: 1:0(k1)"),
        "{strict}"
    );
    let lenient = check("shared\ndelay 1000 lenient\njoin A\nflow A 10\npubat 900 k1\n");
    assert!(lenient.contains("send A: 1:0(k1)"), "{lenient}");
    let off = check("shared\ndelay 0 off\njoin A\nflow A 10\npubat 900 k1\n");
    assert!(off.contains("send A: 1:0(k1)"), "{off}");
}

#[test]
fn skip_acks_delayed_entries_without_delivering_them() {
    let w = run("shared\ndelay 0\njoin A\nflow A 10\npubat 100 k1 k1\npub k2\nskip 2\nstate\nadvance 200\nstate\n");
    assert!(
        !w.out.contains("(k1)"),
        "a skipped delayed entry was sent:\n{}",
        w.out
    );
    assert_eq!(w.d.stats().delayed, 0);
}

#[test]
fn the_last_consumer_leaving_and_a_rejoin_track_the_entry_again() {
    let log = check("shared\ndelay 0\njoin A\nflow A 10\npubat 100 k1\nleave A\njoin B\nflow B 10\nadvance 50\nstate\nadvance 50\nstate\n");
    let before = &log[..log.find("> advance 50\n").unwrap()];
    assert!(!before.contains("send B: 1:0"), "{log}");
    assert!(log.contains("delayed=1"), "{log}");
    assert!(
        after(&log, "> advance 50\n").contains("send B: 1:0(k1)"),
        "{log}"
    );
}

#[test]
fn a_delayed_entry_does_not_take_permits_or_count_as_unacked() {
    let w = run("shared\ndelay 0\njoin A\nflow A 2\npubat 100 k1 k1 k1\npub k2 k3\nstate\n");
    assert!(w.out.contains("send A: 1:3(k2) 1:4(k3)"), "{}", w.out);
    assert_eq!(w.d.stats().delayed, 3);
}
