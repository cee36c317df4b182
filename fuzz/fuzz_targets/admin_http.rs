//! The admin HTTP API: the input is everything a client sent on one connection. Whatever it
//! is, the broker answers with a status (a 400 for bytes that are not a whole request), never
//! a panic; a 5xx would be a bug, so it fails the target too. The same bytes fed in pieces
//! must be framed into the same requests as fed whole.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (status, body) = broker::fuzzing::admin_request(data);
    assert!((200..500).contains(&status), "status {status}: {body}");
    if let Some(e) = broker::fuzzing::admin_framing_differs(data) {
        panic!("the framing depends on how the bytes arrive: {e}");
    }
});
