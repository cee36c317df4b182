//! Topic names as clients send them.

/// A topic name Pulsar clients send: `persistent://tenant/namespace/topic`.
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
    /// Not `persistent://tenant/namespace/topic`.
    #[error("topic name must be persistent://tenant/namespace/topic, got `{0}`")]
    Shape(String),
    /// One of the three parts is empty.
    #[error("empty part in topic name `{0}`")]
    EmptyPart(String),
}

impl TopicNameError {
    /// The code a client gets: `InvalidTopicName`, except for a non-persistent topic, which is
    /// `TopicNotFound`. Every client family gives up at once on `TopicNotFound`, while the C++
    /// client (and with it Python's) retries a PARTITIONED_METADATA or LOOKUP that failed with
    /// `InvalidTopicName` until its operation timeout.
    pub(crate) fn code(&self) -> wire::proto::ServerError {
        match self {
            TopicNameError::NonPersistent(_) => wire::proto::ServerError::TopicNotFound,
            _ => wire::proto::ServerError::InvalidTopicName,
        }
    }
}

impl TopicName {
    /// Parses a fully qualified persistent topic name.
    pub(crate) fn parse(s: &str) -> Result<TopicName, TopicNameError> {
        let rest = if let Some(r) = s.strip_prefix("persistent://") {
            r
        } else if s.starts_with("non-persistent://") {
            return Err(TopicNameError::NonPersistent(s.to_owned()));
        } else {
            return Err(TopicNameError::Shape(s.to_owned()));
        };
        let mut parts = rest.splitn(3, '/');
        let (Some(t), Some(n), Some(l)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(TopicNameError::Shape(s.to_owned()));
        };
        if t.is_empty() || n.is_empty() || l.is_empty() {
            return Err(TopicNameError::EmptyPart(s.to_owned()));
        }
        Ok(TopicName {
            tenant: t.to_owned(),
            namespace: n.to_owned(),
            local: l.to_owned(),
        })
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
    /// the suffix is the last `-partition-` followed by a decimal number).
    pub(crate) fn partition_of(&self) -> Option<(String, u32)> {
        let (base, index) = self.local.rsplit_once(PARTITION_SUFFIX)?;
        if base.is_empty() || index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let index = index.parse().ok()?;
        let base = TopicName {
            local: base.to_owned(),
            ..self.clone()
        };
        Some((base.full(), index))
    }

    /// The full name of partition `i` of this (partitioned) topic.
    pub(crate) fn partition(&self, i: u32) -> String {
        partition_name(&self.full(), i)
    }
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

    #[test]
    fn topic_names() {
        let t = TopicName::parse("persistent://public/default/a/b").unwrap();
        assert_eq!(t.local, "a/b");
        assert_eq!(t.full(), "persistent://public/default/a/b");
        let err = |s: &str| TopicName::parse(s).unwrap_err();
        assert!(matches!(err("public/default/t"), TopicNameError::Shape(_)));
        assert!(matches!(
            err("persistent://public/t"),
            TopicNameError::Shape(_)
        ));
        assert!(matches!(
            err("persistent://public//t"),
            TopicNameError::EmptyPart(_)
        ));
        assert!(matches!(
            err("non-persistent://public/default/t"),
            TopicNameError::NonPersistent(_)
        ));
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
        ] {
            assert_eq!(p(&format!("persistent://a/b/{not}")), None, "{not}");
        }
        let t = TopicName::parse("persistent://a/b/t").unwrap();
        assert_eq!(t.partition(2), "persistent://a/b/t-partition-2");
        assert_eq!(t.namespace_name(), "a/b");
    }
}
