//! Which store the harness's sbxd runs on, and raw queries against it.
//!
//! `SBX_TEST_STORE=postgres` puts every [`super::Daemon`] on a fresh PostgreSQL
//! database of its own (a [`TestDatabase`] on the server of
//! `SBX_TEST_DATABASE_URL`, passed as `--database-url`); unset or `sqlite`
//! keeps the default SQLite file in the data dir. `./scripts/test` runs the
//! fault and SDK suites once more with `postgres`.

use sbx_store::TestDatabase;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The backend named by `SBX_TEST_STORE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// The backend this test run asked for (panics on a value it does not know).
pub fn backend() -> Backend {
    match std::env::var("SBX_TEST_STORE").as_deref() {
        Err(_) | Ok("") | Ok("sqlite") => Backend::Sqlite,
        Ok("postgres") => Backend::Postgres,
        Ok(other) => panic!("SBX_TEST_STORE={other:?}: expected sqlite or postgres"),
    }
}

/// Whether this run's daemons keep their store in PostgreSQL.
pub fn on_postgres() -> bool {
    backend() == Backend::Postgres
}

/// A fresh database for one daemon when the run is on PostgreSQL.
pub fn database_for_daemon() -> Option<TestDatabase> {
    if !on_postgres() {
        return None;
    }
    let url = std::env::var("SBX_TEST_DATABASE_URL").unwrap_or_else(|_| {
        panic!("SBX_TEST_STORE=postgres needs SBX_TEST_DATABASE_URL: run ./scripts/test")
    });
    let db = TestDatabase::create(&url)
        .unwrap_or_else(|e| panic!("creating a test database for sbxd: {e}"));
    Some(db)
}

/// Runs raw SQL against a daemon's store, whichever backend it is on.
pub enum StoreProbe {
    /// The SQLite file, read with the sqlite3 CLI beside the running sbxd.
    Sqlite(PathBuf),
    /// A PostgreSQL connection, kept between queries (tests poll fast); `None`
    /// until the first query and after one failed.
    Postgres {
        url: String,
        client: Mutex<Option<Box<postgres::Client>>>,
    },
}

impl StoreProbe {
    /// The probe for a daemon with data dir `data_dir` and, on PostgreSQL, `url`.
    pub fn new(data_dir: &Path, url: Option<&str>) -> StoreProbe {
        match url {
            Some(url) => StoreProbe::Postgres {
                url: url.to_string(),
                client: Mutex::new(None),
            },
            None => StoreProbe::Sqlite(data_dir.join("sbx.sqlite")),
        }
    }

    /// The result as the sqlite3 CLI prints it: rows on lines, columns joined by
    /// `|`, NULL as empty, trimmed. The SQL must mean the same on both backends.
    pub fn query(&self, sql: &str) -> String {
        match self {
            StoreProbe::Sqlite(db) => {
                let out = std::process::Command::new("sqlite3")
                    .arg(db)
                    .arg(sql)
                    .output()
                    .expect("run sqlite3");
                String::from_utf8_lossy(&out.stdout).trim().to_string()
            }
            StoreProbe::Postgres { url, client } => {
                let mut guard = client.lock().unwrap_or_else(|p| p.into_inner());
                let held = guard.take();
                let (url, statement) = (url.clone(), sql.to_string());
                // The sync client blocks on a runtime of its own, which panics on a
                // thread that drives the test's tokio runtime: use a plain thread.
                let (kept, result) = std::thread::spawn(move || {
                    let mut c = match held {
                        Some(c) if !c.is_closed() => c,
                        _ => Box::new(
                            postgres::Client::connect(&url, postgres::NoTls)
                                .unwrap_or_else(|e| panic!("connecting to the test database: {e}")),
                        ),
                    };
                    let result = c.simple_query(&statement);
                    (Some(c), result)
                })
                .join()
                .expect("query thread");
                let messages = result.unwrap_or_else(|e| panic!("{sql}: {e}"));
                *guard = kept;
                let mut lines = Vec::new();
                for m in messages {
                    if let postgres::SimpleQueryMessage::Row(row) = m {
                        let cols: Vec<&str> =
                            (0..row.len()).map(|i| row.get(i).unwrap_or("")).collect();
                        lines.push(cols.join("|"));
                    }
                }
                lines.join("\n").trim().to_string()
            }
        }
    }
}

impl Drop for StoreProbe {
    fn drop(&mut self) {
        // Closing a sync client blocks on its runtime too: not on the test's thread.
        if let StoreProbe::Postgres { client, .. } = self {
            let held = client.get_mut().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(c) = held {
                let _ = std::thread::spawn(move || drop(c)).join();
            }
        }
    }
}
