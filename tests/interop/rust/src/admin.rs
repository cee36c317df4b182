//! The broker's admin API (Pulsar's admin v2 paths) over plain HTTP/1.1.
//!
//! The broker answers one request per connection with `Content-Length` and
//! `Connection: close`, so a request is: connect, write, read to the end. Every call is bounded
//! by [`TIMEOUT`].

use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

/// The limit for one admin request.
pub const TIMEOUT: Duration = Duration::from_secs(5);

/// `(status, body)` of one request; an HTTP error status is not an error here.
pub async fn http(method: &str, url: &str, body: Option<&str>) -> Result<(u16, String)> {
    tokio::time::timeout(TIMEOUT, http_inner(method, url, body))
        .await
        .map_err(|_| anyhow!("{method} {url}: no answer within {TIMEOUT:?}"))?
        .with_context(|| format!("{method} {url}"))
}

async fn http_inner(method: &str, url: &str, body: Option<&str>) -> Result<(u16, String)> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| anyhow!("not an http:// URL: {url}"))?;
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let mut s = TcpStream::connect(host).await?;
    let body = body.unwrap_or("");
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    if !body.is_empty() {
        req.push_str("Content-Type: application/json\r\n");
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    s.write_all(req.as_bytes()).await?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await?;
    let text = String::from_utf8_lossy(&raw);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        bail!(
            "no header end in the answer: {:?}",
            &text[..text.len().min(200)]
        );
    };
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| anyhow!("no status in {:?}", head.lines().next()))?;
    Ok((status, body.to_owned()))
}

/// `http://…/admin/v2/persistent/tenant/ns/topic` for `persistent://tenant/ns/topic`.
pub fn topic_path(admin_url: &str, topic: &str) -> String {
    let rest = topic.split_once("://").map_or(topic, |(_, r)| r);
    format!("{admin_url}/admin/v2/persistent/{rest}")
}

/// A GET (or other method) that must answer 200 with JSON.
pub async fn json(method: &str, url: &str, body: Option<&str>) -> Result<Value> {
    let (status, text) = http(method, url, body).await?;
    if status != 200 {
        bail!(
            "{method} {url}: HTTP {status} {}",
            &text[..text.len().min(300)]
        );
    }
    serde_json::from_str(&text).with_context(|| format!("{method} {url}: not JSON: {text:.300}"))
}

/// `GET url` as JSON.
pub async fn get(url: &str) -> Result<Value> {
    json("GET", url, None).await
}

/// A POST that must answer 200 or 204.
pub async fn post(url: &str, body: Option<&str>) -> Result<()> {
    let (status, text) = http("POST", url, body).await?;
    if status != 200 && status != 204 {
        bail!("POST {url}: HTTP {status} {}", &text[..text.len().min(300)]);
    }
    Ok(())
}

/// `GET /metrics`: the sample values of `name` whose labels contain `label` (e.g.
/// `subscription="sh"`).
pub async fn metric(admin_url: &str, name: &str, label: &str) -> Result<Vec<f64>> {
    let (status, text) = http("GET", &format!("{admin_url}/metrics"), None).await?;
    if status != 200 {
        bail!("GET /metrics: HTTP {status}");
    }
    Ok(text
        .lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with('{') && l.contains(label))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.trim().parse().ok()))
        .collect())
}
