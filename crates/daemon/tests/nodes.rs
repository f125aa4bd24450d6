//! Cluster mode: two sbxd with `--cluster` on one PostgreSQL list each other as
//! nodes with their load, a drain through one is seen through the other; a node
//! killed with -9 becomes `lost` once its lease runs out, the other fails its
//! sandboxes over (FAILED "node lost") and keeps working, and the killed node,
//! restarted, comes back under a new lease epoch, resurrects nothing and removes
//! its leftovers; `--cluster` without `--database-url` is refused at start.
//!
//! Needs what the other integration tests need, plus the PostgreSQL server whose URL
//! `./scripts/test` exports as `SBX_TEST_DATABASE_URL`.

mod common;

use common::Daemon;
use sbx_store::TestDatabase;
use serde_json::Value;
use std::time::{Duration, Instant};

fn database() -> TestDatabase {
    let url = std::env::var("SBX_TEST_DATABASE_URL").unwrap_or_else(|_| {
        panic!("SBX_TEST_DATABASE_URL is not set: run ./scripts/test, which starts PostgreSQL")
    });
    TestDatabase::create(&url).unwrap_or_else(|e| panic!("creating a test database: {e}"))
}

/// A cluster node on `url` with a 2 s lease.
async fn node(url: &str, id: &str, zone: &str) -> Daemon {
    let label = format!("zone={zone}");
    Daemon::start(&[
        "--cluster",
        "--database-url",
        url,
        "--node-id",
        id,
        "--node-lease-secs",
        "2",
        "--node-label",
        &label,
    ])
    .await
}

/// `GET /v1/nodes` through `d`.
async fn nodes(d: &Daemon) -> Vec<Value> {
    let (status, body) = d.call("GET", "/v1/nodes", None).await;
    assert_eq!(status, 200, "{body}");
    body["data"].as_array().cloned().expect("a node list")
}

/// The node `id` as `d` lists it.
async fn node_seen(d: &Daemon, id: &str) -> Value {
    nodes(d)
        .await
        .into_iter()
        .find(|n| n["id"] == id)
        .unwrap_or_else(|| panic!("node {id} not listed"))
}

/// Polls `d`'s list until node `id` satisfies `want`, at most `within`.
async fn wait_node(d: &Daemon, id: &str, within: Duration, want: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let n = node_seen(d, id).await;
        if want(&n) {
            return n;
        }
        assert!(Instant::now() < deadline, "node {id} never got there: {n}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
#[ignore = "needs root, runsc, the image and PostgreSQL; run ./scripts/test"]
async fn two_nodes_list_drain_lose_and_fence_each_other() {
    let db = database();
    let mut a = node(db.url(), "node-a", "a").await;
    let b = node(db.url(), "node-b", "b").await;

    // Either node lists both, with what each registered.
    for d in [&a, &b] {
        let list = nodes(d).await;
        let ids: Vec<&str> = list.iter().filter_map(|n| n["id"].as_str()).collect();
        assert_eq!(ids, ["node-a", "node-b"]);
        for n in &list {
            assert_eq!(n["state"], "active", "{n}");
            assert_eq!(n["epoch"], 1, "{n}");
            assert!(
                n["capacity"]["vcpu"].as_f64().is_some_and(|v| v > 0.0),
                "{n}"
            );
            assert!(
                n["capacity"]["memoryMb"].as_u64().is_some_and(|m| m > 0),
                "{n}"
            );
            assert!(n["version"].as_str().is_some_and(|v| !v.is_empty()), "{n}");
        }
    }
    let seen_a = node_seen(&b, "node-a").await;
    assert_eq!(seen_a["advertiseUrl"], a.base.as_str());
    assert_eq!(seen_a["labels"]["zone"], "a");

    // A drain through A shows through B; undrain through B shows through A.
    let (status, body) = a.call("POST", "/v1/nodes/node-b/drain", None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"]["state"], "draining");
    assert_eq!(node_seen(&b, "node-b").await["state"], "draining");
    let (status, body) = b.call("POST", "/v1/nodes/node-b/undrain", None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(node_seen(&a, "node-b").await["state"], "active");

    // Unknown ids, and callers that are not the operator.
    let missing = a.call("POST", "/v1/nodes/node-z/drain", None).await;
    common::assert_error(&missing, 404, "node_not_found");
    let tenant_key = a.create_key("acme", None);
    let bearer = format!(
        "Bearer {}",
        sbx_api_types::signing_key::hashed_signing_key(&tenant_key)
    );
    let headers = [("authorization", bearer.as_str())];
    let (status, body) = a.call_with("GET", "/v1/nodes", None, &headers).await;
    assert_eq!(status, 200, "any caller may list: {body}");
    let refused = a
        .call_with("POST", "/v1/nodes/node-b/drain", None, &headers)
        .await;
    common::assert_error(&refused, 403, "access_denied");
    assert_eq!(node_seen(&a, "node-b").await["state"], "active");

    // A sandbox on each node; each node counts its own.
    let on_a = a.create_running("on-a").await;
    let on_b = b.create_running("on-b").await;
    for (id, n) in [("node-a", &on_a), ("node-b", &on_b)] {
        let seen = node_seen(&b, id).await;
        assert_eq!(seen["sandboxes"], 1, "{n}: {seen}");
        assert_eq!(seen["load"]["memoryMb"], 1024, "{seen}");
    }

    // kill -9 of A (its sandbox's container lives on): once its 2 s lease runs out,
    // B fails it over; A's sandbox is FAILED "node lost" within the lease plus 5 s.
    a.kill9();
    let killed = Instant::now();
    let failed = b
        .wait_status(&on_a, "FAILED", Duration::from_secs(2 + 5))
        .await;
    println!(
        "node-a's sandbox FAILED {:?} after kill -9",
        killed.elapsed()
    );
    assert_eq!(failed["error"], "node lost", "{failed}");
    let lost = node_seen(&b, "node-a").await;
    assert_eq!(lost["state"], "lost", "{lost}");
    assert_eq!(lost["epoch"], 2, "the fail-over fenced it: {lost}");
    assert!(lost["failedOverAt"].is_string(), "{lost}");
    assert_eq!(lost["sandboxes"], 0, "{lost}");
    assert_eq!(node_seen(&b, "node-b").await["state"], "active");
    // B's own sandbox is untouched, and creates through B keep succeeding.
    let (_, b_now) = b.call("GET", &format!("/v2/sandboxes/{on_b}"), None).await;
    assert_eq!(b_now["data"]["status"], "RUNNING", "{b_now}");
    assert_eq!(b.exec(&on_b, &["echo", "still"]).await.1.trim(), "still");
    let after = b.create_running("after-loss").await;
    let (status, _) = b
        .call("DELETE", &format!("/v2/sandboxes/{after}"), None)
        .await;
    assert!(status == 202 || status == 204, "{status}");
    assert!(
        a.runsc_containers().iter().any(|c| c.contains(&on_a)),
        "the killed node's container outlived sbxd (the leftover to clean)"
    );

    // A restarted after it was failed over comes back active under a new epoch,
    // does not resurrect its sandbox, and removes its container.
    a.spawn().await;
    let back = wait_node(&b, "node-a", Duration::from_secs(10), |n| {
        n["state"] == "active"
    })
    .await;
    assert_eq!(back["epoch"], 3, "{back}");
    assert!(back.get("failedOverAt").is_none(), "{back}");
    let (_, row) = a.call("GET", &format!("/v2/sandboxes/{on_a}"), None).await;
    assert_eq!(row["data"]["status"], "FAILED", "not resurrected: {row}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while a.runsc_containers().iter().any(|c| c.contains(&on_a)) {
        assert!(
            Instant::now() < deadline,
            "the leftover container is still there"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // And it keeps its lease by heartbeat (well past one lease).
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        assert_eq!(node_seen(&b, "node-a").await["state"], "active");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[test]
#[ignore = "needs the image and the agent; run ./scripts/test"]
fn cluster_without_a_database_is_refused() {
    let (code, stderr) = common::start_refused(&["--cluster"], Duration::from_secs(30));
    assert_ne!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("--cluster needs --database-url"),
        "stderr: {stderr}"
    );
}
