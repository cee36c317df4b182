//! CONNECT, and the commands that find things: topics, their partitions, their schemas.

use tracing::debug;
use wire::proto::{self, BaseCommand, ServerError};

use super::{Session, PROTOCOL_VERSION};
use crate::topic::TopicName;

impl Session {
    pub(super) fn on_connect(&mut self, cmd: &BaseCommand) {
        let Some(c) = &cmd.connect else {
            self.send_error(0, ServerError::UnknownError, "CONNECT without its body");
            return;
        };
        let version = c.protocol_version().min(PROTOCOL_VERSION);
        self.connected = true;
        self.client_version = c.client_version.clone();
        debug!(conn = self.id, client = %c.client_version, protocol = version, "connected");
        // CONNECTED advertises PIP-493's key-ordered negative ack (a client that does not
        // know the flag skips it).
        if let Some(connected) = wire::commands::connected(
            &self.state.server_version,
            version,
            self.state.cfg.max_message_size as i32,
        )
        .connected
        {
            let mut out = Vec::with_capacity(64);
            wire::pip493::encode_connected_with_flag(*connected, &mut out);
            self.out.push_back(out);
        }
    }

    /// PARTITIONED_METADATA: the topic's partition count (0: not partitioned), a partitioned
    /// topic created on first use when the broker is set so and the client allows it
    /// (`metadata_auto_creation_enabled`, true when absent); a refusal when its namespace
    /// does not exist.
    pub(super) fn on_partitioned_metadata(&mut self, cmd: &BaseCommand) {
        let Some(m) = &cmd.partition_metadata else {
            return self.send_error(0, ServerError::UnknownError, "missing body");
        };
        let failed = |code, message: &str| {
            wire::commands::partitioned_metadata_failed(m.request_id, code, message)
        };
        let reply = match TopicName::parse(&m.topic) {
            Err(e) => failed(e.code(), &e.to_string()),
            Ok(name) => {
                let auto_create = m.metadata_auto_creation_enabled.unwrap_or(true);
                match self.state.partitioned_metadata(&name, auto_create) {
                    Ok(n) => wire::commands::partitioned_metadata_response(m.request_id, n),
                    Err(e) => failed(super::topic_error_code(&e), &e.to_string()),
                }
            }
        };
        self.send(&reply);
    }

    /// LOOKUP: this broker owns every topic of an existing namespace, at the address the
    /// client reached.
    pub(super) fn on_lookup(&mut self, cmd: &BaseCommand) {
        let Some(l) = &cmd.lookup_topic else {
            return self.send_error(0, ServerError::UnknownError, "missing body");
        };
        let reply = match TopicName::parse(&l.topic) {
            Ok(name) => match self
                .state
                .metadata()
                .check_namespace(&name.tenant, &name.namespace)
            {
                Ok(()) => wire::commands::lookup_response(l.request_id, &self.service_url, true),
                Err(e) => wire::commands::lookup_failed(
                    l.request_id,
                    ServerError::TopicNotFound,
                    &e.to_string(),
                ),
            },
            Err(e) => wire::commands::lookup_failed(l.request_id, e.code(), &e.to_string()),
        };
        self.send(&reply);
    }

    /// GET_TOPICS_OF_NAMESPACE (every client's pattern subscription, and its periodic
    /// rediscovery): the namespace's persistent topics, unfiltered (the client applies its
    /// pattern); none in NON_PERSISTENT mode, as none are served.
    pub(super) fn on_get_topics_of_namespace(&mut self, cmd: &BaseCommand) {
        let Some(g) = &cmd.get_topics_of_namespace else {
            return self.send_error(0, ServerError::UnknownError, "missing body");
        };
        use proto::command_get_topics_of_namespace::Mode;
        let topics = match g.mode() {
            Mode::NonPersistent => Vec::new(),
            Mode::Persistent | Mode::All => self.state.topic_names_in(&g.namespace),
        };
        self.send(&wire::commands::get_topics_of_namespace_response(
            g.request_id,
            topics,
        ));
    }

    /// GET_SCHEMA: the topic's schema of the asked version (the latest without one); a topic
    /// without it is answered `TopicNotFound` in GET_SCHEMA_RESPONSE, as Pulsar does, which
    /// clients read as "no schema".
    pub(super) fn on_get_schema(&mut self, cmd: &BaseCommand) {
        let Some(g) = &cmd.get_schema else {
            return self.send_error(0, ServerError::UnknownError, "missing body");
        };
        let found = TopicName::parse(&g.topic)
            .ok()
            .and_then(|n| self.state.existing_topic(&n.full()))
            .and_then(|t| t.schemas.get(g.schema_version.as_deref()));
        self.send(&match found {
            Some((schema, version)) => {
                wire::commands::get_schema_response(g.request_id, schema, version)
            }
            None => wire::commands::get_schema_failed(
                g.request_id,
                ServerError::TopicNotFound,
                "Topic not found or no-schema",
            ),
        });
    }

    /// GET_OR_CREATE_SCHEMA (a producer whose message carries another schema than its own, as
    /// the Java client's dead-letter producer with AUTO_PRODUCE_BYTES): the schema's version,
    /// added to the topic when it is new.
    pub(super) fn on_get_or_create_schema(&mut self, cmd: &BaseCommand) {
        let Some(g) = &cmd.get_or_create_schema else {
            return self.send_error(0, ServerError::UnknownError, "missing body");
        };
        let failed = |error, message: &str| {
            wire::commands::get_or_create_schema_failed(g.request_id, error, message)
        };
        let reply = match TopicName::parse(&g.topic) {
            Err(e) => failed(e.code(), &e.to_string()),
            Ok(name) => match self.state.topic_for_client(&name) {
                Err(e) => failed(super::topic_error_code(&e), &e.to_string()),
                Ok(topic) => {
                    match topic.schema_version(&g.schema, self.state.cfg.schema_compatibility) {
                        Ok(v) => wire::commands::get_or_create_schema_response(g.request_id, v),
                        Err(e) => failed(e.code(), &e.to_string()),
                    }
                }
            },
        };
        self.send(&reply);
    }
}
