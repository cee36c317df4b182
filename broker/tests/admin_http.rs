//! The admin server's HTTP, as clients use it beyond one request per connection: keep-alive,
//! chunked bodies, `Expect: 100-continue`, an HTTP/2 upgrade offer, a body over the cap, a request whose body stalls
//! (it holds no one else up), a connection that says nothing (closed), a new connection after
//! the server sat idle longer than its timeouts, and the cap on open connections.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::start_broker;

const QUOTA: &str =
    "/admin/v2/namespaces/public/default/backlogQuota?backlogQuotaType=destination_storage";
const QUOTA_MAP: &str = "/admin/v2/namespaces/public/default/backlogQuotaMap";
const BODY: &str = r#"{"limitSize":12345,"limitTime":-1,"policy":"consumer_backlog_eviction"}"#;

fn connect(b: &broker::Broker) -> TcpStream {
    let s = TcpStream::connect(b.admin_url().trim_start_matches("http://")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}

/// A connection's writing half and its buffered reading half.
fn open(b: &broker::Broker) -> (TcpStream, BufReader<TcpStream>) {
    let s = connect(b);
    (s.try_clone().unwrap(), BufReader::new(s))
}

/// Reads one response framed by its `Content-Length` (none on a 204): `(status, headers, body)`.
fn response(r: &mut BufReader<TcpStream>) -> (u16, String, String) {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        assert!(
            r.read_line(&mut line).unwrap() > 0,
            "closed mid-head: {head}"
        );
        if line == "\r\n" {
            break;
        }
        head.push_str(&line);
    }
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let length = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().unwrap())
        })
        .unwrap_or_else(|| {
            assert_eq!(status, 204, "no Content-Length: {head}");
            0
        });
    let mut body = vec![0; length];
    r.read_exact(&mut body).unwrap();
    (status, head, String::from_utf8(body).unwrap())
}

#[test]
fn one_connection_carries_many_requests_and_bodies_of_every_framing() {
    let b = start_broker(&[]);
    let (mut w, mut r) = open(&b);
    // Two requests on one connection, the second written before the first is answered.
    write!(
        w,
        "GET /admin/v2/clusters HTTP/1.1\r\nHost: x\r\n\r\nGET /admin/v2/tenants HTTP/1.1\r\nHost: x\r\n\r\n"
    )
    .unwrap();
    let (status, _, clusters) = response(&mut r);
    assert_eq!(status, 200, "{clusters}");
    assert!(clusters.contains("standalone"), "{clusters}");
    let (status, _, tenants) = response(&mut r);
    assert_eq!(status, 200, "{tenants}");
    assert!(tenants.contains("public"), "{tenants}");
    // A chunked body, split mid-JSON.
    let (a, z) = BODY.split_at(10);
    write!(
        w,
        "POST {QUOTA} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{a}\r\n{:x}\r\n{z}\r\n0\r\n\r\n",
        a.len(),
        z.len()
    )
    .unwrap();
    let (status, _, body) = response(&mut r);
    assert_eq!(status, 204, "{body}");
    write!(w, "GET {QUOTA_MAP} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let (status, _, map) = response(&mut r);
    assert_eq!(status, 200, "{map}");
    assert!(map.contains("12345"), "the chunked body was applied: {map}");
    // `Expect: 100-continue`: the body goes only after the server says so.
    let body = BODY.replace("12345", "54321");
    write!(
        w,
        "POST {QUOTA} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    let mut interim = String::new();
    r.read_line(&mut interim).unwrap();
    assert!(interim.starts_with("HTTP/1.1 100"), "{interim}");
    while interim != "\r\n" {
        interim.clear();
        r.read_line(&mut interim).unwrap();
    }
    w.write_all(body.as_bytes()).unwrap();
    let (status, _, answer) = response(&mut r);
    assert_eq!(status, 204, "{answer}");
    write!(
        w,
        "GET {QUOTA_MAP} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let (status, _, map) = response(&mut r);
    assert_eq!(status, 200, "{map}");
    assert!(map.contains("54321"), "{map}");
    let mut rest = Vec::new();
    r.read_to_end(&mut rest).unwrap();
    assert!(
        rest.is_empty(),
        "the connection closes after `Connection: close`"
    );
    b.shutdown(Duration::from_secs(5));
}

#[test]
fn a_body_over_the_cap_is_refused_without_reading_it() {
    let b = start_broker(&[]);
    let (mut w, mut r) = open(&b);
    write!(
        w,
        "POST {QUOTA} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        64 << 20
    )
    .unwrap();
    let (status, _, body) = response(&mut r);
    assert_eq!(status, 413, "{body}");
    assert!(body.contains("reason"), "{body}");
    b.shutdown(Duration::from_secs(5));
}

#[test]
fn a_stalled_body_holds_no_other_request_and_a_silent_connection_is_closed() {
    let b = start_broker(&[]);
    // A request whose 4 KiB body never comes (longer than what is read with the head).
    let mut stalled = connect(&b);
    write!(
        stalled,
        "POST {QUOTA} HTTP/1.1\r\nHost: x\r\nContent-Length: 4096\r\n\r\n{{"
    )
    .unwrap();
    // A connection that never sends a byte.
    let mut silent = connect(&b);
    std::thread::sleep(Duration::from_millis(200));
    // Another client is answered while the stalled request still waits for its body.
    let (mut w, mut r) = open(&b);
    write!(w, "GET /admin/v2/clusters HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert_eq!(response(&mut r).0, 200);
    stalled.set_nonblocking(true).unwrap();
    let mut byte = [0u8; 1];
    let pending = stalled.read(&mut byte);
    assert!(
        matches!(&pending, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the stalled request is not answered yet: {pending:?}"
    );
    // The silent connection is closed by the server (after its idle timeout), not held.
    let mut got = Vec::new();
    let closed = silent.read_to_end(&mut got);
    assert!(closed.is_ok(), "the server closes it: {closed:?}");
    // And the stalled request ends with a 408 rather than holding its thread.
    stalled.set_nonblocking(false).unwrap();
    let mut answer = String::new();
    let _ = stalled.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    // The server has had no new connection for longer than its timeouts: it still accepts.
    let (mut w, mut r) = open(&b);
    write!(w, "GET /admin/v2/clusters HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert_eq!(response(&mut r).0, 200);
    b.shutdown(Duration::from_secs(5));
}

#[test]
fn connections_beyond_the_cap_get_a_503_and_closed_ones_make_room() {
    let b = start_broker(&[]);
    let held: Vec<TcpStream> = (0..64).map(|_| connect(&b)).collect();
    // The 65th is answered at once, before it asks anything.
    let (_w, mut r) = open(&b);
    let (status, _, body) = response(&mut r);
    assert_eq!(status, 503, "{body}");
    drop(held);
    // Their threads see the close and end; a new connection is served again.
    let mut served = false;
    for _ in 0..100 {
        let (mut w, mut r) = open(&b);
        write!(w, "GET /admin/v2/clusters HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        if response(&mut r).0 == 200 {
            served = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(served, "room was made when the held connections closed");
    b.shutdown(Duration::from_secs(5));
}
