//! Copies one store into another: `sbxd migrate-store` moves a single node's embedded
//! SQLite into PostgreSQL when it outgrows one machine.
//!
//! Rows keep their ids, times and states; the target assigns fresh generations (a
//! generation only orders writes within one database). A row the target holds already
//! is left as it is, so a copy interrupted half-way is finished by running it again.
//! Idempotency claims are not copied: they live for minutes, and a repeat of a request
//! that ran before the move answers `operation_ambiguous` rather than run twice.
//! Node rows are not copied either: every sbxd registers its node at start.

use crate::{CreateOutcome, SnapshotCreateOutcome, SnapshotStatus, Store, StoreError};
use sbx_api_types::SandboxStatus;

/// Every sandbox status, so that a copy misses none.
const SANDBOX_STATUSES: [SandboxStatus; 9] = [
    SandboxStatus::Pending,
    SandboxStatus::Starting,
    SandboxStatus::Pausing,
    SandboxStatus::Running,
    SandboxStatus::Paused,
    SandboxStatus::Resuming,
    SandboxStatus::Terminating,
    SandboxStatus::Terminated,
    SandboxStatus::Failed,
];

/// Every snapshot status.
const SNAPSHOT_STATUSES: [SnapshotStatus; 6] = [
    SnapshotStatus::Creating,
    SnapshotStatus::Ready,
    SnapshotStatus::Deleting,
    SnapshotStatus::Deleted,
    SnapshotStatus::Failed,
    SnapshotStatus::Lost,
];

/// Rows of one kind: how many were copied, how many the target held already.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Copied {
    /// Written to the target.
    pub copied: usize,
    /// Present in the target already (an earlier, interrupted run).
    pub present: usize,
}

impl Copied {
    fn count(&mut self, written: bool) {
        if written {
            self.copied += 1;
        } else {
            self.present += 1;
        }
    }
}

impl std::fmt::Display for Copied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} copied, {} already there", self.copied, self.present)
    }
}

/// What [`copy_store`] did, per kind of row.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CopyReport {
    /// Signing keys.
    pub api_keys: Copied,
    /// Sandboxes, of every status.
    pub sandboxes: Copied,
    /// Snapshots, of every status.
    pub snapshots: Copied,
    /// Workspace secrets (their ciphertexts, as stored).
    pub secrets: Copied,
    /// E2B records (template, metadata, end time, access tokens of E2B sandboxes).
    pub e2b_records: Copied,
    /// Preview-URL access of `/v1` sandboxes.
    pub previews: Copied,
    /// Volumes (their rows; the data stays on its node).
    pub volumes: Copied,
    /// Volume mounts of sandboxes.
    pub volume_mounts: Copied,
    /// Image names (their rows; the root filesystems stay on their node).
    pub images: Copied,
    /// Templates (their rows; their snapshots are copied with the snapshots).
    pub templates: Copied,
}

/// Copies every signing key, sandbox, snapshot, secret, E2B record, preview row, volume,
/// volume mount, image name and template of `from` into `to`.
pub fn copy_store(from: &dyn Store, to: &dyn Store) -> Result<CopyReport, StoreError> {
    let mut report = CopyReport::default();
    for key in from.list_api_keys()? {
        let present = to.find_api_key(&key.digest)?.is_some();
        if !present {
            to.create_api_key(&key)?;
        }
        report.api_keys.count(!present);
    }
    // Oldest first: of two rows with one name, the terminated one goes in before the
    // active one that took the name over.
    let mut sandboxes = from.sandboxes_in_status(None, &SANDBOX_STATUSES)?;
    sandboxes.sort_by_key(|r| (r.created_at, r.id));
    for sandbox in sandboxes {
        if to.get_sandbox(sandbox.id)?.is_some() {
            report.sandboxes.count(false);
            continue;
        }
        match to.create_sandbox(&sandbox)? {
            CreateOutcome::Created => report.sandboxes.count(true),
            // `create_sandbox` gives no quota; a store that applied one anyway is refused.
            CreateOutcome::QuotaReached(_) => {
                return Err(StoreError::Conflict(
                    "the target refused a sandbox over a workspace quota".into(),
                ))
            }
            CreateOutcome::NameHeld(holder) => {
                return Err(StoreError::Conflict(
                    format!(
                        "the target already has an active sandbox {} named {:?} in workspace {:?}; \
                         migrate into an empty database",
                        holder.id, sandbox.name, sandbox.workspace
                    )
                    .into(),
                ))
            }
        }
    }
    let mut snapshots = from.snapshots_in_status(&SNAPSHOT_STATUSES)?;
    snapshots.sort_by_key(|r| (r.created_at, r.id));
    for snapshot in snapshots {
        if to.get_snapshot(snapshot.id)?.is_some() {
            report.snapshots.count(false);
            continue;
        }
        // The name and limit checks are the target's own, as of the snapshot's creation:
        // the source held the same rows, so they pass unless the target is not empty.
        match to.create_snapshot(&snapshot, snapshot.created_at, 0)? {
            SnapshotCreateOutcome::Created => {}
            SnapshotCreateOutcome::NameHeld(holder) => {
                return Err(StoreError::Conflict(
                    format!(
                        "the target already has a live snapshot {} named {:?}; migrate into an empty database",
                        holder.id, snapshot.name
                    )
                    .into(),
                ))
            }
            SnapshotCreateOutcome::LimitReached(n) => {
                return Err(StoreError::Conflict(
                    format!("the target refused a snapshot over its limit of {n}").into(),
                ))
            }
        }
        // create_snapshot writes the row as captured first; its later fields
        // (status, size, expiry, error) are an update, as they were in the source.
        let mut written = to.get_snapshot(snapshot.id)?.ok_or(StoreError::NotFound)?;
        let generation = written.generation;
        written = crate::SnapshotRecord {
            generation,
            ..snapshot
        };
        to.update_snapshot(&mut written)?;
        report.snapshots.count(true);
    }
    for secret in from.list_all_secrets()? {
        let present = to.get_secret(&secret.workspace, &secret.name)?.is_some();
        if !present {
            to.put_secret(&secret)?;
        }
        report.secrets.count(!present);
    }
    // After the sandboxes: an E2B record belongs to its sandbox's row.
    for record in from.list_e2b_records(None, &Default::default())? {
        report.e2b_records.count(to.create_e2b_record(&record)?);
    }
    for record in from.list_previews()? {
        let present = to.get_preview(record.sandbox_id)?.is_some();
        if !present {
            to.put_preview(&record)?;
        }
        report.previews.count(!present);
    }
    for volume in from.list_volumes(None)? {
        let present = to.get_volume(volume.id)?.is_some();
        if !present && !to.insert_volume(&volume)? {
            return Err(StoreError::Conflict(
                format!(
                    "the target already has a volume named {:?} in workspace {:?}; \
                     migrate into an empty database",
                    volume.name, volume.workspace
                )
                .into(),
            ));
        }
        report.volumes.count(!present);
        let have = to.volume_mounts(volume.id)?;
        for mount in from.volume_mounts(volume.id)? {
            let present = have.contains(&mount);
            if !present {
                to.put_volume_mounts(std::slice::from_ref(&mount))?;
            }
            report.volume_mounts.count(!present);
        }
    }
    for image in from.list_images(None)? {
        let have = to.get_image(&image.workspace, &image.name, &image.tag)?;
        let present = have.as_ref() == Some(&image);
        if !present {
            if let Some(other) = have {
                return Err(StoreError::Conflict(
                    format!(
                        "the target already has image {}:{} in workspace {:?} (digest {}); \
                         migrate into an empty database",
                        other.name, other.tag, other.workspace, other.digest
                    )
                    .into(),
                ));
            }
            to.put_image(&image)?;
        }
        report.images.count(!present);
    }
    for template in from.list_templates(None)? {
        let have = to.get_template(&template.workspace, &template.name)?;
        let present = have.as_ref() == Some(&template);
        if !present && (have.is_some() || !to.create_template(&template)?) {
            return Err(StoreError::Conflict(
                format!(
                    "the target already has template {:?} in workspace {:?}; \
                         migrate into an empty database",
                    template.name, template.workspace
                )
                .into(),
            ));
        }
        report.templates.count(!present);
    }
    Ok(report)
}
