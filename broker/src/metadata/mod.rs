//! The broker's metadata: its cluster, tenants, namespaces and partitioned topics, as Pulsar
//! keeps them in its metadata store. [`Metadata`] is the plain state and its rules (what may be
//! created or deleted, and why not); [`MetadataStore`] keeps it (in memory, or in
//! `DIR/metadata.json` with `--data-dir`).
//!
//! A fresh broker has what Pulsar standalone creates at start: the cluster `standalone`, the
//! tenants `public` and `pulsar`, the namespaces `public/default` and `pulsar/system`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::storage::StorageError;
use crate::topic::valid_name;

mod policies;
mod store;

pub(crate) use policies::{
    BacklogQuota, NamespacePolicies, QuotaKind, RetentionPolicies, EVICTION, EXCEPTION, HOLD,
    LIMITS,
};
pub(crate) use store::{FileMetadata, MemoryMetadata, MetadataStore};

/// The one cluster this broker is (Pulsar standalone's name).
pub(crate) const CLUSTER: &str = "standalone";

/// A tenant's settings, as Pulsar's admin API sends and returns them (`TenantInfo`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TenantInfo {
    /// Roles that may administer the tenant (kept and returned; nothing is authorised here).
    #[serde(default)]
    pub admin_roles: BTreeSet<String>,
    /// The clusters the tenant's namespaces may use (only `standalone` exists).
    #[serde(default)]
    pub allowed_clusters: BTreeSet<String>,
}

/// Why a metadata change or look-up was refused. Each maps to the HTTP status and reason
/// Pulsar's admin API answers ([`MetadataError::status`]).
#[derive(Debug, thiserror::Error)]
pub(crate) enum MetadataError {
    /// A tenant, namespace or topic name Pulsar would not accept.
    #[error("{0}")]
    InvalidName(&'static str),
    /// The tenant exists already (Pulsar's words, without the s).
    #[error("Tenant already exist")]
    TenantExists,
    /// No such tenant.
    #[error("Tenant does not exist")]
    TenantNotFound,
    /// The tenant still has namespaces.
    #[error("The tenant still has active namespaces")]
    TenantNotEmpty,
    /// A tenant without allowed clusters.
    #[error("Clusters can not be empty")]
    NoClusters,
    /// A tenant names a cluster that does not exist.
    #[error("Clusters do not exist")]
    ClusterNotFound,
    /// No such cluster.
    #[error("Cluster does not exist")]
    NoSuchCluster,
    /// The namespace exists already.
    #[error("Namespace already exists")]
    NamespaceExists,
    /// No such namespace.
    #[error("Namespace does not exist")]
    NamespaceNotFound,
    /// The namespace still has topics.
    #[error("Cannot delete non empty namespace")]
    NamespaceNotEmpty,
    /// A topic (partitioned or not) of that name exists already.
    #[error("This topic already exists")]
    TopicExists,
    /// An update of a topic that is not partitioned.
    #[error("Topic {0} is not the partitioned topic.")]
    NotPartitioned(String),
    /// A partition count below 1.
    #[error("Number of partitions should be more than 0")]
    NoPartitions,
    /// A partition count above `--max-num-partitions-per-partitioned-topic`.
    #[error("Number of partitions should be less than or equal to {max}")]
    TooManyPartitions {
        /// The limit.
        max: u32,
    },
    /// An update that would shrink the topic.
    #[error("Expect partitions {asked} can't less than current partitions {current}.")]
    Shrinking {
        /// The count asked for.
        asked: u32,
        /// The count now.
        current: u32,
    },
    /// The metadata could not be written.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

impl MetadataError {
    /// The HTTP status Pulsar's admin API answers for this refusal.
    pub(crate) fn status(&self) -> u16 {
        match self {
            MetadataError::InvalidName(_)
            | MetadataError::ClusterNotFound
            | MetadataError::NoClusters => 412,
            MetadataError::TenantNotFound
            | MetadataError::NoSuchCluster
            | MetadataError::NamespaceNotFound => 404,
            MetadataError::TenantExists
            | MetadataError::TenantNotEmpty
            | MetadataError::NamespaceExists
            | MetadataError::NamespaceNotEmpty
            | MetadataError::TopicExists
            | MetadataError::NotPartitioned(_) => 409,
            MetadataError::NoPartitions | MetadataError::TooManyPartitions { .. } => 406,
            MetadataError::Shrinking { .. } => 422,
            MetadataError::Storage(_) => 500,
        }
    }
}

/// Clusters, tenants, namespaces and partitioned topics: the state, and the rules for
/// changing it. Pure: the broker locks it, changes it, then has a [`MetadataStore`] keep it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Metadata {
    /// Tenant name → its settings.
    tenants: BTreeMap<String, TenantInfo>,
    /// `tenant/namespace` → its policies.
    namespaces: BTreeMap<String, NamespacePolicies>,
    /// Partitioned topic (full name, `persistent://t/ns/topic`) → its partition count.
    partitioned: BTreeMap<String, u32>,
    /// Topic (full name, partitioned or not) → the properties it was created or updated
    /// with; a topic without any has no entry (and a file written before they were kept
    /// reads as none).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    topic_properties: BTreeMap<String, TopicProperties>,
}

/// A topic's properties, as Pulsar's admin API sends and returns them: string to string.
pub(crate) type TopicProperties = BTreeMap<String, String>;

impl Default for Metadata {
    /// What Pulsar standalone creates at start.
    fn default() -> Metadata {
        let standalone = TenantInfo {
            admin_roles: BTreeSet::new(),
            allowed_clusters: BTreeSet::from([CLUSTER.to_owned()]),
        };
        Metadata {
            tenants: BTreeMap::from([
                ("public".to_owned(), standalone.clone()),
                ("pulsar".to_owned(), standalone),
            ]),
            namespaces: BTreeMap::from([
                ("public/default".to_owned(), NamespacePolicies::default()),
                ("pulsar/system".to_owned(), NamespacePolicies::default()),
            ]),
            partitioned: BTreeMap::new(),
            topic_properties: BTreeMap::new(),
        }
    }
}

/// A partition count within 1 and `max`.
fn check_count(n: u32, max: u32) -> Result<(), MetadataError> {
    match n {
        0 => Err(MetadataError::NoPartitions),
        n if n > max => Err(MetadataError::TooManyPartitions { max }),
        _ => Ok(()),
    }
}

impl Metadata {
    /// The tenants' names, sorted.
    pub(crate) fn tenants(&self) -> Vec<String> {
        self.tenants.keys().cloned().collect()
    }

    /// One tenant's settings.
    pub(crate) fn tenant(&self, name: &str) -> Result<&TenantInfo, MetadataError> {
        self.tenants.get(name).ok_or(MetadataError::TenantNotFound)
    }

    /// Creates tenant `name`. Its allowed clusters must exist, and there must be one.
    pub(crate) fn create_tenant(
        &mut self,
        name: &str,
        info: TenantInfo,
    ) -> Result<(), MetadataError> {
        if !valid_name(name) {
            return Err(MetadataError::InvalidName("Tenant name is not valid"));
        }
        Self::check_clusters(&info)?;
        if self.tenants.contains_key(name) {
            return Err(MetadataError::TenantExists);
        }
        self.tenants.insert(name.to_owned(), info);
        Ok(())
    }

    /// Replaces tenant `name`'s settings.
    pub(crate) fn update_tenant(
        &mut self,
        name: &str,
        info: TenantInfo,
    ) -> Result<(), MetadataError> {
        Self::check_clusters(&info)?;
        let t = self
            .tenants
            .get_mut(name)
            .ok_or(MetadataError::TenantNotFound)?;
        *t = info;
        Ok(())
    }

    fn check_clusters(info: &TenantInfo) -> Result<(), MetadataError> {
        if info.allowed_clusters.is_empty() {
            return Err(MetadataError::NoClusters);
        }
        if info.allowed_clusters.iter().any(|c| c != CLUSTER) {
            return Err(MetadataError::ClusterNotFound);
        }
        Ok(())
    }

    /// Deletes tenant `name`, which must have no namespace left.
    pub(crate) fn delete_tenant(&mut self, name: &str) -> Result<(), MetadataError> {
        if !self.tenants.contains_key(name) {
            return Err(MetadataError::TenantNotFound);
        }
        let prefix = format!("{name}/");
        if self.namespaces.keys().any(|n| n.starts_with(&prefix)) {
            return Err(MetadataError::TenantNotEmpty);
        }
        self.tenants.remove(name);
        Ok(())
    }

    /// The namespaces of `tenant` (`tenant/ns`), sorted.
    pub(crate) fn namespaces(&self, tenant: &str) -> Result<Vec<String>, MetadataError> {
        self.tenant(tenant)?;
        let prefix = format!("{tenant}/");
        Ok(self
            .namespaces
            .keys()
            .filter(|n| n.starts_with(&prefix))
            .cloned()
            .collect())
    }

    /// Whether namespace `tenant/ns` exists.
    pub(crate) fn has_namespace(&self, namespace: &str) -> bool {
        self.namespaces.contains_key(namespace)
    }

    /// Why a topic of `tenant/ns` cannot be used: its tenant or its namespace is missing.
    pub(crate) fn check_namespace(&self, tenant: &str, ns: &str) -> Result<(), MetadataError> {
        self.tenant(tenant)?;
        if self.has_namespace(&format!("{tenant}/{ns}")) {
            Ok(())
        } else {
            Err(MetadataError::NamespaceNotFound)
        }
    }

    /// Creates namespace `tenant/ns`.
    pub(crate) fn create_namespace(&mut self, tenant: &str, ns: &str) -> Result<(), MetadataError> {
        if !valid_name(ns) {
            return Err(MetadataError::InvalidName("Namespace name is not valid"));
        }
        self.tenant(tenant)?;
        let full = format!("{tenant}/{ns}");
        if self.namespaces.contains_key(&full) {
            return Err(MetadataError::NamespaceExists);
        }
        self.namespaces.insert(full, NamespacePolicies::default());
        Ok(())
    }

    /// Deletes namespace `tenant/ns`; `has_topics` says whether any topic of it exists (the
    /// broker knows its topics, this does not).
    pub(crate) fn delete_namespace(
        &mut self,
        tenant: &str,
        ns: &str,
        has_topics: bool,
    ) -> Result<(), MetadataError> {
        self.check_namespace(tenant, ns)?;
        let full = format!("{tenant}/{ns}");
        let prefix = format!("persistent://{full}/");
        if has_topics || self.partitioned.keys().any(|t| t.starts_with(&prefix)) {
            return Err(MetadataError::NamespaceNotEmpty);
        }
        self.namespaces.remove(&full);
        Ok(())
    }

    /// Adds a namespace found in the data directory but missing here (a directory written by
    /// an older broker that had no metadata file).
    pub(crate) fn adopt_namespace(&mut self, tenant: &str, ns: &str) -> bool {
        let mut changed = false;
        if !self.tenants.contains_key(tenant) {
            let info = TenantInfo {
                admin_roles: BTreeSet::new(),
                allowed_clusters: BTreeSet::from([CLUSTER.to_owned()]),
            };
            self.tenants.insert(tenant.to_owned(), info);
            changed = true;
        }
        let full = format!("{tenant}/{ns}");
        if self.namespaces.contains_key(&full) {
            return changed;
        }
        self.namespaces.insert(full, NamespacePolicies::default());
        true
    }

    /// The policies of namespace `tenant/ns`.
    pub(crate) fn policies(
        &self,
        tenant: &str,
        ns: &str,
    ) -> Result<&NamespacePolicies, MetadataError> {
        self.check_namespace(tenant, ns)?;
        self.namespaces
            .get(&format!("{tenant}/{ns}"))
            .ok_or(MetadataError::NamespaceNotFound)
    }

    /// Changes the policies of namespace `tenant/ns`.
    pub(crate) fn change_policies(
        &mut self,
        tenant: &str,
        ns: &str,
        change: impl FnOnce(&mut NamespacePolicies),
    ) -> Result<(), MetadataError> {
        self.check_namespace(tenant, ns)?;
        let p = self
            .namespaces
            .get_mut(&format!("{tenant}/{ns}"))
            .ok_or(MetadataError::NamespaceNotFound)?;
        change(p);
        Ok(())
    }

    /// The namespaces that have a policy the broker enforces, with their policies.
    pub(crate) fn enforced_policies(&self) -> Vec<(String, NamespacePolicies)> {
        self.namespaces
            .iter()
            .filter(|(_, p)| p.has_jobs())
            .map(|(n, p)| (n.clone(), p.clone()))
            .collect()
    }

    /// Whether `partition` (a name's [`partition_of`](crate::topic::TopicName::partition_of))
    /// is one of its partitioned topic's partitions: the topic is partitioned and the index is
    /// below its count.
    pub(crate) fn is_partition(&self, partition: Option<(String, u32)>) -> bool {
        partition.is_some_and(|(base, i)| self.partitions(&base).is_some_and(|n| i < n))
    }

    /// The partition count of topic `full`, if it is partitioned.
    pub(crate) fn partitions(&self, full: &str) -> Option<u32> {
        self.partitioned.get(full).copied()
    }

    /// The partitioned topics of namespace `tenant/ns` (full names), sorted.
    pub(crate) fn partitioned_in(&self, namespace: &str) -> Vec<String> {
        let prefix = format!("persistent://{namespace}/");
        self.partitioned
            .keys()
            .filter(|t| t.starts_with(&prefix))
            .cloned()
            .collect()
    }

    /// Makes `full` (in namespace `tenant/ns`) a partitioned topic of `n` partitions;
    /// `exists` says whether a non-partitioned topic of that name exists.
    pub(crate) fn create_partitioned(
        &mut self,
        full: &str,
        n: u32,
        max: u32,
        exists: bool,
    ) -> Result<(), MetadataError> {
        check_count(n, max)?;
        if exists || self.partitioned.contains_key(full) {
            return Err(MetadataError::TopicExists);
        }
        self.partitioned.insert(full.to_owned(), n);
        Ok(())
    }

    /// Grows partitioned topic `full` to `n` partitions (the same count is a no-op); the
    /// count before.
    pub(crate) fn grow_partitioned(
        &mut self,
        full: &str,
        n: u32,
        max: u32,
    ) -> Result<u32, MetadataError> {
        let count = self
            .partitioned
            .get_mut(full)
            .ok_or_else(|| MetadataError::NotPartitioned(full.to_owned()))?;
        if n < *count {
            return Err(MetadataError::Shrinking {
                asked: n,
                current: *count,
            });
        }
        check_count(n, max)?;
        let before = *count;
        *count = n;
        Ok(before)
    }

    /// Forgets partitioned topic `full` and its properties; its partition count, `None` when
    /// it was not one.
    pub(crate) fn delete_partitioned(&mut self, full: &str) -> Option<u32> {
        self.topic_properties.remove(full);
        self.partitioned.remove(full)
    }

    /// Topic `full`'s properties (none kept: empty).
    pub(crate) fn topic_properties(&self, full: &str) -> TopicProperties {
        self.topic_properties.get(full).cloned().unwrap_or_default()
    }

    /// Adds `properties` to topic `full`'s, replacing the values of keys it has (Pulsar's
    /// update merges too).
    pub(crate) fn add_topic_properties(&mut self, full: &str, properties: TopicProperties) {
        if !properties.is_empty() {
            let kept = self.topic_properties.entry(full.to_owned()).or_default();
            kept.extend(properties);
        }
    }

    /// Removes property `key` of topic `full` (a key it lacks: nothing to do, as in Pulsar).
    pub(crate) fn remove_topic_property(&mut self, full: &str, key: &str) {
        if let Some(kept) = self.topic_properties.get_mut(full) {
            kept.remove(key);
            if kept.is_empty() {
                self.topic_properties.remove(full);
            }
        }
    }

    /// Forgets topic `full`'s properties (the topic was deleted).
    pub(crate) fn forget_topic(&mut self, full: &str) {
        self.topic_properties.remove(full);
    }
}

/// The metadata file of a data directory.
pub(crate) fn file_in(data_dir: &std::path::Path) -> PathBuf {
    data_dir.join("metadata.json")
}

#[cfg(test)]
mod tests;
