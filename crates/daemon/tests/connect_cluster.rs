//! Connect in a cluster: a scheduled sync runs once per interval across two real sbxd
//! nodes on one PostgreSQL, also while the node that built its package is killed with -9
//! (the other runs it from the copy in the database), and every run commits exactly once;
//! builds and Run now requests are placed on the freer node, whichever node they reach.
//!
//! Needs what the other integration tests need (root, runsc, the image, the Connect SDK,
//! the npm registry for the build), plus the PostgreSQL server whose URL `./scripts/test`
//! exports as `SBX_TEST_DATABASE_URL`.

mod common;
mod connect_host;

use common::cluster::{self, database, TOKEN};
use common::Daemon;
use connect_host::flow::{records, wait_finished};
use connect_host::tarball_in;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The schedule interval of the test's connection, seconds (`--connect-test-min-schedule-secs`
/// lets it be this short).
const INTERVAL_SECS: i64 = 5;

/// A cluster node with a 3 s lease that allows a 5 s schedule. Nodes share the secret key
/// (credentials sealed through one are opened by the node that runs the sync).
async fn node(url: &str, id: &str, key_file: &std::path::Path) -> Daemon {
    let key = key_file.to_str().expect("utf-8 path");
    let min = INTERVAL_SECS.to_string();
    let extra = [
        "--connect-test-min-schedule-secs",
        min.as_str(),
        "--secret-key-file",
        key,
    ];
    cluster::node_with(url, id, TOKEN, &extra).await
}

/// A package with one sync that commits one record per run and reaches no network.
fn tick_package(parent: &std::path::Path) -> Vec<u8> {
    let dir = parent.join("connector-tick");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let package = json!({"name": "connector-tick", "version": "1.0.0", "private": true,
        "type": "module", "main": "index.mjs"});
    let lock = json!({"name": "connector-tick", "version": "1.0.0", "lockfileVersion": 3,
        "requires": true, "packages": {"": {"name": "connector-tick", "version": "1.0.0"}}});
    std::fs::write(dir.join("package.json"), package.to_string()).expect("write");
    std::fs::write(dir.join("package-lock.json"), lock.to_string()).expect("write");
    std::fs::write(
        dir.join("index.mjs"),
        r#"import { defineConnector } from "@sbx/connect";
export default defineConnector({
  auth: { type: "bearer" },
  async verify() {},
  syncs: {
    ticks: {
      mode: "append",
      async *run() {
        yield { records: [{ at: Date.now() }] };
      },
    },
  },
});
"#,
    )
    .expect("write");
    tarball_in(parent, "connector-tick")
}

/// Uploads the tick package through `d` and starts its build there; returns the build id.
async fn upload_and_build(d: &Daemon, parent: &std::path::Path) -> String {
    let (status, body) = d
        .call_with(
            "POST",
            "/v1/connect/packages",
            Some(tick_package(parent)),
            &[("content-type", "application/gzip")],
        )
        .await;
    assert_eq!(status, 201, "upload: {body}");
    let (status, body) = d
        .call(
            "POST",
            "/v1/connect/packages/connector-tick/versions/1.0.0/builds",
            None,
        )
        .await;
    assert_eq!(status, 202, "build: {body}");
    body["data"]["id"].as_str().expect("build id").to_string()
}

/// Every run of the connection, oldest first.
async fn runs(d: &Daemon, conn: &str) -> Vec<Value> {
    let (status, body) = d
        .call(
            "GET",
            &format!("/v1/connect/connections/{conn}/runs?limit=200"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let mut runs = body["data"].as_array().cloned().expect("runs");
    runs.reverse();
    runs
}

fn ms(run: &Value, field: &str) -> Option<i64> {
    run[field].as_str().map(|t| {
        chrono::DateTime::parse_from_rfc3339(t)
            .unwrap_or_else(|e| panic!("{field} {t}: {e}"))
            .timestamp_millis()
    })
}

/// Polls until `want` holds for the connection's runs, at most `within`.
async fn wait_runs(
    d: &Daemon,
    conn: &str,
    within: Duration,
    what: &str,
    want: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let deadline = Instant::now() + within;
    loop {
        let now = runs(d, conn).await;
        if want(&now) {
            return now;
        }
        assert!(Instant::now() < deadline, "{what}: {now:#?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn succeeded_after(runs: &[Value], after_ms: i64) -> usize {
    runs.iter()
        .filter(|r| r["status"] == "succeeded" && ms(r, "createdAt").unwrap_or(0) > after_ms)
        .count()
}

#[tokio::test]
#[ignore = "needs root, runsc, the image, the npm registry and PostgreSQL; run ./scripts/test"]
async fn a_schedule_runs_once_per_interval_across_nodes_and_survives_a_kill() {
    let db = database();
    let key = tempfile::NamedTempFile::new().expect("key file");
    let bytes: [u8; 32] = std::array::from_fn(|i| (i as u8).wrapping_mul(37).wrapping_add(11));
    std::fs::write(key.path(), bytes).expect("write key");
    let mut a = node(db.url(), "node-a", key.path()).await;
    let b = node(db.url(), "node-b", key.path()).await;

    // Uploaded and built through node a only.
    let parent = tempfile::tempdir().expect("tmp");
    let build = upload_and_build(&a, parent.path()).await;
    let built = wait_finished(&a, &format!("/v1/connect/builds/{build}"), "build").await;
    assert_eq!(built["status"], "succeeded", "{built}");

    // Created through node b, scheduled every 5 s: both nodes' schedulers see it.
    let (status, body) = b
        .call(
            "POST",
            "/v1/connect/connections",
            Some(json!({
                "name": "ticks",
                "package": "connector-tick",
                "version": "1.0.0",
                "config": {},
                "origin": "https://api.example.com",
                "credentials": {"type": "bearer", "token": "t-0123456789"},
                "scheduleIntervalSeconds": INTERVAL_SECS,
            })),
        )
        .await;
    assert_eq!(status, 201, "create connection: {body}");
    let conn = body["data"]["id"].as_str().expect("id").to_string();

    // Both nodes up: scheduled runs succeed, each recorded as run by one of them.
    let first = wait_runs(
        &b,
        &conn,
        Duration::from_secs(90),
        "two runs with both nodes",
        |r| succeeded_after(r, 0) >= 2,
    )
    .await;
    for r in &first {
        assert!(r["nodeId"] == "node-a" || r["nodeId"] == "node-b", "{r}");
    }

    // Node b drained: the schedule goes on, on node a alone (from its next tick).
    let (status, body) = a.call("POST", "/v1/nodes/node-b/drain", None).await;
    assert_eq!(status, 200, "{body}");
    let drained_at = chrono::Utc::now().timestamp_millis() + 1000;
    let during = wait_runs(
        &a,
        &conn,
        Duration::from_secs(60),
        "two runs while b is drained",
        |r| succeeded_after(r, drained_at) >= 2,
    )
    .await;
    for r in during
        .iter()
        .filter(|r| ms(r, "createdAt").unwrap_or(0) > drained_at)
    {
        assert_eq!(r["nodeId"], "node-a", "a drained node started a sync: {r}");
    }
    let (status, body) = a.call("POST", "/v1/nodes/node-b/undrain", None).await;
    assert_eq!(status, 200, "{body}");

    // Node a (the one that built the package) dies; node b keeps the schedule, running the
    // package from the copy in the database, and fails over a's run if it had one.
    a.kill9();
    let killed_at = chrono::Utc::now().timestamp_millis();
    let all = wait_runs(
        &b,
        &conn,
        Duration::from_secs(90),
        "three runs after node a was killed, and no run left unfinished before them",
        |r| {
            succeeded_after(r, killed_at) >= 3
                && r.iter()
                    .filter(|x| ms(x, "createdAt").unwrap_or(0) <= killed_at)
                    .all(|x| x["status"] == "succeeded" || x["status"] == "failed")
        },
    )
    .await;

    for r in all
        .iter()
        .filter(|r| ms(r, "createdAt").unwrap_or(0) > killed_at)
    {
        assert_eq!(r["nodeId"], "node-b", "{r}");
    }

    // Once per interval: runs that count (all but those failed over with their node) start
    // at least an interval apart, and never two at a time.
    let counted: Vec<&Value> = all
        .iter()
        .filter(|r| !(r["status"] == "failed" && r["failureKind"] == "node_lost"))
        .collect();
    for pair in counted.windows(2) {
        let (x, y) = (pair[0], pair[1]);
        let gap = ms(y, "createdAt").expect("created") - ms(x, "createdAt").expect("created");
        assert!(
            gap >= INTERVAL_SECS * 1000,
            "two runs {gap} ms apart: {x} {y}"
        );
        if let (Some(end), Some(start)) = (ms(x, "finishedAt"), ms(y, "startedAt")) {
            assert!(start >= end, "runs overlap: {x} {y}");
        }
    }
    for r in &all {
        assert!(
            r["status"] == "succeeded"
                || (r["status"] == "failed" && r["failureKind"] == "node_lost")
                || r["status"] == "queued"
                || r["status"] == "running",
            "a run failed for another reason: {r}"
        );
    }
    // Exactly once: each succeeded run committed its one record, nothing else did.
    let succeeded = all.iter().filter(|r| r["status"] == "succeeded").count();
    let committed = records(&b, &conn, "ticks").await.len() as u64;
    let in_flight = all
        .iter()
        .filter(|r| r["status"] == "running" || r["status"] == "queued")
        .count() as u64;
    assert!(
        committed >= succeeded as u64 && committed <= succeeded as u64 + in_flight,
        "{committed} records for {succeeded} succeeded runs ({in_flight} in flight)"
    );
}

#[tokio::test]
#[ignore = "needs root, runsc, the image, the npm registry and PostgreSQL; run ./scripts/test"]
async fn builds_and_run_now_through_one_node_are_placed_on_the_freer_one() {
    let db = database();
    let key = tempfile::NamedTempFile::new().expect("key file");
    let bytes: [u8; 32] = std::array::from_fn(|i| (i as u8).wrapping_mul(29).wrapping_add(7));
    std::fs::write(key.path(), bytes).expect("write key");
    // A schedule far away: every run here is a manual one.
    let a = node(db.url(), "node-a", key.path()).await;
    let b = node(db.url(), "node-b", key.path()).await;

    // Node a holds a 1 GiB sandbox, node b nothing: b is the freer of the two, and with
    // two nodes best-of-two always compares both.
    let filler = cluster::created_on(&a, &b, "node-b", "filler").await;

    // Everything below goes through node a; the jobs must run on node b.
    let parent = tempfile::tempdir().expect("tmp");
    let build = upload_and_build(&a, parent.path()).await;
    let built = wait_finished(&a, &format!("/v1/connect/builds/{build}"), "build").await;
    assert_eq!(built["status"], "succeeded", "{built}");
    assert_eq!(
        built["nodeId"], "node-b",
        "the build ran where the request came in: {built}"
    );

    let (status, body) = a
        .call(
            "POST",
            "/v1/connect/connections",
            Some(json!({
                "name": "manual",
                "package": "connector-tick",
                "version": "1.0.0",
                "config": {},
                "origin": "https://api.example.com",
                "credentials": {"type": "bearer", "token": "t-0123456789"},
            })),
        )
        .await;
    assert_eq!(status, 201, "create connection: {body}");
    let conn = body["data"]["id"].as_str().expect("id").to_string();
    let run_now = format!("/v1/connect/connections/{conn}/syncs/ticks/runs");
    for i in 0..3 {
        let (status, body) = a.call("POST", &run_now, None).await;
        assert_eq!(status, 202, "run now #{i}: {body}");
        let run = body["data"]["id"].as_str().expect("run id").to_string();
        let done = wait_finished(&a, &format!("/v1/connect/runs/{run}"), "run").await;
        assert_eq!(done["status"], "succeeded", "{done}");
        assert_eq!(
            done["nodeId"], "node-b",
            "run now #{i} was not placed: {done}"
        );
    }

    // Node b drained: the same request runs on node a, the only candidate left.
    let (status, body) = a.call("POST", "/v1/nodes/node-b/drain", None).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = a.call("POST", &run_now, None).await;
    assert_eq!(status, 202, "run now on a: {body}");
    let run = body["data"]["id"].as_str().expect("run id").to_string();
    let done = wait_finished(&a, &format!("/v1/connect/runs/{run}"), "run").await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(done["nodeId"], "node-a", "{done}");
    assert_eq!(records(&a, &conn, "ticks").await.len(), 4);

    let (status, body) = a
        .call("DELETE", &format!("/v2/sandboxes/{filler}"), None)
        .await;
    assert!(status == 202 || status == 204, "{status} {body}");
}
