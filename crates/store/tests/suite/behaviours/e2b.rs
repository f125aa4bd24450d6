//! E2B record behaviours: one row per sandbox, listed by workspace and metadata,
//! end time changed by compare-and-set, the sweep's due rows per node, and the
//! rows of ended sandboxes deleted.

use super::{at, race, record, Other};
use sbx_api_types::SandboxStatus;
use sbx_store::{E2bRecord, SandboxRecord, Store, StoreError};
use std::collections::BTreeMap;

fn e2b(sandbox: &SandboxRecord, meta: &[(&str, &str)], end_ms: i64) -> E2bRecord {
    E2bRecord {
        sandbox_id: sandbox.id,
        workspace: sandbox.workspace.clone(),
        template_id: "base".into(),
        metadata: meta
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        end_at: at(end_ms),
        auto_pause: false,
        envd_access_token: format!("token-{}", sandbox.id.simple()),
        allow_internet_access: true,
        allow_public_traffic: true,
        traffic_access_token: None,
        generation: 0,
    }
}

fn filter(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

pub fn e2b_records_round_trip_list_by_workspace_and_metadata_and_delete(
    store: &dyn Store,
    other: Other,
) {
    let a = record("a", 1_000);
    let b = record("b", 2_000);
    let mut c = record("c", 3_000);
    c.workspace = "other/production".into();
    for s in [&a, &b, &c] {
        store.create_sandbox(s).unwrap();
    }
    let mut ra = e2b(&a, &[("team", "x"), ("k", "v w")], 10_000);
    ra.auto_pause = true;
    ra.allow_internet_access = false;
    ra.allow_public_traffic = false;
    ra.traffic_access_token = Some("traffic".into());
    let rb = e2b(&b, &[("team", "y")], 11_000);
    let rc = e2b(&c, &[("team", "x")], 12_000);
    for r in [&ra, &rb, &rc] {
        assert!(store.create_e2b_record(r).unwrap());
    }
    // A second insert (an import run twice, a retried create) changes nothing.
    let mut changed = ra.clone();
    changed.template_id = "other".into();
    assert!(!other().create_e2b_record(&changed).unwrap());
    assert_eq!(other().get_e2b_record(a.id).unwrap(), Some(ra.clone()));
    assert_eq!(store.get_e2b_record(uuid::Uuid::new_v4()).unwrap(), None);

    let ids = |rs: Vec<E2bRecord>| {
        let mut v: Vec<_> = rs.into_iter().map(|r| r.sandbox_id).collect();
        v.sort();
        v
    };
    let sorted = |mut v: Vec<uuid::Uuid>| {
        v.sort();
        v
    };
    let ws = Some("default");
    assert_eq!(
        ids(store.list_e2b_records(ws, &filter(&[])).unwrap()),
        sorted(vec![a.id, b.id])
    );
    assert_eq!(
        ids(store
            .list_e2b_records(ws, &filter(&[("team", "x")]))
            .unwrap()),
        vec![a.id]
    );
    assert_eq!(
        ids(store
            .list_e2b_records(ws, &filter(&[("team", "x"), ("k", "v w")]))
            .unwrap()),
        vec![a.id]
    );
    assert!(store
        .list_e2b_records(ws, &filter(&[("team", "x"), ("k", "v")]))
        .unwrap()
        .is_empty());
    assert_eq!(
        ids(store
            .list_e2b_records(None, &filter(&[("team", "x")]))
            .unwrap()),
        sorted(vec![a.id, c.id])
    );
    assert_eq!(store.list_e2b_records(None, &filter(&[])).unwrap().len(), 3);

    assert!(store.delete_e2b_record(b.id).unwrap());
    assert!(!other().delete_e2b_record(b.id).unwrap());
    assert_eq!(other().get_e2b_record(b.id).unwrap(), None);
}

pub fn e2b_updates_are_compare_and_set_and_exactly_one_racer_wins(store: &dyn Store, other: Other) {
    let s = record("raced", 1_000);
    store.create_sandbox(&s).unwrap();
    let base = e2b(&s, &[], 10_000);
    store.create_e2b_record(&base).unwrap();
    let mut read = store.get_e2b_record(s.id).unwrap().unwrap();
    assert_eq!(read.generation, 0);
    read.end_at = at(20_000);
    read.auto_pause = true;
    store.update_e2b_record(&mut read).unwrap();
    assert_eq!(read.generation, 1);
    assert_eq!(other().get_e2b_record(s.id).unwrap(), Some(read.clone()));
    // A write from the generation before is a conflict and changes nothing.
    let mut stale = base.clone();
    stale.end_at = at(99_000);
    assert!(matches!(
        other().update_e2b_record(&mut stale),
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(store.get_e2b_record(s.id).unwrap(), Some(read.clone()));
    let mut missing = e2b(&record("none", 1), &[], 1);
    assert!(matches!(
        store.update_e2b_record(&mut missing),
        Err(StoreError::NotFound)
    ));

    // Racers (two nodes extending one timeout, or the sweep claiming an expiry
    // while a connect extends it) that read the same row: exactly one wins.
    for round in 0..5 {
        let current = store.get_e2b_record(s.id).unwrap().unwrap();
        let outcomes = race(other, 4, move |st, i| {
            let mut mine = current.clone();
            mine.end_at = at(30_000 + round * 100 + i as i64);
            st.update_e2b_record(&mut mine).map(|()| mine)
        });
        let mut wins = Vec::new();
        for o in outcomes {
            match o {
                Ok(r) => wins.push(r),
                Err(e) => assert!(matches!(e, StoreError::Conflict(_)), "{e:?}"),
            }
        }
        assert_eq!(wins.len(), 1, "one write wins");
        assert_eq!(store.get_e2b_record(s.id).unwrap(), Some(wins[0].clone()));
    }
}

pub fn e2b_records_due_are_the_running_sandboxes_of_one_node(store: &dyn Store, _: Other) {
    let mut mine = record("mine", 1_000);
    mine.status = SandboxStatus::Running;
    let mut later = record("later", 1_000);
    later.status = SandboxStatus::Running;
    let mut theirs = record("theirs", 1_000);
    theirs.status = SandboxStatus::Running;
    theirs.node_id = "node-b".into();
    let mut paused = record("paused", 1_000);
    paused.status = SandboxStatus::Paused;
    for s in [&mine, &later, &theirs, &paused] {
        store.create_sandbox(s).unwrap();
        let end = if s.id == later.id { 60_000 } else { 5_000 };
        store.create_e2b_record(&e2b(s, &[], end)).unwrap();
    }
    let due = |node: &str, now: i64| -> Vec<uuid::Uuid> {
        store
            .e2b_records_due(node, at(now))
            .unwrap()
            .into_iter()
            .map(|r| r.sandbox_id)
            .collect()
    };
    assert!(due("node-a", 4_999).is_empty());
    assert_eq!(due("node-a", 5_000), vec![mine.id]);
    assert_eq!(due("node-b", 5_000), vec![theirs.id]);
    assert_eq!(due("node-a", 60_000), vec![mine.id, later.id]);
    assert!(due("node-c", 60_000).is_empty());
}

pub fn e2b_records_of_ended_sandboxes_are_deleted(store: &dyn Store, other: Other) {
    let mut ended = record("ended", 1_000);
    store.create_sandbox(&ended).unwrap();
    let mut failed = record("failed", 1_000);
    store.create_sandbox(&failed).unwrap();
    let mut live = record("live", 1_000);
    live.status = SandboxStatus::Paused;
    store.create_sandbox(&live).unwrap();
    let orphan = record("never-stored", 1_000);
    for s in [&ended, &failed, &live, &orphan] {
        store.create_e2b_record(&e2b(s, &[], 1)).unwrap();
    }
    assert_eq!(store.delete_ended_e2b_records().unwrap(), 1, "the orphan");
    ended.status = SandboxStatus::Terminated;
    ended.ended_at = Some(at(2_000));
    store.update_sandbox(&mut ended).unwrap();
    failed.status = SandboxStatus::Failed;
    store.update_sandbox(&mut failed).unwrap();
    assert_eq!(other().delete_ended_e2b_records().unwrap(), 2);
    assert_eq!(store.delete_ended_e2b_records().unwrap(), 0);
    let left: Vec<_> = store
        .list_e2b_records(None, &BTreeMap::new())
        .unwrap()
        .into_iter()
        .map(|r| r.sandbox_id)
        .collect();
    assert_eq!(left, vec![live.id]);
}
