//! Cluster mode under faults, on real parts (runsc, PostgreSQL, s3s-fs):
//!
//! * a node whose snapshot store is an S3 endpoint nobody listens on: a
//!   snapshot, asked for through another node, fails in bounded time with a
//!   reason that names object storage, and the sandbox keeps running;
//! * a process output stream read through one node while the sandbox's own
//!   node is killed with -9: the client's stream ends with an error within a
//!   bounded time, never a hang and never a clean end;
//! * placement by labels: a `/v1` create's `nodeSelector` puts the sandbox on
//!   a node whose labels match, and is `503 compute_unavailable` naming the
//!   selector when none does, in a cluster and on a single node.
//!
//! Needs what the other integration tests need, plus the PostgreSQL server whose URL
//! `./scripts/test` exports as `SBX_TEST_DATABASE_URL`.

mod common;

use common::cluster::{self, created_on, database, TOKEN};
use common::Daemon;
use futures::StreamExt;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// A cluster node on `url` with a 3 s lease, the shared token and `extra` flags.
async fn node(url: &str, id: &str, extra: &[&str]) -> Daemon {
    cluster::node_with(url, id, TOKEN, extra).await
}

/// The node a sandbox is recorded on.
fn node_of(d: &Daemon, id: &str) -> String {
    d.sql(&format!("SELECT node_id FROM sandboxes WHERE id = '{id}'"))
        .trim()
        .to_string()
}

#[tokio::test]
#[ignore = "needs root, runsc, the image and PostgreSQL; run ./scripts/test"]
async fn an_unreachable_object_store_fails_a_forwarded_snapshot_not_the_sandbox() {
    let db = database();
    // A loopback port nobody listens on: connections are refused at once.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let s3 = [
        "--snapshot-store",
        "s3://sbx-nowhere/cluster",
        "--s3-endpoint",
        endpoint.as_str(),
    ];
    let mut a = node(db.url(), "node-a", &s3).await;
    let _a_leftovers = common::KillLeftovers::of(&a);
    let key = a.data_dir().join("secret.key");
    let key = key.to_str().expect("utf-8 path").to_string();
    let mut flags = s3.to_vec();
    flags.extend(["--secret-key-file", key.as_str()]);
    let mut b = node(db.url(), "node-b", &flags).await;
    let _b_leftovers = common::KillLeftovers::of(&b);
    let id = created_on(&a, &b, "node-b", "src").await;
    assert_eq!(node_of(&a, &id), "node-a");

    // Through B: forwarded to A, whose upload gives up after a few quick retries.
    let asked = Instant::now();
    let answer = tokio::time::timeout(
        Duration::from_secs(90),
        b.call("POST", &format!("/v2/sandboxes/{id}/snapshots"), None),
    )
    .await
    .expect("the snapshot request hung on an unreachable object store");
    let took = asked.elapsed();
    let (status, body) = answer;
    // Either refused with the reason, or accepted and then FAILED with it.
    let snap = if status == 201 || status == 202 {
        let sid = body["data"]["id"]
            .as_str()
            .expect("snapshot id")
            .to_string();
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let (_, got) = b.call("GET", &format!("/v2/snapshots/{sid}"), None).await;
            if got["data"]["status"] != "CREATING" {
                break got["data"].clone();
            }
            assert!(Instant::now() < deadline, "snapshot stays CREATING: {got}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    } else {
        common::assert_error(&(status, body.clone()), 503, "compute_unavailable");
        let message = body["errors"][0]["message"].as_str().unwrap_or_default();
        assert!(message.contains("object storage"), "{message}");
        let (_, all) = b.call("GET", "/v2/snapshots", None).await;
        all["data"][0].clone()
    };
    println!("snapshot answered after {took:?}: {snap}");
    assert_eq!(snap["status"], "FAILED", "{snap}");
    let error = snap["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("object storage"),
        "the reason does not name the object store: {snap}"
    );
    // Nothing half-written stays in A's cache.
    let sid = snap["id"].as_str().expect("snapshot id");
    assert!(!a.data_dir().join("snapshots").join(sid).exists());

    // The sandbox keeps running and answers, through either node.
    let (_, got) = b.call("GET", &format!("/v2/sandboxes/{id}"), None).await;
    assert_eq!(got["data"]["status"], "RUNNING", "{got}");
    assert_eq!(b.exec(&id, &["echo", "still"]).await.1, "still\n");
    assert_eq!(a.exec(&id, &["echo", "here"]).await.1, "here\n");
    // A FAILED snapshot cannot be cloned.
    let refused = b
        .call(
            "POST",
            "/v2/sandboxes",
            Some(json!({"name": "clone", "snapshotId": sid})),
        )
        .await;
    common::assert_error(&refused, 409, "sandbox_snapshot_not_ready");

    let (status, _) = b.call("DELETE", &format!("/v2/sandboxes/{id}"), None).await;
    assert!(status == 202 || status == 204, "{status}");
    a.wait_status(&id, "TERMINATED", Duration::from_secs(60))
        .await;
    b.kill9();
    a.kill9();
}

/// How the client's read of a stream ended.
#[derive(Debug)]
enum Ending {
    /// The connection failed (cut, reset, incomplete chunked body).
    Transport(String),
    /// The body ended normally after this last NDJSON line.
    Clean(String),
}

#[tokio::test]
#[ignore = "needs root, runsc, the image and PostgreSQL; run ./scripts/test"]
async fn a_forwarded_output_stream_ends_with_an_error_when_its_owner_is_killed() {
    let db = database();
    let mut a = node(db.url(), "node-a", &[]).await;
    let _a_leftovers = common::KillLeftovers::of(&a);
    let mut b = node(db.url(), "node-b", &[]).await;
    // B's sandbox outlives B's kill -9: its processes go when the test ends.
    let _b_leftovers = common::KillLeftovers::of(&b);
    // The sandbox on B, its process and its stream through A.
    let id = created_on(&b, &a, "node-a", "owner-dies").await;
    assert_eq!(node_of(&a, &id), "node-b");
    let (status, p) = a
        .call(
            "POST",
            &format!("/v2/sandboxes/{id}/processes"),
            Some(json!({"command": ["sh", "-c",
                "i=0; while :; do i=$((i+1)); echo \"line $i\"; sleep 1; done"]})),
        )
        .await;
    assert_eq!(status, 201, "{p}");
    let pid = p["data"]["id"].as_str().expect("process id").to_string();
    let stream = a
        .http
        .get(a.url(&format!(
            "/v2/sandboxes/{id}/processes/{pid}/output/stream?tailBytes=0"
        )))
        .send()
        .await
        .expect("the stream through A");
    assert_eq!(stream.status(), 200);
    let mut frames = stream.bytes_stream();
    // Two lines of output arrive through A: the stream is really open.
    let mut seen = String::new();
    let opened = tokio::time::timeout(Duration::from_secs(30), async {
        while seen.matches("\"type\":\"log\"").count() < 2 {
            match frames.next().await {
                Some(Ok(bytes)) => seen.push_str(&String::from_utf8_lossy(&bytes)),
                other => panic!("the stream ended before any output: {other:?} after {seen}"),
            }
        }
    })
    .await;
    assert!(opened.is_ok(), "no output through A within 30 s: {seen}");

    // kill -9 of the owner while the stream is open.
    b.kill9();
    let killed = Instant::now();
    let ending = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match frames.next().await {
                Some(Ok(bytes)) => seen.push_str(&String::from_utf8_lossy(&bytes)),
                Some(Err(e)) => return Ending::Transport(e.to_string()),
                None => {
                    let last = seen.lines().last().unwrap_or_default().to_string();
                    return Ending::Clean(last);
                }
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the stream through A hung for 30 s after its owner died"));
    println!(
        "stream ended {:?} after the kill: {ending:?}",
        killed.elapsed()
    );
    match ending {
        Ending::Transport(e) => println!("the client saw: {e}"),
        // A terminal error frame is an error too; a clean end after a log line is not.
        Ending::Clean(last) => {
            let frame: Value = serde_json::from_str(&last).unwrap_or_default();
            assert_eq!(
                frame["type"], "error",
                "the stream ended cleanly though its owner died: {last}"
            );
        }
    }
    // A itself keeps serving.
    let (status, body) = a.call("GET", "/v1/nodes", None).await;
    assert_eq!(status, 200, "{body}");
    a.kill9();
}

/// `POST /v1/sandboxes` of a 1/1024 sandbox with `selector` through `d`.
async fn create_selected(d: &Daemon, name: &str, selector: Value) -> (u16, Value) {
    d.call(
        "POST",
        "/v1/sandboxes",
        Some(json!({"name": name, "vcpu": 1, "memoryMb": 1024, "nodeSelector": selector})),
    )
    .await
}

/// The id of a created sandbox, once RUNNING.
async fn running(d: &Daemon, created: &(u16, Value)) -> String {
    let (status, body) = created;
    assert!(*status == 201 || *status == 202, "create: {status} {body}");
    let id = body["data"]["id"].as_str().expect("id").to_string();
    d.wait_status(&id, "RUNNING", Duration::from_secs(120))
        .await;
    id
}

#[tokio::test]
#[ignore = "needs root, runsc, the image and PostgreSQL; run ./scripts/test"]
async fn a_node_selector_places_creates_on_matching_nodes_only() {
    let db = database();
    let a = node(
        db.url(),
        "node-a",
        &["--node-label", "zone=a", "--node-label", "disk=ssd"],
    )
    .await;
    let _a_leftovers = common::KillLeftovers::of(&a);
    let b = node(
        db.url(),
        "node-b",
        &["--node-label", "zone=b", "--node-label", "disk=ssd"],
    )
    .await;
    let _b_leftovers = common::KillLeftovers::of(&b);

    // Through A, a selector only B matches: on B, every time (placement alone
    // would put about half of them on A).
    let mut ids = Vec::new();
    for i in 0..3 {
        let made = create_selected(&a, &format!("on-b-{i}"), json!({"zone": "b"})).await;
        let id = running(&a, &made).await;
        assert_eq!(node_of(&a, &id), "node-b", "{made:?}");
        ids.push(id);
    }
    // Through B, a selector of two pairs only A matches: on A.
    let made = create_selected(&b, "on-a", json!({"zone": "a", "disk": "ssd"})).await;
    let id = running(&b, &made).await;
    assert_eq!(node_of(&b, &id), "node-a");
    ids.push(id);
    // A pair both hold: either node; an empty selector: any node.
    for (name, sel) in [("any-ssd", json!({"disk": "ssd"})), ("any", json!({}))] {
        let made = create_selected(&a, name, sel).await;
        ids.push(running(&a, &made).await);
    }

    // No node matches: 503 naming the selector, whichever node is asked.
    for d in [&a, &b] {
        let refused = create_selected(d, "nowhere", json!({"zone": "c"})).await;
        common::assert_error(&refused, 503, "compute_unavailable");
        let message = refused.1["errors"][0]["message"]
            .as_str()
            .unwrap_or_default();
        assert!(message.contains("nodeSelector {zone=c}"), "{message}");
    }
    // A holds zone=a but not disk=hdd, B neither: no node holds both pairs.
    let refused = create_selected(&a, "split", json!({"zone": "a", "disk": "hdd"})).await;
    common::assert_error(&refused, 503, "compute_unavailable");
    // The only matching node drained: 503 naming the selector too.
    let (status, body) = a.call("POST", "/v1/nodes/node-b/drain", None).await;
    assert_eq!(status, 200, "{body}");
    let refused = create_selected(&a, "drained", json!({"zone": "b"})).await;
    common::assert_error(&refused, 503, "compute_unavailable");
    let message = refused.1["errors"][0]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(message.contains("nodeSelector {zone=b}"), "{message}");
    let (status, body) = a.call("POST", "/v1/nodes/node-b/undrain", None).await;
    assert_eq!(status, 200, "{body}");
    // Not an object of strings: the handler's 400.
    let bad = create_selected(&a, "bad", json!({"zone": 1})).await;
    common::assert_error(&bad, 400, "invalid_request");

    for id in &ids {
        let (status, _) = a.call("DELETE", &format!("/v2/sandboxes/{id}"), None).await;
        assert!(status == 202 || status == 204, "{status}");
    }
    for id in &ids {
        a.wait_status(id, "TERMINATED", Duration::from_secs(60))
            .await;
    }
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn a_single_node_refuses_a_selector_its_labels_do_not_match() {
    let d = Daemon::start(&["--node-label", "zone=here"]).await;
    let _leftovers = common::KillLeftovers::of(&d);
    let refused = create_selected(&d, "elsewhere", json!({"zone": "there"})).await;
    common::assert_error(&refused, 503, "compute_unavailable");
    let message = refused.1["errors"][0]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(message.contains("nodeSelector {zone=there}"), "{message}");
    // Nothing was created.
    let (_, all) = d.call("GET", "/v2/sandboxes", None).await;
    assert_eq!(all["data"].as_array().map(Vec::len), Some(0), "{all}");
    let made = create_selected(&d, "here", json!({"zone": "here"})).await;
    let id = running(&d, &made).await;
    let (status, _) = d.call("DELETE", &format!("/v2/sandboxes/{id}"), None).await;
    assert!(status == 202 || status == 204, "{status}");
    d.wait_status(&id, "TERMINATED", Duration::from_secs(60))
        .await;
}
