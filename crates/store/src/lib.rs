//! Metadata store of sbxd.
//!
//! [`Store`] is the seam: the embedded SQLite implementation ([`SqliteStore`]) serves a
//! single node; a PostgreSQL implementation fills the same trait for several nodes.

mod records;
mod snapshots;
mod sqlite;

pub use records::*;
pub use sqlite::SqliteStore;

use uuid::Uuid;

/// Store failures.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database refused or failed an operation.
    #[error("database error: {0}")]
    Database(#[from] rusqlite::Error),
    /// A stored row could not be decoded (corruption or a newer schema).
    #[error("corrupt row: {0}")]
    Corrupt(String),
    /// The row to update does not exist.
    #[error("not found")]
    NotFound,
}

/// Result of [`Store::create_sandbox`].
#[derive(Debug, Clone, PartialEq)]
pub enum CreateOutcome {
    /// The new row was inserted.
    Created,
    /// An active sandbox already holds the name; here it is.
    NameHeld(Box<SandboxRecord>),
}

/// Cursor position for sandbox listing (newest first).
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxCursor {
    /// `created_at` of the last item returned, ms since the epoch.
    pub created_at_ms: i64,
    /// id of the last item returned.
    pub id: Uuid,
}

/// Metadata operations. Each call is atomic.
pub trait Store: Send + Sync {
    /// Inserts a sandbox unless an active one in the same workspace holds the name.
    fn create_sandbox(&self, record: &SandboxRecord) -> Result<CreateOutcome, StoreError>;
    /// One sandbox.
    fn get_sandbox(&self, id: Uuid) -> Result<Option<SandboxRecord>, StoreError>;
    /// Writes every field of an existing sandbox.
    fn update_sandbox(&self, record: &SandboxRecord) -> Result<(), StoreError>;
    /// A page of a workspace's sandboxes, newest first.
    fn list_sandboxes(
        &self,
        workspace: &str,
        limit: u32,
        after: Option<&SandboxCursor>,
    ) -> Result<Vec<SandboxRecord>, StoreError>;
    /// Every sandbox whose status is in `statuses`, across workspaces (reconciliation).
    fn sandboxes_in_status(
        &self,
        statuses: &[sbx_api_types::SandboxStatus],
    ) -> Result<Vec<SandboxRecord>, StoreError>;

    /// Inserts a snapshot unless its name is held by a CREATING/READY unexpired one (returned instead).
    fn create_snapshot(
        &self,
        record: &SnapshotRecord,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Option<SnapshotRecord>, StoreError>;
    /// One snapshot.
    fn get_snapshot(&self, id: Uuid) -> Result<Option<SnapshotRecord>, StoreError>;
    /// Writes status, size, times and error of a snapshot.
    fn update_snapshot(&self, record: &SnapshotRecord) -> Result<(), StoreError>;
    /// A page of snapshots (not DELETED), newest first, optionally by exact name.
    fn list_snapshots(
        &self,
        workspace: &str,
        name: Option<&str>,
        limit: u32,
        after: Option<&SandboxCursor>,
    ) -> Result<Vec<SnapshotRecord>, StoreError>;
    /// Every snapshot in one of `statuses` (janitor, reconciliation).
    fn snapshots_in_status(
        &self,
        statuses: &[SnapshotStatus],
    ) -> Result<Vec<SnapshotRecord>, StoreError>;

    /// Creates or replaces a secret.
    fn put_secret(&self, record: &SecretRecord) -> Result<(), StoreError>;
    /// One secret.
    fn get_secret(&self, workspace: &str, name: &str) -> Result<Option<SecretRecord>, StoreError>;
    /// A workspace's secrets, by name.
    fn list_secrets(&self, workspace: &str) -> Result<Vec<SecretRecord>, StoreError>;
    /// Deletes a secret; false if it did not exist.
    fn delete_secret(&self, workspace: &str, name: &str) -> Result<bool, StoreError>;
}
