//! Schema compatibility, as Pulsar's schema registry checks it (`SchemaRegistryServiceImpl`
//! and its `SchemaCompatibilityCheck`s):
//!
//! * A new schema whose type differs from the one it is checked against is incompatible.
//! * The same type and data: compatible.
//! * AVRO, JSON and PROTOBUF schemas (Avro schemas in Pulsar) follow Avro's schema resolution
//!   rules in the strategy's direction: BACKWARD, the new schema reads data written with the
//!   existing one; FORWARD, the existing one reads the new one's data; FULL, both. The
//!   non-transitive strategies check the latest version, the `_TRANSITIVE` ones every version.
//! * Other types (STRING, KEY_VALUE, PROTOBUF_NATIVE, …) are compatible unless the strategy is
//!   ALWAYS_INCOMPATIBLE (Pulsar's default check; its KEY_VALUE and PROTOBUF_NATIVE checks are not
//!   reproduced).
//! * A consumer's schema is checked BACKWARD against the latest version (for BACKWARD, FORWARD
//!   and FULL), or against every version with a transitive strategy.
//!
//! An Avro schema this parser cannot read is let through with a WARN (Pulsar's Java parser is
//! more lenient, with default validation off): a wrong refusal would stop a producer Pulsar
//! accepts.

use apache_avro::schema_compatibility::SchemaCompatibility;
use tracing::warn;
use wire::proto::schema::Type;
use wire::proto::Schema;

/// Pulsar's `SchemaCompatibilityStrategy` (the broker's `schemaCompatibilityStrategy`,
/// default FULL).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Strategy {
    AlwaysIncompatible,
    AlwaysCompatible,
    Backward,
    Forward,
    #[default]
    Full,
    BackwardTransitive,
    ForwardTransitive,
    FullTransitive,
}

impl Strategy {
    /// Every strategy with Pulsar's name.
    pub const ALL: [(&'static str, Strategy); 8] = [
        ("ALWAYS_INCOMPATIBLE", Strategy::AlwaysIncompatible),
        ("ALWAYS_COMPATIBLE", Strategy::AlwaysCompatible),
        ("BACKWARD", Strategy::Backward),
        ("FORWARD", Strategy::Forward),
        ("FULL", Strategy::Full),
        ("BACKWARD_TRANSITIVE", Strategy::BackwardTransitive),
        ("FORWARD_TRANSITIVE", Strategy::ForwardTransitive),
        ("FULL_TRANSITIVE", Strategy::FullTransitive),
    ];

    /// The strategy named `name` (Pulsar's spelling, any case).
    pub fn parse(name: &str) -> Option<Strategy> {
        Strategy::ALL
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, s)| *s)
    }

    /// Pulsar's name.
    pub fn name(self) -> &'static str {
        Strategy::ALL
            .iter()
            .find(|(_, s)| *s == self)
            .map_or("FULL", |(n, _)| n)
    }

    fn transitive(self) -> bool {
        matches!(
            self,
            Strategy::BackwardTransitive | Strategy::ForwardTransitive | Strategy::FullTransitive
        )
    }
}

/// Why a schema was refused (Pulsar's `IncompatibleSchemaException`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Incompatible(pub String);

/// Whether a producer's new schema may become the next version after `existing` (oldest first).
pub(crate) fn check_producer(
    existing: &[Schema],
    new: &Schema,
    strategy: Strategy,
) -> Result<(), Incompatible> {
    if existing.is_empty() || strategy == Strategy::AlwaysCompatible {
        return Ok(());
    }
    let against: Vec<&Schema> = match strategy.transitive() {
        true => existing.iter().rev().collect(),
        false => existing.last().into_iter().collect(),
    };
    for old in against {
        check_pair(old, new, strategy)?;
    }
    Ok(())
}

/// Whether a consumer's schema can read the topic's (`existing`, oldest first; not empty).
pub(crate) fn check_consumer(
    existing: &[Schema],
    new: &Schema,
    strategy: Strategy,
) -> Result<(), Incompatible> {
    match strategy {
        Strategy::AlwaysCompatible => Ok(()),
        Strategy::Backward | Strategy::Forward | Strategy::Full => {
            check_producer(existing, new, Strategy::Backward)
        }
        other => check_producer(existing, new, other),
    }
}

fn type_name(t: i32) -> String {
    Type::try_from(t).map_or_else(|_| t.to_string(), super::type_name)
}

/// One existing version against the new schema.
fn check_pair(old: &Schema, new: &Schema, strategy: Strategy) -> Result<(), Incompatible> {
    if old.r#type != new.r#type {
        return Err(Incompatible(format!(
            "Incompatible schema: exists schema type {}, new schema type {}",
            type_name(old.r#type),
            type_name(new.r#type)
        )));
    }
    if old.schema_data == new.schema_data {
        return Ok(());
    }
    if strategy == Strategy::AlwaysIncompatible {
        return Err(Incompatible(
            "Incompatible schema: the strategy is ALWAYS_INCOMPATIBLE".to_owned(),
        ));
    }
    let avro = matches!(
        Type::try_from(new.r#type),
        Ok(Type::Avro | Type::Json | Type::Protobuf)
    );
    if !avro {
        return Ok(());
    }
    let (Some(old_avro), Some(new_avro)) = (parse(old), parse(new)) else {
        return Ok(());
    };
    let backward = || SchemaCompatibility::can_read(&old_avro, &new_avro);
    let forward = || SchemaCompatibility::can_read(&new_avro, &old_avro);
    let result = match strategy {
        Strategy::Backward | Strategy::BackwardTransitive => backward().map(|_| ()),
        Strategy::Forward | Strategy::ForwardTransitive => forward().map(|_| ()),
        _ => backward().and_then(|_| forward()).map(|_| ()),
    };
    result.map_err(|e| {
        Incompatible(format!(
            "Incompatible schema ({} check against an existing version): {e}",
            strategy.name()
        ))
    })
}

/// The Avro schema in `s`'s data, `None` (with a WARN) when it cannot be parsed.
fn parse(s: &Schema) -> Option<apache_avro::Schema> {
    let text = String::from_utf8_lossy(&s.schema_data);
    match apache_avro::Schema::parse_str(&text) {
        Ok(a) => Some(a),
        Err(e) => {
            warn!(schema = %s.name, error = %e, "an Avro-based schema this broker cannot parse; not checked for compatibility");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn avro(fields: &str) -> Schema {
        Schema {
            name: "o".into(),
            schema_data: format!(
                r#"{{"type":"record","name":"Order","namespace":"interop","fields":[{fields}]}}"#
            )
            .into_bytes(),
            r#type: Type::Avro as i32,
            properties: Vec::new(),
        }
    }

    const ID: &str = r#"{"name":"id","type":"int"}"#;
    const ITEM: &str = r#"{"name":"item","type":"string"}"#;
    const QTY_DEFAULT: &str = r#"{"name":"qty","type":"int","default":1}"#;

    #[test]
    fn full_refuses_a_field_without_default_and_allows_one_with() {
        let v1 = avro(&format!("{ID},{ITEM}"));
        let no_default = avro(&format!(r#"{ID},{ITEM},{{"name":"qty","type":"int"}}"#));
        let with_default = avro(&format!("{ID},{ITEM},{QTY_DEFAULT}"));
        let e = check_producer(std::slice::from_ref(&v1), &no_default, Strategy::Full).unwrap_err();
        assert!(e.0.contains("qty"), "{e}");
        check_producer(std::slice::from_ref(&v1), &with_default, Strategy::Full).unwrap();
        // Dropping a field without a default: FORWARD-incompatible (old readers need it),
        // BACKWARD-compatible (the new reader ignores it).
        let dropped = avro(ID);
        check_producer(std::slice::from_ref(&v1), &dropped, Strategy::Backward).unwrap();
        assert!(check_producer(std::slice::from_ref(&v1), &dropped, Strategy::Forward).is_err());
        assert!(check_producer(&[v1], &dropped, Strategy::Full).is_err());
    }

    #[test]
    fn a_changed_type_is_incompatible_and_a_string_schema_is_not_checked() {
        let v1 = avro(ID);
        let json = Schema {
            r#type: Type::Json as i32,
            ..v1.clone()
        };
        let e = check_producer(std::slice::from_ref(&v1), &json, Strategy::AlwaysCompatible);
        assert!(e.is_ok(), "ALWAYS_COMPATIBLE checks nothing");
        let e = check_producer(&[v1], &json, Strategy::Full).unwrap_err();
        assert_eq!(
            e.0,
            "Incompatible schema: exists schema type AVRO, new schema type JSON"
        );
        let s = |d: &str| Schema {
            name: "s".into(),
            schema_data: d.as_bytes().to_vec(),
            r#type: Type::String as i32,
            properties: Vec::new(),
        };
        check_producer(&[s("a")], &s("b"), Strategy::Full).unwrap();
        assert!(check_producer(&[s("a")], &s("b"), Strategy::AlwaysIncompatible).is_err());
        check_producer(&[s("a")], &s("a"), Strategy::AlwaysIncompatible).unwrap();
    }

    #[test]
    fn transitive_strategies_check_every_version() {
        let v1 = avro(&format!("{ID},{ITEM}"));
        let v2 = avro(&format!("{ID},{ITEM},{QTY_DEFAULT}"));
        // v3 drops `item` (no default): BACKWARD against v2 only is fine, but not FULL against v1.
        let v3 = avro(&format!("{ID},{QTY_DEFAULT}"));
        check_producer(&[v1.clone(), v2.clone()], &v3, Strategy::Backward).unwrap();
        check_producer(&[v1.clone(), v2.clone()], &v3, Strategy::BackwardTransitive).unwrap();
        assert!(check_producer(&[v1, v2], &v3, Strategy::FullTransitive).is_err());
    }

    #[test]
    fn a_consumer_must_read_the_latest_version() {
        let v1 = avro(&format!("{ID},{ITEM}"));
        let reader_needs_qty = avro(&format!(r#"{ID},{{"name":"qty","type":"int"}}"#));
        assert!(
            check_consumer(std::slice::from_ref(&v1), &reader_needs_qty, Strategy::Full).is_err()
        );
        check_consumer(std::slice::from_ref(&v1), &avro(ID), Strategy::Full).unwrap();
        check_consumer(&[v1], &reader_needs_qty, Strategy::AlwaysCompatible).unwrap();
    }

    #[test]
    fn an_unparsable_schema_is_not_refused() {
        let bad = Schema {
            schema_data: b"{not avro".to_vec(),
            ..avro(ID)
        };
        check_producer(&[avro(ID)], &bad, Strategy::Full).unwrap();
    }

    #[test]
    fn strategy_names_are_pulsars() {
        for (name, s) in Strategy::ALL {
            assert_eq!(Strategy::parse(name), Some(s));
            assert_eq!(s.name(), name);
        }
        assert_eq!(Strategy::parse("full"), Some(Strategy::Full));
        assert_eq!(Strategy::parse("UNDEFINED"), None);
    }
}
