//! Node behaviours: registration under a lease, heartbeats fenced by the lease epoch,
//! listing and draining.

use super::{at, record, snapshot, Other};
use sbx_api_types::SandboxStatus;
use sbx_store::{NodeRegistration, NodeState, SnapshotStatus, Store, StoreError, NODE_LOST};
use std::collections::BTreeMap;

fn node(id: &str) -> NodeRegistration {
    NodeRegistration {
        id: id.into(),
        advertise_url: format!("http://{id}:8731"),
        version: "0.1.0".into(),
        labels: BTreeMap::from([("zone".to_string(), "a".to_string())]),
        vcpu_milli: 4000,
        memory_mb: 8192,
    }
}

pub fn nodes_register_heartbeat_list_and_drain(store: &dyn Store, other: Other) {
    assert!(store.list_nodes().unwrap().is_empty());
    let a = store
        .register_node(&node("a"), at(1_000), at(16_000))
        .unwrap();
    assert_eq!(a.epoch, 1);
    assert_eq!(a.state, NodeState::Active);
    assert_eq!(a.registered_at, at(1_000));
    assert_eq!(a.last_heartbeat, at(1_000));
    assert_eq!(a.lease_until, at(16_000));
    assert_eq!(a.labels.get("zone").map(String::as_str), Some("a"));
    assert_eq!((a.vcpu_milli, a.memory_mb), (4000, 8192));
    store
        .register_node(&node("b"), at(1_500), at(16_500))
        .unwrap();

    // A heartbeat with the current epoch extends the lease, seen by another handle too.
    let renewed = store.heartbeat_node("a", 1, at(6_000), at(21_000)).unwrap();
    assert_eq!(renewed.lease_until, at(21_000));
    assert_eq!(renewed.last_heartbeat, at(6_000));
    assert_eq!(renewed.registered_at, at(1_000));
    let listed = other().list_nodes().unwrap();
    let ids: Vec<&str> = listed.iter().map(|n| n.id.as_str()).collect();
    assert_eq!(ids, ["a", "b"]);
    assert_eq!(listed[0], renewed);
    assert!(!listed[0].is_lost(at(20_999)));
    assert!(listed[0].is_lost(at(21_000)));

    // Draining is the operator's: it survives a re-registration within the lease.
    let drained = other().set_node_draining("a", true).unwrap();
    assert_eq!(drained.state, NodeState::Draining);
    let again = store
        .register_node(&node("a"), at(7_000), at(22_000))
        .unwrap();
    assert_eq!(again.state, NodeState::Draining);
    assert_eq!(again.epoch, 1, "a restart within the lease keeps the epoch");
    assert_eq!(
        store.set_node_draining("a", false).unwrap().state,
        NodeState::Active
    );

    assert!(matches!(
        store.set_node_draining("nope", true),
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        store.heartbeat_node("nope", 1, at(7_000), at(22_000)),
        Err(StoreError::NotFound)
    ));
}

pub fn an_expired_lease_re_registered_bumps_the_epoch_and_fences_the_old_one(
    store: &dyn Store,
    other: Other,
) {
    let first = store.register_node(&node("n"), at(0), at(2_000)).unwrap();
    assert_eq!(first.epoch, 1);
    // The lease ran out; the node (a new run of it) registers again elsewhere.
    let second = other()
        .register_node(&node("n"), at(5_000), at(7_000))
        .unwrap();
    assert_eq!(second.epoch, 2);
    assert_eq!(second.registered_at, at(5_000));

    // The old run's heartbeat is fenced and changes nothing.
    match store.heartbeat_node("n", 1, at(5_500), at(60_000)) {
        Err(StoreError::Fenced {
            node,
            held,
            current,
        }) => assert_eq!((node.as_str(), held, current), ("n", 1, 2)),
        other => panic!("expected a fenced heartbeat, got {other:?}"),
    }
    let stored = store.list_nodes().unwrap();
    assert_eq!(stored, vec![second.clone()]);

    // The current epoch's heartbeat works, and a later expiry bumps it again.
    store.heartbeat_node("n", 2, at(6_000), at(8_000)).unwrap();
    let third = store
        .register_node(&node("n"), at(8_000), at(10_000))
        .unwrap();
    assert_eq!(third.epoch, 3, "a lease ending exactly now has run out");
}

/// A sandbox of `node` in `status`, stored.
fn sandbox_on(store: &dyn Store, node: &str, name: &str, status: SandboxStatus) -> uuid::Uuid {
    let mut r = record(name, 1);
    r.node_id = node.into();
    r.status = status;
    if status == SandboxStatus::Running {
        r.running_since = Some(at(1_000));
        r.started_at = Some(at(1_000));
    }
    assert_eq!(
        store.create_sandbox(&r).unwrap(),
        sbx_store::CreateOutcome::Created
    );
    r.id
}

pub fn a_lost_node_is_failed_over_once_and_fenced(store: &dyn Store, other: Other) {
    let a = store.register_node(&node("a"), at(0), at(2_000)).unwrap();
    store.register_node(&node("b"), at(0), at(60_000)).unwrap();
    let running = sandbox_on(store, "a", "r", SandboxStatus::Running);
    let paused = sandbox_on(store, "a", "p", SandboxStatus::Paused);
    let ending = sandbox_on(store, "a", "t", SandboxStatus::Terminating);
    let on_b = sandbox_on(store, "b", "rb", SandboxStatus::Running);
    let mut snap = snapshot("default", None, at(1_500));
    snap.source_sandbox = running;
    store.create_snapshot(&snap, at(1_500), 0).unwrap();

    // Within its lease, a node is not failed over.
    assert_eq!(store.fail_over_node("a", a.epoch, at(1_999)).unwrap(), None);
    // A stale epoch is refused too.
    assert_eq!(
        store.fail_over_node("a", a.epoch + 7, at(3_000)).unwrap(),
        None
    );

    let done = store
        .fail_over_node("a", a.epoch, at(3_000))
        .unwrap()
        .expect("the lost node is failed over");
    assert_eq!(done.epoch, a.epoch + 1);
    let mut ended = done.sandboxes.clone();
    ended.sort();
    let mut want = vec![running, paused, ending];
    want.sort();
    assert_eq!(ended, want);

    let r = store.get_sandbox(running).unwrap().unwrap();
    assert_eq!(r.status, SandboxStatus::Failed);
    assert_eq!(r.error.as_deref(), Some(NODE_LOST));
    assert_eq!(r.ended_at, Some(at(3_000)));
    assert_eq!(r.running_since, None);
    assert_eq!(
        r.active_ms, 2_000,
        "its running time up to the fail-over is kept"
    );
    assert_eq!(
        r.generation, 1,
        "a compare-and-set at the old generation now conflicts"
    );
    let p = store.get_sandbox(paused).unwrap().unwrap();
    assert_eq!(p.status, SandboxStatus::Failed);
    let t = store.get_sandbox(ending).unwrap().unwrap();
    assert_eq!(
        t.status,
        SandboxStatus::Terminated,
        "a destroy under way ends as one"
    );
    assert_eq!(t.error, None);
    let b = store.get_sandbox(on_b).unwrap().unwrap();
    assert_eq!(
        b.status,
        SandboxStatus::Running,
        "another node's sandbox is untouched"
    );
    let s = store.get_snapshot(snap.id).unwrap().unwrap();
    assert_eq!(s.status, SnapshotStatus::Failed);
    assert_eq!(s.error.as_deref(), Some(NODE_LOST));

    // Once: neither this store nor a second one fails it over again.
    assert_eq!(store.fail_over_node("a", a.epoch, at(4_000)).unwrap(), None);
    assert_eq!(
        other().fail_over_node("a", done.epoch, at(4_000)).unwrap(),
        None
    );
    let listed = store.list_nodes().unwrap();
    let a_row = listed.iter().find(|n| n.id == "a").unwrap();
    assert_eq!(a_row.failed_over_at, Some(at(3_000)));
    // The lost node's own heartbeat is fenced.
    assert!(matches!(
        store.heartbeat_node("a", a.epoch, at(4_500), at(9_000)),
        Err(StoreError::Fenced { .. })
    ));
    // Back again, it registers under a newer epoch and may be failed over anew later.
    let back = store
        .register_node(&node("a"), at(5_000), at(7_000))
        .unwrap();
    assert!(back.epoch > done.epoch);
    assert_eq!(back.failed_over_at, None);
    let again = store
        .fail_over_node("a", back.epoch, at(8_000))
        .unwrap()
        .expect("lost again");
    assert!(again.sandboxes.is_empty(), "nothing was active any more");
}

pub fn a_node_back_before_its_fail_over_keeps_its_sandboxes(store: &dyn Store, other: Other) {
    let a = store.register_node(&node("a"), at(0), at(2_000)).unwrap();
    let running = sandbox_on(store, "a", "r", SandboxStatus::Running);
    // The lease ran out, but the node (restarted) registered before anyone failed it
    // over: the fail-over, decided on the epoch it saw, does nothing.
    let back = other()
        .register_node(&node("a"), at(3_000), at(9_000))
        .unwrap();
    assert_eq!(back.epoch, a.epoch + 1);
    assert_eq!(store.fail_over_node("a", a.epoch, at(3_500)).unwrap(), None);
    assert_eq!(
        store.get_sandbox(running).unwrap().unwrap().status,
        SandboxStatus::Running
    );
}

pub fn sandboxes_from_before_nodes_are_adopted_and_usage_is_per_node(store: &dyn Store, _: Other) {
    let old = sandbox_on(store, "", "old", SandboxStatus::Running);
    sandbox_on(store, "b", "b1", SandboxStatus::Running);
    sandbox_on(store, "b", "b2", SandboxStatus::Paused);
    sandbox_on(store, "b", "done", SandboxStatus::Terminated);
    assert_eq!(store.adopt_unowned_sandboxes("a").unwrap(), 1);
    assert_eq!(
        store.adopt_unowned_sandboxes("c").unwrap(),
        0,
        "adopted once"
    );
    let adopted = store.get_sandbox(old).unwrap().unwrap();
    assert_eq!(adopted.node_id, "a");
    let usage = store.node_usage().unwrap();
    let by: Vec<(&str, u64, u64, u64)> = usage
        .iter()
        .map(|u| (u.node_id.as_str(), u.sandboxes, u.vcpu_milli, u.memory_mb))
        .collect();
    assert_eq!(by, vec![("a", 1, 1000, 1024), ("b", 2, 2000, 2048)]);
}
