//! Start-up reconciliation: make the store and the host agree after a crash.

use super::{lifecycle::stop_clock, Result, Service};
use sbx_agent_proto::{Reply, Request};
use sbx_api_types::SandboxStatus;
use std::collections::HashSet;
use std::sync::Arc;

impl Service {
    /// Reattaches to every RUNNING sandbox, finishes interrupted starts and
    /// teardowns, and removes host state that no active sandbox owns.
    pub async fn reconcile(self: &Arc<Self>) -> Result<()> {
        let on_host: HashSet<_> = self
            .runtime
            .list()
            .await
            .map_err(|e| {
                super::ServiceError::Internal(format!("listing sandboxes on the host: {e}"))
            })?
            .into_iter()
            .collect();
        let active = self.store.sandboxes_in_status(&[
            SandboxStatus::Pending,
            SandboxStatus::Starting,
            SandboxStatus::Running,
            SandboxStatus::Pausing,
            SandboxStatus::Paused,
            SandboxStatus::Resuming,
            SandboxStatus::Terminating,
        ])?;
        let mut keep = HashSet::new();
        for record in &active {
            let id = record.id;
            match record.status {
                SandboxStatus::Running => {
                    if on_host.contains(&id) && self.reattach(id).await {
                        keep.insert(id);
                    } else {
                        self.fail(id, "sandbox was lost while sbxd was not running".into())
                            .await;
                    }
                }
                SandboxStatus::Pending | SandboxStatus::Starting => {
                    // A half-finished boot cannot be trusted: start again from scratch.
                    let _ = self.runtime.destroy(id).await;
                    let _ = self
                        .transition(id, |r| {
                            r.status = SandboxStatus::Starting;
                        })
                        .await;
                    keep.insert(id);
                    self.spawn_boot(id);
                }
                SandboxStatus::Terminating => {
                    keep.insert(id);
                    self.spawn_teardown(id, None);
                }
                SandboxStatus::Pausing | SandboxStatus::Paused | SandboxStatus::Resuming => {
                    if on_host.contains(&id) && self.settle_pause(id).await {
                        keep.insert(id);
                    } else {
                        self.fail(id, "sandbox was lost while sbxd was not running".into())
                            .await;
                    }
                }
                SandboxStatus::Terminated | SandboxStatus::Failed => {}
            }
        }
        self.reconcile_snapshots().await?;
        for orphan in on_host.difference(&keep) {
            tracing::info!(sandbox = %orphan, "removing host state no active sandbox owns");
            if let Err(e) = self.runtime.destroy(*orphan).await {
                tracing::error!(sandbox = %orphan, error = %e, "removing orphan");
            }
        }
        tracing::info!(
            active = keep.len(),
            removed = on_host.difference(&keep).count(),
            "reconciled"
        );
        Ok(())
    }

    /// Finishes a pause or resume the daemon died in: the container's real state decides.
    async fn settle_pause(self: &Arc<Self>, id: uuid::Uuid) -> bool {
        let paused = match self.runtime.is_paused(id).await {
            Ok(Some(p)) => p,
            _ => return false,
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
        if paused {
            return recorded;
        }
        recorded && self.reattach(id).await
    }

    /// Snapshots caught mid-capture fail (never stay CREATING); half-done deletions finish.
    async fn reconcile_snapshots(self: &Arc<Self>) -> Result<()> {
        use sbx_store::SnapshotStatus;
        for mut snap in self
            .store
            .snapshots_in_status(&[SnapshotStatus::Creating, SnapshotStatus::Deleting])?
        {
            if snap.status == SnapshotStatus::Creating {
                snap.status = SnapshotStatus::Failed;
                snap.error = Some("interrupted by a restart of sbxd".into());
                snap.updated_at = chrono::Utc::now();
                let _ = tokio::fs::remove_dir_all(self.snapshot_dir(snap.id)).await;
                self.store.update_snapshot(&snap)?;
            } else {
                self.finish_delete(snap).await;
            }
        }
        Ok(())
    }

    async fn reattach(self: &Arc<Self>, id: uuid::Uuid) -> bool {
        if !matches!(self.runtime.is_alive(id).await, Ok(true)) {
            return false;
        }
        let Ok(conn) = self.runtime.connect(id).await else {
            return false;
        };
        if !matches!(conn.call(Request::Ping).await, Ok((Reply::Pong, _))) {
            return false;
        }
        self.agents
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, conn.clone());
        if let Ok(Some(r)) = self.store.get_sandbox(id) {
            self.network.serve(id, &r.network, &conn).await;
        }
        self.spawn_monitor(id, conn);
        true
    }
}
