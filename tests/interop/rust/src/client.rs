//! The `pulsar` crate as an application uses it, with short timeouts and bounded waits.

use std::{
    collections::HashMap,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::{anyhow, Context, Result};
use futures::StreamExt;
use pulsar::{
    consumer::{InitialPosition, Message},
    message::proto::{command_subscribe::SubType, MessageIdData},
    ConnectionRetryOptions, ConsumerOptions, OperationRetryOptions, ProducerOptions, Pulsar,
    TokioExecutor,
};

/// A client.
pub type Client = Pulsar<TokioExecutor>;
/// A consumer of raw payloads.
pub type Consumer = pulsar::Consumer<Vec<u8>, TokioExecutor>;
/// A producer.
pub type Producer = pulsar::Producer<TokioExecutor>;
/// A received message.
pub type Msg = Message<Vec<u8>>;

/// A limit for one client operation (subscribe, create a producer, a receipt).
pub const OP_TIMEOUT: Duration = Duration::from_secs(10);

/// A client with short timeouts and few retries (the crate retries `ServiceNotReady`,
/// `ConsumerBusy` and `ProducerBusy` forever by default).
pub async fn client(url: &str) -> Result<Client> {
    let build = Pulsar::builder(url, TokioExecutor)
        .with_connection_retry_options(ConnectionRetryOptions {
            min_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(500),
            max_retries: 5,
            connection_timeout: Duration::from_secs(2),
            ..Default::default()
        })
        .with_operation_retry_options(OperationRetryOptions {
            operation_timeout: Duration::from_secs(5),
            retry_delay: Duration::from_millis(200),
            max_retries: Some(3),
        })
        .build();
    bounded("connect", build)
        .await
        .with_context(|| format!("client for {url}"))
}

/// `fut` within [`OP_TIMEOUT`], its error with `what`.
pub async fn bounded<T, E, F>(what: &str, fut: F) -> Result<T>
where
    F: std::future::Future<Output = Result<T, E>>,
    E: std::fmt::Display,
{
    match tokio::time::timeout(OP_TIMEOUT, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(anyhow!("{what}: {e}")),
        Err(_) => Err(anyhow!("{what}: no answer within {OP_TIMEOUT:?}")),
    }
}

/// `persistent://public/default/<stem>-<pid>-<time>`, unique per test run.
pub fn unique_topic(stem: &str) -> String {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    format!(
        "persistent://public/default/{stem}-{}-{}",
        std::process::id(),
        ms % 100_000_000
    )
}

/// Milliseconds since the epoch (the clock the broker and the client stamp messages with).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}

/// How a scenario subscribes.
#[derive(Clone)]
pub struct Sub {
    /// Subscription type.
    pub sub_type: SubType,
    /// Consumer name.
    pub name: String,
    /// Flow permits the crate asks for (`with_batch_size`; default 1000): the prefetch.
    pub permits: u32,
    /// The crate's own queue between its engine and the application (default 1000).
    pub queue: u32,
    /// Earliest or Latest (the crate's default is Latest).
    pub initial: InitialPosition,
    /// The crate's ack timeout (`with_unacked_message_resend_delay`).
    pub ack_timeout: Option<Duration>,
}

impl Sub {
    /// A consumer of type `sub_type` named `name`, 1000 permits, from the earliest message.
    pub fn new(sub_type: SubType, name: &str) -> Sub {
        Sub {
            sub_type,
            name: name.to_owned(),
            permits: 1000,
            queue: 1000,
            initial: InitialPosition::Earliest,
            ack_timeout: None,
        }
    }

    /// Prefetch `n`: `n` flow permits and a client queue of `n`.
    pub fn prefetch(mut self, n: u32) -> Sub {
        self.permits = n;
        self.queue = n;
        self
    }

    /// Subscribes to `topic` as `subscription`.
    pub async fn subscribe(
        &self,
        client: &Client,
        topic: &str,
        subscription: &str,
    ) -> Result<Consumer> {
        let b = client
            .consumer()
            .with_topic(topic)
            .with_subscription(subscription)
            .with_subscription_type(self.sub_type)
            .with_consumer_name(self.name.clone())
            .with_batch_size(self.permits)
            .with_unacked_message_resend_delay(self.ack_timeout)
            .with_options(
                ConsumerOptions::default()
                    .with_initial_position(self.initial.clone())
                    .with_receiver_queue_size(self.queue),
            );
        bounded(
            &format!("subscribe {} to {subscription}", self.name),
            b.build(),
        )
        .await
    }
}

/// A producer without batching (the crate's default).
pub async fn producer(client: &Client, topic: &str) -> Result<Producer> {
    producer_with(client, topic, ProducerOptions::default()).await
}

/// A producer with `options`.
pub async fn producer_with(
    client: &Client,
    topic: &str,
    options: ProducerOptions,
) -> Result<Producer> {
    let b = client.producer().with_topic(topic).with_options(options);
    bounded(&format!("producer on {topic}"), b.build()).await
}

/// Sends `payload` with an optional key and waits for the receipt; the message id.
pub async fn send(
    p: &mut Producer,
    payload: impl Into<Vec<u8>>,
    key: Option<&str>,
) -> Result<MessageIdData> {
    let mut m = p.create_message().with_content(payload.into());
    if let Some(k) = key {
        m = m.with_key(k);
    }
    let fut = bounded("send", m.send_non_blocking()).await?;
    let receipt = bounded("send receipt", fut).await?;
    receipt
        .message_id
        .ok_or_else(|| anyhow!("a send receipt without a message id"))
}

/// The next message within `timeout`, `None` when none came.
pub async fn recv(c: &mut Consumer, timeout: Duration) -> Result<Option<Msg>> {
    match tokio::time::timeout(timeout, c.next()).await {
        Err(_) => Ok(None),
        Ok(None) => Err(anyhow!("the consumer's stream ended")),
        Ok(Some(Err(e))) => Err(anyhow!("receive: {e}")),
        Ok(Some(Ok(m))) => Ok(Some(m)),
    }
}

/// Receives until nothing comes for `quiet` (at most `limit` in all, at most `max` messages).
pub async fn drain(
    c: &mut Consumer,
    quiet: Duration,
    limit: Duration,
    max: usize,
) -> Result<Vec<Msg>> {
    let end = Instant::now() + limit;
    let mut out = Vec::new();
    while out.len() < max {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        match recv(c, quiet.min(left)).await? {
            Some(m) => out.push(m),
            None => break,
        }
    }
    Ok(out)
}

/// Receives until `n` messages came (or `limit` passed), then until nothing more comes for
/// `quiet` (so extras show).
pub async fn recv_n(
    c: &mut Consumer,
    n: usize,
    limit: Duration,
    quiet: Duration,
) -> Result<Vec<Msg>> {
    let end = Instant::now() + limit;
    let mut out = Vec::new();
    while out.len() < n {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        if let Some(m) = recv(c, left.min(Duration::from_millis(500))).await? {
            out.push(m);
        }
    }
    out.extend(drain(c, quiet, Duration::from_secs(5), 10_000).await?);
    Ok(out)
}

/// Acks a message (the crate sends it at once, no grouping).
pub async fn ack(c: &mut Consumer, m: &Msg) -> Result<()> {
    c.ack(m).await.map_err(|e| anyhow!("ack: {e}"))
}

/// Nacks a message (the crate sends REDELIVER_UNACKNOWLEDGED_MESSAGES for it at once).
pub async fn nack(c: &mut Consumer, m: &Msg) -> Result<()> {
    c.nack(m).await.map_err(|e| anyhow!("nack: {e}"))
}

/// Closes a consumer (CLOSE_CONSUMER after every ack it sent before).
pub async fn close(mut c: Consumer) -> Result<()> {
    bounded("close consumer", c.close()).await
}

/// Leaves without `close`: drops the consumer. The crate's `close` goes through the consumer's
/// engine, which is blocked while the application's queue is full, so closing a consumer with
/// unread prefetched messages hangs; dropping it makes the engine send CLOSE_CONSUMER, but acks
/// still queued in the engine are lost (the broker redelivers those messages to others).
pub fn drop_consumer(c: Consumer) {
    drop(c);
}

/// Closes within `limit`; when the close does not complete (see [`drop_consumer`]), drops the
/// consumer. True when it closed.
pub async fn close_or_drop(mut c: Consumer, limit: Duration) -> bool {
    matches!(tokio::time::timeout(limit, c.close()).await, Ok(Ok(())))
}

/// The payload as text.
pub fn text(m: &Msg) -> String {
    String::from_utf8_lossy(&m.payload.data).into_owned()
}

/// `(ledger, entry, batch index or -1)`.
pub fn id_of(m: &Msg) -> (u64, u64, i32) {
    let id = m.message_id();
    (id.ledger_id, id.entry_id, id.batch_index.unwrap_or(-1))
}

/// `key#seq` payloads: `(key, seq)`.
pub fn key_seq(m: &Msg) -> Result<(String, u32)> {
    let t = text(m);
    let (k, s) = t
        .split_once('#')
        .ok_or_else(|| anyhow!("payload {t:?} is not key#seq"))?;
    Ok((
        k.to_owned(),
        s.parse().with_context(|| format!("payload {t:?}"))?,
    ))
}

/// Counts per string.
pub fn tally<'a>(items: impl IntoIterator<Item = &'a str>) -> HashMap<String, usize> {
    let mut m = HashMap::new();
    for i in items {
        *m.entry(i.to_owned()).or_insert(0) += 1;
    }
    m
}
