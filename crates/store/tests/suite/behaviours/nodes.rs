//! Node behaviours: registration under a lease, heartbeats fenced by the lease epoch,
//! listing and draining.

use super::{at, Other};
use sbx_store::{NodeRegistration, NodeState, Store, StoreError};
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
