//! The command line: every flag's parsing and refusals.

use super::*;

#[test]
fn defaults_and_flags() {
    let c = BrokerConfig::parse_args(Vec::<String>::new()).unwrap();
    assert_eq!(c.listen.to_string(), "127.0.0.1:6650");
    assert_eq!(c.admin.to_string(), "127.0.0.1:8080");
    let c = BrokerConfig::parse_args([
        "--listen=127.0.0.1:0",
        "--max-message-size",
        "10240",
        "--data-dir",
        "/tmp/x",
    ])
    .unwrap();
    assert_eq!(c.listen.port(), 0);
    assert_eq!(c.max_message_size, 10240);
    assert_eq!(c.max_frame_size(), 10240 + 10240);
    assert_eq!(c.data_dir.as_deref(), Some(std::path::Path::new("/tmp/x")));
    assert!(!c.check_frames);
    assert!(
        BrokerConfig::parse_args(["--check-frames"])
            .unwrap()
            .check_frames
    );
    assert!(matches!(
        BrokerConfig::parse_args(["--check-frames=yes"]).unwrap_err(),
        ConfigError::InvalidValue { flag, value, .. } if flag == "--check-frames" && value == "yes"
    ));
}

#[test]
fn bad_arguments_are_typed_errors() {
    assert_eq!(
        BrokerConfig::parse_args(["--nope"]).unwrap_err(),
        ConfigError::UnknownArgument("--nope".into())
    );
    assert_eq!(
        BrokerConfig::parse_args(["--listen"]).unwrap_err(),
        ConfigError::MissingValue("--listen".into())
    );
    assert!(matches!(
        BrokerConfig::parse_args(["--listen", "localhost"]).unwrap_err(),
        ConfigError::InvalidValue { .. }
    ));
    assert!(matches!(
        BrokerConfig::parse_args(["--max-message-size", "12"]).unwrap_err(),
        ConfigError::InvalidValue { .. }
    ));
    assert_eq!(
        BrokerConfig::parse_args(["--help"]).unwrap_err(),
        ConfigError::Help
    );
    for bad in [
        ["--delayed-delivery-enabled", "yes"],
        ["--delayed-delivery-strict", "1"],
        ["--delayed-delivery-tick-ms", "-5"],
        ["--delayed-delivery-tick-ms", "3600001"],
        ["--allow-auto-topic-creation", "yes"],
        ["--allow-auto-topic-creation-type", "both"],
        ["--default-num-partitions", "0"],
        ["--max-num-partitions-per-partitioned-topic", "-1"],
        ["--message-expiry-check-interval-ms", "0"],
        ["--backlog-quota-check-interval-ms", "x"],
    ] {
        assert!(
            matches!(
                BrokerConfig::parse_args(bad).unwrap_err(),
                ConfigError::InvalidValue { .. }
            ),
            "{bad:?}"
        );
    }
}

#[test]
fn topic_creation_flags() {
    let c = BrokerConfig::parse_args(Vec::<String>::new()).unwrap();
    assert!(c.allow_auto_topic_creation && !c.auto_topic_partitioned);
    assert_eq!(
        (c.default_num_partitions, c.partition_limit()),
        (1, u32::MAX)
    );
    let c = BrokerConfig::parse_args([
        "--allow-auto-topic-creation=false",
        "--allow-auto-topic-creation-type",
        "partitioned",
        "--default-num-partitions",
        "4",
        "--max-num-partitions-per-partitioned-topic",
        "16",
    ])
    .unwrap();
    assert!(!c.allow_auto_topic_creation && c.auto_topic_partitioned);
    assert_eq!((c.default_num_partitions, c.partition_limit()), (4, 16));
}

#[test]
fn delayed_delivery_flags() {
    let d = BrokerConfig::parse_args(Vec::<String>::new())
        .unwrap()
        .delayed_delivery;
    assert_eq!(d, dispatcher::DelayedDelivery::default());
    let c = BrokerConfig::parse_args([
        "--delayed-delivery-enabled=false",
        "--delayed-delivery-tick-ms",
        "0",
        "--delayed-delivery-strict",
        "false",
    ])
    .unwrap();
    assert_eq!(
        c.delayed_delivery,
        dispatcher::DelayedDelivery {
            enabled: false,
            tick: 0,
            strict: false
        }
    );
}

#[test]
fn dispatch_limits_take_pulsars_names_and_defaults() {
    let d = BrokerConfig::default().dispatch;
    assert_eq!(
        (d.max_unacked_per_consumer, d.max_unacked_per_subscription),
        (50_000, 200_000)
    );
    let cfg = BrokerConfig::parse_args([
        "--max-unacked-messages-per-consumer=0",
        "--max-unacked-messages-per-subscription",
        "1000",
        "--key-shared-look-ahead-msg-in-replay-threshold-per-consumer",
        "5",
        "--key-shared-look-ahead-msg-in-replay-threshold-per-subscription=50",
        "--key-shared-unblocking-interval-ms",
        "0",
        "--subscription-key-shared-use-consistent-hashing=false",
        "--subscription-key-shared-consistent-hashing-replica-points",
        "20",
    ])
    .unwrap();
    let d = cfg.dispatch;
    assert_eq!(d.max_unacked_per_consumer, 0);
    assert_eq!(d.max_unacked_per_subscription, 1000);
    assert_eq!(
        (d.look_ahead_per_consumer, d.look_ahead_per_subscription),
        (5, 50)
    );
    assert_eq!(d.unblocking_interval_ms, 0);
    assert_eq!(d.auto_split_mode(), dispatcher::KeySharedMode::AutoSplit);
    assert_eq!(d.key_shared_replica_points, 20);
    for (flag, value) in [
        ("--max-unacked-messages-per-consumer", "-1"),
        ("--max-unacked-messages-per-consumer", "4294967296"),
        ("--key-shared-unblocking-interval-ms", "60001"),
        ("--subscription-key-shared-use-consistent-hashing", "yes"),
        (
            "--subscription-key-shared-consistent-hashing-replica-points",
            "0",
        ),
        (
            "--key-shared-look-ahead-msg-in-replay-threshold-per-consumer",
            "x",
        ),
    ] {
        let e = BrokerConfig::parse_args([flag, value]).unwrap_err();
        assert!(
            matches!(&e, ConfigError::InvalidValue { flag: f, .. } if f == flag),
            "{e}"
        );
    }
}

#[test]
fn a_refusal_names_the_flag_the_value_and_the_reason() {
    assert_eq!(
        BrokerConfig::parse_args(["--listen", "localhost"]).unwrap_err(),
        ConfigError::InvalidValue {
            flag: "--listen".into(),
            value: "localhost".into(),
            reason: "not an IP:PORT".into(),
        }
    );
    assert_eq!(
        BrokerConfig::parse_args(["--legacy=nope"]).unwrap_err().to_string(),
        "invalid value `nope` for `--legacy`: must be `mark-delete-cleanup`, `orphan-chunk-replay`, `unordered-nack` or `no-batch-ack-set`"
    );
    assert_eq!(
        BrokerConfig::parse_args(["serve"]).unwrap_err(),
        ConfigError::UnknownArgument("serve".into())
    );
    // The last of a repeated flag wins; `--legacy` adds up.
    let c = BrokerConfig::parse_args([
        "--entries-per-ledger=5",
        "--entries-per-ledger=7",
        "--legacy=unordered-nack",
        "--legacy=no-batch-ack-set",
    ])
    .unwrap();
    assert_eq!(c.entries_per_ledger, 7);
    assert!(c.legacy.unordered_nack && c.legacy.no_batch_ack_set);
}

#[test]
fn the_help_lists_every_flag() {
    let help = usage();
    for flag in [
        "--listen",
        "--data-dir",
        "--sync",
        "--legacy",
        "--check-frames",
        "--max-unacked-messages-per-consumer",
        "--subscription-key-shared-consistent-hashing-replica-points",
        "--schema-compatibility-strategy",
    ] {
        assert!(help.contains(flag), "{flag} in\n{help}");
    }
}
