//! A topic's schemas: the versions clients are told in PRODUCER_SUCCESS, GET_SCHEMA and
//! GET_OR_CREATE_SCHEMA.
//!
//! Recorded through the topic's catalog (`schemas.json` under `--data-dir`) before a new version
//! is handed out, and read back when the topic opens. A schema is identified by its type and its data:
//! the same schema gets the same version, a new one the next version (Pulsar's
//! `LongSchemaVersion`: an 8-byte big-endian counter from 0). A new schema must be compatible
//! with the topic's under the broker's strategy ([`compat`]); a consumer's schema must be able to
//! read the topic's.

use std::sync::Mutex;

use wire::proto::Schema;

use crate::storage::StorageError;
use crate::sync::lock;

pub mod compat;

pub use compat::Strategy;

/// Why a schema got no version.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SchemaError {
    /// Refused by the compatibility check (Pulsar's `IncompatibleSchema`).
    #[error(transparent)]
    Incompatible(#[from] compat::Incompatible),
    /// The new version could not be recorded.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

impl SchemaError {
    /// The code a client gets.
    pub(crate) fn code(&self) -> wire::proto::ServerError {
        match self {
            SchemaError::Incompatible(_) => wire::proto::ServerError::IncompatibleSchema,
            SchemaError::Storage(_) => wire::proto::ServerError::PersistenceError,
        }
    }
}

/// The schemas of one topic, in the order they were added.
#[derive(Debug, Default)]
pub(crate) struct SchemaRegistry {
    versions: Mutex<Vec<Schema>>,
}

/// A version's wire form: the index as an 8-byte big-endian number.
fn version_bytes(index: usize) -> Vec<u8> {
    (index as u64).to_be_bytes().to_vec()
}

impl SchemaRegistry {
    /// A registry holding `versions` (as recorded), in order.
    pub(crate) fn restored(versions: Vec<Schema>) -> SchemaRegistry {
        SchemaRegistry {
            versions: Mutex::new(versions),
        }
    }

    /// The version of `schema` (type and data compared), added as the next version if the topic
    /// has no such schema yet and it is compatible with the topic's under `strategy`. A new
    /// version is handed out only after `record` took every version (the new one last); when it
    /// fails the registry stays as it was.
    pub(crate) fn get_or_create(
        &self,
        schema: &Schema,
        strategy: Strategy,
        record: impl FnOnce(&[Schema]) -> Result<(), StorageError>,
    ) -> Result<Vec<u8>, SchemaError> {
        let mut versions = lock(&self.versions);
        if let Some(i) = versions
            .iter()
            .position(|s| s.r#type == schema.r#type && s.schema_data == schema.schema_data)
        {
            return Ok(version_bytes(i));
        }
        compat::check_producer(&versions, schema, strategy)?;
        versions.push(schema.clone());
        if let Err(e) = record(&versions) {
            versions.pop();
            return Err(e.into());
        }
        Ok(version_bytes(versions.len() - 1))
    }

    /// A consumer subscribes with `schema`: it must read the topic's schema under `strategy`
    /// ([`compat::check_consumer`]). A topic without a schema takes it as its first version
    /// when `idle` (no producer, no consumer with a schema of its own, no entry: Pulsar's rule),
    /// else the subscribe is refused, as Pulsar refuses it ("Topic does not have schema to
    /// check").
    pub(crate) fn check_consumer(
        &self,
        schema: &Schema,
        strategy: Strategy,
        idle: bool,
        record: impl FnOnce(&[Schema]) -> Result<(), StorageError>,
    ) -> Result<(), SchemaError> {
        let versions = lock(&self.versions);
        if versions.is_empty() {
            drop(versions);
            if !idle {
                return Err(
                    compat::Incompatible("Topic does not have schema to check".into()).into(),
                );
            }
            return self.get_or_create(schema, strategy, record).map(|_| ());
        }
        compat::check_consumer(&versions, schema, strategy)?;
        Ok(())
    }

    /// The schema of `version` (the latest when `None` or empty) and its version; `None` when
    /// the topic has no schema of that version.
    pub(crate) fn get(&self, version: Option<&[u8]>) -> Option<(Schema, Vec<u8>)> {
        let versions = lock(&self.versions);
        let index = match version.filter(|v| !v.is_empty()) {
            None => versions.len().checked_sub(1)?,
            Some(v) => usize::try_from(u64::from_be_bytes(v.try_into().ok()?)).ok()?,
        };
        let schema = versions.get(index)?.clone();
        Some((schema, version_bytes(index)))
    }
}

impl SchemaRegistry {
    /// Every version, oldest first.
    pub(crate) fn all(&self) -> Vec<Schema> {
        lock(&self.versions).clone()
    }
}

/// Pulsar's name of a schema type (`SchemaType` in its admin API's JSON: `JSON`, `AVRO`,
/// `KEY_VALUE`, `BOOLEAN`, …).
pub(crate) fn type_name(t: wire::proto::schema::Type) -> String {
    use wire::proto::schema::Type;
    if t == Type::Bool {
        return "BOOLEAN".into();
    }
    let mut out = String::new();
    for (i, c) in t.as_str_name().chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

/// The schema type Pulsar's admin API names `name`.
pub(crate) fn type_of(name: &str) -> Option<wire::proto::schema::Type> {
    (0..=22)
        .filter_map(|i| wire::proto::schema::Type::try_from(i).ok())
        .find(|t| type_name(*t) == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::proto::schema::Type;

    fn schema(t: Type, data: &[u8]) -> Schema {
        Schema {
            name: "s".into(),
            schema_data: data.to_vec(),
            r#type: t as i32,
            properties: Vec::new(),
        }
    }

    fn ok(_: &[Schema]) -> Result<(), StorageError> {
        Ok(())
    }

    #[test]
    fn type_names_are_pulsars() {
        assert_eq!(type_name(Type::KeyValue), "KEY_VALUE");
        assert_eq!(type_name(Type::Bool), "BOOLEAN");
        assert_eq!(type_name(Type::LocalDateTime), "LOCAL_DATE_TIME");
        assert_eq!(type_of("JSON"), Some(Type::Json));
        assert_eq!(type_of("PROTOBUF_NATIVE"), Some(Type::ProtobufNative));
        assert_eq!(type_of("Json"), None);
    }

    #[test]
    fn a_schema_whose_record_fails_gets_no_version() {
        let r = SchemaRegistry::restored(vec![schema(Type::Json, b"{a}")]);
        let failing = |_: &[Schema]| {
            Err(StorageError::Io {
                op: "write",
                path: "schemas.json".into(),
                source: std::io::Error::other("disk full"),
            })
        };
        assert!(r
            .get_or_create(
                &schema(Type::Json, b"{b}"),
                Strategy::AlwaysCompatible,
                failing
            )
            .is_err());
        assert_eq!(
            r.get(None).map(|(_, v)| v),
            Some(vec![0; 8]),
            "nothing added"
        );
        let mut recorded = 0;
        let v = r
            .get_or_create(
                &schema(Type::Json, b"{b}"),
                Strategy::AlwaysCompatible,
                |all| {
                    recorded = all.len();
                    Ok(())
                },
            )
            .unwrap();
        assert_eq!((v, recorded), (vec![0, 0, 0, 0, 0, 0, 0, 1], 2));
    }

    #[test]
    fn versions_are_assigned_once_per_schema_and_read_back() {
        let r = SchemaRegistry::default();
        assert_eq!(r.get(None), None);
        let json_a = schema(Type::Json, b"{a}");
        assert_eq!(
            r.get_or_create(&json_a, Strategy::AlwaysCompatible, ok)
                .unwrap(),
            vec![0; 8]
        );
        assert_eq!(
            r.get_or_create(&json_a, Strategy::AlwaysCompatible, ok)
                .unwrap(),
            vec![0; 8]
        );
        let json_b = schema(Type::Json, b"{b}");
        assert_eq!(
            r.get_or_create(&json_b, Strategy::AlwaysCompatible, ok)
                .unwrap(),
            vec![0, 0, 0, 0, 0, 0, 0, 1]
        );
        // Same data, another type: another schema.
        assert_eq!(
            r.get_or_create(&schema(Type::Avro, b"{a}"), Strategy::AlwaysCompatible, ok)
                .unwrap(),
            vec![0, 0, 0, 0, 0, 0, 0, 2]
        );
        assert_eq!(r.get(Some(&[0; 8])), Some((json_a, vec![0; 8])));
        assert_eq!(r.get(None).map(|(s, _)| s.r#type), Some(Type::Avro as i32));
        assert_eq!(
            r.get(Some(&[])).map(|(_, v)| v),
            Some(vec![0, 0, 0, 0, 0, 0, 0, 2])
        );
        assert_eq!(r.get(Some(&[0, 0, 0, 0, 0, 0, 0, 9])), None);
        assert_eq!(r.get(Some(&[1, 2, 3])), None);
    }
}
