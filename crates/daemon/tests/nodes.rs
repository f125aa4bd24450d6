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

use common::cluster::{self, created_on, database, token_file, TOKEN};
use common::Daemon;
use futures::StreamExt;
use serde_json::Value;
use std::time::{Duration, Instant};

/// A cluster node on `url` with a 3 s lease and the shared token.
async fn node(url: &str, id: &str, zone: &str) -> Daemon {
    node_with_token(url, id, zone, TOKEN).await
}

/// A cluster node on `url` with a 3 s lease and `token`.
async fn node_with_token(url: &str, id: &str, zone: &str, token: &str) -> Daemon {
    node_with(url, id, zone, token, &[]).await
}

/// A cluster node on `url` labelled `zone=ZONE`, with a 3 s lease, `token` and `extra` flags.
async fn node_with(url: &str, id: &str, zone: &str, token: &str, extra: &[&str]) -> Daemon {
    let label = format!("zone={zone}");
    let mut args = vec!["--node-label", label.as_str()];
    args.extend_from_slice(extra);
    cluster::node_with(url, id, token, &args).await
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

    // A sandbox on each node (placement steered by draining the other one);
    // each node counts its own.
    let on_a = created_on(&a, &b, "node-b", "on-a").await;
    let on_b = created_on(&b, &a, "node-a", "on-b").await;
    assert_eq!(
        a.sql(&format!(
            "SELECT node_id FROM sandboxes WHERE id = '{on_a}'"
        ))
        .trim(),
        "node-a"
    );
    for (id, n) in [("node-a", &on_a), ("node-b", &on_b)] {
        let seen = node_seen(&b, id).await;
        assert_eq!(seen["sandboxes"], 1, "{n}: {seen}");
        assert_eq!(seen["load"]["memoryMb"], 1024, "{seen}");
    }

    // An output stream of a process on A, read through B, is open when A dies.
    let (status, p) = b
        .call(
            "POST",
            &format!("/v2/sandboxes/{on_a}/processes"),
            Some(serde_json::json!({"command": ["sh", "-c", "while :; do echo tick; sleep 0.2; done"]})),
        )
        .await;
    assert_eq!(status, 201, "{p}");
    let pid = p["data"]["id"].as_str().expect("process id").to_string();
    let stream = b
        .http
        .get(b.url(&format!(
            "/v2/sandboxes/{on_a}/processes/{pid}/output/stream?tailBytes=0"
        )))
        .send()
        .await
        .expect("stream through B");
    assert_eq!(stream.status(), 200);
    let mut frames = stream.bytes_stream();
    let first = frames.next().await.expect("a first frame").expect("bytes");
    assert!(!first.is_empty());

    // kill -9 of A (its sandbox's container lives on): once its 3 s lease runs out,
    // B fails it over; A's sandbox is FAILED "node lost" within the lease plus 5 s.
    a.kill9();
    let killed = Instant::now();
    // The stream through B ends with an error, not a hang and not a clean end.
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match frames.next().await {
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Err(e.to_string()),
                None => return Ok(()),
            }
        }
    })
    .await
    .expect("the stream through B hung after its owner died");
    assert!(
        ended.is_err(),
        "the stream ended cleanly though its owner died"
    );
    let failed = b
        .wait_status(&on_a, "FAILED", Duration::from_secs(3 + 5))
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
    let until = Instant::now() + Duration::from_secs(4);
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

#[tokio::test]
#[ignore = "needs root, runsc, the image and PostgreSQL; run ./scripts/test"]
async fn any_node_serves_a_sandbox_of_another_and_only_nodes_with_the_token_forward() {
    let db = database();
    let a = node(db.url(), "node-a", "a").await;
    let b = node(db.url(), "node-b", "b").await;
    let id = created_on(&a, &b, "node-b", "lives-on-a").await;

    // Exec, files (upload and download), a process with its NDJSON output stream
    // and a long wait, all through B, about A's sandbox.
    let (code, out, _) = b.exec(&id, &["sh", "-c", "echo from-$(hostname)"]).await;
    assert_eq!(code, 0);
    assert!(out.starts_with("from-"), "{out}");
    let data: Vec<u8> = (0..3 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    let files = format!("/v2/sandboxes/{id}/files?path=/tmp/through-b.bin");
    let up = b
        .http
        .put(b.url(&files))
        .header("content-type", "application/octet-stream")
        .body(data.clone())
        .send()
        .await
        .expect("upload");
    assert_eq!(up.status(), 200);
    // Read back through A directly (the file is in A's sandbox) and through B.
    for d in [&a, &b] {
        let got = d.http.get(d.url(&files)).send().await.expect("download");
        assert_eq!(got.status(), 200);
        assert_eq!(got.bytes().await.expect("body").as_ref(), data.as_slice());
    }
    let (status, body) = b
        .call(
            "POST",
            &format!("/v2/sandboxes/{id}/processes"),
            Some(serde_json::json!({ "command": ["sh", "-c", "for i in 1 2 3; do echo line-$i; sleep 0.2; done"] })),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let pid = body["data"]["id"].as_str().expect("process id").to_string();
    let stream = b
        .http
        .get(b.url(&format!(
            "/v2/sandboxes/{id}/processes/{pid}/output/stream?tailBytes=0"
        )))
        .send()
        .await
        .expect("stream");
    assert_eq!(stream.status(), 200);
    assert_eq!(stream.headers()["content-type"], "application/x-ndjson");
    let request_id = stream.headers()["x-request-id"]
        .to_str()
        .expect("id")
        .to_string();
    let text = String::from_utf8(stream.bytes().await.expect("frames").to_vec()).expect("utf-8");
    let mut logged = Vec::new();
    for line in text.lines() {
        let frame: Value = serde_json::from_str(line).expect("a JSON frame");
        if frame["type"] == "log" {
            logged.extend(common::b64(&frame["data"]).into_bytes());
        }
    }
    assert_eq!(String::from_utf8_lossy(&logged), "line-1\nline-2\nline-3\n");
    assert!(!request_id.is_empty());
    let (status, waited) = b
        .call(
            "POST",
            &format!("/v2/sandboxes/{id}/processes/{pid}/wait?timeout=60000ms"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{waited}");
    assert_eq!(waited["data"]["exitCode"], 0, "{waited}");

    // Another tenant asking B about A's sandbox gets B's own 404, as on one node.
    let tenant_key = a.create_key("acme", None);
    let bearer = format!(
        "Bearer {}",
        sbx_api_types::signing_key::hashed_signing_key(&tenant_key)
    );
    let other = b
        .call_with(
            "GET",
            &format!("/v2/sandboxes/{id}"),
            None,
            &[("authorization", bearer.as_str())],
        )
        .await;
    common::assert_error(&other, 404, "sandbox_not_found");

    // A request that claims to come from a node without the token is refused.
    for token in [None, Some("0123456789abcdef0123456789abcdef-wrong-token!!")] {
        let mut headers = vec![("x-sbx-forwarded-by", "node-b")];
        if let Some(t) = token {
            headers.push(("x-sbx-cluster-token", t));
        }
        let refused = a
            .call_with("GET", &format!("/v2/sandboxes/{id}"), None, &headers)
            .await;
        common::assert_error(&refused, 401, "cluster_token_invalid");
    }
    // And so is a node started with another token: what it forwards, A refuses.
    let c = node_with_token(
        db.url(),
        "node-c",
        "c",
        "fedcba9876543210fedcba9876543210-another-cluster",
    )
    .await;
    // (A sub-resource: the sandbox resource itself any node answers from the store.)
    let refused = c
        .call("GET", &format!("/v2/sandboxes/{id}/processes"), None)
        .await;
    common::assert_error(&refused, 401, "cluster_token_invalid");
    let (status, _) = c.call("GET", &format!("/v2/sandboxes/{id}"), None).await;
    assert_eq!(status, 200);

    // Destroy through B ends it on A.
    let (status, _) = b.call("DELETE", &format!("/v2/sandboxes/{id}"), None).await;
    assert!(status == 202 || status == 204, "{status}");
    a.wait_status(&id, "TERMINATED", Duration::from_secs(60))
        .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while a.runsc_containers().iter().any(|x| x.contains(&id)) {
        assert!(
            Instant::now() < deadline,
            "A still runs the destroyed sandbox"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[test]
#[ignore = "needs the image and the agent; run ./scripts/test"]
fn cluster_without_a_token_is_refused() {
    let db_url = "postgres://nobody@127.0.0.1:1/none";
    let (code, stderr) = common::start_refused(
        &["--cluster", "--database-url", db_url],
        Duration::from_secs(30),
    );
    assert_ne!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("--cluster needs --cluster-token-file"),
        "stderr: {stderr}"
    );
    let short = token_file("too-short");
    let path = short.path().to_str().expect("utf-8 path");
    let (code, stderr) = common::start_refused(
        &[
            "--cluster",
            "--database-url",
            db_url,
            "--cluster-token-file",
            path,
        ],
        Duration::from_secs(30),
    );
    assert_ne!(code, Some(0), "{stderr}");
    assert!(stderr.contains("at least 32"), "stderr: {stderr}");
}

/// Runs a script of tests/sdk (the real `inngest` SDK) against `base`.
fn sdk(script: &str, base: &str) -> (bool, String) {
    let dir = std::env::var("SBX_TEST_SDK_DIR").expect("SBX_TEST_SDK_DIR: run ./scripts/test");
    common::run_node_script(std::path::Path::new(&dir), script, &[("SBX_URL", base)])
}

#[tokio::test]
#[ignore = "needs root, runsc, the image, node and PostgreSQL; run ./scripts/test"]
async fn creates_through_one_node_of_three_are_placed_on_all_and_the_sdk_works_through_it() {
    let db = database();
    // 4 GiB for sandboxes per node: four of 1 GiB each.
    let small = ["--capacity-memory-mb", "4096"];
    let a = node_with(db.url(), "node-a", "a", TOKEN, &small).await;
    // The nodes of a cluster share one secret key: secrets sealed through one
    // node are opened by whichever node boots the sandbox.
    let key = a.data_dir().join("secret.key");
    let key = key.to_str().expect("utf-8 path");
    let shared = ["--capacity-memory-mb", "4096", "--secret-key-file", key];
    let b = node_with(db.url(), "node-b", "b", TOKEN, &shared).await;
    let c = node_with(db.url(), "node-c", "c", TOKEN, &shared).await;

    // Twelve creates through A fill the three nodes, four each: placement
    // takes the freer node of a sampled pair and skips full ones.
    let mut ids = Vec::new();
    for i in 0..12 {
        ids.push(a.create_running(&format!("placed-{i}")).await);
    }
    let per_node = a.sql(
        "SELECT string_agg(node_id || '=' || n, ',' ORDER BY node_id) FROM \
         (SELECT node_id, count(*) AS n FROM sandboxes WHERE status = 'RUNNING' GROUP BY node_id) t",
    );
    assert_eq!(per_node.trim(), "node-a=4,node-b=4,node-c=4");
    for d in [&a, &b, &c] {
        let seen = node_seen(d, "node-c").await;
        assert_eq!(seen["sandboxes"], 4, "{seen}");
    }
    // A thirteenth fits no node.
    let full = a
        .call(
            "POST",
            "/v2/sandboxes",
            Some(serde_json::json!({"name": "no-room", "vcpu": 1, "memoryMb": 1024})),
        )
        .await;
    common::assert_error(&full, 503, "compute_unavailable");
    // Every one is driven through A, wherever it runs.
    for id in &ids {
        let (code, out, _) = a.exec(id, &["echo", "ok"]).await;
        assert_eq!((code, out.trim()), (0, "ok"), "{id}");
    }
    for id in &ids {
        let (status, _) = a.call("DELETE", &format!("/v2/sandboxes/{id}"), None).await;
        assert!(status == 202 || status == 204, "{status}");
    }
    for id in &ids {
        a.wait_status(id, "TERMINATED", Duration::from_secs(60))
            .await;
    }

    // A drained node takes no new placements.
    let (status, body) = a.call("POST", "/v1/nodes/node-c/drain", None).await;
    assert_eq!(status, 200, "{body}");
    let mut drained_test = Vec::new();
    for i in 0..4 {
        drained_test.push(a.create_running(&format!("not-on-c-{i}")).await);
    }
    let on_c =
        a.sql("SELECT count(*) FROM sandboxes WHERE node_id = 'node-c' AND status = 'RUNNING'");
    assert_eq!(on_c.trim(), "0", "a drained node got a placement");
    for id in &drained_test {
        let (status, _) = a.call("DELETE", &format!("/v2/sandboxes/{id}"), None).await;
        assert!(status == 202 || status == 204, "{status}");
    }
    let (status, body) = a.call("POST", "/v1/nodes/node-c/undrain", None).await;
    assert_eq!(status, 200, "{body}");

    // The real inngest SDK, every group, through A while its sandboxes are
    // placed over the cluster.
    let (ok, out) = sdk("sdk-smoke.mjs", &a.base);
    assert!(
        ok && out.contains("all steps passed"),
        "sdk-smoke through node-a:\n{out}"
    );
    let (ok, out) = sdk("conformance.mjs", &a.base);
    assert!(
        ok && out.contains(" passed, 0 failed"),
        "conformance through node-a:\n{out}"
    );
    let nodes_used = a.sql("SELECT count(DISTINCT node_id) FROM sandboxes");
    println!("sandboxes of this test ran on {} nodes", nodes_used.trim());
    drop((b, c));
}

#[tokio::test]
#[ignore = "needs root, runsc, the image, PostgreSQL and S3; run ./scripts/test"]
async fn a_snapshot_taken_on_one_node_is_cloned_through_another_onto_a_third() {
    let db = database();
    let prefix = format!("cluster-{}", uuid::Uuid::new_v4());
    let s3 = common::s3_flags(&prefix);
    let mut flags: Vec<&str> = s3.iter().map(String::as_str).collect();
    let a = node_with(db.url(), "node-a", "a", TOKEN, &flags).await;
    // One secret key for the cluster: it seals the snapshots' data keys too.
    let key = a.data_dir().join("secret.key");
    let key = key.to_str().expect("utf-8 path").to_string();
    flags.extend(["--secret-key-file", key.as_str()]);
    let b = node_with(db.url(), "node-b", "b", TOKEN, &flags).await;
    let c = node_with(db.url(), "node-c", "c", TOKEN, &flags).await;

    // On A: a file on disk and a value only in a process's memory.
    for (d, id) in [(&b, "node-b"), (&c, "node-c")] {
        let (status, body) = d.call("POST", &format!("/v1/nodes/{id}/drain"), None).await;
        assert_eq!(status, 200, "{body}");
    }
    let src = a.create_running("src").await;
    let (code, _, err) = a
        .exec(
            &src,
            &[
                "sh",
                "-c",
                "head -c 1000000 /dev/urandom > /tmp/blob && sha256sum /tmp/blob",
            ],
        )
        .await;
    assert_eq!(code, 0, "{err}");
    let (_, sum, _) = a.exec(&src, &["sha256sum", "/tmp/blob"]).await;
    let (status, p) = a
        .call(
            "POST",
            &format!("/v2/sandboxes/{src}/processes"),
            Some(serde_json::json!({"command": ["sh", "-c",
                "v=$(od -An -tx1 -N8 /dev/urandom | tr -d ' \\n'); \
                 while :; do if [ -e /tmp/ask ]; then echo \"still $v\" > /tmp/answer.tmp; \
                 mv /tmp/answer.tmp /tmp/answer; rm -f /tmp/ask; fi; sleep 0.05; done"]})),
        )
        .await;
    assert_eq!(status, 201, "{p}");
    let ask = "rm -f /tmp/answer; touch /tmp/ask; \
               for i in $(seq 300); do [ -s /tmp/answer ] && exec cat /tmp/answer; sleep 0.05; done; exit 1";
    let (code, remembered, _) = a.exec(&src, &["sh", "-c", ask]).await;
    assert_eq!(code, 0);

    // The snapshot, through C (forwarded to A, which uploads it).
    let (status, snap) = c
        .call("POST", &format!("/v2/sandboxes/{src}/snapshots"), None)
        .await;
    assert!(status == 201 || status == 202, "{status} {snap}");
    let sid = snap["data"]["id"]
        .as_str()
        .expect("snapshot id")
        .to_string();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (_, got) = c.call("GET", &format!("/v2/snapshots/{sid}"), None).await;
        if got["data"]["status"] == "READY" {
            break;
        }
        assert_ne!(got["data"]["status"], "FAILED", "{got}");
        assert!(Instant::now() < deadline, "snapshot never READY: {got}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A's local copy goes; only the object store has the snapshot now.
    let cache = a.data_dir().join("snapshots").join(&sid);
    assert!(cache.exists(), "A keeps a local copy of what it took");
    std::fs::remove_dir_all(&cache).expect("remove A's cache");

    // Only C takes placements: a clone through B lands on C.
    let (status, body) = a.call("POST", "/v1/nodes/node-a/drain", None).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = a.call("POST", "/v1/nodes/node-c/undrain", None).await;
    assert_eq!(status, 200, "{body}");
    let (status, made) = b
        .call(
            "POST",
            "/v2/sandboxes",
            Some(serde_json::json!({"name": "the-clone", "snapshotId": sid})),
        )
        .await;
    assert!(status == 201 || status == 202, "{status} {made}");
    let clone = made["data"]["id"].as_str().expect("clone id").to_string();
    b.wait_status(&clone, "RUNNING", Duration::from_secs(120))
        .await;
    let on = b.sql(&format!(
        "SELECT node_id FROM sandboxes WHERE id = '{clone}'"
    ));
    assert_eq!(on.trim(), "node-c");
    // Disk and memory intact, asked through B.
    let (_, sum_again, _) = b.exec(&clone, &["sha256sum", "/tmp/blob"]).await;
    assert_eq!(sum_again, sum);
    let (code, recalled, _) = b.exec(&clone, &["sh", "-c", ask]).await;
    assert_eq!(code, 0);
    assert_eq!(recalled, remembered, "the clone's process kept its memory");
    for id in [&clone, &src] {
        let (status, _) = b.call("DELETE", &format!("/v2/sandboxes/{id}"), None).await;
        assert!(status == 202 || status == 204, "{status}");
    }
}
