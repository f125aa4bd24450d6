//! Pause and resume: the sandbox is frozen in place with its memory kept; the
//! active-runtime clock stops while paused and resume does not reset it.
//!
//! Each is decided by the store: only the caller whose compare-and-set moved
//! the row into PAUSING (RESUMING) calls the runtime. A caller that lost the
//! race answers from the row as it is now, as if it had come second in one
//! process.

use super::lifecycle::stop_clock;
use super::views::Sandbox;
use super::{Result, Service, ServiceError};
use chrono::Utc;
use sbx_api_types::SandboxStatus;
use sbx_store::SandboxRecord;
use std::sync::Arc;
use uuid::Uuid;

/// Longest wait of a pause for a snapshot capture of the sandbox to end.
const CAPTURE_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

impl Service {
    /// `POST /v2/sandboxes/{id}/pause`: idempotent by target state.
    pub async fn pause(self: &Arc<Self>, workspace: &str, id: Uuid) -> Result<Sandbox> {
        self.pause_row(workspace, id).await.map(Sandbox::from)
    }

    async fn pause_row(self: &Arc<Self>, workspace: &str, id: Uuid) -> Result<SandboxRecord> {
        self.load(workspace, id).await?;
        let lock = self.lock_for(id);
        let deadline = tokio::time::Instant::now() + CAPTURE_WAIT;
        let (_guard, r, won) = loop {
            let guard = lock.clone().lock_owned().await;
            if let Some((r, won)) = self.claim_pause(workspace, id).await? {
                break (guard, r, won);
            }
            // A capture is under way: wait for it without the lock (it needs the lock
            // when it runs in this process), as a pause waits for it in one process.
            drop(guard);
            if tokio::time::Instant::now() >= deadline {
                return Err(ServiceError::Unavailable(
                    "a snapshot of the sandbox is being taken; retry".into(),
                ));
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        };
        if !won {
            return match r.status {
                SandboxStatus::Paused => Ok(r),
                other => Err(ServiceError::not_running(other)),
            };
        }
        match self.runtime.pause(id).await {
            Ok(()) => {
                let (r, _) = self
                    .change_row(r, |r| {
                        if r.status == SandboxStatus::Pausing {
                            r.status = SandboxStatus::Paused;
                        }
                    })
                    .await?;
                // A destroy may have taken the sandbox over meanwhile: then say so.
                if r.status != SandboxStatus::Paused {
                    return Err(ServiceError::not_running(r.status));
                }
                tracing::info!(sandbox = %id, "sandbox paused");
                Ok(r)
            }
            Err(e) => {
                // Still running (pause is all-or-nothing in runsc): go back to RUNNING.
                let (r, _) = self
                    .change_row(r, |r| {
                        if r.status == SandboxStatus::Pausing {
                            r.status = SandboxStatus::Running;
                            r.running_since = Some(Utc::now());
                        }
                    })
                    .await?;
                if r.status != SandboxStatus::Running {
                    return Err(ServiceError::not_running(r.status));
                }
                Err(ServiceError::Unavailable(format!("pause failed: {e}")))
            }
        }
    }

    /// Moves RUNNING to PAUSING unless a snapshot is being captured (by this
    /// or another sbxd, whose lock is not ours): then `None`, and the caller
    /// waits for the capture without holding the lock. Returns the row and
    /// whether this call moved it.
    async fn claim_pause(
        &self,
        workspace: &str,
        id: Uuid,
    ) -> Result<Option<(SandboxRecord, bool)>> {
        for _ in 0..super::transition::CAS_ATTEMPTS {
            let current = self.load(workspace, id).await?;
            if current.status != SandboxStatus::Running {
                return Ok(Some((current, false)));
            }
            // Checked on every attempt: a snapshot's claim is such a conflict.
            if self.capture_in_progress(id).await? {
                return Ok(None);
            }
            let mut r = current;
            stop_clock(&mut r);
            r.status = SandboxStatus::Pausing;
            match self.store.update_sandbox(&mut r).await {
                Ok(()) => return Ok(Some((r, true))),
                Err(sbx_store::StoreError::Conflict(_)) => continue,
                Err(sbx_store::StoreError::NotFound) => return Err(ServiceError::SandboxNotFound),
                Err(e) => return Err(e.into()),
            }
        }
        Err(ServiceError::Conflict(format!(
            "sandbox {id} kept changing while it was being paused; retry"
        )))
    }

    /// `POST /v2/sandboxes/{id}/resume`: idempotent by target state.
    pub async fn resume(self: &Arc<Self>, workspace: &str, id: Uuid) -> Result<Sandbox> {
        self.resume_row(workspace, id).await.map(Sandbox::from)
    }

    async fn resume_row(self: &Arc<Self>, workspace: &str, id: Uuid) -> Result<SandboxRecord> {
        self.load(workspace, id).await?;
        let lock = self.lock_for(id);
        let _guard = lock.lock().await;
        let current = self.load(workspace, id).await?;
        let (r, won) = self
            .change_row(current, |r| {
                if r.status == SandboxStatus::Paused {
                    r.status = SandboxStatus::Resuming;
                }
            })
            .await?;
        if !won {
            return match r.status {
                SandboxStatus::Running => Ok(r),
                other => Err(not_paused(other)),
            };
        }
        match self.runtime.resume(id).await {
            Ok(()) => {
                let (r, _) = self
                    .change_row(r, |r| {
                        if r.status == SandboxStatus::Resuming {
                            r.status = SandboxStatus::Running;
                            r.running_since = Some(Utc::now());
                        }
                    })
                    .await?;
                if r.status != SandboxStatus::Running {
                    return Err(not_paused(r.status));
                }
                tracing::info!(sandbox = %id, "sandbox resumed");
                Ok(r)
            }
            Err(e) => {
                let (r, _) = self
                    .change_row(r, |r| {
                        if r.status == SandboxStatus::Resuming {
                            r.status = SandboxStatus::Paused;
                        }
                    })
                    .await?;
                if r.status != SandboxStatus::Paused {
                    return Err(not_paused(r.status));
                }
                Err(ServiceError::Unavailable(format!("resume failed: {e}")))
            }
        }
    }
}

/// Resume needs a PAUSED sandbox and this one is `status`.
fn not_paused(status: SandboxStatus) -> ServiceError {
    ServiceError::WrongState {
        is: status.as_str(),
        needs: "PAUSED",
    }
}
