//! Node rows: the sbxd processes sharing one database, each under a lease.
//!
//! A node registers at start and renews its lease by heartbeat. The lease epoch is the
//! fencing token: it grows each time a node registers after its lease had run out, and
//! a heartbeat is accepted only with the current epoch. A node that was presumed lost
//! (its lease ran out and it, or a newer run of it, registered again) is told so by
//! [`crate::StoreError::Fenced`] and must stop acting.
//!
//! A heartbeat after the lease ran out is still accepted while nobody registered the
//! id since: nothing has acted on the node's absence yet. Whatever acts on it (the
//! fail-over, [`crate::Store::fail_over_node`]) bumps the epoch in the same transaction
//! as it fails the node's sandboxes, which fences the node.

/// Why the sandboxes of a node whose lease ran out are FAILED.
pub const NODE_LOST: &str = "node lost";

use chrono::{DateTime, Utc};
use std::collections::BTreeMap;

/// Whether a node takes new sandboxes. Lost is not stored: it is a lease in the past.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeState {
    /// Takes new placements.
    Active,
    /// Takes no new placements; its sandboxes keep running.
    Draining,
}

impl NodeState {
    /// The stored text.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeState::Active => "active",
            NodeState::Draining => "draining",
        }
    }

    /// The state a stored text names.
    pub fn parse(s: &str) -> Option<NodeState> {
        match s {
            "active" => Some(NodeState::Active),
            "draining" => Some(NodeState::Draining),
            _ => None,
        }
    }
}

/// What a node says about itself when it registers.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeRegistration {
    /// Stable id (the host name unless configured).
    pub id: String,
    /// The URL other nodes and clients reach it at.
    pub advertise_url: String,
    /// sbxd version.
    pub version: String,
    /// Operator labels.
    pub labels: BTreeMap<String, String>,
    /// Capacity for sandboxes, milli-vCPUs.
    pub vcpu_milli: u64,
    /// Capacity for sandboxes, MiB.
    pub memory_mb: u64,
}

/// A stored node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeRecord {
    /// Stable id.
    pub id: String,
    /// The URL it is reached at.
    pub advertise_url: String,
    /// sbxd version.
    pub version: String,
    /// Operator labels.
    pub labels: BTreeMap<String, String>,
    /// Capacity for sandboxes, milli-vCPUs.
    pub vcpu_milli: u64,
    /// Capacity for sandboxes, MiB.
    pub memory_mb: u64,
    /// Active or draining (kept across re-registrations: a drain is the operator's).
    pub state: NodeState,
    /// Fencing token (1 at the first registration).
    pub epoch: u64,
    /// The lease runs until then; past it the node counts as lost.
    pub lease_until: DateTime<Utc>,
    /// Last successful heartbeat (or registration).
    pub last_heartbeat: DateTime<Utc>,
    /// When the node last registered.
    pub registered_at: DateTime<Utc>,
    /// When another node failed its sandboxes over (its lease had run out); None
    /// since it last registered.
    pub failed_over_at: Option<DateTime<Utc>>,
}

/// What a fail-over of a lost node did.
#[derive(Debug, Clone, PartialEq)]
pub struct FailOver {
    /// The node's epoch after it (the node is fenced below it).
    pub epoch: u64,
    /// Its sandboxes that were active and are now FAILED (or TERMINATED, if they
    /// were already being destroyed).
    pub sandboxes: Vec<uuid::Uuid>,
}

/// What the active sandboxes of one node hold.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeUsage {
    /// The node's id.
    pub node_id: String,
    /// Active sandboxes.
    pub sandboxes: u64,
    /// Their vCPUs, in thousandths.
    pub vcpu_milli: u64,
    /// Their memory, MiB.
    pub memory_mb: u64,
}

impl NodeRecord {
    /// Whether its lease has run out at `now`.
    pub fn is_lost(&self, now: DateTime<Utc>) -> bool {
        self.lease_until <= now
    }
}

/// The columns of the `nodes` table, in the order both backends read them.
pub(crate) const NODE_COLUMNS: &str = "id, advertise_url, version, labels, vcpu_milli, memory_mb, \
     state, epoch, lease_until_ms, last_heartbeat_ms, registered_at_ms, failed_over_ms";
