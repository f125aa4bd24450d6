//! The Connect database, behind one trait with two backends: embedded SQLite (its own file
//! in the Connect data dir, WAL) and PostgreSQL (the main store's database, tables prefixed
//! `connect_`). Every query is scoped by workspace; both backends apply their forward-only
//! migrations at open and refuse a schema newer than this build.

mod dump;
mod postgres;
mod sqlite;
mod types;
mod webhooks;

#[cfg(test)]
mod tests;

pub use dump::{copy_store, Dump};
pub use postgres::PostgresStore;
pub use sqlite::SqliteStore;
pub use types::{
    CredentialBlob, NewConnection, NewPackageVersion, NewRun, OauthPending, VersionChange,
    VersionChangeOutcome, VersionDeletion,
};
pub use webhooks::{
    DeliveryInsert, DeliveryJob, NewDelivery, WebhookSettings, WebhookTarget, Webhooks,
};

use crate::commit::{CommitError, CommitStats, CommitTarget};
use crate::model::{
    Build, BuildStatus, Connection, ConnectionStatus, Definition, FailureCategory, LogLevel,
    LogLine, Package, PackageVersion, RecordRow, Run,
};
use crate::spool::Spool;
use chrono::{DateTime, Utc};
use std::path::PathBuf;
use std::sync::Arc;

/// The boxed cause of a [`StoreError`]: whatever the backend reported.
pub type Source = sbx_store::Source;

/// Errors of the store. No variant names a backend: each backend's errors become these
/// (as in `sbx_store::StoreError`), keeping the original as the source.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The disk holding the database is full; the write was rolled back whole.
    #[error("connect database: the disk is full: {0}")]
    Full(Source),
    /// The database could not be reached, lost the connection or is busy: nothing is
    /// known to have changed and the call may be repeated.
    #[error("connect database is unavailable: {0}")]
    Unavailable(Source),
    /// A stored value does not parse, or the database reports damage.
    #[error("connect database holds a bad value: {0}")]
    Corrupt(Source),
    /// The row does not exist (in this workspace).
    #[error("{0} not found")]
    NotFound(&'static str),
    /// The row exists already.
    #[error("{0} exists already")]
    Exists(&'static str),
    /// The row changed since the caller read it, so the write it was based on was not made
    /// (a sync run of a connection that moved to another package version meanwhile).
    #[error("{0}")]
    Changed(String),
    /// Another writer got there first (a unique row the call did not expect).
    #[error("connect database: conflicting change: {0}")]
    Conflict(Source),
    /// The Connect schema was written by a newer sbxd; this one refuses to touch it.
    #[error("the Connect database schema version {found} is newer than this sbxd ({supported}); upgrade sbxd")]
    SchemaTooNew {
        /// Schema version recorded in the database.
        found: u32,
        /// Newest schema version this build knows.
        supported: u32,
    },
    /// The database refused or failed an operation for another reason.
    #[error("connect database: {0}")]
    Database(Source),
}

impl StoreError {
    /// A stored value that does not decode.
    pub(crate) fn corrupt(what: impl std::fmt::Display) -> Self {
        StoreError::Corrupt(what.to_string().into())
    }
}

impl From<sbx_store::StoreError> for StoreError {
    fn from(e: sbx_store::StoreError) -> Self {
        use sbx_store::StoreError as S;
        match e {
            S::Full(s) => StoreError::Full(s),
            S::Unavailable(s) => StoreError::Unavailable(s),
            S::Conflict(s) => StoreError::Conflict(s),
            S::Corrupt(s) => StoreError::Corrupt(s),
            S::SchemaTooNew { found, supported } => StoreError::SchemaTooNew { found, supported },
            S::Database(s) => StoreError::Database(s),
            S::NotFound => StoreError::NotFound("row"),
            // Only node heartbeats are fenced, and Connect stores make none.
            fenced @ S::Fenced { .. } => StoreError::Database(Box::new(fenced)),
        }
    }
}

// Both backends' errors are classified the way the main store does it.
impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        sbx_store::StoreError::from(e).into()
    }
}

impl From<::postgres::Error> for StoreError {
    fn from(e: ::postgres::Error) -> Self {
        sbx_store::StoreError::from(e).into()
    }
}

impl From<crate::model::ModelError> for StoreError {
    fn from(e: crate::model::ModelError) -> Self {
        StoreError::Corrupt(Box::new(e))
    }
}

impl From<serde_json::Error> for StoreError {
    fn from(e: serde_json::Error) -> Self {
        StoreError::Corrupt(Box::new(e))
    }
}

/// Where the Connect store lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A SQLite file (created if missing).
    Sqlite(PathBuf),
    /// A PostgreSQL database (`postgres://…` or `key=value` form).
    Postgres(String),
}

impl Location {
    /// Where a node keeps the store: in the PostgreSQL of `database_url` if it has one,
    /// else in `connect.db` under its Connect data dir (`<sbxd data dir>/connect`).
    pub fn of_node(connect_dir: &std::path::Path, database_url: Option<&str>) -> Location {
        match database_url.map(str::trim).filter(|u| !u.is_empty()) {
            Some(url) => Location::Postgres(url.to_string()),
            None => Location::Sqlite(connect_dir.join("connect.db")),
        }
    }
}

/// Opens the store at `location`, applying migrations.
pub fn open(location: &Location) -> Result<Arc<dyn Store>, StoreError> {
    open_for_node(location, None)
}

/// Opens the store at `location` for one node of a cluster: the runs and builds it inserts
/// are `node`'s, and its recovery at start fails only those (and any of no recorded node).
pub fn open_for_node(
    location: &Location,
    node: Option<&str>,
) -> Result<Arc<dyn Store>, StoreError> {
    let node = node.map(str::to_string);
    Ok(match location {
        Location::Sqlite(path) => Arc::new(SqliteStore::open(path)?.for_node(node)),
        Location::Postgres(url) => Arc::new(PostgresStore::open(url)?.for_node(node)),
    })
}

/// Why a sync run was not inserted: its connection moved to `now` since the caller read it.
pub(crate) fn moved_since_read(now: &str) -> StoreError {
    StoreError::Changed(format!(
        "the connection moved to package version {now} while the run was starting; start it again"
    ))
}

/// `Changed` when an update of a run's state found no queued or running run: another node
/// ended it meanwhile (it declared this one lost), and this node must not go on with it.
pub(crate) fn ended_meanwhile(rows: u64, run: &str) -> Result<(), StoreError> {
    if rows == 0 {
        return Err(StoreError::Changed(format!(
            "run {run} is no longer queued or running (its node was declared lost?)"
        )));
    }
    Ok(())
}

/// Whether two lists of sync names hold the same names (the backends sort text differently).
pub(crate) fn same_syncs(a: &[String], b: &[String]) -> bool {
    let (mut a, mut b) = (a.to_vec(), b.to_vec());
    a.sort_unstable();
    a.dedup();
    b.sort_unstable();
    b.dedup();
    a == b
}

/// Formats a time the way the model shows it (RFC 3339, milliseconds, `Z`).
pub fn ts(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

/// The model's text of a time stored as milliseconds since the epoch.
pub(crate) fn ms_text(ms: i64) -> Result<String, StoreError> {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .map(ts)
        .ok_or_else(|| StoreError::corrupt(format!("time {ms} ms is out of range")))
}

pub(crate) fn opt_json(text: Option<String>) -> Result<Option<serde_json::Value>, StoreError> {
    match text {
        None => Ok(None),
        Some(t) => Ok(Some(serde_json::from_str(&t)?)),
    }
}

/// The Connect store: packages, connections, runs, records, and what moves them between stores.
pub trait Store: Packages + Connections + Runs + Records + Blobs + Webhooks + Send + Sync {
    /// Every row, for [`copy_store`].
    fn export(&self) -> Result<Dump, StoreError>;
    /// Writes every row of `dump` in one transaction; `Conflict` (nothing written) unless
    /// this store holds no Connect row yet.
    fn import(&self, dump: &Dump) -> Result<(), StoreError>;
}

/// Packages, versions and builds.
pub trait Packages {
    /// Inserts a version (and its package row). Fails with `Exists` when the version exists.
    fn insert_package_version(
        &self,
        workspace: &str,
        v: &NewPackageVersion,
    ) -> Result<PackageVersion, StoreError>;
    /// One version.
    fn get_package_version(
        &self,
        workspace: &str,
        name: &str,
        version: &str,
    ) -> Result<PackageVersion, StoreError>;
    /// All packages with their versions.
    fn list_packages(&self, workspace: &str) -> Result<Vec<Package>, StoreError>;
    /// All versions of a package, oldest first.
    fn list_package_versions(
        &self,
        workspace: &str,
        name: &str,
    ) -> Result<Vec<PackageVersion>, StoreError>;
    /// Deletes a version with its builds, unless a connection uses it or a build of it is going
    /// (checked in the same transaction, so a connection created meanwhile cannot lose it).
    fn delete_package_version(
        &self,
        workspace: &str,
        name: &str,
        version: &str,
    ) -> Result<VersionDeletion, StoreError>;
    /// Records a successful build and its definition on the version; a version's definition
    /// is immutable (`Exists` when a rebuild describes another one).
    fn set_version_build(
        &self,
        workspace: &str,
        name: &str,
        version: &str,
        build_id: &str,
        definition: &Definition,
    ) -> Result<(), StoreError>;
    /// Creates a queued build.
    fn insert_build(&self, workspace: &str, name: &str, version: &str)
        -> Result<Build, StoreError>;
    /// Updates a build's status, log, artifact and failure.
    fn update_build(
        &self,
        workspace: &str,
        id: &str,
        status: BuildStatus,
        log: &str,
        artifact_dir: Option<&str>,
        failure: Option<&str>,
    ) -> Result<(), StoreError>;
    /// One build.
    fn get_build(&self, workspace: &str, id: &str) -> Result<Build, StoreError>;
    /// Builds of a package version, newest first.
    fn list_builds(
        &self,
        workspace: &str,
        name: &str,
        version: &str,
    ) -> Result<Vec<Build>, StoreError>;
    /// Marks builds left queued or running by a previous daemon of this node (or of no
    /// recorded node) as failed; returns how many.
    fn fail_unfinished_builds(&self) -> Result<usize, StoreError>;
}

/// Connections, their sealed credentials and pending OAuth sign-ins.
pub trait Connections {
    /// Inserts a connection with the id and sealed credentials the caller made.
    fn insert_connection(
        &self,
        workspace: &str,
        id: &str,
        c: &NewConnection,
        credentials: &[u8],
    ) -> Result<Connection, StoreError>;
    /// One connection.
    fn get_connection(&self, workspace: &str, id: &str) -> Result<Connection, StoreError>;
    /// A connection's sealed credentials.
    fn get_connection_credentials(&self, workspace: &str, id: &str) -> Result<Vec<u8>, StoreError>;
    /// All connections of a workspace, oldest first.
    fn list_connections(&self, workspace: &str) -> Result<Vec<Connection>, StoreError>;
    /// Active connections with a schedule, across workspaces: (workspace, connection).
    fn list_scheduled_connections(&self) -> Result<Vec<(String, Connection)>, StoreError>;
    /// Replaces the editable fields of a connection.
    fn update_connection(
        &self,
        workspace: &str,
        id: &str,
        name: &str,
        config: &serde_json::Value,
        status: ConnectionStatus,
        schedule_interval_seconds: Option<u64>,
    ) -> Result<Connection, StoreError>;
    /// Moves a connection to another version of its package with the config validated for it;
    /// committed records and checkpoints stay (they are kept per connection and sync name).
    /// In one transaction with the connection row locked, and only if the connection is still
    /// at `change.from`, no sync run of it is queued or running, and the syncs that committed
    /// are still `change.committed_syncs`: a sync claimed after the caller's check cannot
    /// commit under the old definition once the new one is in force.
    fn set_connection_version(
        &self,
        workspace: &str,
        id: &str,
        change: &VersionChange,
    ) -> Result<VersionChangeOutcome, StoreError>;
    /// Names of the connection's syncs that committed at least once (records or checkpoint).
    fn committed_syncs(
        &self,
        workspace: &str,
        connection_id: &str,
    ) -> Result<Vec<String>, StoreError>;
    /// Sets a connection's status.
    fn set_connection_status(
        &self,
        workspace: &str,
        id: &str,
        status: ConnectionStatus,
    ) -> Result<(), StoreError>;
    /// Replaces a connection's sealed credentials, optionally setting the status too.
    fn set_connection_credentials(
        &self,
        workspace: &str,
        id: &str,
        credentials: &[u8],
        status: Option<ConnectionStatus>,
    ) -> Result<(), StoreError>;
    /// Every connection's sealed credentials across workspaces (key rotation), by id.
    fn credential_blobs(&self) -> Result<Vec<CredentialBlob>, StoreError>;
    /// Writes `new` as a connection's credentials only if the stored blob is still `old`
    /// (compare-and-set: a token refresh meanwhile wins); whether it wrote.
    fn replace_credentials(
        &self,
        workspace: &str,
        id: &str,
        old: &[u8],
        new: &[u8],
    ) -> Result<bool, StoreError>;
    /// Deletes a connection with its committed data, checkpoints, pending sign-ins, runs and logs.
    fn delete_connection(&self, workspace: &str, id: &str) -> Result<(), StoreError>;
    /// Stores a pending OAuth sign-in under its state.
    fn insert_oauth_pending(
        &self,
        workspace: &str,
        state: &str,
        p: &OauthPending,
    ) -> Result<(), StoreError>;
    /// Takes (reads and deletes) a pending sign-in: a state works once.
    fn take_oauth_pending(&self, workspace: &str, state: &str) -> Result<OauthPending, StoreError>;
}

/// Runs and their log lines.
pub trait Runs {
    /// Inserts a queued run, as this handle's node's. A sync run of a connection is inserted
    /// only while the connection is at `r.version` (with the connection row locked, as
    /// [`Connections::set_connection_version`] locks it); else [`StoreError::Changed`]. A
    /// sync with a queued or running run already (on any node) is [`StoreError::Exists`].
    fn insert_run(&self, workspace: &str, r: &NewRun) -> Result<Run, StoreError>;
    /// Inserts a scheduled sync run as [`Runs::insert_run`] does, but only if no run of the
    /// sync was created in the `interval_secs` before `now` (runs failed because their node
    /// was lost do not count: their interval is still owed). `None`: not due (another node's
    /// scheduler got there first), or a run of it is queued or running.
    fn insert_scheduled_run(
        &self,
        workspace: &str,
        r: &NewRun,
        interval_secs: u64,
        now: DateTime<Utc>,
    ) -> Result<Option<Run>, StoreError>;
    /// One run.
    fn get_run(&self, workspace: &str, id: &str) -> Result<Run, StoreError>;
    /// The JSON result of a finished run (describe and OAuth hooks).
    fn get_run_result(
        &self,
        workspace: &str,
        id: &str,
    ) -> Result<Option<serde_json::Value>, StoreError>;
    /// Runs of a connection, newest first; `before` is the id of the last run of the previous page.
    fn list_runs(
        &self,
        workspace: &str,
        connection_id: &str,
        before: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Run>, StoreError>;
    /// Marks a run running for this attempt.
    fn start_run(&self, workspace: &str, id: &str, attempt: u32) -> Result<(), StoreError>;
    /// Marks a run succeeded.
    fn succeed_run(
        &self,
        workspace: &str,
        id: &str,
        records_committed: u64,
        result: Option<&serde_json::Value>,
    ) -> Result<(), StoreError>;
    /// Marks a run failed with a category and a short kind word.
    fn fail_run(
        &self,
        workspace: &str,
        id: &str,
        category: FailureCategory,
        kind: &str,
    ) -> Result<(), StoreError>;
    /// Marks runs left queued or running by a previous daemon of this node (or of no recorded
    /// node) as failed/platform; returns them.
    fn fail_unfinished_runs(&self) -> Result<Vec<String>, StoreError>;
    /// Marks the queued or running runs and builds of a node declared lost as failed/platform
    /// (`node_lost`); returns the runs' ids and the number of builds.
    fn fail_work_of_lost_node(&self, node: &str) -> Result<(Vec<String>, usize), StoreError>;
    /// Creation time of the latest sync run of a connection's sync (any status but runs
    /// failed because their node was lost).
    fn last_sync_run_at(
        &self,
        workspace: &str,
        connection_id: &str,
        sync: &str,
    ) -> Result<Option<DateTime<Utc>>, StoreError>;
    /// Records one log line.
    fn insert_log(
        &self,
        workspace: &str,
        run_id: &str,
        connection_id: Option<&str>,
        level: LogLevel,
        message: &str,
    ) -> Result<(), StoreError>;
    /// Log lines of a run (when `run_id` is set) or of a connection, oldest first, after the cursor id.
    fn list_logs(
        &self,
        workspace: &str,
        connection_id: Option<&str>,
        run_id: Option<&str>,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<LogLine>, StoreError>;
    /// Deletes log lines recorded before `cutoff`.
    fn delete_logs_before(&self, cutoff: DateTime<Utc>) -> Result<usize, StoreError>;
}

/// Immutable byte blobs by key (package tarballs, built artifacts), for nodes that lack a
/// file another node wrote.
pub trait Blobs {
    /// Stores `data` under `key`; a key stored already keeps its first value.
    fn put_blob(&self, key: &str, data: &[u8]) -> Result<(), StoreError>;
    /// The blob under `key`, if any.
    fn get_blob(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError>;
}

/// Why a failed run failed, when its node was declared lost (`failure_kind`).
pub const NODE_LOST_KIND: &str = "node_lost";

/// Committed sync state: the all-or-nothing commit, checkpoints and the records read API.
pub trait Records {
    /// Commits a finished spool in ONE transaction: append inserts; merge upserts by key (the
    /// newer record gets a new seq); replace deletes the dataset's rows and inserts the new
    /// ones; the last checkpoint is stored with them. The spool is consumed (its file is
    /// deleted) whatever happens.
    fn commit(&self, target: CommitTarget<'_>, spool: Spool) -> Result<CommitStats, CommitError>;
    /// The last committed checkpoint of a connection's sync.
    fn get_checkpoint(
        &self,
        workspace: &str,
        connection_id: &str,
        sync: &str,
    ) -> Result<Option<serde_json::Value>, StoreError>;
    /// Committed records of a connection's sync with `seq > after`, in seq order.
    fn read_records(
        &self,
        workspace: &str,
        connection_id: &str,
        sync: &str,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<RecordRow>, StoreError>;
    /// The committed record of a merge sync whose primary key text is `key` (keys are unique
    /// within a sync; append and replace records have none, so they never match).
    fn find_record(
        &self,
        workspace: &str,
        connection_id: &str,
        sync: &str,
        key: &str,
    ) -> Result<Option<RecordRow>, StoreError>;
    /// Number of committed records of a connection's sync.
    fn count_records(
        &self,
        workspace: &str,
        connection_id: &str,
        sync: &str,
    ) -> Result<u64, StoreError>;
}
