use super::*;

/// Feeds `bytes` one piece of `step` bytes at a time and collects what comes out.
fn run(bytes: &[u8], step: usize) -> Vec<Next> {
    let mut f = Framing::default();
    let mut out = Vec::new();
    for piece in bytes.chunks(step.max(1)) {
        f.push(piece);
        loop {
            match f.next() {
                Next::More => break,
                n @ Next::Refuse(_) => {
                    out.push(n);
                    return out;
                }
                n => out.push(n),
            }
        }
    }
    out
}

fn request(method: &str, target: &str, body: &[u8], close: bool) -> Next {
    Next::Request(Parsed {
        method: method.into(),
        target: target.into(),
        body: body.to_vec(),
        close,
    })
}

#[test]
fn requests_come_out_whole_however_the_bytes_arrive() {
    let bytes = b"GET /a?x=1 HTTP/1.1\r\nHost: h\r\n\r\n\
        POST /b HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello\
        PUT /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\nX-T: 1\r\n\r\n\
        DELETE /d HTTP/1.1\r\nConnection: close\r\n\r\n";
    let want = vec![
        request("GET", "/a?x=1", b"", false),
        request("POST", "/b", b"hello", false),
        request("PUT", "/c", b"abcde", false),
        request("DELETE", "/d", b"", true),
    ];
    for step in [1, 2, 7, 64, bytes.len()] {
        assert_eq!(run(bytes, step), want, "pieces of {step}");
    }
}

#[test]
fn expect_continue_is_asked_for_once_and_only_with_a_body() {
    let head = b"POST /b HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n";
    let mut f = Framing::default();
    f.push(head);
    assert_eq!(f.next(), Next::Continue);
    assert_eq!(f.next(), Next::More);
    f.push(b"ok");
    assert_eq!(f.next(), request("POST", "/b", b"ok", false));
    assert!(f.idle());
    let bodiless = b"GET /a HTTP/1.1\r\nExpect: 100-continue\r\n\r\n";
    assert_eq!(run(bodiless, 100), vec![request("GET", "/a", b"", false)]);
}

#[test]
fn http_1_0_closes_unless_kept_alive_and_an_upgrade_offer_is_ignored() {
    assert_eq!(
        run(b"GET / HTTP/1.0\r\n\r\n", 100),
        vec![request("GET", "/", b"", true)]
    );
    assert_eq!(
        run(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", 100),
        vec![request("GET", "/", b"", false)]
    );
    let h2c = b"GET /s HTTP/1.1\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n\
        HTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\nGET /t HTTP/1.1\r\n\r\n";
    assert_eq!(
        run(h2c, 5),
        vec![
            request("GET", "/s", b"", false),
            request("GET", "/t", b"", false)
        ]
    );
}

#[test]
fn what_cannot_become_a_request_is_refused_with_its_status() {
    let status = |bytes: &[u8]| match run(bytes, bytes.len()).pop() {
        Some(Next::Refuse(r)) => r.status,
        other => panic!("{other:?} for {:?}", String::from_utf8_lossy(bytes)),
    };
    assert_eq!(status(b"GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n"), 400);
    assert_eq!(
        status(
            format!(
                "POST / HTTP/1.1\r\nContent-Length: {}\r\n\r\n",
                MAX_BODY + 1
            )
            .as_bytes()
        ),
        413
    );
    assert_eq!(
        status(b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n"),
        400
    );
    assert_eq!(
        status(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"),
        400
    );
    assert_eq!(
        status(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabX\r\n"),
        400
    );
    assert_eq!(status(b"GET / HTTP/1.1\r\nExpect: magic\r\n\r\n"), 417);
    assert_eq!(status(b"GET /\x01 HTTP/1.1\r\n\r\n"), 400);
    assert_eq!(status(b"\r\n\r\nnot http at all\r\n\r\n"), 400);
    let huge = vec![b'a'; MAX_HEAD + 10];
    assert_eq!(status(&[b"GET /".as_slice(), &huge].concat()), 400);
    // Whole, too: a head over the cap is refused even when it arrives complete at once.
    let whole = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(MAX_HEAD));
    assert_eq!(status(whole.as_bytes()), 400);
    let big_chunks = format!(
        "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n",
        MAX_BODY + 1
    );
    assert_eq!(status(big_chunks.as_bytes()), 413);
}

#[test]
fn answers_carry_their_length_and_keep_header_names_as_given() {
    let mut r = Response::new(200, "application/json", "{}");
    r.headers = vec![
        ("X-Pulsar-PROPERTY-k".into(), "v\r\nX-Forged: 1".into()),
        ("bad name: x".into(), "dropped".into()),
        ("X-Pulsar-partition-key".into(), "clé".into()),
    ];
    let text = String::from_utf8(encode(&r, true)).unwrap();
    assert_eq!(
        text,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\
         Connection: close\r\nX-Pulsar-PROPERTY-k: v  X-Forged: 1\r\n\
         X-Pulsar-partition-key: clé\r\n\r\n{}"
    );
    let empty =
        String::from_utf8(encode(&Response::new(204, "application/json", ""), false)).unwrap();
    assert_eq!(
        empty,
        "HTTP/1.1 204 No Content\r\nContent-Type: application/json\r\n\r\n"
    );
}

#[test]
fn the_fuzz_corpus_is_framed_alike_whole_and_in_pieces() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/admin_http");
    let mut inputs = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        for step in 0..16u8 {
            let input = [&[step][..], &bytes].concat();
            if let Some(e) = pieces_differ(&input) {
                panic!("pieces of {}: {e}", step + 1);
            }
        }
        inputs += 1;
    }
    assert!(inputs > 100, "the corpus is there: {inputs} inputs");
}
