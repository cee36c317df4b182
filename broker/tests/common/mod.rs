//! A minimal Pulsar client written on the `wire` codec, for the broker's own tests: it sends
//! exactly the frames a test asks for (including broken ones) and reads replies with a deadline.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use broker::{Broker, BrokerConfig};
use wire::proto::{base_command::Type, BaseCommand, MessageMetadata};
use wire::Frame;

/// A broker on OS-chosen ports, shut down when dropped. It checks every frame it writes as the
/// strictest client reads it (`--check-frames`: a failure closes the connection, so the test
/// sees it).
pub fn start_broker(extra: &[&str]) -> Broker {
    let mut args = vec![
        "--listen",
        "127.0.0.1:0",
        "--admin",
        "127.0.0.1:0",
        "--check-frames",
    ];
    args.extend_from_slice(extra);
    Broker::start(BrokerConfig::parse_args(args).unwrap()).unwrap()
}

/// One raw connection.
pub struct Raw {
    pub stream: TcpStream,
    reader: wire::FrameReader,
}

impl Raw {
    pub fn open(broker: &Broker) -> Raw {
        Raw::open_url(&broker.service_url())
    }

    /// Opens a connection to `pulsar://HOST:PORT` (a broker in another process).
    pub fn open_url(url: &str) -> Raw {
        let stream = TcpStream::connect(url.trim_start_matches("pulsar://")).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        // As the stock clients do: without it an ACK followed by a small FLOW waits for the
        // broker's delayed TCP ack (about 40 ms) under Nagle's algorithm.
        stream.set_nodelay(true).unwrap();
        Raw {
            stream,
            reader: wire::FrameReader::new(64 << 20),
        }
    }

    /// Opens and completes CONNECT/CONNECTED.
    pub fn connected(broker: &Broker) -> Raw {
        Raw::connected_url(&broker.service_url())
    }

    /// [`Raw::connected`] to a broker in another process.
    pub fn connected_url(url: &str) -> Raw {
        let mut c = Raw::open_url(url);
        c.send(&wire::commands::connect("test-client", 20));
        let f = c.expect(Type::Connected);
        assert!(f.command.connected.is_some());
        c
    }

    pub fn send_bytes(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes)
    }

    pub fn send(&mut self, cmd: &BaseCommand) {
        let mut out = Vec::new();
        wire::encode_command(cmd, &mut out);
        self.send_bytes(&out).unwrap();
    }

    pub fn send_message(&mut self, cmd: &BaseCommand, meta: &MessageMetadata, payload: &[u8]) {
        let mut out = Vec::new();
        wire::encode_with_payload(cmd, meta, payload, &mut out);
        self.send_bytes(&out).unwrap();
    }

    /// The next frame within `within`, `None` on timeout; `Err` when the broker closed.
    pub fn next(&mut self, within: Duration) -> Result<Option<Frame>, String> {
        let until = Instant::now() + within;
        let mut buf = [0u8; 65536];
        loop {
            match self.reader.next_frame() {
                Ok(Some(f)) => return Ok(Some(f)),
                Ok(None) => {}
                Err(e) => return Err(format!("undecodable reply: {e}")),
            }
            if Instant::now() >= until {
                return Ok(None);
            }
            match self.stream.read(&mut buf) {
                Ok(0) => return Err("closed".into()),
                Ok(n) => self.reader.feed(&buf[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => return Err(e.to_string()),
            }
        }
    }

    /// The next frame of type `t` (skipping PINGs), panicking after 5 s.
    pub fn expect(&mut self, t: Type) -> Frame {
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until {
            match self.next(Duration::from_millis(100)) {
                Ok(Some(f)) if f.command.r#type() == t => return f,
                Ok(Some(f)) if f.command.r#type() == Type::Ping => {}
                Ok(Some(f)) => panic!("expected {t:?}, got {:?}", f.command),
                Ok(None) => {}
                Err(e) => panic!("expected {t:?}, connection: {e}"),
            }
        }
        panic!("no {t:?} within 5 s");
    }

    /// One frame of each listed type, in whatever order they come (PINGs skipped).
    pub fn expect_all(&mut self, types: &[Type]) -> Vec<Frame> {
        let mut want: Vec<Type> = types.to_vec();
        let mut got = Vec::new();
        let until = Instant::now() + Duration::from_secs(5);
        while !want.is_empty() && Instant::now() < until {
            match self.next(Duration::from_millis(100)) {
                Ok(Some(f)) => {
                    let t = f.command.r#type();
                    if let Some(i) = want.iter().position(|w| *w == t) {
                        want.remove(i);
                        got.push(f);
                    } else if t != Type::Ping {
                        panic!("expected one of {want:?}, got {:?}", f.command);
                    }
                }
                Ok(None) => {}
                Err(e) => panic!("expected {want:?}, connection: {e}"),
            }
        }
        assert!(want.is_empty(), "missing {want:?} after 5 s");
        got
    }

    /// True when the broker closed the connection within 5 s (frames before it are skipped).
    pub fn closed_by_broker(&mut self) -> bool {
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until {
            if self.next(Duration::from_millis(100)).is_err() {
                return true;
            }
        }
        false
    }
}

/// Message metadata as a stock producer writes it.
pub fn metadata(producer: &str, seq: u64, key: Option<&str>) -> MessageMetadata {
    MessageMetadata {
        producer_name: producer.to_owned(),
        sequence_id: seq,
        publish_time: 1_000 + seq,
        partition_key: key.map(str::to_owned),
        ..Default::default()
    }
}

/// One HTTP/1.1 request to the admin server: `(status, body)`.
pub fn http(broker: &Broker, method: &str, path: &str, body: &str) -> (u16, String) {
    let addr = broker.admin_url().trim_start_matches("http://").to_owned();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let status = resp
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = resp
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// `GET …/{topic}/stats` as JSON (the answer must be 200).
#[allow(dead_code)]
pub fn topic_stats(broker: &Broker, topic: &str) -> serde_json::Value {
    let path = format!(
        "/admin/v2/persistent/{}/stats",
        topic.trim_start_matches("persistent://")
    );
    let (status, body) = http(broker, "GET", &path, "");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// Subscribes consumer 1 of `c` to `topic` as subscription `sub` (Shared, from the earliest
/// entry) and waits for the SUCCESS.
pub fn subscribe_shared(c: &mut Raw, topic: &str, sub: &str) {
    use wire::proto::command_subscribe::{InitialPosition, SubType};
    c.send(&wire::commands::subscribe(
        topic,
        sub,
        1,
        1,
        SubType::Shared,
        None,
        InitialPosition::Earliest,
    ));
    c.expect(Type::Success);
}

/// Opens producer 1 on `topic` over `c` and returns the name the broker gave it.
pub fn open_producer(c: &mut Raw, topic: &str) -> String {
    c.send(&wire::commands::producer(topic, 1, 1, None));
    let ps = c.expect(Type::ProducerSuccess);
    ps.command.producer_success.unwrap().producer_name
}

/// Produces `n` messages with keys `k0..k{keys-1}` on `topic` over a fresh connection.
pub fn produce(broker: &Broker, topic: &str, n: u64, keys: u64) {
    let mut c = Raw::connected(broker);
    let name = open_producer(&mut c, topic);
    for i in 0..n {
        let key = format!("k{}", i % keys.max(1));
        c.send_message(
            &wire::commands::send(1, i, 1),
            &metadata(&name, i, Some(&key)),
            format!("m{i}").as_bytes(),
        );
        c.expect(Type::SendReceipt);
    }
}

/// Positions of the MESSAGE frames `c` receives until `n` arrived or `within` passed.
#[allow(dead_code)]
pub fn message_positions(c: &mut Raw, n: usize, within: Duration) -> Vec<cursor::Position> {
    let mut got = Vec::new();
    let until = Instant::now() + within;
    while got.len() < n && Instant::now() < until {
        if let Ok(Some(f)) = c.next(Duration::from_millis(50)) {
            if f.command.r#type() == Type::Message {
                if let Some(m) = f.command.message {
                    got.push(cursor::Position::new(
                        m.message_id.ledger_id,
                        m.message_id.entry_id,
                    ));
                }
            }
        }
    }
    got
}
