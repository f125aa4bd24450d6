//! Throwaway databases for tests: one per test, so that tests run in parallel.

use crate::StoreError;
use postgres::{Client, NoTls};

/// A fresh, empty database on a PostgreSQL server, dropped again on drop.
///
/// For tests (this crate's and sbxd's): `admin_url` names a database the user may
/// connect to and a user allowed to `CREATE DATABASE`.
pub struct TestDatabase {
    admin_url: String,
    name: String,
    url: String,
}

impl TestDatabase {
    /// Creates `sbx_test_<random>` on the server of `admin_url`.
    pub fn create(admin_url: &str) -> Result<Self, StoreError> {
        let name = format!("sbx_test_{}", uuid::Uuid::new_v4().simple());
        let statement = format!("CREATE DATABASE {name}");
        on_plain_thread(admin_url, move |c| c.batch_execute(&statement))?;
        Ok(TestDatabase {
            admin_url: admin_url.to_string(),
            url: with_database(admin_url, &name),
            name,
        })
    }

    /// The URL of the new database.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        // FORCE: connections left by the store under test (workers not yet gone) are ended.
        let statement = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        if let Err(e) = on_plain_thread(&self.admin_url, move |c| c.batch_execute(&statement)) {
            eprintln!("dropping test database {}: {e}", self.name);
        }
    }
}

/// `url` with its database replaced by `name` (a later `dbname` wins in both forms).
fn with_database(url: &str, name: &str) -> String {
    let url = url.trim();
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let sep = if url.contains('?') { '&' } else { '?' };
        format!("{url}{sep}dbname={name}")
    } else {
        format!("{url} dbname={name}")
    }
}

/// Runs `f` on a new connection from a thread of its own, outside any async runtime
/// (the `postgres` client panics when blocked on inside one, as in `#[tokio::test]`s).
fn on_plain_thread(
    url: &str,
    f: impl FnOnce(&mut Client) -> Result<(), postgres::Error> + Send + 'static,
) -> Result<(), StoreError> {
    let url = url.to_string();
    std::thread::spawn(move || -> Result<(), StoreError> {
        let mut client = Client::connect(&url, NoTls)?;
        Ok(f(&mut client)?)
    })
    .join()
    .map_err(|_| StoreError::Database("test database thread panicked".into()))?
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn the_database_is_replaced_in_both_url_forms() {
        assert_eq!(
            with_database("postgres://postgres@%2Ftmp%2Fx/postgres", "t"),
            "postgres://postgres@%2Ftmp%2Fx/postgres?dbname=t"
        );
        assert_eq!(
            with_database("postgres://u@h/db?sslmode=disable", "t"),
            "postgres://u@h/db?sslmode=disable&dbname=t"
        );
        assert_eq!(
            with_database("host=/tmp/x user=postgres", "t"),
            "host=/tmp/x user=postgres dbname=t"
        );
    }
}
