//! Pause and resume: the sandbox is frozen in place with its memory kept; the
//! active-runtime clock stops while paused and resume does not reset it.
//!
//! Each is decided by the store: only the caller whose compare-and-set moved
//! the row into PAUSING (RESUMING) calls the runtime. A caller that lost the
//! race answers from the row as it is now, as if it had come second in one
//! process.

use super::lifecycle::stop_clock;
use super::{Result, Service, ServiceError};
use chrono::Utc;
use sbx_api_types::SandboxStatus;
use sbx_store::SandboxRecord;
use std::sync::Arc;
use uuid::Uuid;

impl Service {
    /// `POST /v2/sandboxes/{id}/pause`: idempotent by target state.
    pub async fn pause(self: &Arc<Self>, workspace: &str, id: Uuid) -> Result<SandboxRecord> {
        self.load(workspace, id)?;
        let lock = self.lock_for(id);
        let _guard = lock.lock().await;
        let current = self.load(workspace, id)?;
        let (r, won) = self.change_row(current, |r| {
            if r.status == SandboxStatus::Running {
                stop_clock(r);
                r.status = SandboxStatus::Pausing;
            }
        })?;
        if !won {
            return match r.status {
                SandboxStatus::Paused => Ok(r),
                other => Err(ServiceError::not_running(other)),
            };
        }
        match self.runtime.pause(id).await {
            Ok(()) => {
                let (r, _) = self.change_row(r, |r| {
                    if r.status == SandboxStatus::Pausing {
                        r.status = SandboxStatus::Paused;
                    }
                })?;
                // A destroy may have taken the sandbox over meanwhile: then say so.
                if r.status != SandboxStatus::Paused {
                    return Err(ServiceError::not_running(r.status));
                }
                tracing::info!(sandbox = %id, "sandbox paused");
                Ok(r)
            }
            Err(e) => {
                // Still running (pause is all-or-nothing in runsc): go back to RUNNING.
                let (r, _) = self.change_row(r, |r| {
                    if r.status == SandboxStatus::Pausing {
                        r.status = SandboxStatus::Running;
                        r.running_since = Some(Utc::now());
                    }
                })?;
                if r.status != SandboxStatus::Running {
                    return Err(ServiceError::not_running(r.status));
                }
                Err(ServiceError::Unavailable(format!("pause failed: {e}")))
            }
        }
    }

    /// `POST /v2/sandboxes/{id}/resume`: idempotent by target state.
    pub async fn resume(self: &Arc<Self>, workspace: &str, id: Uuid) -> Result<SandboxRecord> {
        self.load(workspace, id)?;
        let lock = self.lock_for(id);
        let _guard = lock.lock().await;
        let current = self.load(workspace, id)?;
        let (r, won) = self.change_row(current, |r| {
            if r.status == SandboxStatus::Paused {
                r.status = SandboxStatus::Resuming;
            }
        })?;
        if !won {
            return match r.status {
                SandboxStatus::Running => Ok(r),
                other => Err(not_paused(other)),
            };
        }
        match self.runtime.resume(id).await {
            Ok(()) => {
                let (r, _) = self.change_row(r, |r| {
                    if r.status == SandboxStatus::Resuming {
                        r.status = SandboxStatus::Running;
                        r.running_since = Some(Utc::now());
                    }
                })?;
                if r.status != SandboxStatus::Running {
                    return Err(not_paused(r.status));
                }
                tracing::info!(sandbox = %id, "sandbox resumed");
                Ok(r)
            }
            Err(e) => {
                let (r, _) = self.change_row(r, |r| {
                    if r.status == SandboxStatus::Resuming {
                        r.status = SandboxStatus::Paused;
                    }
                })?;
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
