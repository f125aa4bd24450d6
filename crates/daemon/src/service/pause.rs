//! Pause and resume: the sandbox is frozen in place with its memory kept; the
//! active-runtime clock stops while paused and resume does not reset it.

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
        let mut r = self.load(workspace, id)?;
        match r.status {
            SandboxStatus::Paused => return Ok(r),
            SandboxStatus::Running => {}
            other => return Err(ServiceError::not_running(other)),
        }
        stop_clock(&mut r);
        r.status = SandboxStatus::Pausing;
        self.store.update_sandbox(&r)?;
        match self.runtime.pause(id).await {
            Ok(()) => {
                r.status = SandboxStatus::Paused;
                self.store.update_sandbox(&r)?;
                tracing::info!(sandbox = %id, "sandbox paused");
                Ok(r)
            }
            Err(e) => {
                // Still running (pause is all-or-nothing in runsc): go back to RUNNING.
                r.status = SandboxStatus::Running;
                r.running_since = Some(Utc::now());
                self.store.update_sandbox(&r)?;
                Err(ServiceError::Unavailable(format!("pause failed: {e}")))
            }
        }
    }

    /// `POST /v2/sandboxes/{id}/resume`: idempotent by target state.
    pub async fn resume(self: &Arc<Self>, workspace: &str, id: Uuid) -> Result<SandboxRecord> {
        self.load(workspace, id)?;
        let lock = self.lock_for(id);
        let _guard = lock.lock().await;
        let mut r = self.load(workspace, id)?;
        match r.status {
            SandboxStatus::Running => return Ok(r),
            SandboxStatus::Paused => {}
            other => {
                return Err(ServiceError::WrongState {
                    is: other.as_str(),
                    needs: "PAUSED",
                })
            }
        }
        r.status = SandboxStatus::Resuming;
        self.store.update_sandbox(&r)?;
        match self.runtime.resume(id).await {
            Ok(()) => {
                r.status = SandboxStatus::Running;
                r.running_since = Some(Utc::now());
                self.store.update_sandbox(&r)?;
                tracing::info!(sandbox = %id, "sandbox resumed");
                Ok(r)
            }
            Err(e) => {
                r.status = SandboxStatus::Paused;
                self.store.update_sandbox(&r)?;
                Err(ServiceError::Unavailable(format!("resume failed: {e}")))
            }
        }
    }
}
