//! Schemas over time: a data dir of the first Connect runtime (times as text), a schema
//! from the future, the Connect tables beside the main store's, and a copy between stores.

use super::rows::{connection, definition, version};
use super::{on_both_backends, Fixture};
use crate::commit::CommitTarget;
use crate::model::{BuildStatus, LogLevel, RunKind, SyncMode};
use crate::spool::SpoolWriter;
use crate::store::{
    copy_store, Connections, NewRun, OauthPending, Packages, Records, Runs, SqliteStore, Store,
    StoreError,
};
use serde_json::json;

on_both_backends!(copying_into_a_store_that_holds_rows_writes_nothing);

/// Rows of the first schema as its code wrote them (user_version 1, RFC 3339 text).
const OLD_ROWS: &str = r#"
INSERT INTO packages VALUES ('ws', 'conn', '2025-01-02T03:04:05.678Z');
INSERT INTO package_versions VALUES ('ws', 'conn', '1.0.0', 'ab', 10, 'index.js',
    '2025-01-02T03:04:05.679Z', 'b1', '{"auth":{"type":"bearer"},"syncs":[]}');
INSERT INTO builds VALUES ('b1', 'ws', 'conn', '1.0.0', 'succeeded', 'log', '/art', NULL,
    '2025-01-02T03:04:06.000Z', '2025-01-02T03:04:07.001Z');
INSERT INTO builds VALUES ('b0', 'ws', 'conn', '1.0.0', 'failed', '', NULL, 'boom',
    '2025-01-02T03:04:05.900Z', NULL);
INSERT INTO connections VALUES ('c1', 'ws', 'c', 'conn', '1.0.0', '{"a":1}', 'https://x',
    'bearer', X'0102', 'active', 60, '2025-01-02T03:05:00.000Z', '2025-01-03T00:00:00.123Z');
INSERT INTO oauth_pending VALUES ('st', 'ws', 'c1', 'ver', 'https://cb', '2025-01-02T03:05:01.000Z');
INSERT INTO runs (id, workspace, connection_id, package, version, kind, sync, status, attempt,
    created_at, started_at, finished_at, records_committed)
    VALUES ('r-b', 'ws', 'c1', 'conn', '1.0.0', 'sync', 'items', 'succeeded', 1,
    '2025-01-02T03:06:00.000Z', '2025-01-02T03:06:00.500Z', '2025-01-02T03:06:01.999Z', 2);
INSERT INTO runs (id, workspace, connection_id, package, version, kind, sync, status, created_at)
    VALUES ('r-a', 'ws', 'c1', 'conn', '1.0.0', 'sync', 'items', 'queued', '2025-01-02T03:07:00.000Z');
INSERT INTO logs (workspace, run_id, connection_id, ts, level, message)
    VALUES ('ws', 'r-b', 'c1', '2025-01-02T03:06:00.600Z', 'info', 'gone');
INSERT INTO logs (workspace, run_id, connection_id, ts, level, message)
    VALUES ('ws', 'r-b', 'c1', '2025-01-02T03:06:00.700Z', 'warn', 'kept');
DELETE FROM logs WHERE message = 'gone';
INSERT INTO logs (workspace, run_id, connection_id, ts, level, message)
    VALUES ('ws', 'r-b', 'c1', '2025-01-02T03:06:00.800Z', 'info', 'newest');
DELETE FROM logs WHERE message = 'newest';
INSERT INTO sync_state VALUES (7, 'ws', 'c1', 'items', '{"page":3}', '2025-01-02T03:06:01.999Z');
INSERT INTO records (seq, dataset, key, data) VALUES (5, 7, NULL, '{"n":1}');
INSERT INTO records (seq, dataset, key, data) VALUES (9, 7, NULL, '{"n":2}');
"#;

#[test]
fn a_data_dir_of_the_first_schema_keeps_every_value() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("connect.db");
    {
        let conn = rusqlite::Connection::open(&path).expect("open");
        conn.execute_batch(include_str!("../../../migrations/sqlite/0001_initial.sql"))
            .expect("old schema");
        conn.execute_batch(OLD_ROWS).expect("old rows");
        conn.pragma_update(None, "user_version", 1)
            .expect("version");
    }
    let s = SqliteStore::open(&path).expect("migrate");
    assert_eq!(s.schema_version().expect("version"), 4);
    let packages = s.list_packages("ws").expect("packages");
    assert_eq!(packages[0].created_at, "2025-01-02T03:04:05.678Z");
    let v = s
        .get_package_version("ws", "conn", "1.0.0")
        .expect("version");
    assert_eq!(v.created_at, "2025-01-02T03:04:05.679Z");
    assert_eq!(v.definition, Some(definition(&[])));
    let builds = s.list_builds("ws", "conn", "1.0.0").expect("builds");
    assert_eq!(
        builds.iter().map(|b| b.id.as_str()).collect::<Vec<_>>(),
        vec!["b1", "b0"]
    );
    assert_eq!(
        builds[0].finished_at.as_deref(),
        Some("2025-01-02T03:04:07.001Z")
    );
    assert_eq!(
        (builds[1].status, builds[1].finished_at.as_deref()),
        (BuildStatus::Failed, None)
    );
    let c = s.get_connection("ws", "c1").expect("connection");
    assert_eq!(
        (c.created_at.as_str(), c.updated_at.as_str()),
        ("2025-01-02T03:05:00.000Z", "2025-01-03T00:00:00.123Z")
    );
    assert_eq!(
        s.get_connection_credentials("ws", "c1").expect("blob"),
        vec![1, 2]
    );
    // Runs keep their order (newest first is the later insert) and times.
    let runs = s.list_runs("ws", "c1", None, 10).expect("runs");
    assert_eq!(
        runs.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        vec!["r-a", "r-b"]
    );
    assert_eq!(
        runs[1].started_at.as_deref(),
        Some("2025-01-02T03:06:00.500Z")
    );
    assert_eq!(
        runs[1].finished_at.as_deref(),
        Some("2025-01-02T03:06:01.999Z")
    );
    assert_eq!(runs[0].started_at, None);
    let last = s
        .last_sync_run_at("ws", "c1", "items")
        .expect("last")
        .expect("some");
    assert_eq!(crate::store::ts(last), "2025-01-02T03:07:00.000Z");
    let logs = s.list_logs("ws", Some("c1"), None, None, 10).expect("logs");
    assert_eq!(logs.len(), 1);
    assert_eq!(
        (logs[0].id, logs[0].ts.as_str()),
        (2, "2025-01-02T03:06:00.700Z")
    );
    assert_eq!(
        s.get_checkpoint("ws", "c1", "items").expect("cp"),
        Some(json!({"page": 3}))
    );
    let recs = s
        .read_records("ws", "c1", "items", None, 10)
        .expect("records");
    assert_eq!(recs.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![5, 9]);
    assert_eq!(
        s.take_oauth_pending("ws", "st").expect("pending").verifier,
        "ver"
    );
    // New rows continue after the old ones: a new run lists first, a log id is never reused.
    // (Of another sync: "items" has its queued run r-a, and only one may be queued.)
    let run = s
        .insert_run(
            "ws",
            &NewRun {
                connection_id: Some("c1".into()),
                package: "conn".into(),
                version: "1.0.0".into(),
                kind: RunKind::Sync,
                sync: Some("users".into()),
            },
        )
        .expect("run");
    assert_eq!(
        s.list_runs("ws", "c1", None, 1).expect("runs")[0].id,
        run.id
    );
    s.insert_log("ws", &run.id, Some("c1"), LogLevel::Info, "new")
        .expect("log");
    let logs = s
        .list_logs("ws", Some("c1"), None, Some(2), 10)
        .expect("logs");
    assert_eq!(logs[0].id, 4, "the deleted line 3 keeps its id");
    // Deleting by time works on the converted values.
    let cutoff = chrono::DateTime::parse_from_rfc3339("2025-01-02T03:06:00.701Z").expect("time");
    assert_eq!(s.delete_logs_before(cutoff.into()).expect("janitor"), 1);
}

#[test]
fn a_sqlite_schema_from_the_future_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("connect.db");
    drop(SqliteStore::open(&path).expect("open"));
    rusqlite::Connection::open(&path)
        .expect("open")
        .pragma_update(None, "user_version", 99)
        .expect("version");
    let e = SqliteStore::open(&path).expect_err("newer schema");
    assert!(
        matches!(
            e,
            StoreError::SchemaTooNew {
                found: 99,
                supported: 4
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("upgrade sbxd"), "{e}");
}

#[test]
fn a_postgres_schema_from_the_future_is_refused() {
    let Some(db) = super::postgres_database() else {
        return;
    };
    drop(crate::store::PostgresStore::open(db.url()).expect("open"));
    let mut client = ::postgres::Client::connect(db.url(), ::postgres::NoTls).expect("connect");
    client
        .execute(
            "INSERT INTO connect_schema_version (version) VALUES (99)",
            &[],
        )
        .expect("future version");
    let e = crate::store::PostgresStore::open(db.url()).expect_err("newer schema");
    assert!(
        matches!(
            e,
            StoreError::SchemaTooNew {
                found: 99,
                supported: 3
            }
        ),
        "{e:?}"
    );
}

#[test]
fn connect_tables_live_beside_the_main_store() {
    let Some(db) = super::postgres_database() else {
        return;
    };
    let main = sbx_store::PostgresStore::open(db.url()).expect("main store");
    let connect = crate::store::PostgresStore::open(db.url()).expect("connect store");
    let main_version = main.schema_version().expect("main version");
    assert_eq!(connect.schema_version().expect("connect version"), 3);
    // Opening either again, in any order, migrates nothing twice and breaks nothing.
    drop(crate::store::PostgresStore::open(db.url()).expect("connect again"));
    drop(sbx_store::PostgresStore::open(db.url()).expect("main again"));
    assert_eq!(main.schema_version().expect("main version"), main_version);
    let mut client = ::postgres::Client::connect(db.url(), ::postgres::NoTls).expect("connect");
    let tables: Vec<String> = client
        .query("SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename NOT LIKE 'connect\\_%' ORDER BY 1", &[])
        .expect("tables")
        .iter()
        .map(|r| r.get(0))
        .collect();
    for t in [
        "packages",
        "runs",
        "records",
        "logs",
        "connections",
        "builds",
    ] {
        assert!(
            !tables.contains(&t.to_string()),
            "{t} outside the connect_ prefix: {tables:?}"
        );
    }
}

/// A store with a row in every table.
fn populate(store: &dyn Store, spool: &std::path::Path) {
    store
        .insert_package_version("ws", &version("1.0.0"))
        .expect("version");
    let b = store.insert_build("ws", "conn", "1.0.0").expect("build");
    store
        .update_build(
            "ws",
            &b.id,
            BuildStatus::Succeeded,
            "built\n",
            Some("/art"),
            None,
        )
        .expect("build done");
    store
        .set_version_build("ws", "conn", "1.0.0", &b.id, &definition(&["items"]))
        .expect("definition");
    store
        .insert_connection("ws", "c1", &connection(Some(60)), b"\x00sealed\xff")
        .expect("connection");
    store
        .insert_oauth_pending(
            "ws",
            "state",
            &OauthPending {
                connection_id: "c1".into(),
                verifier: "v".into(),
                redirect_uri: "https://cb".into(),
            },
        )
        .expect("pending");
    for _ in 0..3 {
        let run = store
            .insert_run(
                "ws",
                &NewRun {
                    connection_id: Some("c1".into()),
                    package: "conn".into(),
                    version: "1.0.0".into(),
                    kind: RunKind::Sync,
                    sync: Some("items".into()),
                },
            )
            .expect("run");
        store.start_run("ws", &run.id, 1).expect("start");
        store
            .insert_log("ws", &run.id, Some("c1"), LogLevel::Info, "line")
            .expect("log");
        let mut w = SpoolWriter::create(spool).expect("spool");
        w.append_record(Some("k1"), r#"{"id":"k1"}"#)
            .expect("record");
        w.append_record(Some(&run.id), r#"{"id":"run"}"#)
            .expect("record");
        w.append_checkpoint(&json!({"run": run.id}).to_string())
            .expect("checkpoint");
        let target = CommitTarget {
            workspace: "ws",
            connection_id: "c1",
            sync: "items",
            mode: SyncMode::Merge,
            run_id: None,
            delivery: None,
        };
        let stats = store
            .commit(target, w.finish().expect("finish"))
            .expect("commit");
        store
            .succeed_run("ws", &run.id, stats.records, None)
            .expect("succeed");
    }
    // Webhook settings, a token and a pending delivery are copied too.
    let settings = crate::store::WebhookSettings {
        scheme: crate::model::SignatureScheme::Standard,
        signature_header: None,
        signature_prefix: None,
        id_header: None,
        secret: b"\x00sealed".to_vec(),
    };
    store
        .set_webhooks("ws", "c1", &settings, &[("hook".into(), "hash".into())])
        .expect("webhooks");
    store
        .insert_delivery(
            "ws",
            &crate::store::NewDelivery {
                id: "dlv_1".into(),
                connection_id: "c1".into(),
                webhook: "hook".into(),
                sender_id: "evt-1".into(),
                body: b"{}".to_vec(),
                headers: "{}".into(),
            },
            10,
        )
        .expect("delivery");
}

/// Everything the API reads, as one comparable text.
fn read_all(s: &dyn Store) -> String {
    format!(
        "{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}",
        s.list_packages("ws"),
        s.list_package_versions("ws", "conn"),
        s.list_builds("ws", "conn", "1.0.0"),
        s.list_connections("ws"),
        s.credential_blobs(),
        s.list_runs("ws", "c1", None, 100),
        s.list_logs("ws", Some("c1"), None, None, 100),
        s.read_records("ws", "c1", "items", None, 100),
        s.get_checkpoint("ws", "c1", "items"),
        s.committed_syncs("ws", "c1"),
        s.webhook_settings("ws", "c1"),
        s.find_webhook_token("hash"),
        s.list_deliveries("ws", "c1", None, None, 100),
    )
}

fn copy_and_check(from: &dyn Store, to: &dyn Store, spool: &std::path::Path) {
    populate(from, spool);
    let rows = copy_store(from, to).expect("copy");
    // ... and a webhook setting, token and delivery.
    assert_eq!(rows, 1 + 1 + 1 + 1 + 1 + 3 + 3 + 1 + 4 + 3);
    assert_eq!(read_all(to), read_all(from));
    // The copy is usable: a sign-in completes, new rows continue after the copied ones.
    assert_eq!(
        to.take_oauth_pending("ws", "state")
            .expect("pending")
            .verifier,
        "v"
    );
    let run = to
        .insert_run(
            "ws",
            &NewRun {
                connection_id: Some("c1".into()),
                package: "conn".into(),
                version: "1.0.0".into(),
                kind: RunKind::Sync,
                sync: Some("items".into()),
            },
        )
        .expect("run");
    assert_eq!(
        to.list_runs("ws", "c1", None, 1).expect("runs")[0].id,
        run.id
    );
    let old_logs = from
        .list_logs("ws", Some("c1"), None, None, 100)
        .expect("logs");
    to.insert_log("ws", &run.id, Some("c1"), LogLevel::Info, "new")
        .expect("log");
    let logs = to
        .list_logs("ws", Some("c1"), None, None, 100)
        .expect("logs");
    assert!(logs.last().expect("log").id > old_logs.last().expect("log").id);
    let mut w = SpoolWriter::create(spool).expect("spool");
    w.append_record(Some("k2"), r#"{"id":"k2"}"#)
        .expect("record");
    let target = CommitTarget {
        workspace: "ws",
        connection_id: "c1",
        sync: "items",
        mode: SyncMode::Merge,
        run_id: None,
        delivery: None,
    };
    to.commit(target, w.finish().expect("finish"))
        .expect("commit");
    let records = to
        .read_records("ws", "c1", "items", None, 100)
        .expect("records");
    assert_eq!(records.len(), 5);
    assert_eq!(records.last().expect("record").key.as_deref(), Some("k2"));
}

#[test]
fn a_sqlite_store_copies_into_postgres() {
    let Some(db) = super::postgres_database() else {
        return;
    };
    let from = super::sqlite();
    let to = crate::store::PostgresStore::open(db.url()).expect("open PostgreSQL");
    copy_and_check(&*from.store, &to, &from.spool_path);
}

#[test]
fn a_sqlite_store_copies_into_another() {
    let from = super::sqlite();
    let to = super::sqlite();
    copy_and_check(&*from.store, &*to.store, &from.spool_path);
}

pub(super) fn copying_into_a_store_that_holds_rows_writes_nothing(f: &Fixture) {
    let from = super::sqlite();
    populate(&*from.store, &from.spool_path);
    f.store
        .insert_package_version("ws", &version("9.0.0"))
        .expect("version");
    let e = copy_store(&*from.store, &*f.store).expect_err("target in use");
    assert!(matches!(e, StoreError::Conflict(_)), "{e:?}");
    assert!(f.store.list_connections("ws").expect("list").is_empty());
    assert_eq!(
        f.store.list_packages("ws").expect("list")[0].versions,
        vec!["9.0.0"]
    );
}
