//! The behaviours every backend must have, one function each.

use chrono::{DateTime, Duration, Utc};
use sbx_api_types::SandboxStatus;
use sbx_store::{
    ApiKeyRecord, CreateOutcome, IdempotencyBegin, IdempotencyRecord, SandboxCursor, SandboxRecord,
    SecretRecord, SnapshotCreateOutcome, SnapshotRecord, SnapshotStatus, Store, StoreError,
};
use std::collections::BTreeMap;
use std::sync::Arc;
use uuid::Uuid;

pub use crate::copying::copy_store_moves_every_row_and_finishes_an_interrupted_copy;
mod e2b;
mod images;
mod nodes;
mod previews;
mod quotas;
mod secrets;
mod templates;
mod volumes;
pub use e2b::*;
pub use images::*;
pub use nodes::*;
pub use previews::*;
pub use quotas::*;
pub use secrets::*;
pub use templates::*;
pub use volumes::*;

/// Opens another store on the same data.
pub type Other<'a> = &'a dyn Fn() -> Arc<dyn Store>;

pub(crate) fn at(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).expect("valid time")
}

pub(crate) fn record(name: &str, created_ms: i64) -> SandboxRecord {
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
        created_at: at(created_ms),
        started_at: None,
        ended_at: None,
        error: None,
        active_ms: 0,
        running_since: None,
        network: sbx_api_types::NetworkPolicy::default(),
        generation: 0,
        node_id: "node-a".into(),
    }
}

pub(crate) fn snapshot(workspace: &str, name: Option<&str>, now: DateTime<Utc>) -> SnapshotRecord {
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
        expires_at: now + Duration::hours(1),
        error: None,
        network: sbx_api_types::NetworkPolicy::default(),
        generation: 0,
    }
}

pub(crate) fn key(digest: &str) -> ApiKeyRecord {
    ApiKeyRecord {
        id: Uuid::new_v4(),
        workspace: "acme".into(),
        env: Some("production".into()),
        name: Some("ci".into()),
        digest: digest.into(),
        created_at: at(1000),
        revoked_at: None,
    }
}

fn claim(tenant: &str, now: DateTime<Utc>) -> IdempotencyRecord {
    IdempotencyRecord {
        tenant: tenant.into(),
        path: "/v2/sandboxes/x/exec".into(),
        key: "k1".into(),
        fingerprint: "f".into(),
        owner: Uuid::new_v4(),
        created_at: now,
        expires_at: now + Duration::hours(24),
        lease_until: now + Duration::seconds(30),
        response: None,
    }
}

/// Inserts one sandbox in `default` (used by the schema tests).
pub fn insert_one(store: &dyn Store) {
    assert_eq!(
        store.create_sandbox(&record("one", 1)).expect("create"),
        CreateOutcome::Created
    );
}

pub fn active_name_is_held_until_terminated(store: &dyn Store, _: Other) {
    let a = record("n", 1);
    assert_eq!(store.create_sandbox(&a).unwrap(), CreateOutcome::Created);
    let b = record("n", 2);
    assert_eq!(
        store.create_sandbox(&b).unwrap(),
        CreateOutcome::NameHeld(Box::new(a.clone()))
    );
    assert_eq!(
        store.active_sandbox_named("default", "n").unwrap(),
        Some(a.clone())
    );
    // The same name in another workspace is free.
    let mut elsewhere = record("n", 3);
    elsewhere.workspace = "other".into();
    assert_eq!(
        store.create_sandbox(&elsewhere).unwrap(),
        CreateOutcome::Created
    );
    let mut done = a.clone();
    done.status = SandboxStatus::Terminated;
    store.update_sandbox(&mut done).unwrap();
    assert_eq!(store.active_sandbox_named("default", "n").unwrap(), None);
    assert_eq!(store.create_sandbox(&b).unwrap(), CreateOutcome::Created);
    assert_eq!(
        store.get_sandbox(a.id).unwrap().unwrap().status,
        SandboxStatus::Terminated
    );
    // Inserting the same id twice is a conflict, not a silent overwrite.
    let mut dup = b.clone();
    dup.name = "another".into();
    assert!(matches!(
        store.create_sandbox(&dup),
        Err(StoreError::Conflict(_))
    ));
}

pub fn records_round_trip_every_field(store: &dyn Store, _: Other) {
    let mut r = record("full", 1_700_000_000_123);
    r.status = SandboxStatus::Running;
    r.vcpu = 4;
    r.memory_mb = 8192;
    r.secrets = vec!["B".into(), "A".into()];
    r.snapshot_id = Some(Uuid::new_v4());
    r.started_at = Some(at(1_700_000_000_456));
    r.active_ms = 12_345;
    r.running_since = Some(at(1_700_000_000_789));
    r.network = serde_json::from_str(r#"{"mode":"https-only"}"#).expect("policy");
    store.create_sandbox(&r).unwrap();
    assert_eq!(store.get_sandbox(r.id).unwrap().unwrap(), r);
    // Every field update_sandbox writes comes back.
    r.status = SandboxStatus::Failed;
    r.ended_at = Some(at(1_700_000_001_000));
    r.error = Some("boom".into());
    r.active_ms = 99;
    r.running_since = None;
    r.environment.insert("NEW".into(), "v".into());
    r.secrets = vec![];
    // A running sandbox's policy can be changed (network update).
    r.network =
        serde_json::from_str(r#"{"mode":"allowlist","allow":[{"host":"api.example.com"}]}"#)
            .expect("policy");
    store.update_sandbox(&mut r).unwrap();
    assert_eq!(store.get_sandbox(r.id).unwrap().unwrap(), r);
    assert!(store.get_sandbox(Uuid::new_v4()).unwrap().is_none());

    let now = at(1_700_000_000_000);
    let mut s = snapshot("ws", Some("snap"), now);
    s.environment.insert("E".into(), "1".into());
    s.secrets = vec!["S".into()];
    store.create_snapshot(&s, now, 0).unwrap();
    assert_eq!(store.get_snapshot(s.id).unwrap().unwrap(), s);
    s.status = SnapshotStatus::Ready;
    s.stored_bytes = 1 << 40;
    s.updated_at = now + Duration::seconds(5);
    s.expires_at = now + Duration::days(7);
    s.error = Some("note".into());
    store.update_snapshot(&mut s).unwrap();
    assert_eq!(store.get_snapshot(s.id).unwrap().unwrap(), s);
    assert!(store.get_snapshot(Uuid::new_v4()).unwrap().is_none());
}

pub fn updates_of_missing_rows_are_not_found(store: &dyn Store, _: Other) {
    assert!(matches!(
        store.update_sandbox(&mut record("ghost", 1)),
        Err(StoreError::NotFound)
    ));
    let now = at(1);
    assert!(matches!(
        store.update_snapshot(&mut snapshot("ws", None, now)),
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        store.idempotency_finish("t", "/p", "k", 200, b""),
        Err(StoreError::NotFound)
    ));
}

pub fn snapshot_limit_counts_live_snapshots_of_the_workspace_only(store: &dyn Store, _: Other) {
    let now = at(1_000_000);
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
        store.update_snapshot(&mut r).unwrap();
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
    let later = now + Duration::hours(2);
    let d = snapshot("ws", None, later);
    assert_eq!(
        store.create_snapshot(&d, later, 1).unwrap(),
        SnapshotCreateOutcome::Created
    );
    // An expired name is free again.
    let renamed = snapshot("ws", Some("a"), later);
    assert_eq!(
        store.create_snapshot(&renamed, later, 0).unwrap(),
        SnapshotCreateOutcome::Created
    );
}

pub fn listing_pages_newest_first_without_gaps(store: &dyn Store, _: Other) {
    let mut ids = Vec::new();
    for i in 0..7 {
        let r = record(&format!("s{i}"), 1000 + (i / 2)); // ties on created_at
        ids.push(r.id);
        store.create_sandbox(&r).unwrap();
    }
    let mut seen = Vec::new();
    let mut previous: Option<(i64, Uuid)> = None;
    let mut cursor = None;
    loop {
        let page = store.list_sandboxes("default", 3, cursor.as_ref()).unwrap();
        if page.is_empty() {
            break;
        }
        for r in &page {
            let here = (r.created_at.timestamp_millis(), r.id);
            if let Some(p) = previous {
                assert!(here < p, "newest first, ties by id descending");
            }
            previous = Some(here);
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
    seen.sort();
    assert_eq!(seen, ids);
    assert!(store.list_sandboxes("other", 10, None).unwrap().is_empty());
}

pub fn snapshot_listing_filters_by_name_and_hides_deleted(store: &dyn Store, _: Other) {
    let mut made = Vec::new();
    for i in 0..5 {
        let now = at(10_000 + i);
        let name = if i % 2 == 0 { Some("even") } else { None };
        let mut s = snapshot("ws", name, now);
        // Only one live holder per name: older "even" ones are READY then DELETED/FAILED.
        store.create_snapshot(&s, now, 0).unwrap();
        if name.is_some() && i < 4 {
            s.status = if i == 0 {
                SnapshotStatus::Deleted
            } else {
                SnapshotStatus::Failed
            };
            store.update_snapshot(&mut s).unwrap();
        }
        made.push(s);
    }
    let named = store.list_snapshots("ws", Some("even"), 10, None).unwrap();
    // i = 2 (FAILED) and 4 (CREATING); i = 0 is DELETED and hidden.
    assert_eq!(
        named.iter().map(|s| s.id).collect::<Vec<_>>(),
        vec![made[4].id, made[2].id]
    );
    let first = store.list_snapshots("ws", None, 2, None).unwrap();
    assert_eq!(
        first.iter().map(|s| s.id).collect::<Vec<_>>(),
        vec![made[4].id, made[3].id]
    );
    let last = first.last().unwrap();
    let cursor = SandboxCursor {
        created_at_ms: last.created_at.timestamp_millis(),
        id: last.id,
    };
    let rest = store.list_snapshots("ws", None, 10, Some(&cursor)).unwrap();
    assert_eq!(
        rest.iter().map(|s| s.id).collect::<Vec<_>>(),
        vec![made[2].id, made[1].id]
    );
    assert!(store
        .list_snapshots("nobody", None, 10, None)
        .unwrap()
        .is_empty());
}

pub fn rows_are_found_by_status(store: &dyn Store, _: Other) {
    let mut running = record("r", 1);
    running.status = SandboxStatus::Running;
    let mut paused = record("p", 2);
    paused.status = SandboxStatus::Paused;
    let pending = record("q", 3);
    for r in [&running, &paused, &pending] {
        store.create_sandbox(r).unwrap();
    }
    let mut found: Vec<Uuid> = store
        .sandboxes_in_status(
            Some("node-a"),
            &[SandboxStatus::Running, SandboxStatus::Paused],
        )
        .unwrap()
        .iter()
        .map(|r| r.id)
        .collect();
    found.sort();
    let mut want = vec![running.id, paused.id];
    want.sort();
    assert_eq!(found, want);
    assert!(store
        .sandboxes_in_status(Some("node-a"), &[])
        .unwrap()
        .is_empty());
    // Another node's sandboxes are not this node's; `None` is every node's.
    let mut elsewhere = record("e", 4);
    elsewhere.status = SandboxStatus::Running;
    elsewhere.node_id = "node-b".into();
    store.create_sandbox(&elsewhere).unwrap();
    let of = |node: Option<&str>| -> Vec<Uuid> {
        let mut ids: Vec<Uuid> = store
            .sandboxes_in_status(node, &[SandboxStatus::Running])
            .unwrap()
            .iter()
            .map(|r| r.id)
            .collect();
        ids.sort();
        ids
    };
    assert_eq!(of(Some("node-a")), vec![running.id]);
    assert_eq!(of(Some("node-b")), vec![elsewhere.id]);
    let mut both = vec![running.id, elsewhere.id];
    both.sort();
    assert_eq!(of(None), both);

    let now = at(5);
    let creating = snapshot("ws", None, now);
    let mut deleting = snapshot("ws", None, now);
    store.create_snapshot(&creating, now, 0).unwrap();
    store.create_snapshot(&deleting, now, 0).unwrap();
    deleting.status = SnapshotStatus::Deleting;
    store.update_snapshot(&mut deleting).unwrap();
    let got = store
        .snapshots_in_status(&[SnapshotStatus::Deleting])
        .unwrap();
    assert_eq!(got, vec![deleting]);
}

pub fn secrets_are_replaced_listed_and_deleted(store: &dyn Store, _: Other) {
    let secret = |name: &str, byte: u8, ms: i64| SecretRecord {
        workspace: "ws/production".into(),
        name: name.into(),
        nonce: vec![byte; 12],
        ciphertext: vec![byte, 0, 255],
        created_at: at(ms),
        updated_at: at(ms),
    };
    store.put_secret(&secret("b_KEY", 1, 10)).unwrap();
    store.put_secret(&secret("A_KEY", 2, 20)).unwrap();
    store.put_secret(&secret("a_key", 3, 30)).unwrap();
    // Replacing keeps the creation time and takes everything else.
    store.put_secret(&secret("b_KEY", 9, 40)).unwrap();
    let b = store.get_secret("ws/production", "b_KEY").unwrap().unwrap();
    assert_eq!(
        (b.nonce[0], b.created_at, b.updated_at),
        (9, at(10), at(40))
    );
    // Byte order of names, as SQLite sorts them.
    let names: Vec<String> = store
        .list_secrets("ws/production")
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, vec!["A_KEY", "a_key", "b_KEY"]);
    assert!(store.list_secrets("ws/staging").unwrap().is_empty());
    assert!(store.delete_secret("ws/production", "A_KEY").unwrap());
    assert!(!store.delete_secret("ws/production", "A_KEY").unwrap());
    assert!(store
        .get_secret("ws/production", "A_KEY")
        .unwrap()
        .is_none());
}

pub fn keys_are_found_by_digest_and_revoked_once(store: &dyn Store, _: Other) {
    let k = key("d1");
    store.create_api_key(&k).unwrap();
    assert!(
        matches!(
            store.create_api_key(&key("d1")),
            Err(StoreError::Conflict(_))
        ),
        "digest is unique"
    );
    let mut unbound = key("d0");
    unbound.env = None;
    unbound.name = None;
    unbound.created_at = at(2000);
    store.create_api_key(&unbound).unwrap();
    assert_eq!(store.find_api_key("d1").unwrap().unwrap(), k);
    assert!(store.find_api_key("d2").unwrap().is_none());
    assert_eq!(store.list_api_keys().unwrap(), vec![k.clone(), unbound]);
    assert!(store.revoke_api_key(k.id, at(5000)).unwrap());
    assert!(!store.revoke_api_key(k.id, at(6000)).unwrap());
    assert!(!store.revoke_api_key(Uuid::new_v4(), at(6000)).unwrap());
    assert_eq!(
        store.find_api_key("d1").unwrap().unwrap().revoked_at,
        Some(at(5000))
    );
}

pub fn idempotency_claims_replay_and_expire(store: &dyn Store, _: Other) {
    let now = at(1_700_000_000_000);
    let first = claim("a/production", now);
    assert_eq!(
        store.idempotency_begin(&first, now).unwrap(),
        IdempotencyBegin::Started
    );
    let IdempotencyBegin::Existing(e) = store
        .idempotency_begin(&claim("a/production", now), now)
        .unwrap()
    else {
        panic!("second claim must see the first");
    };
    assert_eq!(e, first, "the first claim, owner and all");
    store
        .idempotency_finish("a/production", "/v2/sandboxes/x/exec", "k1", 200, b"{}")
        .unwrap();
    let got = store
        .idempotency_get("a/production", "/v2/sandboxes/x/exec", "k1")
        .unwrap()
        .unwrap();
    assert_eq!(got.response, Some((200, b"{}".to_vec())));
    // Another tenant's identical key is independent.
    let other = claim("b/production", now);
    assert_eq!(
        store.idempotency_begin(&other, now).unwrap(),
        IdempotencyBegin::Started
    );
    // After expiry the key is free again, and the new claim starts without a response.
    let later = now + Duration::hours(25);
    let renewed = claim("a/production", later);
    assert_eq!(
        store.idempotency_begin(&renewed, later).unwrap(),
        IdempotencyBegin::Started
    );
    assert_eq!(
        store
            .idempotency_get("a/production", "/v2/sandboxes/x/exec", "k1")
            .unwrap(),
        Some(renewed)
    );
    store
        .idempotency_forget("a/production", "/v2/sandboxes/x/exec", "k1")
        .unwrap();
    assert!(store
        .idempotency_get("a/production", "/v2/sandboxes/x/exec", "k1")
        .unwrap()
        .is_none());
    // Only b's claim is left, and it has expired by then.
    assert_eq!(store.idempotency_expire(later).unwrap(), 1);
    assert_eq!(store.idempotency_expire(later).unwrap(), 0);
}

pub fn idempotency_leases_are_renewed_by_their_owner_and_ended_for_others(
    store: &dyn Store,
    _: Other,
) {
    let now = at(1_700_000_000_000);
    let (mine, theirs) = (claim("a/production", now), claim("b/production", now));
    let mut done = claim("c/production", now);
    done.owner = mine.owner;
    for c in [&mine, &theirs, &done] {
        assert_eq!(
            store.idempotency_begin(c, now).unwrap(),
            IdempotencyBegin::Started
        );
    }
    store
        .idempotency_finish("c/production", "/v2/sandboxes/x/exec", "k1", 200, b"{}")
        .unwrap();
    let lease = |tenant: &str| {
        store
            .idempotency_get(tenant, "/v2/sandboxes/x/exec", "k1")
            .unwrap()
            .unwrap()
            .lease_until
    };
    assert_eq!(
        lease("a/production"),
        now + Duration::seconds(30),
        "stored as claimed"
    );
    // Renewal extends the owner's unfinished claims only.
    let until = now + Duration::seconds(90);
    assert_eq!(store.idempotency_renew(mine.owner, until).unwrap(), 1);
    assert_eq!(lease("a/production"), until);
    assert_eq!(lease("b/production"), now + Duration::seconds(30));
    assert_eq!(
        lease("c/production"),
        now + Duration::seconds(30),
        "finished: left alone"
    );
    // Ending the others' leases leaves the caller's own and the finished ones.
    assert_eq!(store.idempotency_abandon_others(mine.owner).unwrap(), 1);
    assert!(lease("b/production") <= now, "b's lease ended");
    assert_eq!(lease("a/production"), until);
    assert_eq!(
        store.idempotency_abandon_others(mine.owner).unwrap(),
        0,
        "once"
    );
    // A new claim of an expired key carries its own lease (the take-over path).
    let later = now + Duration::hours(25);
    let mut again = claim("b/production", later);
    again.lease_until = later + Duration::seconds(30);
    assert_eq!(
        store.idempotency_begin(&again, later).unwrap(),
        IdempotencyBegin::Started
    );
    assert_eq!(lease("b/production"), later + Duration::seconds(30));
}

/// Runs `f(i)` on `n` threads at once, each on its own store on the same data.
pub(crate) fn race<T: Send + 'static>(
    other: Other,
    n: usize,
    f: impl Fn(&dyn Store, usize) -> T + Send + Sync + 'static,
) -> Vec<T> {
    let f = Arc::new(f);
    let stores: Vec<Arc<dyn Store>> = (0..n).map(|_| other()).collect();
    let barrier = Arc::new(std::sync::Barrier::new(n));
    let threads: Vec<_> = stores
        .into_iter()
        .enumerate()
        .map(|(i, store)| {
            let (f, barrier) = (Arc::clone(&f), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                f(&*store, i)
            })
        })
        .collect();
    threads
        .into_iter()
        .map(|t| t.join().expect("racer"))
        .collect()
}

pub fn concurrent_creates_of_one_name_create_once(store: &dyn Store, other: Other) {
    for round in 0..5 {
        let name = format!("contested-{round}");
        let outcomes = race(other, 4, move |s, i| {
            s.create_sandbox(&record(&name, i as i64)).expect("create")
        });
        let created = outcomes
            .iter()
            .filter(|o| **o == CreateOutcome::Created)
            .count();
        assert_eq!(created, 1, "exactly one create wins: {outcomes:?}");
        let holder = store
            .active_sandbox_named("default", &format!("contested-{round}"))
            .unwrap()
            .expect("the winner holds the name");
        for o in outcomes {
            if let CreateOutcome::NameHeld(h) = o {
                assert_eq!(h.id, holder.id, "every loser is shown the winner");
            }
        }
    }
}

pub fn concurrent_snapshot_creates_respect_the_limit(store: &dyn Store, other: Other) {
    let now = at(50_000);
    let outcomes = race(other, 6, move |s, _| {
        s.create_snapshot(&snapshot("ws", None, now), now, 3)
            .expect("create")
    });
    let created = outcomes
        .iter()
        .filter(|o| **o == SnapshotCreateOutcome::Created)
        .count();
    assert_eq!(created, 3, "{outcomes:?}");
    assert_eq!(store.list_snapshots("ws", None, 10, None).unwrap().len(), 3);
    let named = race(other, 4, move |s, _| {
        s.create_snapshot(&snapshot("named", Some("x"), now), now, 0)
            .expect("create")
    });
    assert_eq!(
        named
            .iter()
            .filter(|o| **o == SnapshotCreateOutcome::Created)
            .count(),
        1,
        "{named:?}"
    );
}

pub fn concurrent_claims_of_one_key_start_once(store: &dyn Store, other: Other) {
    let now = at(1_000);
    let outcomes = race(other, 4, move |s, _| {
        s.idempotency_begin(&claim("t/production", now), now)
            .expect("claim")
    });
    let started = outcomes
        .iter()
        .filter(|o| **o == IdempotencyBegin::Started)
        .count();
    assert_eq!(started, 1, "{outcomes:?}");
    // Expired: of several claimants taking it over at once, one wins.
    let later = now + Duration::hours(30);
    let outcomes = race(other, 4, move |s, _| {
        s.idempotency_begin(&claim("t/production", later), later)
            .expect("claim")
    });
    let started = outcomes
        .iter()
        .filter(|o| **o == IdempotencyBegin::Started)
        .count();
    assert_eq!(started, 1, "{outcomes:?}");
    assert!(store
        .idempotency_get("t/production", "/v2/sandboxes/x/exec", "k1")
        .unwrap()
        .is_some());
}

pub fn stale_updates_conflict_and_change_nothing(store: &dyn Store, _: Other) {
    let mut fresh = record("cas", 1);
    store.create_sandbox(&fresh).unwrap();
    assert_eq!(store.get_sandbox(fresh.id).unwrap().unwrap().generation, 0);
    let mut stale = fresh.clone();
    fresh.status = SandboxStatus::Running;
    store.update_sandbox(&mut fresh).unwrap();
    assert_eq!(fresh.generation, 1, "the caller's record follows the row");
    assert_eq!(store.get_sandbox(fresh.id).unwrap().unwrap(), fresh);
    // A write based on the read before that one is refused whole.
    stale.status = SandboxStatus::Terminated;
    stale.error = Some("stale".into());
    assert!(matches!(
        store.update_sandbox(&mut stale),
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(
        stale.generation, 0,
        "a refused write leaves the record as it was"
    );
    assert_eq!(store.get_sandbox(fresh.id).unwrap().unwrap(), fresh);
    // Still active: the stale TERMINATED did not free the name either.
    assert!(store
        .active_sandbox_named("default", "cas")
        .unwrap()
        .is_some());

    let now = at(1_000);
    let mut snap = snapshot("ws", None, now);
    store.create_snapshot(&snap, now, 0).unwrap();
    let mut old = snap.clone();
    snap.status = SnapshotStatus::Ready;
    store.update_snapshot(&mut snap).unwrap();
    assert_eq!(snap.generation, 1);
    old.status = SnapshotStatus::Failed;
    assert!(matches!(
        store.update_snapshot(&mut old),
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(store.get_snapshot(snap.id).unwrap().unwrap(), snap);
}

pub fn concurrent_updates_of_one_row_let_exactly_one_win(store: &dyn Store, other: Other) {
    for round in 0..5 {
        let base = record(&format!("raced-{round}"), round);
        store.create_sandbox(&base).unwrap();
        let snap_base = snapshot("ws", None, at(round));
        store.create_snapshot(&snap_base, at(round), 0).unwrap();
        // Every racer read the same row and writes its own change of it.
        let (sandbox, snap) = (base.clone(), snap_base.clone());
        let outcomes = race(other, 4, move |s, i| {
            let mut mine = sandbox.clone();
            mine.error = Some(format!("racer {i}"));
            let mut my_snap = snap.clone();
            my_snap.error = Some(format!("racer {i}"));
            (
                s.update_sandbox(&mut mine).map(|()| i),
                s.update_snapshot(&mut my_snap).map(|()| i),
            )
        });
        let mut sandbox_wins = Vec::new();
        let mut snapshot_wins = Vec::new();
        for (a, b) in outcomes {
            match a {
                Ok(i) => sandbox_wins.push(i),
                Err(e) => assert!(matches!(e, StoreError::Conflict(_)), "{e:?}"),
            }
            match b {
                Ok(i) => snapshot_wins.push(i),
                Err(e) => assert!(matches!(e, StoreError::Conflict(_)), "{e:?}"),
            }
        }
        assert_eq!(
            sandbox_wins.len(),
            1,
            "one sandbox write wins: {sandbox_wins:?}"
        );
        assert_eq!(
            snapshot_wins.len(),
            1,
            "one snapshot write wins: {snapshot_wins:?}"
        );
        let row = store.get_sandbox(base.id).unwrap().unwrap();
        assert_eq!(row.generation, 1);
        assert_eq!(row.error, Some(format!("racer {}", sandbox_wins[0])));
        let snap_row = store.get_snapshot(snap_base.id).unwrap().unwrap();
        assert_eq!(snap_row.generation, 1);
        assert_eq!(snap_row.error, Some(format!("racer {}", snapshot_wins[0])));
    }
}
