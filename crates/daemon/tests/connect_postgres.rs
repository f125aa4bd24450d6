//! Connect on PostgreSQL: sbxd with `--database-url` keeps packages, connections, runs and
//! committed records in the database (tables `connect_*`), none in `connect/connect.db`,
//! and reads them back after a kill -9.
//!
//! Needs what `--test connect` needs (root, runsc, the image, the npm registry), plus a
//! PostgreSQL server whose URL `./scripts/test` exports as `SBX_TEST_DATABASE_URL`.

mod common;
mod connect_host;

use common::Daemon;
use connect_host::{tarball, ApiHost, API_KEY};
use sbx_connect::store::{Connections, PostgresStore, Records};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn database() -> sbx_store::TestDatabase {
    let url = std::env::var("SBX_TEST_DATABASE_URL").unwrap_or_else(|_| {
        panic!("SBX_TEST_DATABASE_URL is not set: run ./scripts/test, which starts PostgreSQL")
    });
    sbx_store::TestDatabase::create(&url)
        .unwrap_or_else(|e| panic!("creating a test database: {e}"))
}

/// GETs `path` until `done` holds for its `data` (a build or a run that finished).
async fn wait_for(d: &Daemon, path: &str, what: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let (_, b) = d.call("GET", path, None).await;
        let status = b["data"]["status"].as_str().unwrap_or("");
        if status == "succeeded" || status == "failed" {
            return b["data"].clone();
        }
        assert!(Instant::now() < deadline, "{what} did not finish: {b}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn sync(d: &Daemon, conn: &str, name: &str) -> Value {
    let (status, body) = d
        .call(
            "POST",
            &format!("/v1/connect/connections/{conn}/syncs/{name}/runs"),
            None,
        )
        .await;
    assert_eq!(status, 202, "run now {name}: {body}");
    let id = body["data"]["id"].as_str().expect("run id");
    let run = wait_for(d, &format!("/v1/connect/runs/{id}"), "run").await;
    assert_eq!(run["status"], "succeeded", "{run}");
    run
}

/// Committed records of a sync through the API (NDJSON).
async fn records(d: &Daemon, conn: &str, name: &str) -> Vec<Value> {
    let resp = d
        .http
        .get(d.url(&format!(
            "/v1/connect/connections/{conn}/syncs/{name}/records?limit=1000"
        )))
        .send()
        .await
        .expect("records");
    assert_eq!(resp.status().as_u16(), 200);
    let text = resp.text().await.expect("body");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("record line"))
        .collect()
}

#[tokio::test]
#[ignore = "needs root, runsc, the image and PostgreSQL; run ./scripts/test"]
async fn a_connect_sync_commits_into_postgres() {
    let db = database();
    let api = ApiHost::start();
    let mut args = api.daemon_args();
    args.extend(["--database-url".to_string(), db.url().to_string()]);
    let args: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    let mut d = Daemon::start(&args).await;

    let (status, body) = d
        .call_with(
            "POST",
            "/v1/connect/packages",
            Some(tarball("connector-items")),
            &[("content-type", "application/gzip")],
        )
        .await;
    assert_eq!(status, 201, "upload: {body}");
    let (status, body) = d
        .call(
            "POST",
            "/v1/connect/packages/connector-items/versions/1.0.0/builds",
            None,
        )
        .await;
    assert_eq!(status, 202, "build: {body}");
    let build_id = body["data"]["id"].as_str().expect("build id");
    let b = wait_for(&d, &format!("/v1/connect/builds/{build_id}"), "build").await;
    assert_eq!(b["status"], "succeeded", "{b}");
    let (status, body) = d
        .call(
            "POST",
            "/v1/connect/connections",
            Some(json!({
                "name": "items",
                "package": "connector-items",
                "version": "1.0.0",
                "config": {"pageSize": 100, "maxPages": 2},
                "origin": api.origin(),
                "credentials": {"type": "apiKey", "key": API_KEY},
            })),
        )
        .await;
    assert_eq!(status, 201, "create connection: {body}");
    let conn = body["data"]["id"]
        .as_str()
        .expect("connection id")
        .to_string();

    // append twice (from the checkpoint), merge twice, replace twice: committed on PostgreSQL.
    assert_eq!(sync(&d, &conn, "items").await["recordsCommitted"], 200);
    assert_eq!(sync(&d, &conn, "items").await["recordsCommitted"], 50);
    sync(&d, &conn, "users").await;
    sync(&d, &conn, "users").await;
    sync(&d, &conn, "catalog").await;
    sync(&d, &conn, "catalog").await;
    let items = records(&d, &conn, "items").await;
    let users = records(&d, &conn, "users").await;
    let catalog = records(&d, &conn, "catalog").await;
    assert_eq!((items.len(), users.len(), catalog.len()), (250, 21, 24));
    let u5 = users.iter().find(|u| u["id"] == 5).expect("user 5");
    assert_eq!(u5["name"], "User 5 v2", "merge kept the newer record: {u5}");
    assert!(
        !catalog.iter().any(|p| p["sku"] == "sku-7"),
        "replace dropped sku-7"
    );

    // The rows are in the database, not in a SQLite file beside it.
    assert!(
        !d.data_dir().join("connect").join("connect.db").exists(),
        "the Connect store went to SQLite"
    );
    let store = PostgresStore::open(db.url()).expect("open the Connect tables");
    let blobs = store.credential_blobs().expect("connections");
    assert_eq!(blobs.len(), 1);
    assert_eq!(blobs[0].connection_id, conn);
    assert!(
        !blobs[0]
            .blob
            .windows(API_KEY.len())
            .any(|w| w == API_KEY.as_bytes()),
        "credentials sealed"
    );
    let ws = blobs[0].workspace.clone();
    assert_eq!(
        store.count_records(&ws, &conn, "items").expect("count"),
        250
    );
    assert_eq!(store.count_records(&ws, &conn, "users").expect("count"), 21);
    let cp = store
        .get_checkpoint(&ws, &conn, "items")
        .expect("checkpoint");
    assert!(
        cp.is_some_and(|c| c["cursor"].is_string()),
        "checkpoint committed with the records"
    );

    // A new sbxd on the same database reads the same records.
    d.kill9();
    d.spawn().await;
    assert_eq!(records(&d, &conn, "items").await, items);
    assert_eq!(records(&d, &conn, "users").await, users);
    d.kill9();
    drop(store);
    drop(db);
}
