//! PostgreSQL backend: the Connect tables (prefixed `connect_`) in the main store's database,
//! served by the main store's pool of worker threads (the sync `postgres` client must not be
//! blocked on inside the async runtime).

mod connections;
mod dump;
mod packages;
mod records;
mod runs;
mod webhooks;

use super::StoreError;
use chrono::{DateTime, Utc};
use postgres::{Client, Row};
use sbx_store::PostgresPool;

/// Schema versions, applied in order at open; `connect_schema_version` records each one
/// (apart from the main store's `schema_version`). Forward-only, like SQLite's.
const MIGRATIONS: &[&str] = &[
    include_str!("../../../migrations/postgres/0001_initial.sql"),
    include_str!("../../../migrations/postgres/0002_nodes.sql"),
    include_str!("../../../migrations/postgres/0003_webhooks.sql"),
];

/// Connections kept open for Connect (one worker thread each): a long sync commit holds one.
const CONNECTIONS: usize = 4;

/// How long connecting may take before the database counts as unavailable.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Advisory lock key held while migrating the Connect schema ("sbxcmig" in ASCII), apart
/// from the main store's, so that two sbxd starting at once apply each migration once.
const MIGRATION_LOCK: i64 = 0x0073_6278_636d_6967;

/// The Connect store on PostgreSQL.
pub struct PostgresStore {
    pool: PostgresPool,
    /// The node whose runs and builds this handle inserts (see [`super::open`]).
    node: Option<String>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore").finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Connects to `url` (a `postgres://` URL or `key=value` string) and applies migrations.
    pub fn open(url: &str) -> Result<Self, StoreError> {
        let mut config: postgres::Config = url.parse().map_err(|e| {
            StoreError::Database(
                format!("invalid database URL {}: {e}", sbx_store::redact_url(url)).into(),
            )
        })?;
        config.connect_timeout(CONNECT_TIMEOUT);
        if config.get_application_name().is_none() {
            config.application_name("sbxd-connect");
        }
        let store = PostgresStore {
            pool: PostgresPool::new(config, CONNECTIONS),
            node: None,
        };
        store.run(migrate)?;
        Ok(store)
    }

    /// The same store, inserting runs and builds as `node`'s.
    pub fn for_node(mut self, node: Option<String>) -> Self {
        self.node = node;
        self
    }

    /// The Connect schema version the database is at.
    pub fn schema_version(&self) -> Result<u32, StoreError> {
        self.run(|c| {
            let v: Option<i32> = c
                .query_one("SELECT MAX(version) FROM connect_schema_version", &[])?
                .try_get(0)?;
            Ok(v.unwrap_or(0).max(0) as u32)
        })
    }

    /// Runs `f` on a pooled connection.
    fn run<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Client) -> Result<T, StoreError> + Send + 'static,
    {
        self.pool.run(move |c| match f(c) {
            // The pool reconnects after an unavailable answer: let it see one.
            Err(StoreError::Unavailable(s)) => Err(sbx_store::StoreError::Unavailable(s)),
            other => Ok(other),
        })?
    }
}

impl super::Blobs for PostgresStore {
    fn put_blob(&self, key: &str, data: &[u8]) -> Result<(), StoreError> {
        let (key, data) = (key.to_string(), data.to_vec());
        self.run(move |c| {
            c.execute(
                "INSERT INTO connect_blobs (key, data, created_at) VALUES ($1, $2, $3)
                 ON CONFLICT (key) DO NOTHING",
                &[&key, &data, &Utc::now()],
            )?;
            Ok(())
        })
    }

    fn get_blob(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let key = key.to_string();
        self.run(move |c| {
            Ok(
                c.query_opt("SELECT data FROM connect_blobs WHERE key = $1", &[&key])?
                    .map(|r| r.try_get(0))
                    .transpose()?,
            )
        })
    }
}

impl super::Store for PostgresStore {
    fn export(&self) -> Result<super::Dump, StoreError> {
        self.run(dump::export)
    }

    fn import(&self, d: &super::Dump) -> Result<(), StoreError> {
        let d = d.clone();
        self.run(move |c| dump::import(c, &d))
    }
}

fn migrate(client: &mut Client) -> Result<(), StoreError> {
    let mut tx = client.transaction()?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])?;
    // No "relation already exists, skipping" notice in sbxd's log at every start.
    tx.batch_execute("SET LOCAL client_min_messages = warning")?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS connect_schema_version (
             version    integer PRIMARY KEY,
             applied_at timestamptz NOT NULL DEFAULT now()
         )",
    )?;
    let found: Option<i32> = tx
        .query_one("SELECT MAX(version) FROM connect_schema_version", &[])?
        .try_get(0)?;
    let found = found.unwrap_or(0).max(0) as usize;
    if found > MIGRATIONS.len() {
        return Err(StoreError::SchemaTooNew {
            found: found as u32,
            supported: MIGRATIONS.len() as u32,
        });
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(found) {
        tx.batch_execute(sql)?;
        let version = (i + 1) as i32;
        tx.execute(
            "INSERT INTO connect_schema_version (version) VALUES ($1)",
            &[&version],
        )?;
    }
    tx.commit()?;
    Ok(())
}

/// Column `i`, a time, as the model's text.
fn time(row: &Row, i: usize) -> Result<String, StoreError> {
    let t: DateTime<Utc> = row.try_get(i)?;
    Ok(super::ts(t))
}

/// Column `i`, an optional time, as the model's text.
fn opt_time(row: &Row, i: usize) -> Result<Option<String>, StoreError> {
    let t: Option<DateTime<Utc>> = row.try_get(i)?;
    Ok(t.map(super::ts))
}

/// A count or size column, never negative in a sound row.
fn unsigned(row: &Row, i: usize) -> Result<u64, StoreError> {
    let v: i64 = row.try_get(i)?;
    Ok(v.max(0) as u64)
}
