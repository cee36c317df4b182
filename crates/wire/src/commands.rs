//! Constructors for the commands a broker sends, and for those a client of our own (tests, a load
//! generator) sends. Each returns a [`BaseCommand`] with its `type` and sub-message set.
//!
//! Optional fields are set only where Pulsar's broker sets them; every field stays public on the
//! returned value for anything else (`cmd.subscribe.as_mut()`, …).

use crate::proto::{
    base_command::Type, command_ack, command_lookup_topic_response,
    command_partitioned_topic_metadata_response, command_subscribe, BaseCommand, CommandAck,
    CommandAckResponse, CommandActiveConsumerChange, CommandCloseConsumer, CommandCloseProducer,
    CommandConnect, CommandConnected, CommandError, CommandFlow, CommandGetLastMessageId,
    CommandGetLastMessageIdResponse, CommandGetOrCreateSchemaResponse, CommandGetSchemaResponse,
    CommandGetTopicsOfNamespaceResponse, CommandLookupTopic, CommandLookupTopicResponse,
    CommandMessage, CommandPartitionedTopicMetadata, CommandPartitionedTopicMetadataResponse,
    CommandPing, CommandPong, CommandProducer, CommandProducerSuccess, CommandReachedEndOfTopic,
    CommandRedeliverUnacknowledgedMessages, CommandSeek, CommandSend, CommandSendError,
    CommandSendReceipt, CommandSubscribe, CommandSuccess, CommandUnsubscribe, FeatureFlags,
    KeySharedMeta, MessageIdData, Schema, ServerError,
};

/// The newest protocol version in the vendored `PulsarApi.proto` (v21).
pub const PROTOCOL_VERSION: i32 = 21;

/// The version a broker answers in CONNECTED: the smaller of the client's and ours.
pub fn negotiate_protocol_version(client_version: i32) -> i32 {
    client_version.min(PROTOCOL_VERSION)
}

fn base(t: Type) -> BaseCommand {
    BaseCommand {
        r#type: t as i32,
        ..BaseCommand::default()
    }
}

// ---------------------------------------------------------------------------------------------
// Broker → client

/// CONNECTED: `server_version`, the negotiated `protocol_version` and the broker's
/// `max_message_size` (the client's chunking threshold).
pub fn connected(
    server_version: &str,
    protocol_version: i32,
    max_message_size: i32,
) -> BaseCommand {
    BaseCommand {
        connected: Some(Box::new(CommandConnected {
            server_version: server_version.to_owned(),
            protocol_version: Some(protocol_version),
            max_message_size: Some(max_message_size),
            feature_flags: None,
        })),
        ..base(Type::Connected)
    }
}

/// PING (keep-alive probe; the peer answers PONG).
pub fn ping() -> BaseCommand {
    BaseCommand {
        ping: Some(Box::new(CommandPing {})),
        ..base(Type::Ping)
    }
}

/// PONG (the answer to PING).
pub fn pong() -> BaseCommand {
    BaseCommand {
        pong: Some(Box::new(CommandPong {})),
        ..base(Type::Pong)
    }
}

/// PARTITIONED_METADATA_RESPONSE, success: `partitions` (0 = not partitioned).
pub fn partitioned_metadata_response(request_id: u64, partitions: u32) -> BaseCommand {
    BaseCommand {
        partition_metadata_response: Some(Box::new(CommandPartitionedTopicMetadataResponse {
            partitions: Some(partitions),
            request_id,
            response: Some(command_partitioned_topic_metadata_response::LookupType::Success as i32),
            ..Default::default()
        })),
        ..base(Type::PartitionedMetadataResponse)
    }
}

/// PARTITIONED_METADATA_RESPONSE, failed with `error` and `message`.
pub fn partitioned_metadata_failed(
    request_id: u64,
    error: ServerError,
    message: &str,
) -> BaseCommand {
    BaseCommand {
        partition_metadata_response: Some(Box::new(CommandPartitionedTopicMetadataResponse {
            partitions: None,
            request_id,
            response: Some(command_partitioned_topic_metadata_response::LookupType::Failed as i32),
            error: Some(error as i32),
            message: Some(message.to_owned()),
        })),
        ..base(Type::PartitionedMetadataResponse)
    }
}

/// LOOKUP_RESPONSE with `response: Connect`: the client should connect to `broker_service_url`
/// (which must equal the URL the client used, for a single broker).
pub fn lookup_response(
    request_id: u64,
    broker_service_url: &str,
    authoritative: bool,
) -> BaseCommand {
    BaseCommand {
        lookup_topic_response: Some(Box::new(CommandLookupTopicResponse {
            broker_service_url: Some(broker_service_url.to_owned()),
            response: Some(command_lookup_topic_response::LookupType::Connect as i32),
            request_id,
            authoritative: Some(authoritative),
            ..Default::default()
        })),
        ..base(Type::LookupResponse)
    }
}

/// LOOKUP_RESPONSE with `response: Failed`, `error` and `message`.
pub fn lookup_failed(request_id: u64, error: ServerError, message: &str) -> BaseCommand {
    BaseCommand {
        lookup_topic_response: Some(Box::new(CommandLookupTopicResponse {
            response: Some(command_lookup_topic_response::LookupType::Failed as i32),
            request_id,
            error: Some(error as i32),
            message: Some(message.to_owned()),
            ..Default::default()
        })),
        ..base(Type::LookupResponse)
    }
}

/// PRODUCER_SUCCESS: the producer's name (assigned by the broker unless the client provided
/// one), the last stored sequence id (-1 when unknown), the topic's `schema_version` for the
/// producer's schema (empty while the topic has none), `producer_ready: true`.
///
/// `schema_version` is always written: the field is optional in the proto, but the Java client
/// reads it unconditionally (`IllegalStateException: Field 'schema_version' is not set`).
pub fn producer_success(
    request_id: u64,
    producer_name: &str,
    last_sequence_id: i64,
    schema_version: Vec<u8>,
) -> BaseCommand {
    BaseCommand {
        producer_success: Some(Box::new(CommandProducerSuccess {
            request_id,
            producer_name: producer_name.to_owned(),
            last_sequence_id: Some(last_sequence_id),
            schema_version: Some(schema_version),
            topic_epoch: None,
            producer_ready: Some(true),
        })),
        ..base(Type::ProducerSuccess)
    }
}

/// GET_SCHEMA_RESPONSE with the schema and its version.
pub fn get_schema_response(
    request_id: u64,
    schema: Schema,
    schema_version: Vec<u8>,
) -> BaseCommand {
    BaseCommand {
        get_schema_response: Some(Box::new(CommandGetSchemaResponse {
            request_id,
            schema: Some(schema),
            schema_version: Some(schema_version),
            ..Default::default()
        })),
        ..base(Type::GetSchemaResponse)
    }
}

/// GET_SCHEMA_RESPONSE with an error: the frame a client waits for on a failed GET_SCHEMA
/// ([`ServerError::TopicNotFound`] is what Pulsar answers when the topic has no such schema,
/// and what clients read as "no schema").
pub fn get_schema_failed(request_id: u64, error: ServerError, message: &str) -> BaseCommand {
    BaseCommand {
        get_schema_response: Some(Box::new(CommandGetSchemaResponse {
            request_id,
            error_code: Some(error as i32),
            error_message: Some(message.to_owned()),
            ..Default::default()
        })),
        ..base(Type::GetSchemaResponse)
    }
}

/// GET_TOPICS_OF_NAMESPACE_RESPONSE: the namespace's `topics`, not filtered by the client's
/// pattern (`filtered: false`, so the client applies its pattern itself), no hash.
pub fn get_topics_of_namespace_response(request_id: u64, topics: Vec<String>) -> BaseCommand {
    BaseCommand {
        get_topics_of_namespace_response: Some(Box::new(CommandGetTopicsOfNamespaceResponse {
            request_id,
            topics,
            filtered: Some(false),
            topics_hash: None,
            changed: Some(true),
        })),
        ..base(Type::GetTopicsOfNamespaceResponse)
    }
}

/// GET_OR_CREATE_SCHEMA_RESPONSE with the version of the schema (found or just added).
pub fn get_or_create_schema_response(request_id: u64, schema_version: Vec<u8>) -> BaseCommand {
    BaseCommand {
        get_or_create_schema_response: Some(Box::new(CommandGetOrCreateSchemaResponse {
            request_id,
            schema_version: Some(schema_version),
            ..Default::default()
        })),
        ..base(Type::GetOrCreateSchemaResponse)
    }
}

/// GET_OR_CREATE_SCHEMA_RESPONSE with an error (e.g. [`ServerError::IncompatibleSchema`]).
pub fn get_or_create_schema_failed(
    request_id: u64,
    error: ServerError,
    message: &str,
) -> BaseCommand {
    BaseCommand {
        get_or_create_schema_response: Some(Box::new(CommandGetOrCreateSchemaResponse {
            request_id,
            error_code: Some(error as i32),
            error_message: Some(message.to_owned()),
            ..Default::default()
        })),
        ..base(Type::GetOrCreateSchemaResponse)
    }
}

/// SEND_RECEIPT: the stored message's id for the producer's `sequence_id`.
pub fn send_receipt(
    producer_id: u64,
    sequence_id: u64,
    highest_sequence_id: Option<u64>,
    message_id: MessageIdData,
) -> BaseCommand {
    BaseCommand {
        send_receipt: Some(Box::new(CommandSendReceipt {
            producer_id,
            sequence_id,
            message_id: Some(message_id),
            highest_sequence_id,
        })),
        ..base(Type::SendReceipt)
    }
}

/// SEND_ERROR for `sequence_id` (e.g. [`ServerError::ChecksumError`]).
pub fn send_error(
    producer_id: u64,
    sequence_id: u64,
    error: ServerError,
    message: &str,
) -> BaseCommand {
    BaseCommand {
        send_error: Some(Box::new(CommandSendError {
            producer_id,
            sequence_id,
            error: error as i32,
            message: message.to_owned(),
        })),
        ..base(Type::SendError)
    }
}

/// SUCCESS for `request_id` (SUBSCRIBE, CLOSE_PRODUCER, CLOSE_CONSUMER, UNSUBSCRIBE, SEEK, …).
pub fn success(request_id: u64) -> BaseCommand {
    BaseCommand {
        success: Some(Box::new(CommandSuccess {
            request_id,
            schema: None,
        })),
        ..base(Type::Success)
    }
}

/// ERROR for `request_id`.
pub fn error(request_id: u64, error: ServerError, message: &str) -> BaseCommand {
    BaseCommand {
        error: Some(Box::new(CommandError {
            request_id,
            error: error as i32,
            message: message.to_owned(),
        })),
        ..base(Type::Error)
    }
}

/// MESSAGE header for one entry; the stored section follows it on the wire
/// ([`encode_with_section`](crate::encode_with_section)).
///
/// `redelivery_count` is sent only when above 0. `ack_set` (set bit = still unacked, see
/// [`convert::ack_set_from_acked`](crate::convert::ack_set_from_acked)) must be given when a
/// partly acked batch is redelivered, or the client hands the acked messages out again.
pub fn message(
    consumer_id: u64,
    message_id: MessageIdData,
    redelivery_count: u32,
    ack_set: Option<Vec<i64>>,
) -> BaseCommand {
    BaseCommand {
        message: Some(Box::new(message_body(
            consumer_id,
            message_id,
            redelivery_count,
            ack_set,
        ))),
        ..base(Type::Message)
    }
}

/// [`message`]'s `CommandMessage` alone, for
/// [`encode_message_with_section`](crate::encode_message_with_section).
pub fn message_body(
    consumer_id: u64,
    message_id: MessageIdData,
    redelivery_count: u32,
    ack_set: Option<Vec<i64>>,
) -> CommandMessage {
    CommandMessage {
        consumer_id,
        message_id,
        redelivery_count: (redelivery_count > 0).then_some(redelivery_count),
        ack_set: ack_set.unwrap_or_default(),
        consumer_epoch: None,
    }
}

/// ACK_RESPONSE for an ack that carried a `request_id`; `error` is `None` on success.
pub fn ack_response(
    consumer_id: u64,
    request_id: u64,
    error: Option<(ServerError, &str)>,
) -> BaseCommand {
    BaseCommand {
        ack_response: Some(Box::new(CommandAckResponse {
            consumer_id,
            error: error.map(|(e, _)| e as i32),
            message: error.map(|(_, m)| m.to_owned()),
            request_id: Some(request_id),
            ..Default::default()
        })),
        ..base(Type::AckResponse)
    }
}

/// CLOSE_PRODUCER (broker-initiated: the client reconnects on its own; also what a client sends).
pub fn close_producer(producer_id: u64, request_id: u64) -> BaseCommand {
    BaseCommand {
        close_producer: Some(Box::new(CommandCloseProducer {
            producer_id,
            request_id,
            ..Default::default()
        })),
        ..base(Type::CloseProducer)
    }
}

/// CLOSE_CONSUMER (broker-initiated: the client re-subscribes on its own; also what a client
/// sends).
pub fn close_consumer(consumer_id: u64, request_id: u64) -> BaseCommand {
    BaseCommand {
        close_consumer: Some(Box::new(CommandCloseConsumer {
            consumer_id,
            request_id,
            ..Default::default()
        })),
        ..base(Type::CloseConsumer)
    }
}

/// GET_LAST_MESSAGE_ID_RESPONSE: the topic's last message id and, optionally, the consumer's
/// mark-delete position.
pub fn get_last_message_id_response(
    request_id: u64,
    last_message_id: MessageIdData,
    consumer_mark_delete_position: Option<MessageIdData>,
) -> BaseCommand {
    BaseCommand {
        get_last_message_id_response: Some(Box::new(CommandGetLastMessageIdResponse {
            last_message_id,
            request_id,
            consumer_mark_delete_position,
        })),
        ..base(Type::GetLastMessageIdResponse)
    }
}

/// ACTIVE_CONSUMER_CHANGE: on a Failover subscription, whether the consumer is the active one.
pub fn active_consumer_change(consumer_id: u64, is_active: bool) -> BaseCommand {
    BaseCommand {
        active_consumer_change: Some(Box::new(CommandActiveConsumerChange {
            consumer_id,
            is_active: Some(is_active),
        })),
        ..base(Type::ActiveConsumerChange)
    }
}

/// REACHED_END_OF_TOPIC for a consumer of a terminated topic.
pub fn reached_end_of_topic(consumer_id: u64) -> BaseCommand {
    BaseCommand {
        reached_end_of_topic: Some(Box::new(CommandReachedEndOfTopic { consumer_id })),
        ..base(Type::ReachedEndOfTopic)
    }
}

// ---------------------------------------------------------------------------------------------
// Client → broker (for our own tests and load generators)

/// CONNECT with `auth_method_name: "none"` and the feature flags the stock C++ client sends
/// (`supports_auth_refresh`, `supports_broker_entry_metadata`).
pub fn connect(client_version: &str, protocol_version: i32) -> BaseCommand {
    BaseCommand {
        connect: Some(Box::new(CommandConnect {
            client_version: client_version.to_owned(),
            protocol_version: Some(protocol_version),
            auth_method_name: Some("none".to_owned()),
            feature_flags: Some(FeatureFlags {
                supports_auth_refresh: Some(true),
                supports_broker_entry_metadata: Some(true),
                ..Default::default()
            }),
            ..Default::default()
        })),
        ..base(Type::Connect)
    }
}

/// PARTITIONED_METADATA for `topic`.
pub fn partitioned_metadata(topic: &str, request_id: u64) -> BaseCommand {
    BaseCommand {
        partition_metadata: Some(Box::new(CommandPartitionedTopicMetadata {
            topic: topic.to_owned(),
            request_id,
            ..Default::default()
        })),
        ..base(Type::PartitionedMetadata)
    }
}

/// LOOKUP for `topic` (not authoritative).
pub fn lookup(topic: &str, request_id: u64) -> BaseCommand {
    BaseCommand {
        lookup_topic: Some(Box::new(CommandLookupTopic {
            topic: topic.to_owned(),
            request_id,
            authoritative: Some(false),
            ..Default::default()
        })),
        ..base(Type::Lookup)
    }
}

/// PRODUCER on `topic`; with `producer_name: None` the broker assigns one
/// (`user_provided_producer_name: false`).
pub fn producer(
    topic: &str,
    producer_id: u64,
    request_id: u64,
    producer_name: Option<&str>,
) -> BaseCommand {
    BaseCommand {
        producer: Some(Box::new(CommandProducer {
            topic: topic.to_owned(),
            producer_id,
            request_id,
            producer_name: producer_name.map(str::to_owned),
            user_provided_producer_name: Some(producer_name.is_some()),
            ..Default::default()
        })),
        ..base(Type::Producer)
    }
}

/// SEND header for `num_messages` messages (1 unless batched); the payload section follows it
/// ([`encode_with_payload`](crate::encode_with_payload)).
pub fn send(producer_id: u64, sequence_id: u64, num_messages: i32) -> BaseCommand {
    BaseCommand {
        send: Some(Box::new(CommandSend {
            producer_id,
            sequence_id,
            num_messages: (num_messages != 1).then_some(num_messages),
            ..Default::default()
        })),
        ..base(Type::Send)
    }
}

/// SUBSCRIBE. `key_shared_meta` only matters for `Key_Shared`.
pub fn subscribe(
    topic: &str,
    subscription: &str,
    consumer_id: u64,
    request_id: u64,
    sub_type: command_subscribe::SubType,
    key_shared_meta: Option<KeySharedMeta>,
    initial_position: command_subscribe::InitialPosition,
) -> BaseCommand {
    BaseCommand {
        subscribe: Some(Box::new(CommandSubscribe {
            topic: topic.to_owned(),
            subscription: subscription.to_owned(),
            sub_type: sub_type as i32,
            consumer_id,
            request_id,
            initial_position: Some(initial_position as i32),
            key_shared_meta,
            ..Default::default()
        })),
        ..base(Type::Subscribe)
    }
}

/// FLOW: `permits` more messages (a batch of n uses n permits).
pub fn flow(consumer_id: u64, permits: u32) -> BaseCommand {
    BaseCommand {
        flow: Some(Box::new(CommandFlow {
            consumer_id,
            message_permits: permits,
        })),
        ..base(Type::Flow)
    }
}

/// ACK, individual, of one message id. `ack_set: Some(..)` acks only part of a batch (set bit =
/// still unacked); `None` acks the whole entry.
pub fn ack(
    consumer_id: u64,
    mut message_id: MessageIdData,
    ack_set: Option<Vec<i64>>,
) -> BaseCommand {
    if let Some(set) = ack_set {
        message_id.ack_set = set;
    }
    ack_ids(consumer_id, vec![message_id])
}

/// ACK, individual, of several message ids at once (as the C++ client's ack grouping sends them).
pub fn ack_ids(consumer_id: u64, message_ids: Vec<MessageIdData>) -> BaseCommand {
    BaseCommand {
        ack: Some(Box::new(CommandAck {
            consumer_id,
            ack_type: command_ack::AckType::Individual as i32,
            message_id: message_ids,
            ..Default::default()
        })),
        ..base(Type::Ack)
    }
}

/// REDELIVER_UNACKNOWLEDGED_MESSAGES for `message_ids`; an empty list means "all my unacked".
pub fn redeliver_unacknowledged(consumer_id: u64, message_ids: Vec<MessageIdData>) -> BaseCommand {
    BaseCommand {
        redeliver_unacknowledged_messages: Some(Box::new(CommandRedeliverUnacknowledgedMessages {
            consumer_id,
            message_ids,
            consumer_epoch: None,
        })),
        ..base(Type::RedeliverUnacknowledgedMessages)
    }
}

/// SEEK the subscription to `message_id`.
pub fn seek(consumer_id: u64, request_id: u64, message_id: MessageIdData) -> BaseCommand {
    BaseCommand {
        seek: Some(Box::new(CommandSeek {
            consumer_id,
            request_id,
            message_id: Some(message_id),
            message_publish_time: None,
        })),
        ..base(Type::Seek)
    }
}

/// UNSUBSCRIBE the consumer's subscription.
pub fn unsubscribe(consumer_id: u64, request_id: u64) -> BaseCommand {
    BaseCommand {
        unsubscribe: Some(Box::new(CommandUnsubscribe {
            consumer_id,
            request_id,
            ..Default::default()
        })),
        ..base(Type::Unsubscribe)
    }
}

/// GET_LAST_MESSAGE_ID for the consumer's topic.
pub fn get_last_message_id(consumer_id: u64, request_id: u64) -> BaseCommand {
    BaseCommand {
        get_last_message_id: Some(Box::new(CommandGetLastMessageId {
            consumer_id,
            request_id,
        })),
        ..base(Type::GetLastMessageId)
    }
}
