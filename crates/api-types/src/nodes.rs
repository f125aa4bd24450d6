//! Nodes of a cluster (`GET /v1/nodes`): the sbxd processes sharing one database.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A node's state as shown: `lost` is not stored, it is a lease that ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeState {
    /// Heartbeating, takes new sandboxes.
    Active,
    /// Heartbeating, takes no new sandboxes; its sandboxes keep running.
    Draining,
    /// Its lease ran out: no heartbeat for longer than the lease.
    Lost,
}

impl NodeState {
    /// The wire text.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeState::Active => "active",
            NodeState::Draining => "draining",
            NodeState::Lost => "lost",
        }
    }
}

/// What a node offers to sandboxes (after reserve and overcommit).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeCapacity {
    /// vCPUs (fractional when overcommit makes them so).
    pub vcpu: f64,
    /// Memory in MiB.
    pub memory_mb: u64,
}

/// One node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Node {
    /// Stable id (`--node-id`, by default the host name).
    pub id: String,
    /// Where the node is reached (`--advertise-url`).
    pub advertise_url: String,
    /// sbxd version.
    pub version: String,
    /// Operator labels (`--node-label key=value`).
    pub labels: BTreeMap<String, String>,
    /// Capacity for sandboxes.
    pub capacity: NodeCapacity,
    /// What its active sandboxes hold, in the same units as `capacity`.
    pub load: NodeCapacity,
    /// How many active sandboxes it runs.
    pub sandboxes: u64,
    /// When another node failed its sandboxes over because its lease ran out
    /// (RFC 3339); absent since it last registered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_over_at: Option<String>,
    /// active, draining or lost.
    pub state: NodeState,
    /// Lease epoch: grows each time the node registers after its lease ran out.
    pub epoch: u64,
    /// When the lease runs out (RFC 3339) unless renewed.
    pub lease_expires_at: String,
    /// Last heartbeat (RFC 3339).
    pub last_heartbeat_at: String,
    /// Last registration (RFC 3339).
    pub registered_at: String,
}
