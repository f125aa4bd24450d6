//! `sbxd migrate-store --from <data dir> --to postgres://…`: moves a single node's
//! embedded SQLite store into PostgreSQL, so that the node (and later others) can run
//! on it with every sandbox, snapshot, secret, key and Connect row still there.
//!
//! The node's own files (sandbox disks, runsc state, snapshots, console logs, the
//! secret key) stay in the data dir: the node keeps using it with `--database-url`.
//! sbxd must be stopped meanwhile; the data dir lock makes sure it is.

use crate::data_dir::{DataDirError, DataDirLock};
use sbx_store::{CopyReport, PostgresStore, SqliteStore, StoreError};
use std::path::{Path, PathBuf};

/// Errors of the migration.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    /// The data dir has no store to copy.
    #[error("no store to migrate: {0} does not exist")]
    NoSource(PathBuf),
    /// sbxd is running on the data dir, or it cannot be locked.
    #[error(transparent)]
    DataDir(#[from] DataDirError),
    /// Opening the source store failed.
    #[error("opening the SQLite store at {path}: {source}")]
    Source {
        /// The SQLite file.
        path: PathBuf,
        /// Cause.
        source: StoreError,
    },
    /// Opening the target database failed.
    #[error("opening the PostgreSQL store at {url}: {source}")]
    Target {
        /// The URL without its password.
        url: String,
        /// Cause.
        source: StoreError,
    },
    /// Copying the sandbox store failed; rerunning finishes the copy.
    #[error("copying the sandbox store (run the same command again to finish): {0}")]
    Copy(#[source] StoreError),
    /// Copying the Connect store failed; rerunning finishes the copy.
    #[error("copying the Connect store (run the same command again to finish): {0}")]
    Connect(String),
}

/// What was copied.
#[derive(Debug, Clone, PartialEq)]
pub struct MigrateReport {
    /// Rows of the sandbox store.
    pub store: CopyReport,
    /// A line on the Connect store's rows.
    pub connect: String,
}

/// Copies the store of `data_dir` into the PostgreSQL database at `url`.
pub fn migrate(data_dir: &Path, url: &str) -> Result<MigrateReport, MigrateError> {
    let sqlite_path = data_dir.join("sbx.sqlite");
    if !sqlite_path.exists() {
        return Err(MigrateError::NoSource(sqlite_path));
    }
    // Held for the whole copy: sbxd cannot start on the data dir meanwhile.
    let _lock = DataDirLock::acquire(data_dir)?;
    let from = SqliteStore::open(&sqlite_path).map_err(|source| MigrateError::Source {
        path: sqlite_path.clone(),
        source,
    })?;
    let to = PostgresStore::open(url).map_err(|source| MigrateError::Target {
        url: sbx_store::redact_url(url),
        source,
    })?;
    let store = sbx_store::copy_store(&from, &to).map_err(MigrateError::Copy)?;
    let connect = migrate_connect(data_dir, url)?;
    Ok(MigrateReport { store, connect })
}

/// Copies the Connect store of the data dir into the same database, in one
/// transaction on the target (an empty Connect store there, or nothing is written).
fn migrate_connect(data_dir: &Path, url: &str) -> Result<String, MigrateError> {
    use sbx_connect::store::Location;
    let connect_dir = data_dir.join("connect");
    let Location::Sqlite(path) = Location::of_node(&connect_dir, None) else {
        unreachable!("without a database URL the Connect store is a SQLite file");
    };
    if !path.exists() {
        return Ok("Connect: the node never ran Connect, nothing to copy".to_string());
    }
    let connect = |e: sbx_connect::store::StoreError| MigrateError::Connect(e.to_string());
    let from = sbx_connect::store::open(&Location::Sqlite(path)).map_err(connect)?;
    let to =
        sbx_connect::store::open(&Location::of_node(&connect_dir, Some(url))).map_err(connect)?;
    // An earlier run that got this far copied everything (the copy is one transaction).
    if to.export().map_err(connect)?.rows() > 0 {
        return Ok("Connect: the target holds Connect rows already (an earlier run copied them); nothing copied".to_string());
    }
    let rows = sbx_connect::store::copy_store(from.as_ref(), to.as_ref()).map_err(connect)?;
    Ok(format!("Connect: {rows} rows copied"))
}
