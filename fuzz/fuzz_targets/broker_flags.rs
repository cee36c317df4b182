//! The broker's command line: the input's parts (split at `kod_fuzz::SEP`) are the arguments.
//! Parsing gives a configuration or a typed error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let args: Vec<String> = kod_fuzz::split_parts(data)
        .into_iter()
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect();
    let _ = broker::BrokerConfig::parse_args(&args);
});
