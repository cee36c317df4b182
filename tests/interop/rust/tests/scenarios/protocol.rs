//! Schemas, Failover, access modes and pattern subscriptions, written as the crate's
//! applications would use them. A scenario for a feature the broker lacks would be an EXPECTED
//! FAILURE naming it (`scenario::run_xfail`); none is left.

use std::{
    collections::BTreeSet,
    time::{Duration, Instant},
};

use pulsar::{
    proto::{schema::Type as SchemaType, Schema},
    ProducerOptions, SubType,
};
use pulsar_rs_interop::{
    anyhow,
    broker::Broker,
    client::{self, ack, close, drain, recv, recv_n, text, Sub},
    ensure, scenario, Result,
};

const JSON_SCHEMA: &str = r#"{"type":"record","name":"Order","namespace":"interop","fields":[{"name":"id","type":"int"},{"name":"item","type":"string"}]}"#;

/// A schema producer sends one message; the consumer must see the message's schema version
/// and fetch the schema (GET_SCHEMA) by it.
async fn schema_round_trip(ctx: &scenario::Ctx, kind: SchemaType) -> Result<String> {
    let mut b = Broker::start(&ctx.log_dir, "broker", &[])?;
    let cl = client::client(&b.service_url).await?;
    let topic = client::unique_topic("schema");
    let schema = Schema {
        name: "Order".to_owned(),
        schema_data: JSON_SCHEMA.as_bytes().to_vec(),
        r#type: kind as i32,
        properties: Vec::new(),
    };
    let mut c = Sub::new(SubType::Shared, "c")
        .subscribe(&cl, &topic, "sub")
        .await?;
    let opts = ProducerOptions {
        schema: Some(schema.clone()),
        ..Default::default()
    };
    let mut p = client::producer_with(&cl, &topic, opts).await?;
    let payload = if kind == SchemaType::Json {
        br#"{"id":1,"item":"tea"}"#.to_vec()
    } else {
        vec![2, 6, b't', b'e', b'a']
    };
    client::send(&mut p, payload.clone(), None).await?;
    let m = recv(&mut c, Duration::from_secs(5))
        .await?
        .ok_or_else(|| anyhow!("the message did not arrive"))?;
    ctx.count(1);
    ensure!(m.payload.data == payload, "payload changed");
    let version = m.metadata().schema_version.clone().unwrap_or_default();
    ensure!(
        !version.is_empty(),
        "the message carries no schema version (the producer got none from the broker)"
    );
    let got = client::bounded("get_schema", c.get_schema(&topic, Some(version.clone())))
        .await?
        .ok_or_else(|| anyhow!("GET_SCHEMA returned no schema"))?;
    ensure!(
        got.r#type == kind as i32,
        "GET_SCHEMA type {}, expected {:?}",
        got.r#type,
        kind
    );
    ensure!(
        got.schema_data == schema.schema_data,
        "GET_SCHEMA returned other schema data"
    );
    ack(&mut c, &m).await?;
    close(c).await?;
    p.close().await?;
    b.stop()?;
    Ok(format!(
        "{kind:?} schema version {version:?}, GET_SCHEMA round trip"
    ))
}

// The broker has a schema registry now (in memory, versions by type and data): these two
// were expected failures ("schema registry") until it landed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_json() {
    scenario::run("schema_json", |ctx| async move {
        schema_round_trip(&ctx, SchemaType::Json).await
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_avro() {
    scenario::run("schema_avro", |ctx| async move {
        schema_round_trip(&ctx, SchemaType::Avro).await
    })
    .await;
}

/// Schema compatibility: with Pulsar's default strategy (FULL), a producer whose Avro record
/// shares no field with the topic's schema (and has no defaults) is refused
/// (`IncompatibleSchema`), while a second producer with the same schema is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_compatibility() {
    scenario::run("schema_compatibility", |ctx| async move {
        let mut b = Broker::start(&ctx.log_dir, "broker", &[])?;
        let cl = client::client(&b.service_url).await?;
        let topic = client::unique_topic("schema-compat");
        let avro = |name: &str, data: &str| Schema {
            name: name.to_owned(),
            schema_data: data.as_bytes().to_vec(),
            r#type: SchemaType::Avro as i32,
            properties: Vec::new(),
        };
        let v1 = avro("Order", JSON_SCHEMA);
        let other = avro(
            "Invoice",
            r#"{"type":"record","name":"Invoice","namespace":"interop","fields":[{"name":"total","type":"double"}]}"#,
        );
        let opts = |s: &Schema| ProducerOptions { schema: Some(s.clone()), ..Default::default() };
        let mut p1 = client::producer_with(&cl, &topic, opts(&v1)).await?;
        client::send(&mut p1, vec![2, 6, b't', b'e', b'a'], None).await?;
        let mut same = client::producer_with(&cl, &topic, opts(&v1)).await?;
        client::send(&mut same, vec![4, 6, b'c', b'a', b'y'], None).await?;
        same.close().await?;
        let refused = client::producer_with(&cl, &topic, opts(&other)).await;
        ensure!(refused.is_err(), "a producer with an incompatible Avro schema was accepted");
        let err = refused.err().map(|e| e.to_string()).unwrap_or_default();
        ensure!(err.contains("IncompatibleSchema"), "refused with {err}, expected IncompatibleSchema");
        p1.close().await?;
        b.stop()?;
        Ok(format!("incompatible schema refused: {err}"))
    })
    .await;
}

/// Failover: of two consumers one is active and gets everything; when it closes, the other
/// takes over and gets the next messages in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover() {
    scenario::run("failover", |ctx| async move {
        let mut b = Broker::start(&ctx.log_dir, "broker", &[])?;
        let cl = client::client(&b.service_url).await?;
        let topic = client::unique_topic("failover");
        let mut a = Sub::new(SubType::Failover, "a")
            .subscribe(&cl, &topic, "fo")
            .await?;
        let mut z = Sub::new(SubType::Failover, "z")
            .subscribe(&cl, &topic, "fo")
            .await?;
        let mut p = client::producer(&cl, &topic).await?;
        for i in 0..10 {
            client::send(&mut p, format!("m{i}"), None).await?;
        }
        let ga = drain(
            &mut a,
            Duration::from_millis(700),
            Duration::from_secs(5),
            100,
        )
        .await?;
        let gz = drain(
            &mut z,
            Duration::from_millis(300),
            Duration::from_secs(5),
            100,
        )
        .await?;
        ctx.count((ga.len() + gz.len()) as u64);
        ensure!(
            (ga.len(), gz.len()) == (10, 0) || (ga.len(), gz.len()) == (0, 10),
            "not one active consumer: a got {}, z got {}",
            ga.len(),
            gz.len()
        );
        let (mut active, mut standby, got) = if ga.len() == 10 {
            (a, z, ga)
        } else {
            (z, a, gz)
        };
        for m in &got {
            ack(&mut active, m).await?;
        }
        close(active).await?;
        for i in 10..15 {
            client::send(&mut p, format!("m{i}"), None).await?;
        }
        let rest = recv_n(
            &mut standby,
            5,
            Duration::from_secs(5),
            Duration::from_millis(300),
        )
        .await?;
        ctx.count(rest.len() as u64);
        let texts: Vec<String> = rest.iter().map(text).collect();
        let want: Vec<String> = (10..15).map(|i| format!("m{i}")).collect();
        ensure!(
            texts == want,
            "after the active one closed the standby got {texts:?}, expected m10..m14 in order"
        );
        close(standby).await?;
        b.stop()?;
        Ok("one active consumer got 10, the standby took over with 5".to_owned())
    })
    .await;
}

/// A regex subscription over two topics gets the messages of both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pattern_subscription() {
    scenario::run("pattern_subscription", |ctx| async move {
        let mut b = Broker::start(&ctx.log_dir, "broker", &[])?;
        let cl = client::client(&b.service_url).await?;
        let stem = client::unique_topic("pattern");
        let topics = [format!("{stem}-one"), format!("{stem}-two")];
        for t in &topics {
            let mut p = client::producer(&cl, t).await?;
            client::send(&mut p, t.clone(), None).await?;
            p.close().await?;
        }
        let re = regex::Regex::new(&format!("{}-.*", regex::escape(&stem)))?;
        let builder = cl
            .consumer()
            .with_topic_regex(re)
            .with_lookup_namespace("public/default")
            .with_subscription("pat")
            .with_subscription_type(SubType::Shared)
            .with_options(
                pulsar::ConsumerOptions::default()
                    .with_initial_position(pulsar::consumer::InitialPosition::Earliest),
            );
        let mut c: client::Consumer = client::bounded("regex subscribe", builder.build()).await?;
        let got = recv_n(
            &mut c,
            2,
            Duration::from_secs(5),
            Duration::from_millis(300),
        )
        .await?;
        ctx.count(got.len() as u64);
        let names: BTreeSet<String> = got.iter().map(text).collect();
        ensure!(
            names == topics.iter().cloned().collect::<BTreeSet<_>>(),
            "the pattern consumer got {names:?}"
        );
        close(c).await?;
        b.stop()?;
        Ok("one message from each of the two matching topics".to_owned())
    })
    .await;
}

/// Producer access mode Exclusive: while an Exclusive producer is connected, a second
/// Exclusive producer and a Shared one are refused; after it closes, a new one is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_producer_access_mode() {
    scenario::run("exclusive_producer_access_mode", |ctx| async move {
        let mut b = Broker::start(&ctx.log_dir, "broker", &[])?;
        let cl = client::client(&b.service_url).await?;
        let topic = client::unique_topic("access-mode");
        let exclusive = || ProducerOptions { access_mode: Some(1), ..Default::default() };
        let mut p1 = client::producer_with(&cl, &topic, exclusive()).await?;
        let t0 = Instant::now();
        let second = client::producer_with(&cl, &topic, exclusive()).await;
        ensure!(second.is_err(), "a second Exclusive producer was accepted while the first is connected");
        let shared = client::producer_with(&cl, &topic, ProducerOptions::default()).await;
        ensure!(shared.is_err(), "a Shared producer was accepted while an Exclusive one is connected");
        let refused_ms = t0.elapsed().as_millis();
        client::send(&mut p1, "from p1", None).await?;
        p1.close().await?;
        let mut p3 = client::producer_with(&cl, &topic, exclusive()).await?;
        client::send(&mut p3, "from p3", None).await?;
        p3.close().await?;
        b.stop()?;
        Ok(format!("second Exclusive and a Shared producer refused ({refused_ms} ms), accepted after close"))
    })
    .await;
}
