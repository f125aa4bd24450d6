//! This node's identity in a cluster: id, labels, lease and the cluster token.

use super::ConfigError;
use std::time::Duration;

/// Longest node lease: past it a dead node would pass for alive for over an hour.
pub const MAX_NODE_LEASE: Duration = Duration::from_secs(3600);

/// How this sbxd registers itself as a node (`crate::service::nodes`).
#[derive(Debug, Clone, PartialEq)]
pub struct NodeConfig {
    /// `--cluster`: several nodes share the database (needs `--database-url`).
    pub cluster: bool,
    /// Stable node id (`--node-id`, by default the host name).
    pub id: String,
    /// Where other nodes and clients reach this one (`--advertise-url`).
    pub advertise_url: String,
    /// Operator labels (`--node-label key=value`).
    pub labels: std::collections::BTreeMap<String, String>,
    /// How long a registration or heartbeat holds the node's lease; heartbeats every third of it.
    pub lease: Duration,
    /// The secret nodes of a cluster show each other (`--cluster-token-file`).
    pub cluster_token: Option<ClusterToken>,
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            cluster: false,
            id: "local".into(),
            advertise_url: "http://127.0.0.1:8731".into(),
            labels: Default::default(),
            lease: Duration::from_secs(15),
            cluster_token: None,
        }
    }
}

/// Fewest characters of a cluster token (a 128-bit random value in hex is 32).
pub const MIN_CLUSTER_TOKEN: usize = 32;

/// The shared secret of a cluster's nodes: a node forwarding a request to
/// another shows it. Never printed.
#[derive(Clone, PartialEq)]
pub struct ClusterToken(String);

impl ClusterToken {
    /// A token from the contents of its file (surrounding white space dropped).
    pub fn parse(raw: &str) -> Result<ClusterToken, ConfigError> {
        let t = raw.trim();
        if t.len() < MIN_CLUSTER_TOKEN || !t.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ConfigError::BadClusterToken);
        }
        Ok(ClusterToken(t.to_string()))
    }

    /// The token, for the header of a forwarded request.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether `shown` is this token, compared in constant time.
    pub fn matches(&self, shown: &[u8]) -> bool {
        let mine = self.0.as_bytes();
        if shown.len() != mine.len() {
            return false;
        }
        mine.iter()
            .zip(shown)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }
}

impl std::fmt::Debug for ClusterToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterToken(..)")
    }
}

impl NodeConfig {
    /// Checks the node settings against the database in use.
    pub fn validate(&self, database_url: Option<&str>) -> Result<(), ConfigError> {
        let shared = database_url.is_some_and(|u| !u.trim().is_empty());
        // Nodes of a cluster meet in the database: each on its own SQLite would see only itself.
        if self.cluster && !shared {
            return Err(ConfigError::ClusterNeedsDatabase);
        }
        // Nodes forward requests to each other: without a shared secret, anyone who
        // reaches a node could pass for another node.
        if self.cluster && self.cluster_token.is_none() {
            return Err(ConfigError::ClusterNeedsToken);
        }
        check_node_id(&self.id)?;
        let url = &self.advertise_url;
        let has_host = url
            .strip_prefix("http://")
            .or_else(|| url.strip_prefix("https://"))
            .is_some_and(|rest| !rest.is_empty() && !rest.contains(char::is_whitespace));
        if !has_host {
            return Err(ConfigError::BadAdvertiseUrl(url.clone()));
        }
        if self.lease < Duration::from_secs(1) || self.lease > MAX_NODE_LEASE {
            return Err(ConfigError::NodeLease);
        }
        Ok(())
    }
}

/// A node id: 1–63 of `[A-Za-z0-9._-]`, starting with a letter or digit (host names fit).
pub fn check_node_id(id: &str) -> Result<(), ConfigError> {
    let ok = !id.is_empty()
        && id.len() <= 63
        && id.starts_with(|c: char| c.is_ascii_alphanumeric())
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(ConfigError::BadNodeId(id.to_string()))
    }
}

/// Parses `--node-label` values (`key=value`); a key given twice is refused.
pub fn parse_node_labels(
    values: &[String],
) -> Result<std::collections::BTreeMap<String, String>, ConfigError> {
    let mut labels = std::collections::BTreeMap::new();
    for value in values.iter().map(|v| v.trim()).filter(|v| !v.is_empty()) {
        let bad = || ConfigError::BadNodeLabel(value.to_string());
        let (key, label) = value.split_once('=').ok_or_else(bad)?;
        let key = key.trim();
        let key_ok = !key.is_empty()
            && key.len() <= 63
            && key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/'));
        if !key_ok || label.len() > 253 || label.chars().any(char::is_control) {
            return Err(bad());
        }
        if labels
            .insert(key.to_string(), label.trim().to_string())
            .is_some()
        {
            return Err(bad());
        }
    }
    Ok(labels)
}
