//! The Connect database: its own SQLite file (WAL); every query is scoped by workspace.

mod connections;
mod packages;
mod records;
mod runs;

pub use connections::{NewConnection, OauthPending};
pub use packages::{NewPackageVersion, VersionDeletion};
pub use runs::NewRun;

use chrono::{DateTime, Utc};
use rusqlite::Connection;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

/// Errors of the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The disk holding the database is full (SQLITE_FULL); the write was rolled back whole.
    #[error("connect database: the disk is full: {0}")]
    Full(rusqlite::Error),
    /// SQLite failed.
    #[error("connect database: {0}")]
    Sqlite(rusqlite::Error),
    /// A stored value does not parse.
    #[error("connect database holds a bad value: {0}")]
    Corrupt(String),
    /// The row does not exist (in this workspace).
    #[error("{0} not found")]
    NotFound(&'static str),
    /// The row exists already.
    #[error("{0} exists already")]
    Exists(&'static str),
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        // A full disk heals once space is freed: the service answers it apart.
        if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull) {
            StoreError::Full(e)
        } else {
            StoreError::Sqlite(e)
        }
    }
}

impl From<crate::model::ModelError> for StoreError {
    fn from(e: crate::model::ModelError) -> Self {
        StoreError::Corrupt(e.to_string())
    }
}

impl From<serde_json::Error> for StoreError {
    fn from(e: serde_json::Error) -> Self {
        StoreError::Corrupt(e.to_string())
    }
}

const MIGRATIONS: &[&str] = &[r#"
CREATE TABLE packages (
    workspace TEXT NOT NULL,
    name TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (workspace, name)
);
CREATE TABLE package_versions (
    workspace TEXT NOT NULL,
    name TEXT NOT NULL,
    version TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    size INTEGER NOT NULL,
    entry TEXT NOT NULL,
    created_at TEXT NOT NULL,
    build_id TEXT,
    definition TEXT,
    PRIMARY KEY (workspace, name, version)
);
CREATE TABLE builds (
    id TEXT PRIMARY KEY,
    workspace TEXT NOT NULL,
    name TEXT NOT NULL,
    version TEXT NOT NULL,
    status TEXT NOT NULL,
    log TEXT NOT NULL DEFAULT '',
    artifact_dir TEXT,
    failure TEXT,
    created_at TEXT NOT NULL,
    finished_at TEXT
);
CREATE INDEX builds_by_version ON builds (workspace, name, version, created_at);
CREATE TABLE connections (
    id TEXT PRIMARY KEY,
    workspace TEXT NOT NULL,
    name TEXT NOT NULL,
    package TEXT NOT NULL,
    version TEXT NOT NULL,
    config TEXT NOT NULL,
    origin TEXT NOT NULL,
    auth_kind TEXT NOT NULL,
    credentials BLOB NOT NULL,
    status TEXT NOT NULL,
    schedule_secs INTEGER,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE INDEX connections_by_workspace ON connections (workspace, created_at);
CREATE TABLE oauth_pending (
    state TEXT PRIMARY KEY,
    workspace TEXT NOT NULL,
    connection_id TEXT NOT NULL,
    verifier TEXT NOT NULL,
    redirect_uri TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE runs (
    id TEXT PRIMARY KEY,
    workspace TEXT NOT NULL,
    connection_id TEXT,
    package TEXT NOT NULL,
    version TEXT NOT NULL,
    kind TEXT NOT NULL,
    sync TEXT,
    status TEXT NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL,
    started_at TEXT,
    finished_at TEXT,
    records_committed INTEGER NOT NULL DEFAULT 0,
    failure_category TEXT,
    failure_kind TEXT,
    result TEXT
);
CREATE INDEX runs_by_connection ON runs (workspace, connection_id, created_at);
CREATE INDEX runs_by_status ON runs (status);
CREATE TABLE logs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    workspace TEXT NOT NULL,
    run_id TEXT NOT NULL,
    connection_id TEXT,
    ts TEXT NOT NULL,
    level TEXT NOT NULL,
    message TEXT NOT NULL
);
CREATE INDEX logs_by_run ON logs (workspace, run_id, id);
CREATE INDEX logs_by_connection ON logs (workspace, connection_id, id);
CREATE INDEX logs_by_ts ON logs (ts);
CREATE TABLE sync_state (
    id INTEGER PRIMARY KEY,
    workspace TEXT NOT NULL,
    connection_id TEXT NOT NULL,
    sync TEXT NOT NULL,
    checkpoint TEXT,
    updated_at TEXT NOT NULL,
    UNIQUE (workspace, connection_id, sync)
);
CREATE TABLE records (
    seq INTEGER PRIMARY KEY,
    dataset INTEGER NOT NULL,
    key TEXT,
    data TEXT NOT NULL
);
CREATE INDEX records_by_dataset ON records (dataset, seq);
CREATE UNIQUE INDEX records_by_key ON records (dataset, key) WHERE key IS NOT NULL;
"#];

/// Formats a time the way the store keeps it (sortable as text).
pub fn ts(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

/// Parses a stored time.
pub fn parse_ts(s: &str) -> Result<DateTime<Utc>, StoreError> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| StoreError::Corrupt(format!("time {s:?}: {e}")))
}

/// The Connect store.
pub struct Store {
    path: PathBuf,
    conn: Mutex<Connection>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

fn open_connection(path: &Path) -> Result<Connection, StoreError> {
    let conn = Connection::open(path)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    // WAL + NORMAL is durable against process crashes; a power loss may drop the last commit,
    // which a sync then redoes from the older checkpoint.
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.busy_timeout(std::time::Duration::from_secs(30))?;
    Ok(conn)
}

impl Store {
    /// Opens (creating if needed) the database file and applies migrations.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let mut conn = open_connection(path)?;
        let version: usize = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        if version > MIGRATIONS.len() {
            return Err(StoreError::Corrupt(format!(
                "connect schema version {version} is newer than this sbxd ({})",
                MIGRATIONS.len()
            )));
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(version) {
            let tx = conn.transaction()?;
            tx.execute_batch(sql)?;
            tx.pragma_update(None, "user_version", i + 1)?;
            tx.commit()?;
        }
        Ok(Store {
            path: path.to_path_buf(),
            conn: Mutex::new(conn),
        })
    }

    /// A separate connection for long writes (a sync commit), so reads are not blocked behind it.
    pub fn open_writer(&self) -> Result<Connection, StoreError> {
        open_connection(&self.path)
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave a half-written row (SQLite rolls the
        // open transaction back), so a poisoned lock is still usable.
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Deletes log lines recorded before `cutoff`.
    pub fn delete_logs_before(&self, cutoff: DateTime<Utc>) -> Result<usize, StoreError> {
        let conn = self.lock();
        Ok(conn.execute("DELETE FROM logs WHERE ts < ?1", [ts(cutoff)])?)
    }
}

pub(crate) fn opt_json(text: Option<String>) -> Result<Option<serde_json::Value>, StoreError> {
    match text {
        None => Ok(None),
        Some(t) => Ok(Some(serde_json::from_str(&t)?)),
    }
}
