//! The simulator's scenario files: any text parses to a scenario or to an error naming a line
//! (never a panic).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Err(e) = tests::sim::Scenario::parse("fuzz", &text) {
        let _ = e.to_string();
    }
});
