//! A minimal Pulsar client written on the `wire` codec, for the broker's own tests: it sends
//! exactly the frames a test asks for (including broken ones) and reads replies with a deadline.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use broker::{Broker, BrokerConfig};
use wire::proto::{base_command::Type, BaseCommand, MessageMetadata};
use wire::Frame;

/// A broker on OS-chosen ports, shut down when dropped.
pub fn start_broker(extra: &[&str]) -> Broker {
    let mut args = vec!["--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"];
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
        let addr = broker
            .service_url()
            .trim_start_matches("pulsar://")
            .to_owned();
        let stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        Raw {
            stream,
            reader: wire::FrameReader::new(64 << 20),
        }
    }

    /// Opens and completes CONNECT/CONNECTED.
    pub fn connected(broker: &Broker) -> Raw {
        let mut c = Raw::open(broker);
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
