//! All-or-nothing commit of a finished spool: records and the last checkpoint in ONE
//! transaction. Each store backend does it ([`crate::store::Records::commit`]) with the same
//! semantics; this module holds what they share.

use crate::model::SyncMode;
use crate::spool::SpoolError;
use crate::store::StoreError;

/// Errors of a commit; on any of them nothing was written.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    /// The database failed.
    #[error("commit: {0}")]
    Store(#[from] StoreError),
    /// The spool could not be read.
    #[error(transparent)]
    Spool(#[from] SpoolError),
    /// A merge record has no primary key (a package error, kind `bad_batch`).
    #[error("a merge record has no primary key")]
    MissingKey,
    /// The run is no longer running: another node declared this one lost and failed it,
    /// and a new run owns the sync now. Nothing was committed.
    #[error("run {0} is no longer running (its node was declared lost); nothing committed")]
    Fenced(String),
    /// The delivery is no longer pending (another worker committed or failed it); nothing
    /// was committed.
    #[error("delivery {0} is no longer pending; nothing committed")]
    Settled(String),
}

/// Where a spool commits.
#[derive(Debug, Clone, Copy)]
pub struct CommitTarget<'a> {
    /// Workspace.
    pub workspace: &'a str,
    /// Connection id.
    pub connection_id: &'a str,
    /// Sync name.
    pub sync: &'a str,
    /// Commit mode.
    pub mode: SyncMode,
    /// The run committing: the commit happens only while it is still running.
    pub run_id: Option<&'a str>,
    /// The webhook delivery whose records these are: it moves from pending to committed in
    /// the same transaction, and nothing is written unless it was still pending.
    pub delivery: Option<&'a str>,
}

/// What a commit wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitStats {
    /// Records written.
    pub records: u64,
    /// Whether the checkpoint changed.
    pub checkpoint_updated: bool,
}

// Backend errors are store errors first, classified once in the store module.
impl From<rusqlite::Error> for CommitError {
    fn from(e: rusqlite::Error) -> Self {
        CommitError::Store(e.into())
    }
}

impl From<postgres::Error> for CommitError {
    fn from(e: postgres::Error) -> Self {
        CommitError::Store(e.into())
    }
}
