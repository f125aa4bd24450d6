//! `sbxd migrate-store`: a node on SQLite moves to PostgreSQL with everything it held.
//!
//! Needs root, runsc, the image, what `--test connect` needs (a test API host) and
//! PostgreSQL (`./scripts/test` starts a throwaway one).

mod common;
mod connect_host;
mod e2b_common;

use common::Daemon;
use connect_host::flow::{install, records, sync};
use connect_host::ApiHost;
use serde_json::json;
use std::process::Command;
use std::time::{Duration, Instant};

/// Runs `sbxd migrate-store`; returns (success, stdout, stderr).
fn migrate(from: &std::path::Path, to: &str) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sbxd"))
        .arg("migrate-store")
        .arg("--from")
        .arg(from)
        .arg("--to")
        .arg(to)
        .env("SBX_LOG", "warn")
        .output()
        .expect("run sbxd migrate-store");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
#[ignore = "needs root, runsc, the image and PostgreSQL; run ./scripts/test"]
async fn a_sqlite_node_moves_to_postgresql_with_everything_it_held() {
    let url = std::env::var("SBX_TEST_DATABASE_URL")
        .expect("SBX_TEST_DATABASE_URL is not set: run ./scripts/test, which starts PostgreSQL");
    let db = sbx_store::TestDatabase::create(&url).expect("test database");
    let api = ApiHost::start();
    let args = api.daemon_args();
    let args: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    let mut d = Daemon::start(&args).await;

    // A node with a bit of everything: a running sandbox with a file, a paused one,
    // a snapshot, a secret, and a Connect connection with committed records.
    let conn = install(
        &d,
        &api,
        "connector-items",
        "items",
        serde_json::json!({"pageSize": 100, "maxPages": 2}),
    )
    .await;
    assert_eq!(sync(&d, &conn, "items").await["recordsCommitted"], 200);
    let items = records(&d, &conn, "items").await;
    let (status, put) = d
        .call(
            "PUT",
            "/v1/secrets/TOKEN",
            Some(json!({"value": "moved-along"})),
        )
        .await;
    assert_eq!(status, 200, "{put}");
    let running = d.create_running("keeps-running").await;
    d.exec(&running, &["sh", "-c", "echo still-here > /tmp/f"])
        .await;
    let paused = d.create_running("stays-paused").await;
    // An E2B sandbox: its E2B fields (metadata, token) are store rows too.
    let e2b_id = e2b_common::create(&d, "dev", json!({"metadata": {"moved": "yes"}})).await;
    let (_, before, _) = e2b_common::e2b(
        &d,
        Some("dev"),
        "GET",
        &format!("/sandboxes/{e2b_id}"),
        None,
    )
    .await;
    d.exec(&paused, &["sh", "-c", "echo frozen > /tmp/p"]).await;
    let (status, body) = d
        .call("POST", &format!("/v2/sandboxes/{paused}/pause"), None)
        .await;
    assert!(status == 200 || status == 202, "{status} {body}");
    d.wait_status(&paused, "PAUSED", Duration::from_secs(60))
        .await;
    let (status, snap) = d
        .call(
            "POST",
            &format!("/v2/sandboxes/{running}/snapshots"),
            Some(json!({"name": "base"})),
        )
        .await;
    assert!(status == 201 || status == 202, "{status} {snap}");
    let snap_id = snap["data"]["id"]
        .as_str()
        .expect("snapshot id")
        .to_string();
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let (_, got) = d
            .call("GET", &format!("/v2/snapshots/{snap_id}"), None)
            .await;
        if got["data"]["status"] == "READY" {
            break;
        }
        assert!(Instant::now() < deadline, "snapshot never READY: {got}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // While sbxd runs, the data dir is refused: the copy would race the node's writes.
    let (ok, _, stderr) = migrate(d.data_dir(), db.url());
    assert!(!ok, "migrate-store ran under a live sbxd");
    assert!(
        stderr.contains("another sbxd is using the data dir"),
        "{stderr}"
    );

    // Stopped: the copy runs, and a second run finds everything there.
    d.kill9();
    let (ok, stdout, stderr) = migrate(d.data_dir(), db.url());
    assert!(ok, "migrate-store failed: {stdout} {stderr}");
    assert!(
        stdout.contains("sandboxes: 3 copied, 0 already there"),
        "{stdout}"
    );
    assert!(stdout.contains("E2B records: 1 copied"), "{stdout}");
    assert!(stdout.contains("snapshots: 1 copied"), "{stdout}");
    assert!(stdout.contains("secrets: 1 copied"), "{stdout}");
    assert!(
        stdout.contains("Connect: ") && stdout.contains("rows copied"),
        "{stdout}"
    );
    let (ok, again, stderr) = migrate(d.data_dir(), db.url());
    assert!(ok, "a second run failed: {again} {stderr}");
    assert!(
        again.contains("sandboxes: 0 copied, 3 already there"),
        "{again}"
    );
    assert!(
        again.contains("E2B records: 0 copied, 1 already there"),
        "{again}"
    );

    // The node on PostgreSQL: every sandbox, its state and its data are there.
    d.add_args(&["--database-url", db.url()]);
    d.spawn().await;
    let (_, got) = d
        .call("GET", &format!("/v2/sandboxes/{running}"), None)
        .await;
    assert_eq!(got["data"]["status"], "RUNNING", "{got}");
    assert_eq!(d.exec(&running, &["cat", "/tmp/f"]).await.1, "still-here\n");
    let (status, after, _) = e2b_common::e2b(
        &d,
        Some("dev"),
        "GET",
        &format!("/sandboxes/{e2b_id}"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{after}");
    assert_eq!(after["metadata"]["moved"], "yes", "{after}");
    assert_eq!(after["endAt"], before["endAt"], "the same end time");
    assert_eq!(
        after["envdAccessToken"], before["envdAccessToken"],
        "the same envd token"
    );
    let (_, got) = d
        .call("GET", &format!("/v2/sandboxes/{paused}"), None)
        .await;
    assert_eq!(got["data"]["status"], "PAUSED", "{got}");
    let (status, body) = d
        .call("POST", &format!("/v2/sandboxes/{paused}/resume"), None)
        .await;
    assert!(status == 200 || status == 202, "{status} {body}");
    d.wait_status(&paused, "RUNNING", Duration::from_secs(60))
        .await;
    assert_eq!(d.exec(&paused, &["cat", "/tmp/p"]).await.1, "frozen\n");
    // The snapshot clones, and the secret is injected into a new sandbox.
    let (status, clone) = d
        .call(
            "POST",
            "/v2/sandboxes",
            Some(json!({"name": "from-base", "snapshotId": snap_id})),
        )
        .await;
    assert_eq!(status, 201, "{clone}");
    let clone_id = clone["data"]["id"].as_str().expect("clone id").to_string();
    d.wait_status(&clone_id, "RUNNING", Duration::from_secs(90))
        .await;
    assert_eq!(
        d.exec(&clone_id, &["cat", "/tmp/f"]).await.1,
        "still-here\n"
    );
    let (status, with_secret) = d
        .call(
            "POST",
            "/v2/sandboxes",
            Some(json!({"name": "with-secret", "vcpu": 1, "memoryMb": 1024, "secrets": ["TOKEN"]})),
        )
        .await;
    assert_eq!(status, 201, "{with_secret}");
    let secret_id = with_secret["data"]["id"].as_str().expect("id").to_string();
    d.wait_status(&secret_id, "RUNNING", Duration::from_secs(90))
        .await;
    let printed = d
        .exec(&secret_id, &["sh", "-c", "printf %s \"$TOKEN\""])
        .await
        .1;
    assert_eq!(printed, "moved-along");
    // Names are held in the new store: the running sandbox's name is still taken.
    let (status, dup) = d
        .call(
            "POST",
            "/v2/sandboxes",
            Some(json!({"name": "keeps-running", "vcpu": 1, "memoryMb": 1024})),
        )
        .await;
    assert!(
        status == 200 || status == 409 || status == 201,
        "{status} {dup}"
    );
    assert_eq!(
        dup["data"]["id"],
        running.as_str(),
        "same name, same sandbox: {dup}"
    );

    // The Connect connection: its records, its checkpoint (the next sync appends from
    // it) and its sealed credentials (the sync signs in with them) came along.
    assert_eq!(records(&d, &conn, "items").await, items);
    assert_eq!(sync(&d, &conn, "items").await["recordsCommitted"], 50);
    assert_eq!(records(&d, &conn, "items").await.len(), 250);

    // A data dir without a store is refused clearly.
    let empty = tempfile::tempdir().expect("tempdir");
    let (ok, _, stderr) = migrate(empty.path(), db.url());
    assert!(!ok);
    assert!(stderr.contains("no store to migrate"), "{stderr}");
    d.destroy_all(Duration::from_secs(60)).await;
    drop(d);
    drop(db);
}
