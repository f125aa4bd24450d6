//! E2B snapshots: sbx snapshots that are also template ids (`Sandbox.create(snapshotID)`),
//! and fork (a snapshot, then sandboxes booted from it).

use super::{bad_token, SCAN_PAGE, SETTLE_WAIT};
use super::{not_found_template, CreateSpec, E2b, E2bError, E2bSandbox, E2bState, Result};
use crate::service::lifecycle::format_cursor;
use crate::service::{ServiceError, Snapshot};
use sbx_api_types::SnapshotStatus;
use sbx_store::SandboxCursor;
use std::time::Duration;
use uuid::Uuid;

impl E2b {
    /// `POST /sandboxes/{id}/snapshots`: a snapshot (memory and disk) that
    /// `Sandbox.create(snapshotID)` boots from; waits until it is usable.
    pub async fn snapshot_create(
        &self,
        workspace: &str,
        id: Uuid,
        name: Option<String>,
    ) -> Result<Snapshot> {
        let view = self.info(workspace, id).await?;
        if view.state != E2bState::Running {
            return Err(E2bError::Conflict(format!(
                "sandbox {id} is paused; connect to it first"
            )));
        }
        let snap = self.svc.snapshot_create(workspace, id, name).await?;
        let deadline = tokio::time::Instant::now() + SETTLE_WAIT;
        let mut snap = snap;
        while snap.status == SnapshotStatus::Creating && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
            snap = self.svc.snapshot_get(workspace, snap.id).await?;
        }
        match snap.status {
            SnapshotStatus::Ready => Ok(snap),
            other => Err(E2bError::Service(ServiceError::Internal(format!(
                "the snapshot is {}: {}",
                other.as_str(),
                snap.error.unwrap_or_default()
            )))),
        }
    }

    /// `GET /snapshots`: READY snapshots of the tenant, newest first, optionally
    /// of one sandbox or with one name.
    pub async fn snapshot_list(
        &self,
        workspace: &str,
        sandbox: Option<Uuid>,
        name: Option<&str>,
        limit: u32,
        token: Option<&str>,
    ) -> Result<(Vec<Snapshot>, Option<String>)> {
        let mut out = Vec::new();
        let mut cursor = token.map(str::to_string);
        loop {
            let page = self
                .svc
                .snapshot_list(workspace, name, SCAN_PAGE, cursor.as_deref())
                .await
                .map_err(bad_token)?;
            for snap in page.items {
                if snap.status != SnapshotStatus::Ready
                    || sandbox.is_some_and(|s| s != snap.source_sandbox)
                {
                    continue;
                }
                let after = format_cursor(&SandboxCursor {
                    created_at_ms: snap.created_at.timestamp_millis(),
                    id: snap.id,
                });
                out.push(snap);
                if out.len() >= limit as usize {
                    return Ok((out, Some(after)));
                }
            }
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => return Ok((out, None)),
            }
        }
    }

    /// `DELETE /templates/{id}`: deletes a snapshot; templates themselves cannot be deleted.
    pub async fn snapshot_delete(&self, workspace: &str, template_id: &str) -> Result<()> {
        let snap = self.template_snapshot(workspace, template_id).await?;
        self.svc
            .snapshot_delete(workspace, snap.id)
            .await
            .map_err(|e| match e {
                ServiceError::SnapshotNotFound => not_found_template(template_id),
                other => other.into(),
            })
    }

    /// The snapshot a template id names (a snapshot id of this tenant), else `NotFound`.
    pub(super) async fn template_snapshot(
        &self,
        workspace: &str,
        template_id: &str,
    ) -> Result<Snapshot> {
        let Ok(id) = Uuid::parse_str(template_id) else {
            return Err(not_found_template(template_id));
        };
        match self.svc.snapshot_get(workspace, id).await {
            Ok(s) if s.status == SnapshotStatus::Ready => Ok(s),
            Ok(_) | Err(ServiceError::SnapshotNotFound) => Err(not_found_template(template_id)),
            Err(e) => Err(e.into()),
        }
    }

    /// `POST /sandboxes/{id}/fork`: a snapshot of the running sandbox, then `count`
    /// sandboxes booted from it (each with the source's metadata and auto-pause).
    /// The snapshot stays (it expires like any other) so that the forks can be
    /// re-created; one result per fork.
    pub async fn fork(
        &self,
        workspace: &str,
        id: Uuid,
        timeout_secs: Option<u64>,
        count: u32,
    ) -> Result<Vec<Result<E2bSandbox>>> {
        if let Some(t) = timeout_secs {
            self.check_timeout(t)?;
        }
        let source = self.info(workspace, id).await?;
        let snap = self.snapshot_create(workspace, id, None).await?;
        let mut out = Vec::new();
        for _ in 0..count {
            let spec = CreateSpec {
                template_id: snap.id.to_string(),
                timeout_secs,
                metadata: source.record.metadata.clone(),
                auto_pause: source.record.auto_pause,
                allow_public_traffic: source.record.traffic_access_token.is_none(),
                ..CreateSpec::default()
            };
            out.push(self.create(workspace, spec).await);
        }
        Ok(out)
    }
}
