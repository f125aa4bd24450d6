//! Metadata store of sbxd.
//!
//! [`Store`] is the seam: the embedded SQLite implementation ([`SqliteStore`]) serves a
//! single node; a PostgreSQL implementation fills the same trait for several nodes.

mod records;
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
    NameHeld(SandboxRecord),
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
}
