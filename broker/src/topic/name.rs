//! Topic names as clients send them.

/// A topic name Pulsar clients send: `persistent://tenant/namespace/topic`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TopicName {
    pub tenant: String,
    pub namespace: String,
    pub local: String,
}

/// Why a topic name was refused (the message goes to the client with `InvalidTopicName`).
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
}
