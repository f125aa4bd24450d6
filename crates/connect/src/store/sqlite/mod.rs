//! Embedded SQLite backend: one file (WAL) in the Connect data dir.

mod commit;
mod connections;
mod dump;
mod packages;
mod records;
mod runs;
mod webhooks;

use super::StoreError;
use chrono::{DateTime, Utc};
use rusqlite::{Connection, Row};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

/// Schema versions, applied in order at open; `PRAGMA user_version` records the last.
/// Forward-only: a shipped file never changes, a change is a new file.
const MIGRATIONS: &[&str] = &[
    include_str!("../../../migrations/sqlite/0001_initial.sql"),
    include_str!("../../../migrations/sqlite/0002_timestamps.sql"),
    include_str!("../../../migrations/sqlite/0003_nodes.sql"),
    include_str!("../../../migrations/sqlite/0004_webhooks.sql"),
];

/// The Connect store on SQLite.
pub struct SqliteStore {
    path: PathBuf,
    conn: Mutex<Connection>,
    /// The node whose runs and builds this handle inserts (see [`super::open`]).
    node: Option<String>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish()
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

impl SqliteStore {
    /// Opens (creating if needed) the database file and applies migrations.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let mut conn = open_connection(path)?;
        let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        let found = version.max(0) as usize;
        if found > MIGRATIONS.len() {
            return Err(StoreError::SchemaTooNew {
                found: found as u32,
                supported: MIGRATIONS.len() as u32,
            });
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(found) {
            let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            tx.execute_batch(sql)?;
            tx.pragma_update(None, "user_version", i + 1)?;
            tx.commit()?;
        }
        Ok(SqliteStore {
            path: path.to_path_buf(),
            conn: Mutex::new(conn),
            node: None,
        })
    }

    /// The same store, inserting runs and builds as `node`'s.
    pub fn for_node(mut self, node: Option<String>) -> Self {
        self.node = node;
        self
    }

    /// The schema version the file is at.
    pub fn schema_version(&self) -> Result<u32, StoreError> {
        let v: i64 = self
            .lock()
            .pragma_query_value(None, "user_version", |r| r.get(0))?;
        Ok(v.max(0) as u32)
    }

    /// A separate connection for long writes (a sync commit), so reads are not blocked behind it.
    fn open_writer(&self) -> Result<Connection, StoreError> {
        open_connection(&self.path)
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave a half-written row (SQLite rolls the
        // open transaction back), so a poisoned lock is still usable.
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl super::Blobs for SqliteStore {
    fn put_blob(&self, key: &str, data: &[u8]) -> Result<(), StoreError> {
        self.lock().execute(
            "INSERT INTO blobs (key, data, created_at) VALUES (?1, ?2, ?3) ON CONFLICT (key) DO NOTHING",
            rusqlite::params![key, data, now_ms()],
        )?;
        Ok(())
    }

    fn get_blob(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        use rusqlite::OptionalExtension;
        Ok(self
            .lock()
            .query_row("SELECT data FROM blobs WHERE key = ?1", [key], |r| r.get(0))
            .optional()?)
    }
}

impl super::Store for SqliteStore {
    fn export(&self) -> Result<super::Dump, StoreError> {
        dump::export(&self.lock())
    }

    fn import(&self, d: &super::Dump) -> Result<(), StoreError> {
        dump::import(&mut self.lock(), d)
    }
}

/// Now, as stored: milliseconds since the epoch.
fn now_ms() -> i64 {
    Utc::now().timestamp_millis()
}

fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

fn bad_time(ms: i64) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(
        0,
        rusqlite::types::Type::Integer,
        format!("time {ms} ms is out of range").into(),
    )
}

/// Column `i`, a time in ms, as the model's text.
fn time(row: &Row<'_>, i: usize) -> rusqlite::Result<String> {
    let v: i64 = row.get(i)?;
    super::ms_text(v).map_err(|_| bad_time(v))
}

/// Column `i`, an optional time in ms, as the model's text.
fn opt_time(row: &Row<'_>, i: usize) -> rusqlite::Result<Option<String>> {
    let v: Option<i64> = row.get(i)?;
    v.map(|v| super::ms_text(v).map_err(|_| bad_time(v)))
        .transpose()
}
