//! One behaviour suite for every [`Store`] backend: each behaviour is a function
//! taking `&dyn Store`, run once on SQLite and once on PostgreSQL.
//!
//! The PostgreSQL half needs a server: `./scripts/test` starts a throwaway one and
//! sets `SBX_TEST_DATABASE_URL`; each test gets a database of its own.

mod behaviours;
mod copying;

use sbx_store::{PostgresStore, SqliteStore, Store, TestDatabase};

/// A fresh PostgreSQL database for one test (dropped with the guard).
fn postgres_database() -> TestDatabase {
    let url = std::env::var("SBX_TEST_DATABASE_URL").unwrap_or_else(|_| {
        panic!("SBX_TEST_DATABASE_URL is not set: run ./scripts/test, which starts PostgreSQL")
    });
    TestDatabase::create(&url).unwrap_or_else(|e| panic!("creating a test database: {e}"))
}

/// Declares each behaviour once per backend. A behaviour also gets a way to open
/// a second store on the same data: what a second sbxd would see (on in-memory
/// SQLite the same store again; on a SQLite file a new handle on it).
macro_rules! on_every_backend {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            use super::*;
            $(
                #[test]
                fn $name() {
                    let store = std::sync::Arc::new(SqliteStore::in_memory().expect("in-memory SQLite"));
                    let same = std::sync::Arc::clone(&store);
                    let other = move || -> std::sync::Arc<dyn Store> { same.clone() };
                    behaviours::$name(&*store, &other);
                }
            )*
        }
        // A file, and a new handle on it per racer: what two sbxd sharing one
        // data dir would do (not a supported deployment, but it must not corrupt).
        mod sqlite_file {
            use super::*;
            $(
                #[test]
                fn $name() {
                    let dir = tempfile::tempdir().expect("tempdir");
                    let path = dir.path().join("db.sqlite");
                    let store = SqliteStore::open(&path).expect("open SQLite");
                    let other = move || -> std::sync::Arc<dyn Store> {
                        std::sync::Arc::new(SqliteStore::open(&path).expect("open SQLite"))
                    };
                    behaviours::$name(&store, &other);
                }
            )*
        }
        mod postgres {
            use super::*;
            $(
                #[test]
                #[ignore = "needs PostgreSQL; run ./scripts/test"]
                fn $name() {
                    let db = postgres_database();
                    let store = PostgresStore::open(db.url()).expect("open PostgreSQL");
                    let url = db.url().to_string();
                    let other = move || -> std::sync::Arc<dyn Store> {
                        std::sync::Arc::new(PostgresStore::open(&url).expect("open PostgreSQL"))
                    };
                    behaviours::$name(&store, &other);
                    drop(store);
                    drop(db);
                }
            )*
        }
    };
}

on_every_backend!(
    active_name_is_held_until_terminated,
    records_round_trip_every_field,
    updates_of_missing_rows_are_not_found,
    snapshot_limit_counts_live_snapshots_of_the_workspace_only,
    listing_pages_newest_first_without_gaps,
    snapshot_listing_filters_by_name_and_hides_deleted,
    rows_are_found_by_status,
    secrets_are_replaced_listed_and_deleted,
    every_secret_of_every_workspace_is_listed_in_order,
    ciphertext_replacement_is_compare_and_set,
    keys_are_found_by_digest_and_revoked_once,
    idempotency_claims_replay_and_expire,
    idempotency_leases_are_renewed_by_their_owner_and_ended_for_others,
    concurrent_creates_of_one_name_create_once,
    concurrent_snapshot_creates_respect_the_limit,
    a_workspace_quota_counts_its_active_sandboxes_only,
    concurrent_creates_keep_a_workspace_quota,
    concurrent_claims_of_one_key_start_once,
    stale_updates_conflict_and_change_nothing,
    concurrent_updates_of_one_row_let_exactly_one_win,
    copy_store_moves_every_row_and_finishes_an_interrupted_copy,
    nodes_register_heartbeat_list_and_drain,
    an_expired_lease_re_registered_bumps_the_epoch_and_fences_the_old_one,
    a_lost_node_is_failed_over_once_and_fenced,
    a_node_back_before_its_fail_over_keeps_its_sandboxes,
    sandboxes_from_before_nodes_are_adopted_and_usage_is_per_node,
    e2b_records_round_trip_list_by_workspace_and_metadata_and_delete,
    e2b_updates_are_compare_and_set_and_exactly_one_racer_wins,
    e2b_records_due_are_the_running_sandboxes_of_one_node,
    e2b_records_of_ended_sandboxes_are_deleted,
    preview_rows_are_put_replaced_listed_and_deleted,
    volumes_are_unique_per_tenant_listed_and_deleted_with_their_mounts,
    images_are_named_per_tenant_repointed_found_by_digest_and_deleted,
    templates_are_unique_per_tenant_compare_and_set_and_deleted,
);

mod schema {
    use super::*;

    #[test]
    fn sqlite_refuses_a_schema_from_the_future() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("db.sqlite");
        let supported = SqliteStore::open(&path)
            .expect("open")
            .schema_version()
            .expect("version");
        {
            let conn = rusqlite::Connection::open(&path).expect("raw open");
            conn.execute(
                "INSERT INTO schema_version (version, applied_at_ms) VALUES (?1, 0)",
                [supported + 7],
            )
            .expect("future version");
        }
        let err = SqliteStore::open(&path)
            .err()
            .expect("a newer schema is refused");
        assert!(
            matches!(err, sbx_store::StoreError::SchemaTooNew { found, supported: s } if found == supported + 7 && s == supported),
            "{err}"
        );
        assert_eq!(
            err.to_string(),
            format!(
                "database schema version {} is newer than this sbxd ({supported}); upgrade sbxd",
                supported + 7
            )
        );
    }

    #[test]
    fn sqlite_reopens_at_the_same_version_and_keeps_rows() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("db.sqlite");
        let first = SqliteStore::open(&path).expect("open");
        let v = first.schema_version().expect("version");
        assert!(v >= 4, "every migration ran: {v}");
        behaviours::insert_one(&first);
        drop(first);
        let again = SqliteStore::open(&path).expect("reopen");
        assert_eq!(again.schema_version().expect("version"), v);
        assert_eq!(
            again
                .list_sandboxes("default", 10, None)
                .expect("list")
                .len(),
            1
        );
    }

    #[test]
    #[ignore = "needs PostgreSQL; run ./scripts/test"]
    fn postgres_refuses_a_schema_from_the_future_and_reopens_otherwise() {
        let db = postgres_database();
        let store = PostgresStore::open(db.url()).expect("open");
        let supported = store.schema_version().expect("version");
        assert!(supported >= 1);
        behaviours::insert_one(&store);
        drop(store);
        // Opening again applies nothing and keeps the rows.
        let again = PostgresStore::open(db.url()).expect("reopen");
        assert_eq!(again.schema_version().expect("version"), supported);
        assert_eq!(
            again
                .list_sandboxes("default", 10, None)
                .expect("list")
                .len(),
            1
        );
        drop(again);
        let url = db.url().to_string();
        let future = supported + 3;
        std::thread::spawn(move || {
            let mut c = ::postgres::Client::connect(&url, ::postgres::NoTls).expect("connect");
            c.execute(
                "INSERT INTO schema_version (version) VALUES ($1)",
                &[&(future as i32)],
            )
            .expect("future version");
        })
        .join()
        .expect("thread");
        let err = PostgresStore::open(db.url())
            .err()
            .expect("a newer schema is refused");
        assert_eq!(
            err.to_string(),
            format!(
                "database schema version {future} is newer than this sbxd ({supported}); upgrade sbxd"
            )
        );
    }

    #[test]
    #[ignore = "needs PostgreSQL; run ./scripts/test"]
    fn postgres_connections_lost_are_unavailable_then_replaced() {
        let db = postgres_database();
        let store = PostgresStore::open(db.url()).expect("open");
        behaviours::insert_one(&store);
        // Wake every worker's connection, then end them all from the server side,
        // as a restart or failover of the database would.
        let url = db.url().to_string();
        let hold = std::sync::Arc::new(store);
        let racers: Vec<_> = (0..8)
            .map(|_| {
                let s = std::sync::Arc::clone(&hold);
                std::thread::spawn(move || s.list_sandboxes("default", 10, None).map(|v| v.len()))
            })
            .collect();
        for r in racers {
            assert_eq!(r.join().expect("reader").expect("read"), 1);
        }
        let ended = std::thread::spawn(move || -> i64 {
            let mut c = ::postgres::Client::connect(&url, ::postgres::NoTls).expect("connect");
            let rows = c
                .query(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                     WHERE datname = current_database() AND pid <> pg_backend_pid()",
                    &[],
                )
                .expect("terminate");
            rows.len() as i64
        })
        .join()
        .expect("thread");
        assert!(ended >= 1, "the store had connections to end");
        // Each worker whose connection died fails its next call as unavailable (the
        // outcome of that call is not known), then reconnects: the data is all there.
        let mut unavailable = 0;
        let mut answered = 0;
        for _ in 0..20 {
            match hold.list_sandboxes("default", 10, None) {
                Ok(rows) => {
                    assert_eq!(rows.len(), 1);
                    answered += 1;
                }
                Err(e) => {
                    assert!(matches!(e, sbx_store::StoreError::Unavailable(_)), "{e:?}");
                    unavailable += 1;
                }
            }
        }
        assert!(
            unavailable <= ended,
            "{unavailable} failures for {ended} lost connections"
        );
        assert!(
            answered >= 20 - ended,
            "the store recovered: {answered} answers"
        );
    }

    #[test]
    #[ignore = "needs PostgreSQL; run ./scripts/test"]
    fn postgres_prepared_statements_survive_a_schema_change_by_another_process() {
        let db = postgres_database();
        let store = std::sync::Arc::new(PostgresStore::open(db.url()).expect("open"));
        behaviours::insert_one(&*store);
        // Every worker prepares the listing (the store keeps statements prepared
        // per connection).
        let list_everywhere = |store: &std::sync::Arc<PostgresStore>| {
            let racers: Vec<_> = (0..8)
                .map(|_| {
                    let s = std::sync::Arc::clone(store);
                    std::thread::spawn(move || s.list_sandboxes("default", 10, None))
                })
                .collect();
            for r in racers {
                let rows = r.join().expect("reader").expect("listing after the change");
                assert_eq!(rows.len(), 1);
                assert_eq!(rows[0].name, "one");
            }
        };
        list_everywhere(&store);
        // What a newer sbxd's migration could do: change a listed column's type,
        // which makes PostgreSQL refuse the statements prepared before it
        // ("cached plan must not change result type").
        let url = db.url().to_string();
        std::thread::spawn(move || {
            let mut c = ::postgres::Client::connect(&url, ::postgres::NoTls).expect("connect");
            c.batch_execute("ALTER TABLE sandboxes ALTER COLUMN error TYPE varchar(4000)")
                .expect("alter");
        })
        .join()
        .expect("thread");
        list_everywhere(&store);
    }

    #[test]
    fn postgres_that_cannot_be_reached_is_unavailable() {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!(
            "postgres://postgres@{}/postgres",
            dir.path().display().to_string().replace('/', "%2F")
        );
        let err = PostgresStore::open(&url)
            .err()
            .expect("nothing listens there");
        assert!(
            matches!(err, sbx_store::StoreError::Unavailable(_)),
            "{err:?}"
        );
        assert!(err.is_retryable());
    }
}
