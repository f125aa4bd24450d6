//! Start-up reconciliation: make the store and the host agree after a crash.

use super::{lifecycle::stop_clock, Result, Service};
use crate::runtime::{AgentCallError, RuntimeError};
use futures::future::BoxFuture;
use futures::StreamExt;
use sbx_agent_proto::{Reply, Request};
use sbx_api_types::SandboxStatus;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

/// Why a sandbox that sbxd cannot find again after a restart is FAILED.
const LOST: &str = "sandbox was lost while sbxd was not running";

/// Why a sandbox whose container is alive but whose agent does not answer
/// after a restart is FAILED: it was not lost, its agent stalled (the
/// handshake's or the ping's own words say how long sbxd waited).
fn agent_silent(why: impl std::fmt::Display) -> String {
    format!("sandbox agent did not answer after sbxd restarted: {why}")
}

/// How long start-up waits for the per-sandbox work before it opens the
/// port anyway (the rest goes on in the background).
const RECONCILE_WAIT: Duration = Duration::from_secs(10);
/// Sandboxes reconciled at the same time (each may run `runsc` commands).
const RECONCILE_PARALLEL: usize = 8;

impl Service {
    /// Reattaches to every RUNNING sandbox, finishes interrupted starts and
    /// teardowns, and removes host state that no active sandbox owns.
    ///
    /// The decisions come from the store and `runsc list` at once; the work
    /// for each sandbox (reattach, settle, fail, destroy) runs in its own task,
    /// bounded by the agent deadlines, at most [`RECONCILE_PARALLEL`] at a time.
    /// This waits for them at most [`RECONCILE_WAIT`]: a sandbox whose agent
    /// stalls its handshake cannot keep sbxd's port closed.
    pub async fn reconcile(self: &Arc<Self>) -> Result<()> {
        self.abandon_earlier_claims().await?;
        let on_host: HashSet<_> = self
            .runtime
            .list()
            .await
            .map_err(|e| {
                super::ServiceError::Internal(format!("listing sandboxes on the host: {e}"))
            })?
            .into_iter()
            .collect();
        let active = self
            .store
            .sandboxes_in_status(Some(&self.config.node.id), &SandboxStatus::ACTIVE)
            .await?;
        let mut keep = HashSet::new();
        let mut work: Vec<BoxFuture<'static, ()>> = Vec::new();
        for record in &active {
            let id = record.id;
            let this = self.clone();
            match record.status {
                SandboxStatus::Running if on_host.contains(&id) => {
                    keep.insert(id);
                    work.push(Box::pin(async move {
                        if let Err(reason) = this.reattach(id).await {
                            this.fail(id, reason).await;
                        }
                    }));
                }
                SandboxStatus::Pending | SandboxStatus::Starting => {
                    keep.insert(id);
                    work.push(Box::pin(async move {
                        // A half-finished boot cannot be trusted: start again from scratch.
                        let _ = this.runtime.destroy(id).await;
                        let _ = this
                            .transition(id, |r| {
                                r.status = SandboxStatus::Starting;
                            })
                            .await;
                        this.spawn_boot(id);
                    }));
                }
                SandboxStatus::Terminating => {
                    keep.insert(id);
                    self.spawn_teardown(id, None);
                }
                SandboxStatus::Pausing | SandboxStatus::Paused | SandboxStatus::Resuming
                    if on_host.contains(&id) =>
                {
                    keep.insert(id);
                    work.push(Box::pin(async move {
                        if let Err(reason) = this.settle_pause(id).await {
                            this.fail(id, reason).await;
                        }
                    }));
                }
                SandboxStatus::Running
                | SandboxStatus::Pausing
                | SandboxStatus::Paused
                | SandboxStatus::Resuming => {
                    work.push(Box::pin(async move { this.fail(id, LOST.into()).await }));
                }
                SandboxStatus::Terminated | SandboxStatus::Failed => {}
            }
        }
        self.reconcile_snapshots().await?;
        self.sweep_images().await;
        self.resume_template_builds().await;
        let orphans: Vec<_> = on_host.difference(&keep).copied().collect();
        for orphan in &orphans {
            let (this, orphan) = (self.clone(), *orphan);
            work.push(Box::pin(async move {
                tracing::info!(sandbox = %orphan, "removing host state no active sandbox owns");
                if let Err(e) = this.runtime.destroy(orphan).await {
                    tracing::error!(sandbox = %orphan, error = %e, "removing orphan");
                }
            }));
        }
        let total = work.len();
        let all = tokio::spawn(
            futures::stream::iter(work)
                .buffer_unordered(RECONCILE_PARALLEL)
                .collect::<Vec<()>>(),
        );
        let finished = tokio::time::timeout(RECONCILE_WAIT, all).await.is_ok();
        if !finished {
            tracing::warn!(
                tasks = total,
                "reconciliation is still running after {}s; serving meanwhile",
                RECONCILE_WAIT.as_secs()
            );
        }
        tracing::info!(active = keep.len(), removed = orphans.len(), "reconciled");
        Ok(())
    }

    /// Finishes a pause or resume the daemon died in: the container's real
    /// state decides. `Err` is why the sandbox cannot be kept.
    async fn settle_pause(self: &Arc<Self>, id: uuid::Uuid) -> std::result::Result<(), String> {
        let paused = match self.runtime.is_paused(id).await {
            Ok(Some(p)) => p,
            _ => return Err(LOST.into()),
        };
        let settle = move |r: &mut sbx_store::SandboxRecord| {
            if paused {
                stop_clock(r);
                r.status = SandboxStatus::Paused;
            } else {
                r.status = SandboxStatus::Running;
                r.running_since.get_or_insert_with(chrono::Utc::now);
            }
        };
        let recorded = match self.transition(id, &settle).await {
            Ok(_) => true,
            // The sandbox itself is fine: keep it, and record its state once
            // space returns (failing it would destroy a healthy sandbox).
            Err(super::ServiceError::StorageFull(_)) => {
                self.record_when_space_returns(id, "PAUSED or RUNNING", settle);
                true
            }
            Err(_) => false,
        };
        if !recorded {
            return Err(LOST.into());
        }
        if paused {
            return Ok(());
        }
        self.reattach(id).await
    }

    /// Snapshots caught mid-capture fail (never stay CREATING); half-done deletions finish.
    async fn reconcile_snapshots(self: &Arc<Self>) -> Result<()> {
        use sbx_store::SnapshotStatus;
        for mut snap in self
            .store
            .snapshots_in_status(&[SnapshotStatus::Creating, SnapshotStatus::Deleting])
            .await?
        {
            // Another node's snapshot is not this restart's to settle.
            if !self.holds_snapshot_files(&snap).await {
                continue;
            }
            if snap.status == SnapshotStatus::Creating {
                snap.status = SnapshotStatus::Failed;
                snap.error = Some("interrupted by a restart of sbxd".into());
                snap.updated_at = chrono::Utc::now();
                let _ = tokio::fs::remove_dir_all(self.snapshot_dir(snap.id)).await;
                // Whatever an interrupted upload left (best effort; expiry deletes again).
                self.remove_remote_in_background(snap.id);
                // A conflict: another sbxd settled it first; its answer stands.
                match self.store.update_snapshot(&mut snap).await {
                    Ok(()) | Err(sbx_store::StoreError::Conflict(_)) => {}
                    Err(e) => return Err(e.into()),
                }
            } else {
                self.finish_delete(snap).await;
            }
        }
        Ok(())
    }

    /// Connects to a running sandbox's agent after a restart. `Err` is why
    /// the sandbox cannot be kept: gone from the host ([`LOST`]), or alive
    /// with an agent that does not answer (said as such: the sandbox was
    /// not lost, and an operator looking at it should know the difference).
    async fn reattach(self: &Arc<Self>, id: uuid::Uuid) -> std::result::Result<(), String> {
        if !matches!(self.runtime.is_alive(id).await, Ok(true)) {
            return Err(LOST.into());
        }
        // Under the attach gate, like any other connection attempt: a request
        // that arrives meanwhile waits for this one instead of racing it.
        let _gate = self.enter_gate(id).await.map_err(|e| {
            format!("sbxd could not reconnect to the sandbox's agent after it restarted: {e}")
        })?;
        if self.cached_agent(id).is_some() {
            return Ok(());
        }
        let conn = match self.runtime.connect(id).await {
            Ok(conn) => conn,
            Err(RuntimeError::AgentNotReady(why)) => return Err(agent_silent(why)),
            Err(e) => {
                return Err(format!(
                    "sbxd could not reconnect to the sandbox's agent after it restarted: {e}"
                ))
            }
        };
        match conn.call(Request::Ping).await {
            Ok((Reply::Pong, _)) => {}
            Ok((other, _)) => {
                conn.shutdown().await;
                return Err(agent_silent(AgentCallError::Unexpected(format!(
                    "{other:?}"
                ))));
            }
            Err(e) => {
                conn.shutdown().await;
                return Err(agent_silent(e));
            }
        }
        self.register_agent(id, conn.clone());
        if let Ok(Some(r)) = self.store.get_sandbox(id).await {
            self.network.serve(id, &r.network, &conn).await;
        }
        Ok(())
    }
}
