//! Recovery of a `--data-dir`: the input's parts (split at `kod_fuzz::SEP`) become one topic's
//! files: two ledger logs, a subscription's type file and its cursor file. Recovery either
//! succeeds or returns a typed error (the broker refuses to start); it never panics. A
//! recovery that succeeded must succeed again on what it left (it may have cut a torn tail).
#![no_main]

use std::fs;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let root = kod_fuzz::scratch("data-dir");
    let topic = root
        .join("topics")
        .join(broker::fuzzing::topic_dir_name("persistent://public/default/t"));
    let subs = topic.join("subscriptions");
    fs::create_dir_all(&subs).unwrap();
    let parts = kod_fuzz::split_parts(data);
    let files = [
        topic.join("ledger-000000000001.log"),
        topic.join("ledger-000000000002.log"),
        subs.join("s.json"),
        subs.join("s.cursor"),
    ];
    for (part, path) in parts.iter().zip(files.iter()) {
        fs::write(path, part).unwrap();
    }
    if broker::fuzzing::recover_data_dir(&root).is_ok() {
        broker::fuzzing::recover_data_dir(&root).expect("a recovered directory recovers again");
    }
    let _ = fs::remove_dir_all(&root);
});
