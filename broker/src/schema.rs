//! A topic's schemas: the versions clients are told in PRODUCER_SUCCESS, GET_SCHEMA and
//! GET_OR_CREATE_SCHEMA.
//!
//! Kept in memory (not under `--data-dir`). A schema is identified by its type and its data:
//! the same schema gets the same version, a new one the next version (Pulsar's
//! `LongSchemaVersion`: an 8-byte big-endian counter from 0). Every new schema is accepted:
//! there is no compatibility check.

use std::sync::Mutex;

use wire::proto::Schema;

use crate::sync::lock;

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
    /// The version of `schema` (type and data compared), added as the next version if the topic
    /// has no such schema yet.
    pub(crate) fn get_or_create(&self, schema: &Schema) -> Vec<u8> {
        let mut versions = lock(&self.versions);
        let index = match versions
            .iter()
            .position(|s| s.r#type == schema.r#type && s.schema_data == schema.schema_data)
        {
            Some(i) => i,
            None => {
                versions.push(schema.clone());
                versions.len() - 1
            }
        };
        version_bytes(index)
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

    #[test]
    fn versions_are_assigned_once_per_schema_and_read_back() {
        let r = SchemaRegistry::default();
        assert_eq!(r.get(None), None);
        let json_a = schema(Type::Json, b"{a}");
        assert_eq!(r.get_or_create(&json_a), vec![0; 8]);
        assert_eq!(r.get_or_create(&json_a), vec![0; 8]);
        let json_b = schema(Type::Json, b"{b}");
        assert_eq!(r.get_or_create(&json_b), vec![0, 0, 0, 0, 0, 0, 0, 1]);
        // Same data, another type: another schema.
        assert_eq!(
            r.get_or_create(&schema(Type::Avro, b"{a}")),
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
