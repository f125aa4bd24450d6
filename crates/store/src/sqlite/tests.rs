//! Unit tests of what only the SQLite store has (a file, its pages); the behaviours
//! every backend shares are in `tests/suite`.

use super::*;
use std::collections::BTreeMap;

fn record(name: &str, created_ms: i64) -> SandboxRecord {
    SandboxRecord {
        id: Uuid::new_v4(),
        workspace: "default".into(),
        name: name.into(),
        status: SandboxStatus::Pending,
        vcpu: 1,
        memory_mb: 1024,
        environment: BTreeMap::from([("A".to_string(), "1".to_string())]),
        secrets: vec![],
        snapshot_id: None,
        image_ref: "default".into(),
        created_at: DateTime::from_timestamp_millis(created_ms).unwrap(),
        started_at: None,
        ended_at: None,
        error: None,
        active_ms: 0,
        running_since: None,
        network: sbx_api_types::NetworkPolicy::default(),
        generation: 0,
        node_id: "local".into(),
    }
}

#[test]
fn a_full_disk_is_a_typed_error_that_keeps_every_row() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("db.sqlite")).unwrap();
    let kept = record("kept", 1);
    store.create_sandbox(&kept).unwrap();
    // A database that may not grow is what SQLite sees on a full disk.
    let pages: i64 = store
        .lock()
        .pragma_query_value(None, "page_count", |r| r.get(0))
        .unwrap();
    store
        .lock()
        .pragma_update(None, "max_page_count", pages)
        .unwrap();
    let mut refused = None;
    for i in 0..1000 {
        let mut r = record(&format!("big-{i}"), 2 + i);
        r.environment.insert("PAD".into(), "x".repeat(8192));
        if let Err(e) = store.create_sandbox(&r) {
            refused = Some((e, r));
            break;
        }
    }
    let (err, r) = refused.expect("a database that cannot grow refuses a write");
    assert!(matches!(err, StoreError::Full(_)), "{err}");
    assert!(store.get_sandbox(r.id).unwrap().is_none());
    assert_eq!(store.get_sandbox(kept.id).unwrap().unwrap(), kept);
    let check: String = store
        .lock()
        .query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    // Space returns: the same write goes through on the same connection.
    store
        .lock()
        .pragma_update(None, "max_page_count", 1_000_000)
        .unwrap();
    assert_eq!(store.create_sandbox(&r).unwrap(), CreateOutcome::Created);
}

#[test]
fn reopening_a_file_keeps_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sqlite");
    let r = record("keep", 5);
    SqliteStore::open(&path)
        .unwrap()
        .create_sandbox(&r)
        .unwrap();
    let again = SqliteStore::open(&path).unwrap();
    assert_eq!(again.get_sandbox(r.id).unwrap().unwrap(), r);
}

#[test]
fn an_online_backup_holds_the_rows_of_an_open_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sqlite");
    let live = SqliteStore::open(&path).unwrap();
    let r = record("kept", 5);
    live.create_sandbox(&r).unwrap();
    let copy = dir.path().join("copy.sqlite");
    // The source stays open (WAL, a writer after the copy): the copy is a snapshot.
    backup_sqlite(&path, &copy).unwrap();
    live.create_sandbox(&record("later", 6)).unwrap();
    let restored = SqliteStore::open(&copy).unwrap();
    assert_eq!(restored.get_sandbox(r.id).unwrap().unwrap(), r);
    assert_eq!(
        restored.list_sandboxes("default", 10, None).unwrap().len(),
        1
    );
    // An existing target is never overwritten; a missing source is never created.
    assert!(backup_sqlite(&path, &copy).is_err());
    let missing = dir.path().join("missing.sqlite");
    assert!(backup_sqlite(&missing, &dir.path().join("c2.sqlite")).is_err());
    assert!(!missing.exists());
}
