use super::*;

fn info(clusters: &[&str]) -> TenantInfo {
    TenantInfo {
        admin_roles: BTreeSet::new(),
        allowed_clusters: clusters.iter().map(|c| c.to_string()).collect(),
    }
}

#[test]
fn a_fresh_broker_has_what_pulsar_standalone_creates() {
    let m = Metadata::default();
    assert_eq!(m.tenants(), ["public", "pulsar"]);
    assert_eq!(m.namespaces("public").unwrap(), ["public/default"]);
    assert_eq!(m.namespaces("pulsar").unwrap(), ["pulsar/system"]);
    assert!(m.check_namespace("public", "default").is_ok());
    assert_eq!(
        m.tenant("public").unwrap().allowed_clusters,
        BTreeSet::from([CLUSTER.to_owned()])
    );
}

#[test]
fn tenants_are_created_once_named_well_and_deleted_when_empty() {
    let mut m = Metadata::default();
    m.create_tenant("acme", info(&["standalone"])).unwrap();
    let status = |r: Result<(), MetadataError>| r.unwrap_err().status();
    assert_eq!(status(m.create_tenant("no-clusters", info(&[]))), 412);
    assert_eq!(status(m.create_tenant("acme", info(&["standalone"]))), 409);
    assert_eq!(status(m.create_tenant("a/b", info(&["standalone"]))), 412);
    assert_eq!(status(m.create_tenant("", info(&["standalone"]))), 412);
    assert_eq!(status(m.create_tenant("x", info(&["elsewhere"]))), 412);
    assert_eq!(status(m.update_tenant("nope", info(&["standalone"]))), 404);
    let mut roles = info(&["standalone"]);
    roles.admin_roles.insert("ops".into());
    m.update_tenant("acme", roles.clone()).unwrap();
    assert_eq!(m.tenant("acme").unwrap(), &roles);

    m.create_namespace("acme", "orders").unwrap();
    assert_eq!(status(m.create_namespace("acme", "orders")), 409);
    assert_eq!(status(m.create_namespace("nope", "orders")), 404);
    assert_eq!(status(m.create_namespace("acme", "a b")), 412);
    assert_eq!(status(m.delete_tenant("acme")), 409);
    assert_eq!(status(m.delete_namespace("acme", "orders", true)), 409);
    m.delete_namespace("acme", "orders", false).unwrap();
    assert_eq!(status(m.delete_namespace("acme", "orders", false)), 404);
    m.delete_tenant("acme").unwrap();
    assert_eq!(status(m.delete_tenant("acme")), 404);
    assert!(matches!(
        m.namespaces("acme"),
        Err(MetadataError::TenantNotFound)
    ));
}

#[test]
fn a_topic_needs_its_tenant_and_namespace() {
    let m = Metadata::default();
    assert!(matches!(
        m.check_namespace("nope", "default"),
        Err(MetadataError::TenantNotFound)
    ));
    assert!(matches!(
        m.check_namespace("public", "nope"),
        Err(MetadataError::NamespaceNotFound)
    ));
}

#[test]
fn partitioned_topics_are_created_grown_and_deleted() {
    let mut m = Metadata::default();
    let t = "persistent://public/default/p";
    let status = |r: Result<(), MetadataError>| r.unwrap_err().status();
    assert_eq!(status(m.create_partitioned(t, 0, 100, false)), 406);
    assert_eq!(status(m.create_partitioned(t, 101, 100, false)), 406);
    assert_eq!(status(m.create_partitioned(t, 3, 100, true)), 409);
    m.create_partitioned(t, 3, 100, false).unwrap();
    assert_eq!(status(m.create_partitioned(t, 4, 100, false)), 409);
    assert_eq!(m.partitions(t), Some(3));
    assert_eq!(m.partitioned_in("public/default"), [t]);
    assert_eq!(
        m.grow_partitioned(t, 3, 100).unwrap(),
        3,
        "the same count: a no-op"
    );
    assert_eq!(status(m.grow_partitioned(t, 2, 100).map(drop)), 422);
    assert_eq!(status(m.grow_partitioned(t, 101, 100).map(drop)), 406);
    assert_eq!(
        status(
            m.grow_partitioned("persistent://public/default/q", 5, 100)
                .map(drop)
        ),
        409
    );
    assert_eq!(m.grow_partitioned(t, 5, 100).unwrap(), 3);
    assert_eq!(m.partitions(t), Some(5));
    assert_eq!(status(m.delete_namespace("public", "default", false)), 409);
    assert_eq!(m.delete_partitioned(t), Some(5));
    assert_eq!(m.partitions(t), None);
    assert_eq!(m.delete_partitioned(t), None);
}

#[test]
fn pulsars_three_quota_policies_are_accepted() {
    for policy in [
        "consumer_backlog_eviction",
        "producer_request_hold",
        "producer_exception",
    ] {
        let body = format!(r#"{{"limitSize": 1, "policy": "{policy}"}}"#);
        let q = BacklogQuota::from_body(body.as_bytes()).unwrap();
        assert_eq!((q.limit_size, q.policy.as_str()), (1, policy));
    }
    for (body, refused) in [
        (
            &br#"{"limitSize": 1, "policy": "drop_everything"}"#[..],
            "drop_everything",
        ),
        (br#"{"limitSize": 1}"#, "needs a `policy`"),
        (b"[1", "not a BacklogQuota"),
    ] {
        let e = BacklogQuota::from_body(body).unwrap_err().to_string();
        assert!(e.contains(refused), "{e}");
    }
    assert_eq!(QuotaKind::parse(None), Some(QuotaKind::DestinationStorage));
    assert_eq!(
        QuotaKind::parse(Some("message_age")),
        Some(QuotaKind::MessageAge)
    );
    assert_eq!(QuotaKind::parse(Some("x")), None);
}

#[test]
fn an_old_data_directory_adopts_its_namespaces() {
    let mut m = Metadata::default();
    assert!(!m.adopt_namespace("public", "default"));
    assert!(m.adopt_namespace("old", "ns"));
    assert!(m.check_namespace("old", "ns").is_ok());
}

#[test]
fn the_file_store_keeps_the_metadata_and_refuses_what_it_cannot_read() {
    let dir = std::env::temp_dir().join(format!("broker-metadata-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = FileMetadata::new(file_in(&dir));
    assert!(store.load().unwrap().is_none());
    let mut m = Metadata::default();
    m.create_tenant("acme", info(&["standalone"])).unwrap();
    m.create_namespace("acme", "orders").unwrap();
    m.create_partitioned("persistent://acme/orders/t", 4, 100, false)
        .unwrap();
    m.change_policies("acme", "orders", |p| {
        p.message_ttl_in_seconds = Some(30);
        let q =
            BacklogQuota::from_body(br#"{"limit": 100, "policy": "consumer_backlog_eviction"}"#)
                .unwrap();
        assert_eq!((q.limit_size, q.limit_time), (100, -1));
        p.backlog_quota_map.insert(QuotaKind::MessageAge, q);
    })
    .unwrap();
    assert_eq!(m.enforced_policies().len(), 1);
    store.save(&m).unwrap();
    assert_eq!(store.load().unwrap(), Some(m));

    std::fs::write(file_in(&dir), b"{not json").unwrap();
    assert!(matches!(store.load(), Err(StorageError::Unreadable { .. })));
    std::fs::write(
        file_in(&dir),
        br#"{"version": 9, "tenants": {}, "namespaces": [], "partitioned": {}}"#,
    )
    .unwrap();
    let err = store.load().unwrap_err().to_string();
    assert!(err.contains("format version Some(9)"), "{err}");
    assert!(MemoryMetadata.load().unwrap().is_none());
    let _ = std::fs::remove_dir_all(&dir);
}
