//! The admin HTTP API: the input is one request as a client writes it (the method and target
//! from its first line, the body after the blank line; the HTTP framing is the server
//! library's). Whatever it is, the broker answers with a status, never a panic; a 5xx would
//! be a bug, so it fails the target too.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (status, body) = broker::fuzzing::admin_request(data);
    assert!((200..500).contains(&status), "status {status}: {body}");
});
