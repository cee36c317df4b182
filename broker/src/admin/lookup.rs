//! `GET /lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}`: what a client given the web
//! URL (`http://…`) asks first, as Pulsar's `TopicLookup` answers it. This broker serves every
//! topic of an existing namespace, so the answer is always its own addresses; the client then
//! speaks the binary protocol to `brokerUrl`. Its other HTTP questions (partitions, the
//! namespace's topics, schemas) are admin paths served beside this one.

use super::{json, Request, Response};
use crate::state::BrokerState;
use crate::topic::TopicName;

/// `rest`: the segments after `/lookup/v2/topic/`.
pub(super) fn route(req: &Request, state: &BrokerState, rest: &[&str]) -> Response {
    if req.method != "GET" {
        return super::no_route(req);
    }
    let [domain, tenant, namespace, topic @ ..] = rest else {
        return super::no_route(req);
    };
    if topic.is_empty() {
        return super::no_route(req);
    }
    let full = format!("{domain}://{tenant}/{namespace}/{}", topic.join("/"));
    let name = match TopicName::parse(&full) {
        Ok(n) => n,
        Err(e) => return Response::json_error(412, &e.to_string()),
    };
    if let Err(e) = state
        .metadata()
        .check_namespace(&name.tenant, &name.namespace)
    {
        return Response::json_error(e.status(), &e.to_string());
    }
    let (service, admin) = (
        reachable(&state.service_url, req.reached),
        reachable(&state.admin_url, req.reached),
    );
    json(
        200,
        // No TLS here: its URLs are empty, and present (the C++ client refuses an answer
        // without `brokerUrlTls`).
        &serde_json::json!({
            "brokerUrl": service,
            "brokerUrlTls": "",
            "nativeUrl": service,
            "httpUrl": admin,
            "httpUrlTls": "",
        }),
    )
}

/// `url` (`scheme://host:port`), its host replaced by `reached` when it is the unspecified
/// address (a broker listening on every address): the client cannot connect to `0.0.0.0`.
fn reachable(url: &str, reached: Option<std::net::IpAddr>) -> String {
    let Some((scheme, addr)) = url.split_once("://") else {
        return url.to_owned();
    };
    match (addr.parse::<std::net::SocketAddr>(), reached) {
        (Ok(a), Some(ip)) if a.ip().is_unspecified() => {
            format!("{scheme}://{}", std::net::SocketAddr::new(ip, a.port()))
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::reachable;
    use crate::admin::{route, Request};
    use crate::config::BrokerConfig;
    use crate::state::BrokerState;

    /// The lookup answers the broker's own URLs for a topic of an existing namespace (the TLS
    /// ones empty but present), 404 for a missing namespace, 412 for a name Pulsar refuses.
    #[test]
    fn a_lookup_answers_this_broker_or_why_not() {
        let st = BrokerState::new(
            BrokerConfig::default(),
            "pulsar://127.0.0.1:6650".into(),
            std::sync::Arc::new(crate::topic::SteppedRuntimes::default()),
        );
        let get = |path: &str| route(&Request::new("GET", path, Vec::new(), 0), &st);
        let ok = get("/lookup/v2/topic/persistent/public/default/t-partition-1");
        assert_eq!(ok.status, 200);
        let v: serde_json::Value = serde_json::from_slice(&ok.body).unwrap();
        assert_eq!(v["brokerUrl"], "pulsar://127.0.0.1:6650");
        assert_eq!(v["nativeUrl"], "pulsar://127.0.0.1:6650");
        assert_eq!(v["brokerUrlTls"], "");
        assert_eq!(v["httpUrl"], st.admin_url.as_str());
        assert_eq!(get("/lookup/v2/topic/persistent/public/nope/t").status, 404);
        assert_eq!(
            get("/lookup/v2/topic/persistent/public/default/a/b").status,
            412
        );
        let post = Request::new(
            "POST",
            "/lookup/v2/topic/persistent/public/default/t",
            Vec::new(),
            0,
        );
        assert_eq!(route(&post, &st).status, 404);
    }

    #[test]
    fn an_unspecified_host_becomes_the_reached_one() {
        let ip = "10.1.2.3".parse().ok();
        assert_eq!(
            reachable("pulsar://0.0.0.0:6650", ip),
            "pulsar://10.1.2.3:6650"
        );
        assert_eq!(
            reachable("pulsar://127.0.0.1:6650", ip),
            "pulsar://127.0.0.1:6650"
        );
        assert_eq!(
            reachable("pulsar://0.0.0.0:6650", None),
            "pulsar://0.0.0.0:6650"
        );
        let v6 = "::1".parse().ok();
        assert_eq!(reachable("http://[::]:8080", v6), "http://[::1]:8080");
    }
}
