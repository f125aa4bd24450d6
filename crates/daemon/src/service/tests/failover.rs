//! Node loss on the fake runtime: two nodes (each a service with its own fake
//! host) on one SQLite file, as two sbxd of a cluster on one database.

use super::*;
use crate::service::Heartbeat;

/// A node of the pair: its service and its host.
struct Node {
    service: Arc<Service>,
    runtime: Arc<FakeRuntime>,
}

/// Nodes `a` and `b` with one-second leases on one store in `dir`.
fn two_nodes(dir: &std::path::Path) -> (Node, Node, Arc<dyn Store>) {
    let store: Arc<dyn Store> =
        Arc::new(SqliteStore::open(&dir.join("shared.sqlite")).expect("open store"));
    let node = |id: &str| {
        let mut config = Config::for_tests(dir.join(id));
        config.node.id = id.to_string();
        config.node.cluster = true;
        config.node.lease = Duration::from_secs(1);
        std::fs::create_dir_all(&config.data_dir).expect("data dir");
        let secrets =
            crate::service::SecretBox::load_or_create(&dir.join("secret.key")).expect("key");
        let runtime = Arc::new(FakeRuntime::new());
        let service = Service::new(config, store.clone(), runtime.clone(), secrets);
        Node { service, runtime }
    };
    (node("a"), node("b"), store)
}

async fn running_on(node: &Node, name: &str) -> Uuid {
    match node.service.create(WS, request(name)).await {
        Ok(CreateOutcome::Created(r)) => {
            assert_eq!(r.status, SandboxStatus::Running, "{r:?}");
            r.id
        }
        other => panic!("create {name}: {other:?}"),
    }
}

#[tokio::test]
async fn a_lost_node_is_failed_over_once_and_cleans_up_when_it_returns() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, b, store) = two_nodes(dir.path());
    a.service.register_node().await.expect("register a");
    b.service.register_node().await.expect("register b");
    let on_a = running_on(&a, "on-a").await;
    let on_b = running_on(&b, "on-b").await;
    assert_eq!(store.get_sandbox(on_a).unwrap().unwrap().node_id, "a");

    // Each node's own duties see only its own sandboxes.
    let nodes = b.service.list_nodes().await.expect("list");
    let load: Vec<(&str, u64)> = nodes.iter().map(|n| (n.id.as_str(), n.sandboxes)).collect();
    assert_eq!(load, vec![("a", 1), ("b", 1)]);
    assert_eq!(nodes[0].load.memory_mb, 1024);

    // While a's lease holds, b fails nothing over.
    assert_eq!(b.service.fail_over_lost_nodes().await, 0);
    // a stops heartbeating (as if cut off): its lease is made to end now.
    store
        .heartbeat_node("a", 1, chrono::Utc::now(), chrono::Utc::now())
        .expect("end a's lease");
    assert_eq!(b.service.fail_over_lost_nodes().await, 1);
    assert_eq!(b.service.fail_over_lost_nodes().await, 0, "once");
    let lost = store.get_sandbox(on_a).unwrap().unwrap();
    assert_eq!(lost.status, SandboxStatus::Failed);
    assert_eq!(lost.error.as_deref(), Some(sbx_store::NODE_LOST));
    assert_eq!(
        store.get_sandbox(on_b).unwrap().unwrap().status,
        SandboxStatus::Running,
        "b's sandbox is untouched"
    );
    // Nothing on a acts on the lost sandbox: a pause is refused by the store's state.
    assert!(a.service.pause(WS, on_a).await.is_err());

    // a comes back: its heartbeat is fenced; it removes the leftover and rejoins.
    assert!(a.runtime.host_ids().contains(&on_a));
    match a.service.heartbeat_node().await {
        Heartbeat::Fenced(_) => {}
        other => panic!("a was not fenced: {other:?}"),
    }
    let back = a
        .service
        .recover_from_fence()
        .await
        .expect("recover")
        .expect("a was failed over, so it rejoins");
    assert_eq!(back.epoch, 3, "failed over (2), then registered again (3)");
    assert!(
        !a.runtime.host_ids().contains(&on_a),
        "the leftover is gone"
    );
    assert!(matches!(
        a.service.heartbeat_node().await,
        Heartbeat::Renewed
    ));
    assert_eq!(
        store.get_sandbox(on_a).unwrap().unwrap().status,
        SandboxStatus::Failed,
        "not resurrected"
    );
    // b's sandbox and host are as they were; a takes new sandboxes again.
    assert!(b.runtime.host_ids().contains(&on_b));
    running_on(&a, "again-on-a").await;
}

#[tokio::test]
async fn a_node_fenced_by_another_run_of_itself_stops_without_acting() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, _b, store) = two_nodes(dir.path());
    a.service.register_node().await.expect("register");
    let on_a = running_on(&a, "on-a").await;
    store
        .heartbeat_node("a", 1, chrono::Utc::now(), chrono::Utc::now())
        .expect("end the lease");
    // Another run registers node id "a" (not a fail-over).
    store
        .register_node(
            &sbx_store::NodeRegistration {
                id: "a".into(),
                advertise_url: "http://127.0.0.1:1".into(),
                version: "0".into(),
                labels: Default::default(),
                vcpu_milli: 1000,
                memory_mb: 1024,
            },
            chrono::Utc::now(),
            chrono::Utc::now() + chrono::Duration::seconds(60),
        )
        .expect("another run");
    assert!(matches!(
        a.service.heartbeat_node().await,
        Heartbeat::Fenced(_)
    ));
    assert!(a
        .service
        .recover_from_fence()
        .await
        .expect("recover")
        .is_none());
    assert!(a.runtime.host_ids().contains(&on_a), "nothing destroyed");
}
