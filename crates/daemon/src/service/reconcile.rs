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
                    let _ = self
                        .transition(id, |r| {
                            stop_clock(r);
                            r.status = SandboxStatus::Terminating;
                        })
                        .await;
                    keep.insert(id);
                    self.spawn_teardown(
                        id,
                        Some("pause is not supported by this server version".into()),
                    );
                }
                SandboxStatus::Terminated | SandboxStatus::Failed => {}
            }
        }
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
        self.spawn_monitor(id, conn);
        true
    }
}
