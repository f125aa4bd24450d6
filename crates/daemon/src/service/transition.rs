//! Transitions decided by the store: read a row, change it, write it back with
//! a compare-and-set on its generation. The in-memory per-sandbox lock only
//! saves this process from racing itself; another sbxd on the same database
//! is kept out by the store, and a caller that lost the race decides again
//! from the row as it is now.

use super::{Result, Service, ServiceError};
use sbx_store::{SandboxRecord, SnapshotRecord, SnapshotStatus};
use uuid::Uuid;

/// How often a change that lost a compare-and-set race is tried again on the
/// current row before the caller is told of the conflict.
pub(super) const CAS_ATTEMPTS: usize = 8;

impl Service {
    /// Reads, changes and writes a sandbox under its transition lock.
    pub(super) async fn transition(
        &self,
        id: Uuid,
        change: impl Fn(&mut SandboxRecord),
    ) -> Result<SandboxRecord> {
        self.transition_won(id, change).await.map(|(r, _)| r)
    }

    /// Like `transition`; also says whether this call's write made the change
    /// (false: the closure found nothing to change on the current row).
    pub(super) async fn transition_won(
        &self,
        id: Uuid,
        change: impl Fn(&mut SandboxRecord),
    ) -> Result<(SandboxRecord, bool)> {
        // The lock only saves this process from racing itself; the store's
        // compare-and-set in `change_row` is what keeps other actors apart.
        let lock = self.lock_for(id);
        let _guard = lock.lock().await;
        let record = self
            .store
            .get_sandbox(id)
            .await?
            .ok_or(ServiceError::SandboxNotFound)?;
        self.change_row(record, change).await
    }

    /// Applies `change` to `record` and writes it if the row is still as read;
    /// when another actor changed it first, applies `change` again to the
    /// current row (at most [`CAS_ATTEMPTS`] times). A change that leaves the
    /// row as it is writes nothing. Returns the row as stored and whether this
    /// call's write made the change: only that caller may act on the runtime.
    pub(super) async fn change_row(
        &self,
        mut record: SandboxRecord,
        change: impl Fn(&mut SandboxRecord),
    ) -> Result<(SandboxRecord, bool)> {
        let id = record.id;
        for _ in 0..CAS_ATTEMPTS {
            let before = record.clone();
            change(&mut record);
            if record == before {
                return Ok((record, false));
            }
            match self.store.update_sandbox(&mut record).await {
                Ok(()) => return Ok((record, true)),
                Err(sbx_store::StoreError::Conflict(_)) => {
                    record = self
                        .store
                        .get_sandbox(id)
                        .await?
                        .ok_or(ServiceError::SandboxNotFound)?;
                }
                Err(sbx_store::StoreError::NotFound) => return Err(ServiceError::SandboxNotFound),
                Err(e) => return Err(e.into()),
            }
        }
        Err(ServiceError::Conflict(format!(
            "sandbox {id} kept changing under {CAS_ATTEMPTS} attempts to change it; retry"
        )))
    }

    /// Marks a RUNNING sandbox as changed (its generation bumped, nothing else)
    /// for a snapshot that has just been inserted CREATING: a pause that read
    /// the row before that snapshot existed then fails its compare-and-set and,
    /// reading again, finds the capture under way (see `capture_in_progress`).
    pub(super) async fn claim_for_capture(&self, id: Uuid) -> Result<SandboxRecord> {
        for _ in 0..CAS_ATTEMPTS {
            let mut record = self
                .store
                .get_sandbox(id)
                .await?
                .ok_or(ServiceError::SandboxNotFound)?;
            if record.status != sbx_api_types::SandboxStatus::Running {
                return Err(ServiceError::not_running(record.status));
            }
            match self.store.update_sandbox(&mut record).await {
                Ok(()) => return Ok(record),
                Err(sbx_store::StoreError::Conflict(_)) => continue,
                Err(sbx_store::StoreError::NotFound) => return Err(ServiceError::SandboxNotFound),
                Err(e) => return Err(e.into()),
            }
        }
        Err(ServiceError::Conflict(format!(
            "sandbox {id} kept changing under {CAS_ATTEMPTS} attempts to snapshot it; retry"
        )))
    }

    /// Whether a snapshot of `id` is being captured (by any actor): a pause
    /// must not freeze the guest under a checkpoint.
    pub(super) async fn capture_in_progress(&self, id: Uuid) -> Result<bool> {
        Ok(self
            .store
            .snapshots_in_status(&[SnapshotStatus::Creating])
            .await?
            .iter()
            .any(|s| s.source_sandbox == id))
    }

    /// Applies `change` to `snap` and writes it if the row is still as read,
    /// retrying on the current row when another actor changed it first (see
    /// `change_row` for sandboxes). Returns the stored row and whether this
    /// call's write made the change.
    pub(super) async fn change_snapshot(
        &self,
        mut snap: SnapshotRecord,
        change: impl Fn(&mut SnapshotRecord),
    ) -> Result<(SnapshotRecord, bool)> {
        let id = snap.id;
        for _ in 0..CAS_ATTEMPTS {
            let before = snap.clone();
            change(&mut snap);
            if snap == before {
                return Ok((snap, false));
            }
            match self.store.update_snapshot(&mut snap).await {
                Ok(()) => return Ok((snap, true)),
                Err(sbx_store::StoreError::Conflict(_)) => {
                    snap = self
                        .store
                        .get_snapshot(id)
                        .await?
                        .ok_or(ServiceError::SnapshotNotFound)?;
                }
                Err(sbx_store::StoreError::NotFound) => return Err(ServiceError::SnapshotNotFound),
                Err(e) => return Err(e.into()),
            }
        }
        Err(ServiceError::Conflict(format!(
            "snapshot {id} kept changing under {} attempts to change it; retry",
            CAS_ATTEMPTS
        )))
    }
}
