//! Unit tests of the SQLite store.

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
    }
}

#[test]
fn active_name_is_held_until_terminated() {
    let store = SqliteStore::in_memory().unwrap();
    let a = record("n", 1);
    assert_eq!(store.create_sandbox(&a).unwrap(), CreateOutcome::Created);
    let b = record("n", 2);
    assert_eq!(
        store.create_sandbox(&b).unwrap(),
        CreateOutcome::NameHeld(Box::new(a.clone()))
    );
    let mut done = a.clone();
    done.status = SandboxStatus::Terminated;
    store.update_sandbox(&done).unwrap();
    assert_eq!(store.create_sandbox(&b).unwrap(), CreateOutcome::Created);
    assert_eq!(
        store.get_sandbox(a.id).unwrap().unwrap().status,
        SandboxStatus::Terminated
    );
}

fn snapshot(workspace: &str, name: Option<&str>, now: DateTime<Utc>) -> SnapshotRecord {
    SnapshotRecord {
        id: Uuid::new_v4(),
        workspace: workspace.into(),
        name: name.map(str::to_string),
        source_sandbox: Uuid::new_v4(),
        status: SnapshotStatus::Creating,
        vcpu: 1,
        memory_mb: 1024,
        environment: BTreeMap::new(),
        secrets: vec![],
        image_ref: "default".into(),
        source_image_id: "0".repeat(64),
        compatibility_id: "test".into(),
        stored_bytes: 0,
        created_at: now,
        updated_at: now,
        expires_at: now + chrono::Duration::hours(1),
        error: None,
        network: sbx_api_types::NetworkPolicy::default(),
    }
}

#[test]
fn snapshot_limit_counts_live_snapshots_of_the_workspace_only() {
    let store = SqliteStore::in_memory().unwrap();
    let now = DateTime::from_timestamp_millis(1_000_000).unwrap();
    let a = snapshot("ws", Some("a"), now);
    let b = snapshot("ws", None, now);
    assert_eq!(
        store.create_snapshot(&a, now, 2).unwrap(),
        SnapshotCreateOutcome::Created
    );
    assert_eq!(
        store.create_snapshot(&b, now, 2).unwrap(),
        SnapshotCreateOutcome::Created
    );
    let c = snapshot("ws", None, now);
    assert_eq!(
        store.create_snapshot(&c, now, 2).unwrap(),
        SnapshotCreateOutcome::LimitReached(2)
    );
    // A held name is reported before the limit.
    let again = snapshot("ws", Some("a"), now);
    assert_eq!(
        store.create_snapshot(&again, now, 2).unwrap(),
        SnapshotCreateOutcome::NameHeld(Box::new(a.clone()))
    );
    // Other workspaces and "no limit" are not affected; nothing was inserted by refusals.
    let other = snapshot("other", None, now);
    assert_eq!(
        store.create_snapshot(&other, now, 2).unwrap(),
        SnapshotCreateOutcome::Created
    );
    assert_eq!(
        store.create_snapshot(&c, now, 0).unwrap(),
        SnapshotCreateOutcome::Created
    );
    assert_eq!(store.list_snapshots("ws", None, 10, None).unwrap().len(), 3);
    // Deleted, failed and expired snapshots free their place.
    for (mut r, status) in [(a, SnapshotStatus::Deleted), (b, SnapshotStatus::Failed)] {
        r.status = status;
        store.update_snapshot(&r).unwrap();
    }
    let e = snapshot("ws", None, now);
    assert_eq!(
        store.create_snapshot(&e, now, 2).unwrap(),
        SnapshotCreateOutcome::Created
    );
    assert_eq!(
        store
            .create_snapshot(&snapshot("ws", None, now), now, 2)
            .unwrap(),
        SnapshotCreateOutcome::LimitReached(2)
    );
    let later = now + chrono::Duration::hours(2);
    let d = snapshot("ws", None, later);
    assert_eq!(
        store.create_snapshot(&d, later, 1).unwrap(),
        SnapshotCreateOutcome::Created
    );
}

#[test]
fn listing_pages_newest_first_without_gaps() {
    let store = SqliteStore::in_memory().unwrap();
    let mut ids = Vec::new();
    for i in 0..7 {
        let r = record(&format!("s{i}"), 1000 + (i / 2)); // ties on created_at
        ids.push(r.id);
        store.create_sandbox(&r).unwrap();
    }
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let page = store.list_sandboxes("default", 3, cursor.as_ref()).unwrap();
        if page.is_empty() {
            break;
        }
        let last = page.last().unwrap();
        cursor = Some(SandboxCursor {
            created_at_ms: last.created_at.timestamp_millis(),
            id: last.id,
        });
        seen.extend(page.iter().map(|r| r.id));
    }
    assert_eq!(seen.len(), 7);
    ids.sort();
    let mut sorted = seen.clone();
    sorted.sort();
    assert_eq!(sorted, ids);
    assert!(store.list_sandboxes("other", 10, None).unwrap().is_empty());
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
