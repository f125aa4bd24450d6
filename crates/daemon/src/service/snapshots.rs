//! Snapshots of memory and disk (gVisor checkpoint with the source left
//! running), their expiry janitor, and cleanup.

use super::views::Snapshot;
use super::{agent_error, Result, Service, ServiceError};
use crate::runtime::SandboxSpec;
use chrono::{Duration as ChronoDuration, Utc};
use sbx_agent_proto::Request;
use sbx_api_types::validate;
use sbx_api_types::SandboxStatus;
use sbx_store::{SandboxCursor, SnapshotCreateOutcome, SnapshotRecord, SnapshotStatus};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tracing::Instrument;
use uuid::Uuid;

/// Checkpoints taken before a snapshot gives up (each one is verified).
const CHECKPOINT_ATTEMPTS: u32 = 3;
/// How long a verification restore gets to answer (as long as a boot's
/// agent gets: on a loaded node a restore can take well over 10 s).
const VERIFY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

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

    async fn capture(self: &Arc<Self>, snap_id: Uuid, sandbox: Uuid) {
        let started = std::time::Instant::now();
        // Uploaded (when the store is remote) after the source is serving
        // again and before the row says READY: a READY snapshot can be cloned
        // on any node. A failed upload fails the snapshot, never the source.
        let result = match self.capture_inner(snap_id, sandbox).await {
            Ok(bytes) => self.upload_snapshot(snap_id).await.map(|()| bytes),
            Err(e) => Err(e),
        };
        sbx_metrics::global().snapshot(result.as_ref().ok().copied(), started.elapsed());
        let Ok(Some(snap)) = self.store.get_snapshot(snap_id).await else {
            return;
        };
        let dir = self.snapshot_dir(snap_id);
        let (status, bytes, error) = match &result {
            Ok(bytes) => (SnapshotStatus::Ready, *bytes, None),
            Err(e) => (SnapshotStatus::Failed, 0, Some(e.to_string())),
        };
        let settle = move |s: &mut SnapshotRecord| {
            if s.status == SnapshotStatus::Creating {
                s.status = status;
                s.stored_bytes = bytes;
                s.error = error.clone();
                s.updated_at = Utc::now();
            }
        };
        match self.change_snapshot(snap, &settle).await {
            Ok((_, true)) => match result {
                Ok(bytes) => {
                    tracing::info!(snapshot = %snap_id, %sandbox, bytes, "snapshot ready")
                }
                Err(e) => {
                    tracing::warn!(snapshot = %snap_id, %sandbox, error = %e, "snapshot failed");
                    let _ = tokio::fs::remove_dir_all(&dir).await;
                    self.remove_remote_in_background(snap_id);
                }
            },
            // Deleted while capturing: drop the files.
            Ok((s, false)) => {
                tracing::debug!(snapshot = %snap_id, status = s.status.as_str(), "capture outlived its snapshot");
                let _ = tokio::fs::remove_dir_all(&dir).await;
                self.remove_remote_in_background(snap_id);
            }
            Err(ServiceError::StorageFull(_)) => {
                let Ok(Some(mut s)) = self.store.get_snapshot(snap_id).await else {
                    return;
                };
                settle(&mut s);
                self.record_capture_when_space_returns(s)
            }
            Err(e) => tracing::error!(snapshot = %snap_id, error = %e, "recording snapshot result"),
        }
    }

    /// Copies a verified checkpoint to the snapshot store (nothing to do for
    /// the local one). Its failure is the snapshot's, with the store's reason.
    async fn upload_snapshot(&self, snap_id: Uuid) -> Result<()> {
        let dir = self.snapshot_dir(snap_id);
        let started = std::time::Instant::now();
        match self.snapshot_store.upload(snap_id, &dir).await {
            Ok(up) => {
                if up.files > 0 {
                    tracing::info!(
                        snapshot = %snap_id, files = up.files, bytes = up.bytes,
                        ms = started.elapsed().as_millis() as u64,
                        store = %self.snapshot_store.describe(), "snapshot uploaded"
                    );
                }
                Ok(())
            }
            Err(e) => Err(ServiceError::Unavailable(format!(
                "{SNAPSHOT_UPLOAD_FAILED}: {e}"
            ))),
        }
    }

    /// Removes what an upload may have left in the store (a failed or
    /// abandoned capture). Best effort: the janitor deletes the snapshot's
    /// objects again when it expires.
    pub(super) fn remove_remote_in_background(&self, snap_id: Uuid) {
        let store = Arc::clone(&self.snapshot_store);
        tokio::spawn(async move {
            if let Err(e) = store.delete(snap_id).await {
                tracing::warn!(snapshot = %snap_id, error = %e, "removing a failed snapshot's objects");
            }
        });
    }

    /// Makes sure this node has the snapshot's checkpoint, fetching it from
    /// the snapshot store when the local cache lacks it (one fetch per
    /// snapshot at a time; concurrent clones wait for it). `Err` is the
    /// reason the clone fails with.
    pub(super) async fn snapshot_locally(&self, snap_id: Uuid) -> Result<PathBuf, String> {
        let dir = self.snapshot_dir(snap_id);
        match self.snapshot_store.fetch(snap_id, &dir).await {
            Ok(()) => Ok(dir.join("checkpoint")),
            Err(e) if e.is_unusable() => {
                Err(format!("{}: {e}", super::lifecycle::SNAPSHOT_UNUSABLE))
            }
            Err(e) => Err(format!("{}: {e}", super::lifecycle::SNAPSHOT_UNREACHABLE)),
        }
    }

    /// Writes a capture's result that the store refused for a full disk again
    /// and again until it goes through (unless the snapshot was deleted
    /// meanwhile), so that it does not stay CREATING without a restart.
    fn record_capture_when_space_returns(self: &Arc<Self>, result: SnapshotRecord) {
        tracing::warn!(snapshot = %result.id, "data disk full: recording the snapshot's result once space returns");
        let this = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(super::lifecycle::RECORD_RETRY).await;
                let current = match this.store.get_snapshot(result.id).await {
                    Ok(Some(s)) if s.status == SnapshotStatus::Creating => s,
                    _ => return,
                };
                let written = this
                    .store
                    .update_snapshot(&mut SnapshotRecord {
                        updated_at: Utc::now(),
                        // Written over the row as it is now (CREATING), not as first read.
                        generation: current.generation,
                        ..result.clone()
                    })
                    .await;
                match written {
                    Err(sbx_store::StoreError::Full(_)) => continue,
                    Ok(()) => {
                        tracing::info!(snapshot = %current.id, "snapshot result recorded after the data disk had been full")
                    }
                    Err(e) => {
                        tracing::error!(snapshot = %current.id, error = %e, "recording snapshot result")
                    }
                }
                return;
            }
        });
    }

    /// Takes the checkpoint. The sandbox's transition lock is held only around
    /// `runsc checkpoint` itself (a host command with its own deadline), never
    /// across a call to the agent: a guest whose agent stalls on `sync` or on
    /// the verification restore delays its own snapshot, not a DELETE or the
    /// runtime limit of its sandbox. A pause meanwhile waits for the capture
    /// (the CREATING snapshot row tells it so); a destroy meanwhile makes the
    /// capture fail, as it would in one process.
    async fn capture_inner(self: &Arc<Self>, snap_id: Uuid, sandbox: Uuid) -> Result<u64> {
        // No new relay may start while the checkpoint is taken: requests that
        // need the agent wait at the gate (bounded) until it reconnects below.
        let _gate = self.enter_gate(sandbox).await?;
        let current = self
            .store
            .get_sandbox(sandbox)
            .await?
            .ok_or(ServiceError::SandboxNotFound)?;
        if current.status != SandboxStatus::Running {
            return Err(ServiceError::not_running(current.status));
        }
        let result = self.checkpoint_verified(snap_id, &current).await;
        // Reconnect whatever happened, so the source keeps serving.
        if let Err(e) = self.attach_gated(sandbox).await {
            tracing::warn!(%sandbox, error = %e, "reconnecting after snapshot");
        }
        result?;
        Ok(dir_size(&self.snapshot_dir(snap_id)))
    }

    /// Flushes the guest, closes its agent connection, then checkpoints until
    /// a checkpoint restores (each attempt verified unless configured off).
    async fn checkpoint_verified(
        self: &Arc<Self>,
        snap_id: Uuid,
        current: &sbx_store::SandboxRecord,
    ) -> Result<()> {
        let sandbox = current.id;
        // Crash consistency: flush what the guest holds in its page cache first.
        // Then close the agent connection: a checkpoint taken while the relay
        // process runs would hold its host pipes and could not be restored.
        // Every call here has the agent client's deadline, and no lock is held.
        let conn = match self.cached_agent(sandbox) {
            Some(conn) => conn,
            None => self.runtime.connect(sandbox).await.map_err(|e| {
                ServiceError::Unavailable(format!("sandbox agent unreachable: {e}"))
            })?,
        };
        let synced = conn.call(Request::Sync).await.map_err(agent_error);
        // Close the in-sandbox proxy listeners first (fewer live sockets in
        // the image; the next `net_serve` reopens them). An agent too old to
        // know `quiesce` answers with an error, which is fine to ignore.
        if let Err(e) = conn.call(Request::Quiesce).await {
            tracing::debug!(%sandbox, error = %e, "agent did not quiesce");
        }
        conn.shutdown().await;
        self.forget_agent(sandbox);
        synced?;
        let dir = self.snapshot_dir(snap_id);
        for attempt in 1..=CHECKPOINT_ATTEMPTS {
            self.checkpoint_once(current, &dir).await?;
            if !self.config.limits.snapshot_verify {
                return Ok(());
            }
            // A throwaway sandbox of the source's shape, with its volumes
            // (runsc restores only with the mounts the checkpoint had).
            let probe = SandboxSpec {
                id: Uuid::new_v4(),
                vcpu: current.vcpu,
                memory_mb: current.memory_mb,
                volumes: self.volume_binds(current.id).await?,
                rootfs: self
                    .rootfs_for(&current.image_ref)
                    .map_err(ServiceError::Internal)?,
            };
            match self.verify_checkpoint(probe, dir.join("checkpoint")).await {
                Ok(()) => return Ok(()),
                Err(why) => tracing::warn!(
                    snapshot = %snap_id, %sandbox, attempt, why,
                    "checkpoint does not restore; taking it again"
                ),
            }
        }
        Err(ServiceError::Internal(format!(
            "no restorable checkpoint in {CHECKPOINT_ATTEMPTS} attempts"
        )))
    }

    /// One `runsc checkpoint` into a fresh `dir`, under the sandbox's
    /// transition lock, of a sandbox whose row has not moved since `current`
    /// was read (checked before and after: the lock keeps this process's
    /// transitions out, the generation another sbxd's).
    async fn checkpoint_once(&self, current: &sbx_store::SandboxRecord, dir: &Path) -> Result<()> {
        let sandbox = current.id;
        let lock = self.lock_for(sandbox);
        let _guard = lock.lock().await;
        self.unchanged_since(current).await?;
        // A fresh directory per attempt: runsc writes into it.
        let _ = tokio::fs::remove_dir_all(dir).await;
        tokio::fs::create_dir_all(dir).await.map_err(|e| {
            if sbx_runsc::is_enospc(&e) {
                ServiceError::StorageFull(format!("the data disk is full: snapshot storage: {e}"))
            } else {
                ServiceError::Unavailable(format!("snapshot storage: {e}"))
            }
        })?;
        self.runtime
            .checkpoint(sandbox, dir.join("checkpoint"))
            .await
            .map_err(|e| {
                if e.is_disk_full() {
                    ServiceError::StorageFull(format!(
                        "the data disk is full: checkpoint failed: {e}"
                    ))
                } else {
                    ServiceError::Internal(format!("checkpoint failed: {e}"))
                }
            })?;
        self.unchanged_since(current).await
    }

    /// A checkpoint is only what was RUNNING throughout if the row did not move.
    async fn unchanged_since(&self, current: &sbx_store::SandboxRecord) -> Result<()> {
        match self.store.get_sandbox(current.id).await? {
            Some(now) if now.generation == current.generation => Ok(()),
            Some(now) => Err(ServiceError::Conflict(format!(
                "the sandbox changed to {} during the checkpoint",
                now.status.as_str()
            ))),
            None => Err(ServiceError::SandboxNotFound),
        }
    }

    /// Restores a fresh checkpoint into a throwaway sandbox and checks that
    /// its agent answers. gVisor 20240729 now and then writes a checkpoint
    /// whose agent crashes as soon as it is restored (SIGSEGV in tokio's I/O
    /// driver; every restore of that checkpoint fails the same way, while
    /// most checkpoints of the same sandbox are fine): such a snapshot would
    /// be useless, so it is taken again instead.
    async fn verify_checkpoint(&self, probe: SandboxSpec, image: PathBuf) -> Result<(), String> {
        let id = probe.id;
        let result = async {
            self.runtime
                .restore(probe, image)
                .await
                .map_err(|e| format!("restore: {e}"))?;
            let deadline = std::time::Instant::now() + VERIFY_TIMEOUT;
            loop {
                if !matches!(self.runtime.is_alive(id).await, Ok(true)) {
                    return Err("the restored sandbox stopped".to_string());
                }
                match self.runtime.connect(id).await {
                    Ok(conn) => {
                        conn.shutdown().await;
                        return Ok(());
                    }
                    Err(e) if std::time::Instant::now() >= deadline => {
                        return Err(format!("agent did not answer: {e}"))
                    }
                    Err(_) => tokio::time::sleep(std::time::Duration::from_millis(10)).await,
                }
            }
        }
        .await;
        // Removed in the background: the snapshot does not wait for it.
        let runtime = Arc::clone(&self.runtime);
        tokio::spawn(async move {
            if let Err(e) = runtime.destroy(id).await {
                tracing::warn!(probe = %id, error = %e, "removing the checkpoint probe");
            }
        });
        result
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
fn dir_size(dir: &Path) -> u64 {
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
