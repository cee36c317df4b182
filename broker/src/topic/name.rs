//! Topic names as clients send them, read as Pulsar's `TopicName.get` reads them.

/// A persistent topic's name: `persistent://tenant/namespace/topic`. Clients may send it in
/// Pulsar's short forms too (`topic` in `public/default`, or `tenant/namespace/topic`);
/// [`TopicName::parse`] expands them, and everything after it uses the full form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TopicName {
    pub tenant: String,
    pub namespace: String,
    pub local: String,
}

/// Why a topic name was refused (the message goes to the client with
/// [`TopicNameError::code`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TopicNameError {
    /// `non-persistent://…`: not served.
    #[error("non-persistent topics are not served: {0}")]
    NonPersistent(String),
    /// A short name of neither one part nor three (Pulsar's wording).
    #[error("Invalid short topic name '{0}', it should be in the format of <tenant>/<namespace>/<topic> or <topic>")]
    Short(String),
    /// A domain other than `persistent` or `non-persistent`.
    #[error("Invalid topic domain in `{0}`: must be persistent or non-persistent")]
    Domain(String),
    /// `persistent://tenant/cluster/namespace/topic`: Pulsar's legacy form, whose namespace
    /// (`tenant/cluster/namespace`) cannot exist here.
    #[error("legacy topic names with a cluster are not served (use persistent://tenant/namespace/topic): `{0}`")]
    Legacy(String),
    /// Not `domain://tenant/namespace/topic`.
    #[error("Invalid topic name: {0}")]
    Shape(String),
    /// One of the three parts is empty.
    #[error("empty part in topic name `{0}`")]
    EmptyPart(String),
    /// A tenant or namespace with a character Pulsar's names do not allow (letters, digits,
    /// `-`, `_`, `=`, `:` and `.` are).
    #[error(
        "Invalid topic name: {0}: tenant and namespace may hold letters, digits and -_=:. only"
    )]
    Chars(String),
}

impl TopicNameError {
    /// The code a client gets: `InvalidTopicName`, except for a non-persistent topic or a
    /// legacy name, which are `TopicNotFound`. Every client family gives up at once on
    /// `TopicNotFound`, while the C++ client (and with it Python's) retries a
    /// PARTITIONED_METADATA or LOOKUP that failed with `InvalidTopicName` until its operation
    /// timeout.
    pub(crate) fn code(&self) -> wire::proto::ServerError {
        match self {
            TopicNameError::NonPersistent(_) | TopicNameError::Legacy(_) => {
                wire::proto::ServerError::TopicNotFound
            }
            _ => wire::proto::ServerError::InvalidTopicName,
        }
    }
}

/// The tenant and namespace of a short name of one part (Pulsar's `public/default`).
const DEFAULT_NAMESPACE: (&str, &str) = ("public", "default");

impl TopicName {
    /// Parses a topic name as Pulsar's `TopicName.get` does: a name without `://` is short,
    /// `topic` (in `public/default`) or `tenant/namespace/topic` (empty parts between slashes
    /// are not counted); a full name is `persistent://tenant/namespace/topic`, where the topic
    /// part may hold further slashes only as a fourth part would make it Pulsar's legacy form
    /// (`tenant/cluster/namespace/topic`), which is refused. `-partition-N` needs no special
    /// form: it is part of the topic ([`TopicName::partition_of`]).
    pub(crate) fn parse(s: &str) -> Result<TopicName, TopicNameError> {
        let Some((domain, rest)) = s.split_once("://") else {
            return Self::parse_short(s);
        };
        match domain {
            "persistent" => {}
            "non-persistent" => return Err(TopicNameError::NonPersistent(s.to_owned())),
            _ => return Err(TopicNameError::Domain(s.to_owned())),
        }
        let parts: Vec<&str> = rest.splitn(4, '/').collect();
        let [t, n, l] = parts[..] else {
            return Err(if parts.len() == 4 {
                TopicNameError::Legacy(s.to_owned())
            } else {
                TopicNameError::Shape(s.to_owned())
            });
        };
        if t.is_empty() || n.is_empty() || l.is_empty() {
            return Err(TopicNameError::EmptyPart(s.to_owned()));
        }
        if !valid_name(t) || !valid_name(n) {
            return Err(TopicNameError::Chars(s.to_owned()));
        }
        Ok(TopicName {
            tenant: t.to_owned(),
            namespace: n.to_owned(),
            local: l.to_owned(),
        })
    }

    /// `topic` or `tenant/namespace/topic`, as `persistent://…`.
    fn parse_short(s: &str) -> Result<TopicName, TopicNameError> {
        let parts: Vec<&str> = s.split('/').filter(|p| !p.is_empty()).collect();
        match parts[..] {
            [local] => {
                let (t, n) = DEFAULT_NAMESPACE;
                Self::parse(&format!("persistent://{t}/{n}/{local}"))
            }
            [_, _, _] => Self::parse(&format!("persistent://{s}")),
            _ => Err(TopicNameError::Short(s.to_owned())),
        }
    }

    /// The canonical form.
    pub(crate) fn full(&self) -> String {
        format!(
            "persistent://{}/{}/{}",
            self.tenant, self.namespace, self.local
        )
    }

    /// `tenant/namespace`.
    pub(crate) fn namespace_name(&self) -> String {
        format!("{}/{}", self.tenant, self.namespace)
    }

    /// For `{topic}-partition-{i}`, the partitioned topic's full name and `i` (Pulsar's rule:
    /// the suffix is the last `-partition-` followed by a non-negative `int` written without a
    /// sign or leading zeros, so `t-partition-01` is a topic of its own, not partition 1).
    pub(crate) fn partition_of(&self) -> Option<(String, u32)> {
        let (base, index) = self.local.rsplit_once(PARTITION_SUFFIX)?;
        let i: i32 = index.parse().ok()?;
        if base.is_empty() || i < 0 || i.to_string() != index {
            return None;
        }
        let base = TopicName {
            local: base.to_owned(),
            ..self.clone()
        };
        Some((base.full(), i.unsigned_abs()))
    }

    /// The full name of partition `i` of this (partitioned) topic.
    pub(crate) fn partition(&self, i: u32) -> String {
        partition_name(&self.full(), i)
    }
}

/// Pulsar's rule for tenant, namespace and cluster names: letters, digits, `-`, `_`, `=`,
/// `:` and `.`.
pub(crate) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '=' | ':' | '.'))
}

/// What separates a partitioned topic's name from a partition's index.
pub(crate) const PARTITION_SUFFIX: &str = "-partition-";

/// The full name of partition `i` of partitioned topic `full`.
pub(crate) fn partition_name(full: &str, i: u32) -> String {
    format!("{full}{PARTITION_SUFFIX}{i}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every form Pulsar's `TopicName.get` accepts, and what it expands to.
    #[test]
    fn topic_names() {
        for (sent, full) in [
            ("t", "persistent://public/default/t"),
            ("t-partition-2", "persistent://public/default/t-partition-2"),
            ("/t", "persistent://public/default/t"),
            ("a/b/t", "persistent://a/b/t"),
            ("a/b/t-partition-0", "persistent://a/b/t-partition-0"),
            ("persistent://a/b/t", "persistent://a/b/t"),
            ("persistent://a.x/b=y:z/t t", "persistent://a.x/b=y:z/t t"),
        ] {
            let name = TopicName::parse(sent).unwrap_or_else(|e| panic!("{sent}: {e}"));
            assert_eq!(name.full(), full, "{sent}");
            assert_eq!(TopicName::parse(&name.full()), Ok(name), "{sent}");
        }
        let short = TopicName::parse("my-topic").unwrap();
        assert_eq!(
            (short.tenant.as_str(), short.namespace.as_str()),
            ("public", "default")
        );
        assert_eq!(short.local, "my-topic");
    }

    /// What Pulsar refuses, and the code each refusal gets.
    #[test]
    fn refused_names() {
        use wire::proto::ServerError::{InvalidTopicName, TopicNotFound};
        for (sent, code, what) in [
            ("a/t", InvalidTopicName, "short"),
            ("a/b/c/t", InvalidTopicName, "short"),
            ("", InvalidTopicName, "short"),
            ("//", InvalidTopicName, "short"),
            ("persistent://public/t", InvalidTopicName, "shape"),
            ("persistent://public//t", InvalidTopicName, "empty"),
            ("persistent://public/default/", InvalidTopicName, "empty"),
            ("persistent://pub lic/default/t", InvalidTopicName, "chars"),
            ("http://public/default/t", InvalidTopicName, "domain"),
            (
                "persistent://public/standalone/default/t",
                TopicNotFound,
                "legacy",
            ),
            ("persistent://public/default/a/b", TopicNotFound, "legacy"),
            (
                "non-persistent://public/default/t",
                TopicNotFound,
                "non-persistent",
            ),
        ] {
            let e = TopicName::parse(sent).unwrap_err();
            let kind = match e {
                TopicNameError::Short(_) => "short",
                TopicNameError::Shape(_) => "shape",
                TopicNameError::EmptyPart(_) => "empty",
                TopicNameError::Chars(_) => "chars",
                TopicNameError::Domain(_) => "domain",
                TopicNameError::Legacy(_) => "legacy",
                TopicNameError::NonPersistent(_) => "non-persistent",
            };
            assert_eq!((kind, e.code()), (what, code), "{sent}");
        }
    }

    #[test]
    fn partitions() {
        let p = |s: &str| TopicName::parse(s).unwrap().partition_of();
        assert_eq!(
            p("persistent://public/default/t-partition-3"),
            Some(("persistent://public/default/t".to_owned(), 3))
        );
        assert_eq!(
            p("persistent://a/b/x-partition-1-partition-12"),
            Some(("persistent://a/b/x-partition-1".to_owned(), 12))
        );
        for not in [
            "t",
            "t-partition-",
            "-partition-1",
            "t-partition-x",
            "t-partition--1",
            "t-partition-01",
            "t-partition-+1",
            "t-partition-2147483648",
        ] {
            assert_eq!(p(&format!("persistent://a/b/{not}")), None, "{not}");
        }
        assert_eq!(
            p("persistent://a/b/t-partition-2147483647").map(|(_, i)| i),
            Some(2_147_483_647)
        );
        let t = TopicName::parse("persistent://a/b/t").unwrap();
        assert_eq!(t.partition(2), "persistent://a/b/t-partition-2");
        assert_eq!(t.namespace_name(), "a/b");
    }
}
