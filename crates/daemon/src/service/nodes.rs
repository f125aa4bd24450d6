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
//! Every sandbox row names the node that runs it; a node's own duties
//! (admission, reconciliation, runtime limits) look at its own rows only.
//!
//! In cluster mode every node also watches the others: a node whose lease ran out
//! is failed over by whichever node sees it first, in one store transaction that
//! bumps its epoch (fencing it) and ends its active sandboxes as FAILED "node
//! lost" ([`sbx_store::Store::fail_over_node`]); the store decides, so it happens
//! once. A node that learns it was fenced destroys what is left of those
//! sandboxes on its host and registers anew.

use super::{Result, Service, ServiceError};
use chrono::{DateTime, Utc};
use sbx_api_types::{format_time, Node, NodeCapacity, NodeState};
use sbx_store::{NodeRecord, NodeRegistration, NodeUsage, StoreError};
use std::sync::atomic::Ordering;
use std::sync::Arc;

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

/// The wire view of a node at `now`, with what its sandboxes hold.
fn node_view(r: &NodeRecord, usage: Option<&NodeUsage>, now: DateTime<Utc>) -> Node {
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
        load: NodeCapacity {
            vcpu: usage.map_or(0, |u| u.vcpu_milli) as f64 / 1000.0,
            memory_mb: usage.map_or(0, |u| u.memory_mb),
        },
        sandboxes: usage.map_or(0, |u| u.sandboxes),
        failed_over_at: r.failed_over_at.map(format_time),
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
        let adopted = self.store.adopt_unowned_sandboxes(&node.id).await?;
        if adopted > 0 {
            tracing::info!(sandboxes = adopted, node = %node.id, "adopted sandboxes recorded before nodes were");
        }
        Ok(node_view(&record, None, now))
    }

    /// This node's lease and cluster duties, forever (a task of its own, every
    /// third of the lease, so that two heartbeats may fail before it runs out):
    /// heartbeat; when fenced, recover; in cluster mode, fail lost nodes over.
    pub async fn node_duties(self: Arc<Self>) {
        let mut tick = tokio::time::interval(self.config.node.lease / 3);
        // After a stall, one heartbeat rather than a burst of them.
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            match self.heartbeat_node().await {
                Heartbeat::Renewed => {}
                Heartbeat::Failed(e) => {
                    tracing::warn!(error = %e, "node heartbeat failed; retrying")
                }
                Heartbeat::Fenced(e) => {
                    tracing::error!(error = %e, "node fenced: its lease ran out and was taken");
                    match self.recover_from_fence().await {
                        Ok(Some(node)) => {
                            tracing::warn!(
                                epoch = node.epoch,
                                "failed over while cut off; rejoined"
                            );
                        }
                        Ok(None) => {
                            // Another run holds this node id's lease: renewing would steal it.
                            tracing::error!(
                                "another sbxd registered this node id; heartbeats stop"
                            );
                            return;
                        }
                        Err(e) => {
                            tracing::error!(error = %e, "rejoining after being fenced; retrying")
                        }
                    }
                }
            }
            if self.config.node.cluster {
                self.fail_over_lost_nodes().await;
            }
        }
    }

    /// Fails over every other node whose lease ran out and that nobody failed over
    /// yet (cluster mode). Returns how many sandboxes this call ended.
    pub async fn fail_over_lost_nodes(&self) -> usize {
        let now = Utc::now();
        let nodes = match self.store.list_nodes().await {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(error = %e, "listing nodes to find lost ones");
                return 0;
            }
        };
        let mut ended = 0;
        for n in nodes
            .iter()
            .filter(|n| n.id != self.config.node.id && n.is_lost(now) && n.failed_over_at.is_none())
        {
            match self.store.fail_over_node(&n.id, n.epoch, now).await {
                Ok(Some(done)) => {
                    tracing::warn!(
                        node = %n.id,
                        epoch = done.epoch,
                        sandboxes = done.sandboxes.len(),
                        lease_expired_at = %format_time(n.lease_until),
                        "node lost: its lease ran out; its sandboxes are FAILED"
                    );
                    ended += done.sandboxes.len();
                }
                // Another node did it first, or the node came back.
                Ok(None) => {}
                Err(e) => tracing::warn!(node = %n.id, error = %e, "failing a lost node over"),
            }
        }
        ended
    }

    /// Ids of the nodes that were failed over and have not registered since: work they
    /// held outside sandboxes (Connect runs and builds) is failed by the caller.
    pub async fn failed_over_nodes(&self) -> Vec<String> {
        match self.store.list_nodes().await {
            Ok(nodes) => nodes
                .into_iter()
                .filter(|n| n.failed_over_at.is_some() && n.id != self.config.node.id)
                .map(|n| n.id)
                .collect(),
            Err(e) => {
                tracing::warn!(error = %e, "listing nodes to find failed-over ones");
                Vec::new()
            }
        }
    }

    /// After this node was fenced. If it was failed over (while it could not
    /// renew its lease), destroys the host state of every sandbox the store no
    /// longer has active on this node and registers anew: `Some`. If instead
    /// another run of sbxd registered this node id, acts on nothing: `None`
    /// (renewing would take that run's lease). Warm-pool members have no row
    /// and are kept.
    pub async fn recover_from_fence(self: &Arc<Self>) -> Result<Option<Node>> {
        let me = &self.config.node.id;
        let row = self
            .store
            .list_nodes()
            .await?
            .into_iter()
            .find(|n| &n.id == me);
        if row.is_none_or(|n| n.failed_over_at.is_none()) {
            return Ok(None);
        }
        let on_host =
            self.runtime.list().await.map_err(|e| {
                ServiceError::Internal(format!("listing sandboxes on the host: {e}"))
            })?;
        let mut destroyed = 0;
        for id in on_host {
            let Some(row) = self.store.get_sandbox(id).await? else {
                continue;
            };
            if row.status.is_active() && row.node_id == self.config.node.id {
                continue;
            }
            self.forget_agent(id);
            if let Err(e) = self.runtime.destroy(id).await {
                tracing::error!(sandbox = %id, error = %e, "destroying a failed-over sandbox's leftovers");
            } else {
                destroyed += 1;
            }
        }
        tracing::warn!(
            destroyed,
            "fenced: removed the leftovers of sandboxes failed over while this node was cut off"
        );
        self.register_node().await.map(Some)
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

    /// The URL of the node that runs sandbox `id` of `tenant`, when that is another
    /// live node of the cluster (the request about it is forwarded there). `None`:
    /// this node answers (its own sandbox, an ended one, another tenant's, or no
    /// cluster).
    pub async fn remote_owner(&self, tenant: &str, id: uuid::Uuid) -> Result<Option<String>> {
        if !self.config.node.cluster {
            return Ok(None);
        }
        let Some(row) = self.store.get_sandbox(id).await? else {
            return Ok(None);
        };
        if row.workspace != tenant || !row.status.is_active() || row.node_id == self.config.node.id
        {
            return Ok(None);
        }
        // Its node gone: the fail-over ends the sandbox shortly; until then
        // nobody can act on it.
        let url = self
            .live_node_url(&row.node_id, || {
                format!("sandbox {id} runs on node {}", row.node_id)
            })
            .await?;
        Ok(Some(url))
    }

    /// The advertise URL of node `id` while its lease holds; otherwise
    /// `Unavailable`, saying what needed it (`what`: "sandbox X runs on node Y").
    pub(super) async fn live_node_url(
        &self,
        id: &str,
        what: impl FnOnce() -> String,
    ) -> Result<String> {
        let now = Utc::now();
        match self
            .store
            .list_nodes()
            .await?
            .into_iter()
            .find(|n| n.id == id)
        {
            Some(n) if !n.is_lost(now) => Ok(n.advertise_url),
            _ => Err(ServiceError::Unavailable(format!(
                "{}, which is not answering; retry",
                what()
            ))),
        }
    }

    /// Every node, by id.
    pub async fn list_nodes(&self) -> Result<Vec<Node>> {
        let now = Utc::now();
        let nodes = self.store.list_nodes().await?;
        let usage = self.store.node_usage().await?;
        let of = |id: &str| usage.iter().find(|u| u.node_id == id);
        Ok(nodes.iter().map(|r| node_view(r, of(&r.id), now)).collect())
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
            Ok(record) => {
                let usage = self.store.node_usage().await?;
                let of = usage.iter().find(|u| u.node_id == record.id);
                Ok(node_view(&record, of, Utc::now()))
            }
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
