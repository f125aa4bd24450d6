//! The store's behaviours, each run on SQLite and on PostgreSQL.
//!
//! The PostgreSQL half needs a server at `SBX_TEST_DATABASE_URL` (`./scripts/test` starts
//! one); without it each PostgreSQL test prints a note and passes without checking anything.

mod commit;
mod migrations;
mod nodes;
mod rows;
mod webhooks;

use super::{PostgresStore, SqliteStore, Store};
use std::path::PathBuf;
use std::sync::Arc;

/// Opens a handle on a fixture's data as the named node.
pub(super) type NodeHandle = Box<dyn Fn(&str) -> Arc<dyn Store>>;

/// A store under test, with a place for spools.
pub(super) struct Fixture {
    pub store: Arc<dyn Store>,
    pub spool_path: PathBuf,
    /// Opens another handle on the same data (what a restarted sbxd sees).
    pub reopen: Box<dyn Fn() -> Arc<dyn Store>>,
    /// Opens another handle on the same data as a node of a cluster.
    pub for_node: NodeHandle,
    // Dropped after the store: the database goes with the test.
    _db: Option<sbx_store::TestDatabase>,
    _dir: tempfile::TempDir,
}

pub(super) fn sqlite() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("connect.db");
    let store = Arc::new(SqliteStore::open(&path).expect("open SQLite"));
    let node_path = path.clone();
    Fixture {
        store,
        spool_path: dir.path().join("spool").join("run.spool"),
        reopen: Box::new(move || Arc::new(SqliteStore::open(&path).expect("reopen SQLite"))),
        for_node: Box::new(move |node| {
            let s = SqliteStore::open(&node_path).expect("open SQLite");
            Arc::new(s.for_node(Some(node.to_string())))
        }),
        _db: None,
        _dir: dir,
    }
}

/// A fresh PostgreSQL database, or `None` (with a note) when no server is configured.
pub(super) fn postgres_database() -> Option<sbx_store::TestDatabase> {
    let Ok(url) = std::env::var("SBX_TEST_DATABASE_URL") else {
        eprintln!("SBX_TEST_DATABASE_URL is not set: skipping a PostgreSQL test (./scripts/test starts a server)");
        return None;
    };
    Some(sbx_store::TestDatabase::create(&url).expect("creating a test database"))
}

pub(super) fn postgres() -> Option<Fixture> {
    let db = postgres_database()?;
    let dir = tempfile::tempdir().expect("tempdir");
    let url = db.url().to_string();
    let store = Arc::new(PostgresStore::open(&url).expect("open PostgreSQL"));
    let node_url = url.clone();
    Some(Fixture {
        store,
        spool_path: dir.path().join("spool").join("run.spool"),
        reopen: Box::new(move || Arc::new(PostgresStore::open(&url).expect("reopen PostgreSQL"))),
        for_node: Box::new(move |node| {
            let s = PostgresStore::open(&node_url).expect("open PostgreSQL");
            Arc::new(s.for_node(Some(node.to_string())))
        }),
        _db: Some(db),
        _dir: dir,
    })
}

/// Declares each behaviour (a `fn(&Fixture)` of the calling module) once per backend.
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[test]
                fn $name() {
                    super::$name(&crate::store::tests::sqlite());
                }
            )*
        }
        mod postgres {
            $(
                #[test]
                fn $name() {
                    if let Some(f) = crate::store::tests::postgres() {
                        super::$name(&f);
                    }
                }
            )*
        }
    };
}
pub(super) use on_both_backends;
