//! Per-sandbox usage: one task of this node samples every RUNNING sandbox it
//! runs every `--usage-sample-secs` (through [`Runtime::usage`], off the
//! async workers) into an in-memory history (`sbx_node::usage::History`);
//! `GET /v1/sandboxes/{id}/metrics` and E2B's `getMetrics` read it. Paused
//! sandboxes get no samples (their history stays); a sandbox that is no
//! longer active on this node is forgotten at the next round. Nothing is
//! stored: a restart of sbxd starts every history afresh.
//!
//! The process count is the one number the host cannot see (the sandbox's
//! cgroup holds the sentry, the gofer and the platform's stub processes, not
//! one process per guest process): it is the number of pids in the guest's
//! `/proc`, asked of the sandbox's agent over its open connection (no
//! `runsc exec`), with a short deadline, as a quiet call (it neither wakes
//! a sandbox frozen while idle nor keeps one awake; see `idle.rs`). The guest
//! can lie about it; it only misinforms its own owner.
//!
//! [`Runtime::usage`]: crate::runtime::Runtime::usage

use super::{Result, Service, ServiceError};
use sbx_api_types::{SandboxMetrics, SandboxStatus, UsageSample};
use sbx_node::usage::{Reading, Sample};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Instant, SystemTime};
use uuid::Uuid;

/// How long samples are kept.
pub const USAGE_HISTORY: std::time::Duration = std::time::Duration::from_secs(600);

/// One round's readings: sandbox, vCPUs, when, what.
type Round = Vec<(Uuid, u32, Instant, SystemTime, Option<Reading>)>;

impl Service {
    /// Takes one sample of every RUNNING sandbox of this node and forgets the
    /// sandboxes that are no longer active here.
    pub async fn sample_usage(self: &Arc<Self>) {
        let Ok(records) = self
            .store
            .sandboxes_in_status(Some(&self.config.node.id), &SandboxStatus::ACTIVE)
            .await
        else {
            return;
        };
        let active: HashSet<Uuid> = records.iter().map(|r| r.id).collect();
        let running: Vec<(Uuid, u32)> = records
            .iter()
            .filter(|r| r.status == SandboxStatus::Running)
            .map(|r| (r.id, r.vcpu))
            .collect();
        let runtime = self.runtime.clone();
        let round: Round = match tokio::task::spawn_blocking(move || {
            running
                .into_iter()
                .map(|(id, vcpu)| {
                    let reading = runtime.usage(id);
                    if let Err(e) = &reading {
                        tracing::debug!(sandbox = %id, error = %e, "no usage reading");
                    }
                    (id, vcpu, Instant::now(), SystemTime::now(), reading.ok())
                })
                .collect()
        })
        .await
        {
            Ok(round) => round,
            Err(e) => {
                tracing::warn!(error = %e, "usage sampling task failed");
                return;
            }
        };
        let round = self.with_process_counts(round).await;
        let mut history = self.usage.lock().unwrap_or_else(|p| p.into_inner());
        let sampled: HashSet<Uuid> = round.iter().map(|(id, ..)| *id).collect();
        for (id, vcpu, at, wall, reading) in round {
            match reading {
                Some(r) => history.record(id, vcpu, &r, at, wall),
                None => history.gap(id),
            }
        }
        // Paused (or pausing, resuming) sandboxes: no sample, a fresh interval after.
        for id in active.difference(&sampled) {
            history.gap(*id);
        }
        history.retain(|id| active.contains(&id));
    }

    /// Fills in each reading's process count from the sandbox's agent (all at once).
    async fn with_process_counts(&self, round: Round) -> Round {
        let counts = round.iter().map(|(id, _, _, _, reading)| {
            let conn = reading.as_ref().and_then(|_| self.cached_agent(*id));
            async move { count_processes(conn?).await }
        });
        let counts = futures::future::join_all(counts).await;
        round
            .into_iter()
            .zip(counts)
            .map(|((id, vcpu, at, wall, reading), n)| {
                let reading = reading.map(|r| Reading { processes: n, ..r });
                (id, vcpu, at, wall, reading)
            })
            .collect()
    }

    /// `GET /v1/sandboxes/{id}/metrics`: the sandbox's recent usage. A sandbox
    /// that has ended has none (`SandboxNotFound`).
    pub async fn sandbox_metrics(&self, workspace: &str, id: Uuid) -> Result<SandboxMetrics> {
        let record = self.load(workspace, id).await?;
        if !record.status.is_active() {
            return Err(ServiceError::SandboxNotFound);
        }
        let samples = self
            .usage_samples(id)
            .iter()
            .map(|s| UsageSample {
                timestamp: sbx_api_types::format_unix_ms(s.unix_ms),
                cpu_percent: round2(s.cpu_percent),
                cpu_core_percent: round2(s.cpu_core_percent),
                cpu_time_ms: s.cpu_time_ms,
                memory_bytes: s.memory_bytes,
                memory_peak_bytes: s.memory_peak_bytes,
                memory_cache_bytes: s.memory_cache_bytes,
                disk_used_bytes: s.disk_used_bytes,
                disk_total_bytes: s.disk_total_bytes,
                processes: s.processes,
            })
            .collect();
        Ok(SandboxMetrics {
            sandbox_id: id,
            vcpu: record.vcpu,
            memory_mb: record.memory_mb,
            interval_secs: self.config.limits.usage_sample.as_secs(),
            samples,
        })
    }

    /// The raw samples of a sandbox of this node, oldest first (E2B's `getMetrics`).
    pub fn usage_samples(&self, id: Uuid) -> Vec<Sample> {
        self.usage
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .samples(id)
    }
}

/// The number of processes in the guest, sbxd's relays left out (`None` when the agent does not answer in time).
async fn count_processes(conn: crate::runtime::AgentConn) -> Option<u64> {
    match super::idle::guest_processes(&conn).await {
        Ok(n) => Some(n),
        // A sandbox sleeps only with PID 1 as its only process (`idle.rs`).
        Err(crate::runtime::AgentCallError::Asleep) => Some(1),
        Err(_) => None,
    }
}

/// Two decimals are all a percentage needs on the wire.
fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}
