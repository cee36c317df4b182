//! HTTP/1.1 request framing for the admin server, sans IO: bytes in ([`Framing::push`]), whole
//! requests out ([`Framing::next`]), and the bytes of an answer ([`encode`]). Heads are parsed
//! by `httparse`; bodies by `Content-Length` or chunked (trailers skipped); `Expect:
//! 100-continue` asks the shell for an interim answer; pipelined requests come out one by one.
//! An `Upgrade` offer (Java's `java.net.http` client offers `h2c`) is ignored, as HTTP allows:
//! the answer is HTTP/1.1.
//!
//! What it refuses, with the answer to write before closing: a head over [`MAX_HEAD`] bytes or
//! one `httparse` rejects (400), a body over [`MAX_BODY`] (413, before reading it), a bad
//! `Content-Length` or chunk size (400), an `Expect` other than `100-continue` (417).

use super::Response;

/// Largest request head.
pub(crate) const MAX_HEAD: usize = 64 * 1024;

/// Largest request body (a 413 beyond).
pub(crate) const MAX_BODY: usize = 1024 * 1024;

/// Headers a request may have.
const MAX_HEADERS: usize = 64;

/// One whole request.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Parsed {
    pub method: String,
    /// The request target: the path with its query.
    pub target: String,
    pub body: Vec<u8>,
    /// The connection closes after the answer (`Connection: close`, or HTTP/1.0 without
    /// `keep-alive`).
    pub close: bool,
}

/// What the buffered bytes hold next.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// A whole request.
    Request(Parsed),
    /// The client waits for `100 Continue` before it sends the body.
    Continue,
    /// More bytes are needed.
    More,
    /// The bytes cannot become a request: write this answer and close.
    Refuse(Response),
}

/// The head of the request being read, until its body is whole.
#[derive(Debug)]
struct Head {
    method: String,
    target: String,
    close: bool,
    body: BodyFraming,
    /// `Expect: 100-continue` not yet answered.
    continue_pending: bool,
}

#[derive(Debug, Clone, Copy)]
enum BodyFraming {
    Length(usize),
    Chunked,
}

/// One connection's request stream.
#[derive(Debug, Default)]
pub(crate) struct Framing {
    buf: Vec<u8>,
    head: Option<Head>,
}

impl Framing {
    /// Bytes as they arrived.
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// True when no request is partly read (nothing buffered).
    pub(crate) fn idle(&self) -> bool {
        self.head.is_none() && self.buf.is_empty()
    }

    /// The next request, or what is needed first.
    pub(crate) fn next(&mut self) -> Next {
        if self.head.is_none() {
            match self.parse_head() {
                Ok(Some(head)) => self.head = Some(head),
                Ok(None) => return Next::More,
                Err(refusal) => return Next::Refuse(refusal),
            }
        }
        let Some(head) = self.head.as_mut() else {
            return Next::More;
        };
        let body = match head.body {
            BodyFraming::Length(n) => take_length(&mut self.buf, n),
            BodyFraming::Chunked => take_chunked(&mut self.buf),
        };
        match body {
            Ok(Some(body)) => {
                let head = self.head.take().expect("a head is being read");
                Next::Request(Parsed {
                    method: head.method,
                    target: head.target,
                    body,
                    close: head.close,
                })
            }
            Ok(None) if head.continue_pending => {
                head.continue_pending = false;
                Next::Continue
            }
            Ok(None) => Next::More,
            Err(refusal) => Next::Refuse(refusal),
        }
    }

    /// Parses (and removes) a whole head from the buffer.
    fn parse_head(&mut self) -> Result<Option<Head>, Response> {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut headers);
        let len = match req.parse(&self.buf) {
            Ok(httparse::Status::Complete(len)) if len > MAX_HEAD => {
                return Err(bad("request head too large"))
            }
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) if self.buf.len() > MAX_HEAD => {
                return Err(bad("request head too large"))
            }
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(e) => return Err(bad(&format!("bad request head: {e}"))),
        };
        let mut length = 0;
        let mut chunked = false;
        let mut close = req.version == Some(0);
        let mut expect_continue = false;
        for h in req.headers.iter() {
            let value = String::from_utf8_lossy(h.value);
            let value = value.trim();
            if h.name.eq_ignore_ascii_case("content-length") {
                let n = value
                    .parse::<u64>()
                    .map_err(|_| bad("bad Content-Length"))?;
                if n > MAX_BODY as u64 {
                    return Err(too_large());
                }
                length = n as usize;
            } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                if !value.to_ascii_lowercase().ends_with("chunked") {
                    return Err(bad("a transfer coding other than chunked"));
                }
                chunked = true;
            } else if h.name.eq_ignore_ascii_case("connection") {
                let v = value.to_ascii_lowercase();
                close = v.contains("close") || (close && !v.contains("keep-alive"));
            } else if h.name.eq_ignore_ascii_case("expect") {
                if !value.eq_ignore_ascii_case("100-continue") {
                    return Err(Response::json_error(417, "only 100-continue is expected"));
                }
                expect_continue = true;
            }
        }
        // A transfer coding overrides a length (RFC 9112, 6.3).
        let framing = if chunked {
            BodyFraming::Chunked
        } else {
            BodyFraming::Length(length)
        };
        let head = Head {
            method: req.method.unwrap_or_default().to_owned(),
            target: req.path.unwrap_or_default().to_owned(),
            close,
            body: framing,
            continue_pending: expect_continue && !matches!(framing, BodyFraming::Length(0)),
        };
        self.buf.drain(..len);
        Ok(Some(head))
    }
}

/// The `n`-byte body at the buffer's start, removed, once it is whole.
fn take_length(buf: &mut Vec<u8>, n: usize) -> Result<Option<Vec<u8>>, Response> {
    if buf.len() < n {
        return Ok(None);
    }
    Ok(Some(buf.drain(..n).collect()))
}

/// The chunked body at the buffer's start, decoded and removed with its trailers, once the
/// last chunk and the trailers are whole.
fn take_chunked(buf: &mut Vec<u8>) -> Result<Option<Vec<u8>>, Response> {
    let mut body = Vec::new();
    let mut at = 0;
    loop {
        let (consumed, size) = match httparse::parse_chunk_size(&buf[at..]) {
            Ok(httparse::Status::Complete(c)) => c,
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(_) => return Err(bad("bad chunk size")),
        };
        at += consumed;
        if size == 0 {
            return match trailers_end(&buf[at..]) {
                Some(end) => {
                    buf.drain(..at + end);
                    Ok(Some(body))
                }
                None => Ok(None),
            };
        }
        if body.len() as u64 + size > MAX_BODY as u64 {
            return Err(too_large());
        }
        let size = size as usize;
        if buf.len() < at + size + 2 {
            return Ok(None);
        }
        if &buf[at + size..at + size + 2] != b"\r\n" {
            return Err(bad("a chunk not followed by CRLF"));
        }
        body.extend_from_slice(&buf[at..at + size]);
        at += size + 2;
    }
}

/// Where the trailers after the last chunk end (past their blank line), once they are whole.
fn trailers_end(rest: &[u8]) -> Option<usize> {
    if rest.starts_with(b"\r\n") {
        return Some(2);
    }
    rest.windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| i + 4)
}

fn bad(why: &str) -> Response {
    Response::json_error(400, &format!("bad request: {why}"))
}

fn too_large() -> Response {
    Response::json_error(413, &format!("request body over {MAX_BODY} bytes"))
}

/// The bytes of `r` as an HTTP/1.1 answer, with its `Content-Length` (none on a 204) and
/// `Connection: close` when the connection closes after it. Header names are written as given
/// (Pulsar's admin clients match `X-Pulsar-PROPERTY-` case-sensitively), those that are not
/// HTTP tokens left out; values as given but for control characters, which become spaces (CR
/// and LF would end the header: a message's key or property read back could forge one).
pub(crate) fn encode(r: &Response, close: bool) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {} {}\r\n", r.status, reason(r.status)).into_bytes();
    let mut header = |name: &str, value: &str| {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        for c in value.chars() {
            let c = if c.is_control() { ' ' } else { c };
            let mut b = [0u8; 4];
            out.extend_from_slice(c.encode_utf8(&mut b).as_bytes());
        }
        out.extend_from_slice(b"\r\n");
    };
    header("Content-Type", r.content_type);
    if r.status != 204 {
        header("Content-Length", &r.body.len().to_string());
    }
    if close {
        header("Connection", "close");
    }
    for (name, value) in r.headers.iter().filter(|(name, _)| is_token(name)) {
        header(name, value);
    }
    out.extend_from_slice(b"\r\n");
    if r.status != 204 {
        out.extend_from_slice(&r.body);
    }
    out
}

/// A header name HTTP allows (a `token`: no separator, space or control character); a
/// message's property key that is not one is left out, not written as a broken header.
fn is_token(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// What the framing makes of `bytes[1..]` fed whole against fed in pieces of
/// `bytes[0] % 16 + 1` bytes: `None` when both give the same requests (or the same refusal) in
/// the same order, `100 Continue` left out (it is asked for only while a body is to come).
pub(crate) fn pieces_differ(bytes: &[u8]) -> Option<String> {
    let (&first, rest) = bytes.split_first()?;
    let outputs = |step: usize| {
        let mut f = Framing::default();
        let mut out = Vec::new();
        for piece in rest.chunks(step) {
            f.push(piece);
            loop {
                match f.next() {
                    Next::More => break,
                    Next::Continue => {}
                    n @ Next::Refuse(_) => {
                        out.push(n);
                        return out;
                    }
                    n => out.push(n),
                }
            }
        }
        out
    };
    let whole = outputs(rest.len().max(1));
    let pieces = outputs(usize::from(first % 16) + 1);
    (whole != pieces).then(|| format!("whole: {whole:?}\nin pieces: {pieces:?}"))
}

/// The interim answer to `Expect: 100-continue`.
pub(crate) const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        204 => "No Content",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        408 => "Request Timeout",
        409 => "Conflict",
        412 => "Precondition Failed",
        413 => "Payload Too Large",
        417 => "Expectation Failed",
        422 => "Unprocessable Entity",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

#[cfg(test)]
mod tests;
