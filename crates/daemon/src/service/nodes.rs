//! This node's registration and lease, and the node list (first part of cluster mode).
//!
//! Every sbxd registers itself in the store's `nodes` table at start, with or without
//! `--cluster`: a single node is a cluster of one, so `GET /v1/nodes` works everywhere.
//! It then renews its lease by heartbeat. The lease epoch the store hands out is the
//! fencing token: once a heartbeat is refused as fenced (the lease ran out and the node
//! id was registered again since), this process stops heartbeating for good; later
//! parts of cluster mode make it stop acting too.
//!
//! Nodes are operator resources: any authenticated caller may list them, but only the
//! operator drains one. The operator is whoever holds a key of the `default` workspace
//! (the keys given to sbxd by flag or environment, keys an operator created for that
//! workspace with `sbxd keys create`, and dev mode).
//!
//! Load (what a node's sandboxes use) is not shown yet: sandbox rows do not record
//! their node until placement exists, so only capacity is reported.

use super::{Result, Service, ServiceError};
use chrono::{DateTime, Utc};
use sbx_api_types::{format_time, Node, NodeCapacity, NodeState};
use sbx_store::{NodeRecord, NodeRegistration, StoreError};
use std::sync::atomic::Ordering;

/// Outcome of one heartbeat.
#[derive(Debug)]
pub enum Heartbeat {
    /// The lease was extended.
    Renewed,
    /// The store holds a newer epoch for this node id: stop heartbeating and acting.
    Fenced(String),
    /// The store could not be reached or refused; the next heartbeat tries again.
    Failed(String),
}

/// The wire view of a node at `now`.
fn node_view(r: &NodeRecord, now: DateTime<Utc>) -> Node {
    let state = if r.is_lost(now) {
        NodeState::Lost
    } else {
        match r.state {
            sbx_store::NodeState::Active => NodeState::Active,
            sbx_store::NodeState::Draining => NodeState::Draining,
        }
    };
    Node {
        id: r.id.clone(),
        advertise_url: r.advertise_url.clone(),
        version: r.version.clone(),
        labels: r.labels.clone(),
        capacity: NodeCapacity {
            vcpu: r.vcpu_milli as f64 / 1000.0,
            memory_mb: r.memory_mb,
        },
        state,
        epoch: r.epoch,
        lease_expires_at: format_time(r.lease_until),
        last_heartbeat_at: format_time(r.last_heartbeat),
        registered_at: format_time(r.registered_at),
    }
}

/// Whether the tenant (`workspace/env`) is the operator's.
fn is_operator(tenant: &str) -> bool {
    tenant.split('/').next() == Some(crate::tenants::DEFAULT_WORKSPACE)
}

impl Service {
    /// When a lease taken or renewed at `now` runs out (the configured lease is at most
    /// an hour, see `config::MAX_NODE_LEASE`).
    fn lease_until(&self, now: DateTime<Utc>) -> DateTime<Utc> {
        chrono::Duration::from_std(self.config.node.lease.min(crate::config::MAX_NODE_LEASE))
            .ok()
            .and_then(|lease| now.checked_add_signed(lease))
            .unwrap_or(now)
    }

    /// Registers this node (or takes over its row) and remembers the epoch it holds.
    pub async fn register_node(&self) -> Result<Node> {
        let capacity = self.capacity();
        let node = &self.config.node;
        let registration = NodeRegistration {
            id: node.id.clone(),
            advertise_url: node.advertise_url.clone(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            labels: node.labels.clone(),
            vcpu_milli: capacity.vcpu_milli,
            memory_mb: capacity.memory_mb,
        };
        let now = Utc::now();
        let record = self
            .store
            .register_node(&registration, now, self.lease_until(now))
            .await?;
        self.node_epoch.store(record.epoch, Ordering::SeqCst);
        Ok(node_view(&record, now))
    }

    /// Extends this node's lease if it still holds the current epoch.
    pub async fn heartbeat_node(&self) -> Heartbeat {
        let epoch = self.node_epoch.load(Ordering::SeqCst);
        let now = Utc::now();
        let id = &self.config.node.id;
        match self
            .store
            .heartbeat_node(id, epoch, now, self.lease_until(now))
            .await
        {
            Ok(_) => Heartbeat::Renewed,
            Err(e @ StoreError::Fenced { .. }) => Heartbeat::Fenced(e.to_string()),
            // The row is gone (removed by hand): this node no longer holds any lease.
            Err(StoreError::NotFound) => {
                Heartbeat::Fenced(format!("node {id} is no longer registered"))
            }
            Err(e) => Heartbeat::Failed(e.to_string()),
        }
    }

    /// Every node, by id.
    pub async fn list_nodes(&self) -> Result<Vec<Node>> {
        let now = Utc::now();
        let nodes = self.store.list_nodes().await?;
        Ok(nodes.iter().map(|r| node_view(r, now)).collect())
    }

    /// Stops (or resumes) new placements on a node; the operator's only.
    pub async fn set_node_draining(&self, tenant: &str, id: &str, draining: bool) -> Result<Node> {
        if !is_operator(tenant) {
            return Err(ServiceError::AccessDenied(format!(
                "draining nodes is for the operator: use a key of the {:?} workspace",
                crate::tenants::DEFAULT_WORKSPACE
            )));
        }
        match self.store.set_node_draining(id, draining).await {
            Ok(record) => Ok(node_view(&record, Utc::now())),
            Err(StoreError::NotFound) => Err(ServiceError::NodeNotFound(id.to_string())),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::is_operator;

    #[test]
    fn only_the_default_workspace_operates_nodes() {
        assert!(is_operator("default/production"));
        assert!(is_operator("default/staging"));
        assert!(!is_operator("acme/production"));
        assert!(!is_operator("defaultx/production"));
    }
}
