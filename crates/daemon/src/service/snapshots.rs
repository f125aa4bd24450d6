//! Snapshots of memory and disk (gVisor checkpoint with the source left
//! running), their expiry janitor, and cleanup.

use super::views::Snapshot;
use super::{Result, Service, ServiceError};
use chrono::{Duration as ChronoDuration, Utc};
use sbx_api_types::validate;
use sbx_api_types::SandboxStatus;
use sbx_store::{SandboxCursor, SnapshotCreateOutcome, SnapshotRecord, SnapshotStatus};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tracing::Instrument;
use uuid::Uuid;

/// How often the janitor looks for local copies of deleted snapshots (one
/// store read per local snapshot directory).
const CACHE_SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// Start of the error of a snapshot whose upload to the snapshot store failed.
pub const SNAPSHOT_UPLOAD_FAILED: &str = "uploading the snapshot to object storage failed";

/// One page of snapshots.
#[derive(Debug)]
pub struct SnapshotPage {
    /// Items, newest first.
    pub items: Vec<Snapshot>,
    /// Cursor of the next page.
    pub next_cursor: Option<String>,
}

impl Service {
    /// Directory holding a snapshot's files.
    pub(super) fn snapshot_dir(&self, id: Uuid) -> PathBuf {
        self.config.data_dir.join("snapshots").join(id.to_string())
    }

    /// `POST /v2/sandboxes/{id}/snapshots`: answers READY if the capture finishes quickly, else CREATING.
    pub async fn snapshot_create(
        self: &Arc<Self>,
        workspace: &str,
        id: Uuid,
        name: Option<String>,
    ) -> Result<Snapshot> {
        let name = name.filter(|n| !n.is_empty());
        if let Some(n) = &name {
            validate::name("name", n)?;
        }
        let source = self.load(workspace, id).await?;
        if source.status != SandboxStatus::Running {
            return Err(ServiceError::not_running(source.status));
        }
        let now = Utc::now();
        let record = SnapshotRecord {
            id: Uuid::new_v4(),
            workspace: workspace.to_string(),
            name: name.clone(),
            source_sandbox: id,
            status: SnapshotStatus::Creating,
            vcpu: source.vcpu,
            memory_mb: source.memory_mb,
            environment: source.environment.clone(),
            secrets: source.secrets.clone(),
            image_ref: source.image_ref.clone(),
            // A custom image's digest names it; the default image has its own id.
            source_image_id: super::images::digest_of(&source.image_ref).map_or_else(
                || self.image_id.clone(),
                |d| d["sha256:".len()..].to_string(),
            ),
            compatibility_id: self.runtime.compatibility_id(),
            stored_bytes: 0,
            created_at: now,
            updated_at: now,
            expires_at: now
                + ChronoDuration::from_std(self.config.limits.snapshot_ttl)
                    .unwrap_or(ChronoDuration::days(7)),
            error: None,
            network: source.network.clone(),
            generation: 0,
        };
        let max_live = self.config.limits.snapshots_per_workspace;
        match self.store.create_snapshot(&record, now, max_live).await? {
            SnapshotCreateOutcome::Created => {}
            SnapshotCreateOutcome::NameHeld(_) => {
                return Err(ServiceError::SnapshotNameTaken(name.unwrap_or_default()))
            }
            SnapshotCreateOutcome::LimitReached(n) => return Err(ServiceError::SnapshotLimit(n)),
        }
        // Claimed after the insert: a pause that read the sandbox before the
        // snapshot existed now loses its compare-and-set and sees the capture.
        if let Err(e) = self.claim_for_capture(id).await {
            let why = e.to_string();
            let _ = self
                .change_snapshot(record, move |s| {
                    if s.status == SnapshotStatus::Creating {
                        s.status = SnapshotStatus::Failed;
                        s.error = Some(why.clone());
                        s.updated_at = Utc::now();
                    }
                })
                .await;
            return Err(e);
        }
        let (tx, mut rx) = tokio::sync::watch::channel(false);
        let this = self.clone();
        let snap_id = record.id;
        // The checkpoint (and verify restore) spans are children of the request.
        tokio::spawn(
            async move {
                this.capture(snap_id, id).await;
                let _ = tx.send(true);
            }
            .in_current_span(),
        );
        let _ =
            tokio::time::timeout(self.config.limits.create_sync_wait, rx.wait_for(|d| *d)).await;
        self.store
            .get_snapshot(snap_id)
            .await?
            .map(Snapshot::from)
            .ok_or(ServiceError::SnapshotNotFound)
    }

    /// `GET /v2/snapshots/{id}`.
    pub async fn snapshot_get(&self, workspace: &str, id: Uuid) -> Result<Snapshot> {
        match self.store.get_snapshot(id).await? {
            Some(s) if s.workspace == workspace && s.status != SnapshotStatus::Deleted => {
                Ok(s.into())
            }
            _ => Err(ServiceError::SnapshotNotFound),
        }
    }

    /// `GET /v2/snapshots`.
    pub async fn snapshot_list(
        &self,
        workspace: &str,
        name: Option<&str>,
        limit: u32,
        cursor: Option<&str>,
    ) -> Result<SnapshotPage> {
        if let Some(n) = name {
            validate::name("name", n)?;
        }
        let after = cursor.map(super::lifecycle::parse_cursor).transpose()?;
        let mut items = self
            .store
            .list_snapshots(workspace, name, limit + 1, after.as_ref())
            .await?;
        let more = items.len() > limit as usize;
        items.truncate(limit as usize);
        let next_cursor = if more {
            items.last().map(|s| {
                super::lifecycle::format_cursor(&SandboxCursor {
                    created_at_ms: s.created_at.timestamp_millis(),
                    id: s.id,
                })
            })
        } else {
            None
        };
        Ok(SnapshotPage {
            items: items.iter().map(Snapshot::from).collect(),
            next_cursor,
        })
    }

    /// `DELETE /v2/snapshots/{id}`: safe to repeat; frees the files.
    pub async fn snapshot_delete(&self, workspace: &str, id: Uuid) -> Result<()> {
        let snap = match self.store.get_snapshot(id).await? {
            Some(s) if s.workspace == workspace => s,
            _ => return Err(ServiceError::SnapshotNotFound),
        };
        if snap.status == SnapshotStatus::Deleted {
            return Ok(());
        }
        if let Some(template) = self.template_owning(workspace, id).await? {
            return Err(ServiceError::Conflict(format!(
                "snapshot {id} belongs to template {template:?}; delete the template instead"
            )));
        }
        let (snap, _) = self
            .change_snapshot(snap, |s| {
                if s.status != SnapshotStatus::Deleted && s.status != SnapshotStatus::Deleting {
                    s.status = SnapshotStatus::Deleting;
                    s.updated_at = Utc::now();
                }
            })
            .await?;
        // Whoever marked it DELETING, finishing is safe to repeat (removing absent files is fine).
        if snap.status == SnapshotStatus::Deleting {
            self.finish_delete(snap).await;
        }
        Ok(())
    }

    pub(super) async fn finish_delete(&self, snap: SnapshotRecord) {
        // The objects first: a store that cannot be reached keeps the
        // snapshot DELETING, and the janitor tries again.
        if let Err(e) = self.snapshot_store.delete(snap.id).await {
            tracing::error!(snapshot = %snap.id, error = %e, "removing snapshot objects; will retry");
            return;
        }
        let dir = self.snapshot_dir(snap.id);
        match tokio::fs::remove_dir_all(&dir).await {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::error!(snapshot = %snap.id, error = %e, "removing snapshot files; will retry");
                return;
            }
        }
        let id = snap.id;
        let done = self
            .change_snapshot(snap, |s| {
                if s.status == SnapshotStatus::Deleting {
                    s.status = SnapshotStatus::Deleted;
                    s.stored_bytes = 0;
                    s.updated_at = Utc::now();
                }
            })
            .await;
        if let Err(e) = done {
            tracing::error!(snapshot = %id, error = %e, "recording snapshot deletion");
        }
    }

    /// Deletes expired snapshots and retries unfinished deletions.
    pub async fn snapshot_janitor(&self) {
        let Ok(candidates) = self
            .store
            .snapshots_in_status(&[
                SnapshotStatus::Ready,
                SnapshotStatus::Failed,
                SnapshotStatus::Deleting,
            ])
            .await
        else {
            return;
        };
        let now = Utc::now();
        self.drop_stale_caches().await;
        for mut snap in candidates {
            // Another node's snapshot is its own to expire (its files are there).
            if !self.holds_snapshot_files(&snap).await {
                continue;
            }
            if snap.status == SnapshotStatus::Deleting || snap.expires_at <= now {
                tracing::info!(snapshot = %snap.id, "deleting expired snapshot");
                snap.status = SnapshotStatus::Deleting;
                // A conflict: another actor changed it since the listing; the next round decides.
                if self.store.update_snapshot(&mut snap).await.is_ok() {
                    self.finish_delete(snap).await;
                }
            }
        }
    }

    /// Removes local snapshot directories whose snapshot is deleted or
    /// unknown: with a shared store, another node may have deleted a
    /// snapshot this node had fetched.
    async fn drop_stale_caches(&self) {
        {
            let mut last = self.cache_sweep.lock().unwrap_or_else(|p| p.into_inner());
            if last.is_some_and(|t| t.elapsed() < CACHE_SWEEP_EVERY) {
                return;
            }
            *last = Some(std::time::Instant::now());
        }
        let root = self.config.data_dir.join("snapshots");
        let Ok(mut entries) = tokio::fs::read_dir(&root).await else {
            return;
        };
        while let Ok(Some(entry)) = entries.next_entry().await {
            let Some(id) = entry
                .file_name()
                .to_str()
                .and_then(|n| Uuid::parse_str(n).ok())
            else {
                continue;
            };
            let stale = match self.store.get_snapshot(id).await {
                Ok(None) => true,
                Ok(Some(s)) => s.status == SnapshotStatus::Deleted,
                Err(_) => false,
            };
            if stale {
                tracing::info!(snapshot = %id, "removing the local copy of a deleted snapshot");
                let _ = tokio::fs::remove_dir_all(entry.path()).await;
            }
        }
    }

    /// The checkpoint a clone restores from, if the snapshot is usable.
    pub(super) async fn clone_source(&self, workspace: &str, id: Uuid) -> Result<SnapshotRecord> {
        let snap = match self.store.get_snapshot(id).await? {
            Some(s) if s.workspace == workspace => s,
            _ => return Err(ServiceError::SnapshotNotFound),
        };
        match snap.status {
            SnapshotStatus::Ready if snap.expires_at > Utc::now() => Ok(snap),
            SnapshotStatus::Ready
            | SnapshotStatus::Deleted
            | SnapshotStatus::Deleting
            | SnapshotStatus::Lost => Err(ServiceError::SnapshotNotFound),
            SnapshotStatus::Creating | SnapshotStatus::Failed => {
                Err(ServiceError::SnapshotNotReady(snap.status.as_str()))
            }
        }
    }
}

/// Bytes used by the files under `dir`.
pub(super) fn dir_size(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(|e| e.ok())
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_size(&e.path()),
            Ok(m) => std::os::unix::fs::MetadataExt::blocks(&m) * 512,
            Err(_) => 0,
        })
        .sum()
}
