//! PostgreSQL implementation: the same rows and semantics as SQLite, shared by several sbxd.
//!
//! The [`crate::Store`] trait is synchronous and sbxd calls it from its async
//! tasks. The `postgres` client drives its own Tokio runtime and panics when
//! blocked on from inside another, so every connection lives on a plain worker
//! thread and a call hands it a job and waits for the answer. A later step makes
//! the trait async and drops the workers.

mod e2b;
mod image_builds;
mod images;
mod nodes;
mod pool;
mod previews;
mod rows;
mod secrets;
mod store;
mod templates;
mod testing;
mod volumes;

pub use pool::{Pool, Session};
pub use testing::TestDatabase;

use crate::StoreError;
use postgres::error::SqlState;

/// Schema versions, applied in order at open; `schema_version` records each one.
/// Forward-only: a shipped file never changes, a change is a new file.
pub(crate) const MIGRATIONS: &[&str] = &[
    include_str!("../../migrations/postgres/0001_initial.sql"),
    include_str!("../../migrations/postgres/0002_generation.sql"),
    include_str!("../../migrations/postgres/0003_idempotency_lease.sql"),
    include_str!("../../migrations/postgres/0004_nodes.sql"),
    include_str!("../../migrations/postgres/0005_sandbox_node.sql"),
    include_str!("../../migrations/postgres/0006_e2b_sandboxes.sql"),
    include_str!("../../migrations/postgres/0007_sandbox_previews.sql"),
    include_str!("../../migrations/postgres/0008_volumes.sql"),
    include_str!("../../migrations/postgres/0009_images.sql"),
    include_str!("../../migrations/postgres/0010_image_builds.sql"),
    include_str!("../../migrations/postgres/0011_templates.sql"),
];

/// Connections kept open to the database (one worker thread each).
const CONNECTIONS: usize = 4;

/// How long connecting may take before the database counts as unavailable.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Advisory lock key held while migrating, so that two sbxd starting at once
/// apply each migration once ("sbxmig" in ASCII).
const MIGRATION_LOCK: i64 = 0x0000_7362_786d_6967;

/// PostgreSQL-backed [`crate::Store`].
pub struct PostgresStore {
    pool: Pool,
}

impl PostgresStore {
    /// Connects to `url` (a `postgres://` URL or `key=value` string) and applies migrations.
    pub fn open(url: &str) -> Result<Self, StoreError> {
        let mut config: postgres::Config = url.parse().map_err(|e| {
            StoreError::Database(format!("invalid database URL {}: {e}", redact_url(url)).into())
        })?;
        config.connect_timeout(CONNECT_TIMEOUT);
        if config.get_application_name().is_none() {
            config.application_name("sbxd");
        }
        let store = PostgresStore {
            pool: Pool::new(config, CONNECTIONS),
        };
        store.pool.run(|c| migrate(c))?;
        Ok(store)
    }

    /// The schema version the database is at.
    pub fn schema_version(&self) -> Result<u32, StoreError> {
        self.pool.run(|c| {
            let v: Option<i32> = c
                .query_one("SELECT MAX(version) FROM schema_version", &[])?
                .get(0);
            Ok(v.unwrap_or(0).max(0) as u32)
        })
    }
}

fn migrate(client: &mut postgres::Client) -> Result<(), StoreError> {
    let mut tx = client.transaction()?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])?;
    // No "relation already exists, skipping" notice in sbxd's log at every start.
    tx.batch_execute("SET LOCAL client_min_messages = warning")?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS schema_version (
             version    integer PRIMARY KEY,
             applied_at timestamptz NOT NULL DEFAULT now()
         )",
    )?;
    let found: Option<i32> = tx
        .query_one("SELECT MAX(version) FROM schema_version", &[])?
        .get(0);
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
            "INSERT INTO schema_version (version) VALUES ($1)",
            &[&version],
        )?;
    }
    tx.commit()?;
    Ok(())
}

impl From<postgres::Error> for StoreError {
    fn from(e: postgres::Error) -> Self {
        if let Some(db) = e.as_db_error() {
            let code = db.code();
            // Class 08: connection exceptions; 57P0x: the server is shutting down or starting.
            let unavailable = code.code().starts_with("08")
                || [
                    SqlState::ADMIN_SHUTDOWN,
                    SqlState::CRASH_SHUTDOWN,
                    SqlState::CANNOT_CONNECT_NOW,
                    SqlState::TOO_MANY_CONNECTIONS,
                    SqlState::T_R_DEADLOCK_DETECTED,
                    SqlState::T_R_SERIALIZATION_FAILURE,
                    SqlState::LOCK_NOT_AVAILABLE,
                ]
                .contains(code);
            return if *code == SqlState::DISK_FULL {
                StoreError::Full(Box::new(e))
            } else if *code == SqlState::UNIQUE_VIOLATION {
                StoreError::Conflict(Box::new(e))
            } else if *code == SqlState::DATA_CORRUPTED || *code == SqlState::INDEX_CORRUPTED {
                StoreError::Corrupt(Box::new(e))
            } else if unavailable {
                StoreError::Unavailable(Box::new(e))
            } else {
                StoreError::Database(Box::new(e))
            };
        }
        // No answer from the server: refused, reset, timed out or closed.
        let io = std::error::Error::source(&e).is_some_and(|s| s.is::<std::io::Error>());
        if e.is_closed() || io || e.to_string().contains("timeout") {
            StoreError::Unavailable(Box::new(e))
        } else {
            StoreError::Database(Box::new(e))
        }
    }
}

/// `url` without its password, for messages and logs.
///
/// Handles both the URL form (`postgres://user:secret@host/db`) and the key-value
/// form (`host=... password=secret`); anything unparseable is shown as `<unparseable URL>`.
pub fn redact_url(url: &str) -> String {
    let trimmed = url.trim();
    if let Some(rest) = trimmed
        .strip_prefix("postgres://")
        .or_else(|| trimmed.strip_prefix("postgresql://"))
    {
        let scheme = &trimmed[..trimmed.len() - rest.len()];
        // The userinfo ends at the last '@' before the path.
        let authority_end = rest.find('/').unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(authority_end);
        let redacted = match authority.rfind('@') {
            Some(at) => {
                let (userinfo, host) = authority.split_at(at);
                let user = userinfo.split(':').next().unwrap_or("");
                if userinfo.contains(':') {
                    format!("{user}:***{host}")
                } else {
                    format!("{userinfo}{host}")
                }
            }
            None => authority.to_string(),
        };
        // A password may also be given as a query parameter.
        let tail = redact_query_password(tail);
        return format!("{scheme}{redacted}{tail}");
    }
    if trimmed.contains('=') {
        return trimmed
            .split_whitespace()
            .map(|kv| {
                if kv.starts_with("password=") {
                    "password=***"
                } else {
                    kv
                }
            })
            .collect::<Vec<_>>()
            .join(" ");
    }
    "<unparseable URL>".into()
}

fn redact_query_password(tail: &str) -> String {
    let Some((path, query)) = tail.split_once('?') else {
        return tail.to_string();
    };
    let query = query
        .split('&')
        .map(|kv| {
            if kv.starts_with("password=") {
                "password=***"
            } else {
                kv
            }
        })
        .collect::<Vec<_>>()
        .join("&");
    format!("{path}?{query}")
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn urls_lose_their_password_only() {
        assert_eq!(
            redact_url("postgres://sbx:hunter2@db.example:5432/sbx"),
            "postgres://sbx:***@db.example:5432/sbx"
        );
        assert_eq!(
            redact_url("postgresql://sbx@%2Ftmp%2Fpg/postgres?password=x&sslmode=disable"),
            "postgresql://sbx@%2Ftmp%2Fpg/postgres?password=***&sslmode=disable"
        );
        assert_eq!(
            redact_url("host=/tmp/pg user=sbx password=hunter2 dbname=sbx"),
            "host=/tmp/pg user=sbx password=*** dbname=sbx"
        );
        assert_eq!(redact_url("nonsense"), "<unparseable URL>");
    }
}
