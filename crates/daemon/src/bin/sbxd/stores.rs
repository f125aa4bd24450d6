//! Opening the stores for the daemon and the admin commands.

use anyhow::Context;
use std::sync::Arc;

/// The Connect store of a node, for an admin command; `None` when the node never ran
/// Connect (no database file, and no PostgreSQL to look in).
pub(crate) fn open_connect_store(
    data_dir: &std::path::Path,
    database_url: Option<&str>,
) -> anyhow::Result<Option<Arc<dyn sbx_connect::store::Store>>> {
    let location = sbx_connect::store::Location::of_node(&data_dir.join("connect"), database_url);
    if let sbx_connect::store::Location::Sqlite(path) = &location {
        if !path.exists() {
            return Ok(None);
        }
    }
    Ok(Some(
        sbx_connect::store::open(&location).context("opening the Connect store")?,
    ))
}

/// The sandbox store: PostgreSQL at `database_url` if given, else SQLite at `sqlite_path`.
///
/// A failure names the database (a URL without its password) and why, so that a
/// wrong URL, a server that is down or a schema from a newer sbxd stops sbxd at start.
pub(crate) fn open_store(
    sqlite_path: &std::path::Path,
    database_url: Option<&str>,
) -> anyhow::Result<Arc<dyn sbx_store::Store>> {
    match database_url.map(str::trim).filter(|u| !u.is_empty()) {
        Some(url) => {
            let store = sbx_store::PostgresStore::open(url).with_context(|| {
                format!(
                    "opening the PostgreSQL store at {}",
                    sbx_store::redact_url(url)
                )
            })?;
            tracing::info!(database = %sbx_store::redact_url(url), "store on PostgreSQL");
            Ok(Arc::new(store))
        }
        None => Ok(Arc::new(
            sbx_store::SqliteStore::open(sqlite_path).with_context(|| {
                format!("opening the SQLite store at {}", sqlite_path.display())
            })?,
        )),
    }
}
