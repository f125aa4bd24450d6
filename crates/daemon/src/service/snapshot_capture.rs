//! Taking a snapshot: the checkpoint with the source quiesced, its
//! verification by a probe restore (run beside the upload to the snapshot
//! store), retries, and recording the result. `snapshots.rs` has the API side.

use super::snapshots::{dir_size, SNAPSHOT_UPLOAD_FAILED};
use super::{agent_error, Result, Service, ServiceError};
use crate::runtime::{AgentConn, SandboxSpec};
use chrono::Utc;
use sbx_agent_proto::Request;
use sbx_api_types::SandboxStatus;
use sbx_store::{SnapshotRecord, SnapshotStatus};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use uuid::Uuid;

/// Checkpoints taken before a snapshot gives up (each one is verified).
const CHECKPOINT_ATTEMPTS: u32 = 3;
/// How long a verification restore gets to answer (as long as a boot's
/// agent gets: on a loaded node a restore can take well over 10 s).
const VERIFY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

impl Service {
    /// Takes, verifies and records the snapshot (the task behind `snapshot_create`).
    pub(super) async fn capture(self: &Arc<Self>, snap_id: Uuid, sandbox: Uuid) {
        let started = std::time::Instant::now();
        // Uploaded (when the store is remote) before the row says READY: a
        // READY snapshot can be cloned on any node. A failed upload fails
        // the snapshot, never the source.
        let result = self.capture_inner(snap_id, sandbox).await;
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

    /// Takes the checkpoint until one restores, and uploads it. The sandbox's
    /// transition lock is held only around `runsc checkpoint` itself (a host
    /// command with its own deadline), never across a call to the agent: a
    /// guest whose agent stalls on `sync` delays its own snapshot, not a
    /// DELETE or the runtime limit of its sandbox. A pause meanwhile waits
    /// for the capture (the CREATING snapshot row tells it so); a destroy
    /// meanwhile makes the capture fail, as it would in one process.
    ///
    /// Once `runsc checkpoint` returns, three things run at once: the source
    /// gets its agent connection back (so it serves again), the checkpoint
    /// is restored into a throwaway probe, and it is uploaded. READY still
    /// means "a restore of these files answered"; only the waiting is shared.
    async fn capture_inner(self: &Arc<Self>, snap_id: Uuid, sandbox: Uuid) -> Result<u64> {
        let dir = self.snapshot_dir(snap_id);
        for attempt in 1..=CHECKPOINT_ATTEMPTS {
            // No new connection (attach or relay) may open while the
            // checkpoint is taken: requests that need one wait at the gate
            // (bounded) until the source serves again below.
            let gate = self.enter_gate(sandbox).await?;
            let current = self
                .store
                .get_sandbox(sandbox)
                .await?
                .ok_or(ServiceError::SandboxNotFound)?;
            if current.status != SandboxStatus::Running {
                return Err(ServiceError::not_running(current.status));
            }
            let started = std::time::Instant::now();
            let (taken, kept) = self.checkpoint_quiesced(&current, &dir).await;
            let checkpointed = started.elapsed();
            // The source keeps serving: over the same connection when it
            // came through the checkpoint (the network service, which
            // `quiesce` stopped, starts again on it), else over a new one.
            let reconnect = async {
                match kept {
                    Some(conn) => self.network.serve(sandbox, &current.network, &conn).await,
                    None => {
                        if let Err(e) = self.attach_gated(sandbox).await {
                            tracing::warn!(%sandbox, error = %e, "reconnecting after snapshot");
                        }
                    }
                }
                drop(gate);
                tracing::debug!(%sandbox, ms = started.elapsed().as_millis() as u64, "source serving again after its checkpoint");
            };
            let check = async {
                taken?;
                // Outer error: the probe could not even be described; inner:
                // the checkpoint did not restore (taken again).
                let verified = async {
                    if !self.config.limits.snapshot_verify {
                        return Ok::<_, ServiceError>(Ok(()));
                    }
                    // A throwaway sandbox of the source's shape, with its
                    // volumes (runsc restores only with the mounts the
                    // checkpoint had).
                    let probe = SandboxSpec {
                        id: Uuid::new_v4(),
                        vcpu: current.vcpu,
                        memory_mb: current.memory_mb,
                        volumes: self.volume_binds(current.id).await?,
                        rootfs: self
                            .rootfs_for(&current.image_ref)
                            .map_err(ServiceError::Internal)?,
                    };
                    Ok(self.verify_checkpoint(probe, dir.join("checkpoint")).await)
                };
                let (verified, uploaded) = tokio::join!(verified, self.upload_snapshot(snap_id));
                match verified? {
                    // A bad checkpoint's upload is overwritten by the next
                    // attempt's (its manifest is written last).
                    Err(why) => Ok(Some(why)),
                    Ok(()) => uploaded.map(|()| None),
                }
            };
            let ((), checked) = tokio::join!(reconnect, check);
            tracing::debug!(
                snapshot = %snap_id, attempt,
                checkpoint_ms = checkpointed.as_millis() as u64,
                total_ms = started.elapsed().as_millis() as u64,
                "checkpoint attempt done"
            );
            match checked? {
                None => return Ok(dir_size(&dir)),
                Some(why) => tracing::warn!(
                    snapshot = %snap_id, %sandbox, attempt, why,
                    "checkpoint does not restore; taking it again"
                ),
            }
        }
        Err(ServiceError::Internal(format!(
            "no restorable checkpoint in {CHECKPOINT_ATTEMPTS} attempts"
        )))
    }

    /// Flushes the guest, quiesces its agent, then checkpoints it into
    /// `dir`. A stdio-channel connection is kept (its writer held, so the
    /// agent's reader is at a frame boundary in the image) and returned;
    /// any other is closed first: a relay process running at the checkpoint
    /// would hold host pipes and the image could not be restored.
    async fn checkpoint_quiesced(
        self: &Arc<Self>,
        current: &sbx_store::SandboxRecord,
        dir: &Path,
    ) -> (Result<()>, Option<AgentConn>) {
        let sandbox = current.id;
        // Every call here has the agent client's deadline, and no lock is held.
        let conn = match self.cached_agent(sandbox) {
            Some(conn) => conn,
            None => match self.runtime.connect(sandbox).await {
                Ok(conn) => conn,
                Err(e) => {
                    return (
                        Err(ServiceError::Unavailable(format!(
                            "sandbox agent unreachable: {e}"
                        ))),
                        None,
                    )
                }
            },
        };
        // Crash consistency: flush what the guest holds in its page cache first.
        let synced = conn.call(Request::Sync).await.map_err(agent_error);
        // `quiesce` closes the in-sandbox proxy listeners (fewer live sockets
        // in the image; the next `net_serve` reopens them).
        if conn.kept_through_checkpoint() {
            match conn
                .quiesce_holding_writer(
                    Request::Quiesce,
                    sbx_agent_proto::client::SHORT_CALL_TIMEOUT,
                )
                .await
            {
                Ok((_, hold)) => {
                    let taken = match synced {
                        Ok(_) => self.checkpoint_once(current, dir).await,
                        Err(e) => Err(e),
                    };
                    drop(hold);
                    return (taken, Some(conn));
                }
                // The failure closed the connection: checkpoint as for a relay.
                Err(e) => tracing::debug!(%sandbox, error = %e, "agent did not quiesce"),
            }
        } else if let Err(e) = conn.call(Request::Quiesce).await {
            // An agent too old to know `quiesce` answers with an error, which is fine to ignore.
            tracing::debug!(%sandbox, error = %e, "agent did not quiesce");
        }
        let t = std::time::Instant::now();
        conn.shutdown().await;
        self.forget_agent(sandbox);
        if let Err(e) = synced {
            return (Err(e), None);
        }
        let closed = t.elapsed();
        let taken = self.checkpoint_once(current, dir).await;
        tracing::debug!(%sandbox, relay_close_ms = closed.as_millis() as u64, checkpoint_ms = (t.elapsed() - closed).as_millis() as u64, "checkpoint");
        (taken, None)
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

    /// Restores a fresh checkpoint into a throwaway sandbox (without the
    /// disk a real sandbox gets) and checks that its agent answers. gVisor 20240729 now and then writes a checkpoint
    /// whose agent crashes as soon as it is restored (SIGSEGV in tokio's I/O
    /// driver; every restore of that checkpoint fails the same way, while
    /// most checkpoints of the same sandbox are fine): such a snapshot would
    /// be useless, so it is taken again instead.
    async fn verify_checkpoint(&self, probe: SandboxSpec, image: PathBuf) -> Result<(), String> {
        let id = probe.id;
        let result = async {
            self.runtime
                .restore_probe(probe, image)
                .await
                .map_err(|e| format!("restore: {e}"))?;
            let restored = std::time::Instant::now();
            let deadline = std::time::Instant::now() + VERIFY_TIMEOUT;
            loop {
                // Connect first: asking runsc whether the probe lives costs
                // a host command, worth paying only when the agent did not answer.
                let failure = match self.runtime.connect(id).await {
                    Ok(conn) => {
                        tracing::debug!(probe = %id, connect_ms = restored.elapsed().as_millis() as u64, "checkpoint probe answered");
                        // Not waited for: the probe is destroyed anyway.
                        tokio::spawn(async move { conn.shutdown().await });
                        return Ok(());
                    }
                    Err(e) => e,
                };
                if !matches!(self.runtime.is_alive(id).await, Ok(true)) {
                    return Err(format!("the restored sandbox stopped: {failure}"));
                }
                if std::time::Instant::now() >= deadline {
                    return Err(format!("agent did not answer: {failure}"));
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
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
}
