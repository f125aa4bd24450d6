//! Placement of Connect's scheduled jobs in cluster mode: which node starts a
//! due sync.
//!
//! Every node's scheduler sees the same due syncs. For each one, every node
//! draws the same best-of-[`SAMPLES`] from the same list (the live, undrained
//! nodes, sorted by id, with their free memory and CPU from the store),
//! seeded by the sync and its interval number; only the chosen node tries to
//! start it. The store still decides (one queued-or-running run per sync), so
//! two nodes that read the load a moment apart cannot both run it; one that
//! skips wrongly only delays the run to the next tick. A node that dies keeps
//! its picks until its lease runs out, then it is no longer a candidate.

use super::placement::{best_of, Candidate, SAMPLES};
use super::Service;
use chrono::Utc;
use sbx_store::NodeState;
use sha2::{Digest, Sha256};

/// One tick's view of the cluster for deciding where background jobs start.
pub struct JobPlacement {
    /// This node.
    me: String,
    /// `None`: start everything here (a single node, or the store could not
    /// be read: a node that cannot read it cannot start a run either).
    candidates: Option<Vec<Candidate>>,
}

impl JobPlacement {
    /// Whether this node starts the job named `key` (the same key on every node).
    pub fn runs_here(&self, key: &str) -> bool {
        let Some(candidates) = &self.candidates else {
            return true;
        };
        if !candidates.iter().any(|c| c.id == self.me) {
            // Drained or lost: leave it to the others.
            return false;
        }
        let mut sample: Vec<Candidate> = candidates
            .iter()
            .map(|c| Candidate {
                id: c.id.clone(),
                url: c.url.clone(),
                free_memory_mb: c.free_memory_mb,
                free_vcpu_milli: c.free_vcpu_milli,
            })
            .collect();
        best_of(&mut sample, SAMPLES, seed(key)).id == self.me
    }
}

/// A seed every node derives alike from the key.
fn seed(key: &str) -> u128 {
    let digest = Sha256::digest(key.as_bytes());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    u128::from_be_bytes(bytes)
}

impl Service {
    /// The cluster as it stands now, for [`JobPlacement::runs_here`].
    pub async fn job_placement(&self) -> JobPlacement {
        let me = self.config.node.id.clone();
        if !self.config.node.cluster {
            return JobPlacement {
                me,
                candidates: None,
            };
        }
        let (nodes, usage) = match (self.store.list_nodes().await, self.store.node_usage().await) {
            (Ok(n), Ok(u)) => (n, u),
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!(error = %e, "job placement: the nodes could not be read; starting due jobs here");
                return JobPlacement {
                    me,
                    candidates: None,
                };
            }
        };
        let now = Utc::now();
        let mut candidates: Vec<Candidate> = nodes
            .iter()
            .filter(|n| n.state == NodeState::Active && !n.is_lost(now))
            .map(|n| {
                let used = usage.iter().find(|u| u.node_id == n.id);
                Candidate {
                    id: n.id.clone(),
                    url: n.advertise_url.clone(),
                    free_memory_mb: n.memory_mb.saturating_sub(used.map_or(0, |u| u.memory_mb)),
                    free_vcpu_milli: n
                        .vcpu_milli
                        .saturating_sub(used.map_or(0, |u| u.vcpu_milli)),
                }
            })
            .collect();
        // Every node must sample from the same order.
        candidates.sort_by(|a, b| a.id.cmp(&b.id));
        JobPlacement {
            me,
            candidates: Some(candidates),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(me: &str, nodes: &[(&str, u64)]) -> JobPlacement {
        JobPlacement {
            me: me.into(),
            candidates: Some(
                nodes
                    .iter()
                    .map(|(id, mem)| Candidate {
                        id: id.to_string(),
                        url: format!("http://{id}"),
                        free_memory_mb: *mem,
                        free_vcpu_milli: 2000,
                    })
                    .collect(),
            ),
        }
    }

    #[test]
    fn exactly_one_node_takes_each_job_and_the_freer_ones_take_more() {
        let nodes = [("a", 1000), ("b", 4000), ("c", 8000)];
        let mut taken = std::collections::BTreeMap::<&str, usize>::new();
        for i in 0..600 {
            let key = format!("ws/conn-{i}/sync");
            let takers: Vec<&str> = nodes
                .iter()
                .map(|(id, _)| *id)
                .filter(|id| view(id, &nodes).runs_here(&key))
                .collect();
            assert_eq!(takers.len(), 1, "{key}: {takers:?}");
            *taken.entry(takers[0]).or_default() += 1;
        }
        // Best of two: the fullest node never wins a pair, the emptiest wins
        // both of its pairs, the middle one the pair without the emptiest.
        assert_eq!(taken.get("a"), None, "{taken:?}");
        assert!(taken["c"] > taken["b"] && taken["b"] > 100, "{taken:?}");
    }

    #[test]
    fn a_drained_or_lost_node_takes_nothing_and_a_single_node_takes_everything() {
        let others = [("a", 1000), ("b", 1000)];
        for i in 0..50 {
            assert!(!view("c", &others).runs_here(&format!("k{i}")));
        }
        let single = JobPlacement {
            me: "vm".into(),
            candidates: None,
        };
        assert!(single.runs_here("anything"));
        let two = [("a", 1000), ("b", 1000)];
        let a = (0..200)
            .filter(|i| view("a", &two).runs_here(&format!("k{i}")))
            .count();
        assert!(
            a > 50 && a < 150,
            "equal nodes share the jobs: a took {a} of 200"
        );
    }
}
