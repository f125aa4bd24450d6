//! This node's registration and heartbeat, fencing by lease epoch, and who may drain.

use super::*;
use crate::service::{Heartbeat, ServiceError};
use sbx_api_types::NodeState;

/// A node with a one-second lease.
fn node(id: &str) -> impl FnOnce(&mut Config) + '_ {
    move |c| {
        c.node.id = id.to_string();
        c.node.lease = Duration::from_secs(1);
    }
}

#[tokio::test]
async fn a_node_registers_heartbeats_and_is_listed() {
    let h = Harness::with(node("n1"));
    let registered = h.service.register_node().await.expect("register");
    assert_eq!((registered.id.as_str(), registered.epoch), ("n1", 1));
    assert_eq!(registered.state, NodeState::Active);
    assert!(matches!(
        h.service.heartbeat_node().await,
        Heartbeat::Renewed
    ));
    let list = h.service.list_nodes().await.expect("list");
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].capacity.memory_mb, h.service.capacity().memory_mb);
}

#[tokio::test]
async fn a_re_registration_after_the_lease_fences_the_old_process() {
    let old = Harness::with(node("n1"));
    old.service.register_node().await.expect("register");
    // The lease runs out (as if the process had hung); a new run of the node registers.
    old.store
        .heartbeat_node("n1", 1, chrono::Utc::now(), chrono::Utc::now())
        .expect("end the lease");
    let new = {
        let secrets =
            crate::service::SecretBox::load_or_create(&old.service.config().secret_key_path())
                .expect("key");
        Service::new(
            old.service.config().clone(),
            old.store.clone(),
            old.runtime.clone(),
            secrets,
        )
    };
    assert_eq!(new.register_node().await.expect("register").epoch, 2);
    assert!(matches!(new.heartbeat_node().await, Heartbeat::Renewed));
    match old.service.heartbeat_node().await {
        Heartbeat::Fenced(why) => assert!(why.contains("epoch 1"), "{why}"),
        other => panic!("the old process was not fenced: {other:?}"),
    }
}

#[tokio::test]
async fn only_the_operator_drains_and_unknown_nodes_are_not_found() {
    let h = Harness::with(node("n1"));
    h.service.register_node().await.expect("register");
    let refused = h.service.set_node_draining(WS, "n1", true).await;
    assert!(
        matches!(refused, Err(ServiceError::AccessDenied(_))),
        "{refused:?}"
    );
    let drained = h
        .service
        .set_node_draining("default/production", "n1", true)
        .await
        .expect("drain");
    assert_eq!(drained.state, NodeState::Draining);
    let missing = h
        .service
        .set_node_draining("default/production", "n2", true)
        .await;
    assert!(
        matches!(missing, Err(ServiceError::NodeNotFound(_))),
        "{missing:?}"
    );
    let undrained = h
        .service
        .set_node_draining("default/staging", "n1", false)
        .await
        .expect("undrain");
    assert_eq!(undrained.state, NodeState::Active);
}
