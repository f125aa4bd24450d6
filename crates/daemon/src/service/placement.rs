//! Placement of creates in cluster mode: which node runs a new sandbox.
//!
//! Best of K: among the live nodes that take placements (not draining, lease
//! not run out) and have room for the shape by the store's count of what their
//! active sandboxes hold, sample [`SAMPLES`] at random and take the one with the
//! most free memory (then CPU). Sampling rather than always taking the emptiest
//! keeps concurrent creates from all piling onto the same node between two
//! reads of the load. The chosen node's own admission control still decides
//! (it also counts creates not yet in the store); a refusal there makes the
//! caller try the next choice. Nothing is placed outside cluster mode.
//!
//! With the default local snapshot store, a snapshot's files are on the node
//! that ran its source sandbox: clones of it, its deletion and its expiry
//! happen there ([`Service::snapshot_node`]). With snapshots in object storage
//! any node can do all three: a clone is placed like a fresh create of the
//! snapshot's shape, preferring the node that took it (its cache is warm).
//!
//! A create may carry a `nodeSelector` (`/v1/sandboxes`): only nodes whose
//! labels (`--node-label`) hold every pair of it are candidates. The node that
//! runs the create checks its own labels again ([`Service::check_node_selector`]),
//! which is also the whole check on a single node.

use super::{Result, Service, ServiceError};
use chrono::Utc;
use sbx_store::NodeState;
use std::collections::BTreeMap;

/// A create's `nodeSelector`: label key → required value (empty: any node).
pub type NodeSelector = BTreeMap<String, String>;

/// Whether `labels` hold every pair of `selector`.
pub fn labels_match(labels: &BTreeMap<String, String>, selector: &NodeSelector) -> bool {
    selector
        .iter()
        .all(|(k, v)| labels.get(k).is_some_and(|have| have == v))
}

/// `selector` as the error messages show it: `{zone=eu-1, gpu=yes}`.
pub fn describe_selector(selector: &NodeSelector) -> String {
    let pairs: Vec<String> = selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{{{}}}", pairs.join(", "))
}

/// How many eligible nodes are sampled per decision.
pub(super) const SAMPLES: usize = 2;

/// Where a create runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// On this node.
    Here,
    /// On another node, reached at `url`.
    Node {
        /// Its id.
        id: String,
        /// Its advertise URL.
        url: String,
    },
}

/// A node that could take the shape, with what it has left.
pub(super) struct Candidate {
    pub(super) id: String,
    pub(super) url: String,
    pub(super) free_memory_mb: u64,
    pub(super) free_vcpu_milli: u64,
}

impl Service {
    /// Refuses (`compute_unavailable`) a create whose `selector` this node's
    /// own labels do not satisfy: a single node, or a cluster node that a
    /// create reached without placement choosing it.
    pub fn check_node_selector(&self, selector: &NodeSelector) -> Result<()> {
        if labels_match(&self.config.node.labels, selector) {
            return Ok(());
        }
        Err(ServiceError::Unavailable(format!(
            "nodeSelector {}: the labels of node {} ({}) do not match it",
            describe_selector(selector),
            self.config.node.id,
            describe_selector(&self.config.node.labels),
        )))
    }

    /// Chooses the node for a create of `vcpu` × `memory_mb` among the nodes
    /// whose labels match `selector`, skipping the nodes in `tried` (they
    /// refused it). `compute_unavailable` when no such node has room.
    pub async fn place(
        &self,
        vcpu: u32,
        memory_mb: u32,
        tried: &[String],
        selector: &NodeSelector,
    ) -> Result<Placement> {
        self.place_preferring(vcpu, memory_mb, tried, None, selector)
            .await
    }

    /// [`Service::place`] for a create that mounts `volumes` (names in
    /// `tenant`) or boots `image`: on the node of its local volumes and of
    /// its image (images are node-local; S3 volumes mount on any node).
    /// Unknown names are left to the create handler (404); local volumes or
    /// an image on two nodes are refused (409).
    #[allow(clippy::too_many_arguments)]
    pub async fn place_with_volumes(
        &self,
        tenant: &str,
        volumes: &[String],
        image: Option<&str>,
        vcpu: u32,
        memory_mb: u32,
        tried: &[String],
        selector: &NodeSelector,
    ) -> Result<Placement> {
        // No image: the tenant's default, which may be an image of its own.
        let image = image.unwrap_or(sbx_api_types::images::DEFAULT_IMAGE);
        let mut pinned: Option<String> = self.image_node(tenant, image).await?;
        for name in volumes {
            let Some(v) = self.store.volume_named(tenant, name).await? else {
                continue;
            };
            if v.kind != "local" {
                continue;
            }
            match &pinned {
                Some(node) if *node != v.node_id => {
                    return Err(ServiceError::Conflict(format!(
                        "the local volumes and image of this create live on two nodes ({node} and {}); \
                         a sandbox can use local volumes and an image of one node only",
                        v.node_id
                    )))
                }
                _ => pinned = Some(v.node_id),
            }
        }
        match pinned {
            None => self.place(vcpu, memory_mb, tried, selector).await,
            Some(node) => {
                self.place_among(vcpu, memory_mb, tried, None, Some(&node), selector)
                    .await
            }
        }
    }

    /// Like [`Service::place`], taking node `prefer` whenever it has room.
    async fn place_preferring(
        &self,
        vcpu: u32,
        memory_mb: u32,
        tried: &[String],
        prefer: Option<&str>,
        selector: &NodeSelector,
    ) -> Result<Placement> {
        self.place_among(vcpu, memory_mb, tried, prefer, None, selector)
            .await
    }

    /// The placement itself: among the nodes that match `selector` (only
    /// node `only` when given), `prefer` when it has room, else best of K.
    async fn place_among(
        &self,
        vcpu: u32,
        memory_mb: u32,
        tried: &[String],
        prefer: Option<&str>,
        only: Option<&str>,
        selector: &NodeSelector,
    ) -> Result<Placement> {
        if !self.config.node.cluster {
            // The create handler checks this node's labels.
            return Ok(Placement::Here);
        }
        let now = Utc::now();
        let nodes = self.store.list_nodes().await?;
        let usage = self.store.node_usage().await?;
        let want_cpu = u64::from(vcpu) * 1000;
        let want_mem = u64::from(memory_mb);
        let selected = nodes
            .iter()
            .filter(|n| labels_match(&n.labels, selector))
            .count();
        if selected == 0 {
            return Err(ServiceError::Unavailable(format!(
                "nodeSelector {}: no node of the cluster has labels that match it",
                describe_selector(selector)
            )));
        }
        let mut candidates: Vec<Candidate> = nodes
            .iter()
            .filter(|n| n.state == NodeState::Active && !n.is_lost(now))
            .filter(|n| !tried.contains(&n.id))
            .filter(|n| labels_match(&n.labels, selector))
            .filter(|n| only.is_none_or(|only| n.id == only))
            .filter_map(|n| {
                let used = usage.iter().find(|u| u.node_id == n.id);
                let free_memory_mb = n.memory_mb.saturating_sub(used.map_or(0, |u| u.memory_mb));
                let free_vcpu_milli = n
                    .vcpu_milli
                    .saturating_sub(used.map_or(0, |u| u.vcpu_milli));
                (free_memory_mb >= want_mem && free_vcpu_milli >= want_cpu).then(|| Candidate {
                    id: n.id.clone(),
                    url: n.advertise_url.clone(),
                    free_memory_mb,
                    free_vcpu_milli,
                })
            })
            .collect();
        if let (true, Some(only)) = (candidates.is_empty(), only) {
            return Err(ServiceError::Unavailable(format!(
                "the sandbox mounts local volumes of node {only}, which is not live, \
                 drained, full for {vcpu} vCPU and {memory_mb} MiB, or outside nodeSelector {}",
                describe_selector(selector)
            )));
        }
        if candidates.is_empty() && selector.is_empty() {
            return Err(ServiceError::Unavailable(format!(
                "no node of the cluster has room for {vcpu} vCPU and {memory_mb} MiB"
            )));
        }
        if candidates.is_empty() {
            return Err(ServiceError::Unavailable(format!(
                "nodeSelector {}: no live, undrained node that matches it has room for {vcpu} vCPU and {memory_mb} MiB",
                describe_selector(selector)
            )));
        }
        let chosen = match candidates
            .iter()
            .position(|c| Some(c.id.as_str()) == prefer)
        {
            Some(i) => &candidates[i],
            None => best_of(&mut candidates, SAMPLES, random()),
        };
        if chosen.id == self.config.node.id {
            Ok(Placement::Here)
        } else {
            Ok(Placement::Node {
                id: chosen.id.clone(),
                url: chosen.url.clone(),
            })
        }
    }
}

impl Service {
    /// The node that holds a snapshot's files (the node of its source sandbox),
    /// or `None` when that is this node, there is no cluster, or the source row
    /// is gone (then nobody else holds them either).
    async fn snapshot_holder(&self, snap: &sbx_store::SnapshotRecord) -> Result<Option<String>> {
        if !self.config.node.cluster || self.snapshots_shared() {
            return Ok(None);
        }
        Ok(self
            .store
            .get_sandbox(snap.source_sandbox)
            .await?
            .map(|source| source.node_id)
            .filter(|node| node != &self.config.node.id))
    }

    /// Whether this node holds `snap`'s files (and so expires and cleans it).
    pub(super) async fn holds_snapshot_files(&self, snap: &sbx_store::SnapshotRecord) -> bool {
        matches!(self.snapshot_holder(snap).await, Ok(None))
    }

    /// Whether every node reaches every snapshot's files (object storage).
    fn snapshots_shared(&self) -> bool {
        matches!(
            self.config.snapshot_store,
            sbx_node::snapshot_store::StoreConfig::S3(_)
        )
    }

    /// Where a clone of snapshot `id` of `tenant` runs, trying nodes not in
    /// `tried`: on the node that holds its files, or, with snapshots in object
    /// storage, where placement puts its shape among the nodes that match
    /// `selector`, the node that took it first.
    pub async fn place_clone(
        &self,
        tenant: &str,
        id: uuid::Uuid,
        tried: &[String],
        selector: &NodeSelector,
    ) -> Result<Placement> {
        if !(self.config.node.cluster && self.snapshots_shared()) {
            return self.snapshot_node(tenant, id).await;
        }
        let snap = match self.store.get_snapshot(id).await? {
            Some(s) if s.workspace == tenant => s,
            // The local handler answers (not found).
            _ => return Ok(Placement::Here),
        };
        let took_it = self
            .store
            .get_sandbox(snap.source_sandbox)
            .await?
            .map(|source| source.node_id);
        self.place_preferring(
            snap.vcpu,
            snap.memory_mb,
            tried,
            took_it.as_deref(),
            selector,
        )
        .await
    }

    /// Where a request about volume `key` (a name or id) of `tenant` that
    /// needs its data runs (its deletion, its usage): on the node of a local
    /// volume; here for an S3 one, an unknown one (404 here) or outside
    /// cluster mode.
    pub async fn volume_node(&self, tenant: &str, key: &str) -> Result<Placement> {
        if !self.config.node.cluster {
            return Ok(Placement::Here);
        }
        let found = match sbx_api_types::validate::canonical_id("volume", key) {
            Ok(id) => self.store.get_volume(id).await?,
            Err(_) => self.store.volume_named(tenant, key).await?,
        };
        let Some(v) = found.filter(|v| v.workspace == tenant) else {
            return Ok(Placement::Here);
        };
        if v.kind != "local" || v.node_id == self.config.node.id {
            return Ok(Placement::Here);
        }
        let url = self
            .live_node_url(&v.node_id, || {
                format!("volume {:?} is stored on node {}", v.name, v.node_id)
            })
            .await?;
        Ok(Placement::Node { id: v.node_id, url })
    }

    /// Where a request about snapshot `id` of `tenant` that needs its files (a
    /// clone of it, its deletion) runs: on the node that holds them.
    pub async fn snapshot_node(&self, tenant: &str, id: uuid::Uuid) -> Result<Placement> {
        let Some(snap) = self.store.get_snapshot(id).await? else {
            return Ok(Placement::Here);
        };
        if snap.workspace != tenant {
            return Ok(Placement::Here);
        }
        let Some(holder) = self.snapshot_holder(&snap).await? else {
            return Ok(Placement::Here);
        };
        let url = self
            .live_node_url(&holder, || {
                format!("snapshot {id} is stored on node {holder}")
            })
            .await?;
        Ok(Placement::Node { id: holder, url })
    }
}

/// A random number, from the operating system's generator (via a v4 UUID).
fn random() -> u128 {
    uuid::Uuid::new_v4().as_u128()
}

/// Of up to `k` candidates drawn from `all` with `seed`, the one with the most
/// free memory, then CPU. `all` must not be empty.
pub(super) fn best_of(all: &mut [Candidate], k: usize, mut seed: u128) -> &Candidate {
    let n = all.len();
    let k = k.min(n).max(1);
    // A partial Fisher-Yates shuffle: the first k are a uniform sample.
    for i in 0..k {
        let j = i + (seed % (n - i) as u128) as usize;
        seed /= n.max(2) as u128;
        all.swap(i, j);
    }
    let sample = &all[..k];
    let mut best = &sample[0];
    for c in &sample[1..] {
        if (c.free_memory_mb, c.free_vcpu_milli) > (best.free_memory_mb, best.free_vcpu_milli) {
            best = c;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(id: &str, mem: u64) -> Candidate {
        Candidate {
            id: id.into(),
            url: format!("http://{id}"),
            free_memory_mb: mem,
            free_vcpu_milli: 1000,
        }
    }

    #[test]
    fn best_of_two_takes_the_freer_of_a_random_pair_and_spreads() {
        let mut counts = std::collections::BTreeMap::<String, usize>::new();
        for seed in 0..3000u128 {
            let mut all = vec![
                candidate("a", 100),
                candidate("b", 200),
                candidate("c", 300),
            ];
            let chosen = best_of(&mut all, 2, seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            *counts.entry(chosen.id.clone()).or_default() += 1;
        }
        // The emptiest node wins every pair it is in (2 of 3 pairs), the fullest
        // never; the middle one wins the pair without the emptiest.
        assert_eq!(counts.get("a"), None, "{counts:?}");
        let (b, c) = (counts["b"], counts["c"]);
        assert!(c > b && b > 500, "{counts:?}");
    }

    #[test]
    fn a_selector_needs_every_pair_with_the_same_value() {
        let labels: BTreeMap<String, String> = [("zone", "eu-1"), ("gpu", "no")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let sel = |pairs: &[(&str, &str)]| -> NodeSelector {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert!(labels_match(&labels, &sel(&[])));
        assert!(labels_match(&labels, &sel(&[("zone", "eu-1")])));
        assert!(labels_match(
            &labels,
            &sel(&[("zone", "eu-1"), ("gpu", "no")])
        ));
        assert!(!labels_match(&labels, &sel(&[("zone", "eu-2")])));
        assert!(!labels_match(
            &labels,
            &sel(&[("zone", "eu-1"), ("ssd", "yes")])
        ));
        assert_eq!(
            describe_selector(&sel(&[("zone", "eu-1"), ("gpu", "no")])),
            "{gpu=no, zone=eu-1}"
        );
    }

    #[test]
    fn one_candidate_is_taken() {
        let mut all = vec![candidate("only", 1)];
        assert_eq!(best_of(&mut all, 2, 12345).id, "only");
    }
}
