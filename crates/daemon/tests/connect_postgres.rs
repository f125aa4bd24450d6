//! Connect on PostgreSQL: sbxd with `--database-url` keeps packages, connections, runs and
//! committed records in the database (tables `connect_*`), none in `connect/connect.db`,
//! and reads them back after a kill -9.
//!
//! Needs what `--test connect` needs (root, runsc, the image, the npm registry), plus a
//! PostgreSQL server whose URL `./scripts/test` exports as `SBX_TEST_DATABASE_URL`.

mod common;
mod connect_host;

use common::Daemon;
use connect_host::flow::{install, records, sync};
use connect_host::{ApiHost, API_KEY};
use sbx_connect::store::{Connections, PostgresStore, Records};
use serde_json::json;

fn database() -> sbx_store::TestDatabase {
    let url = std::env::var("SBX_TEST_DATABASE_URL").unwrap_or_else(|_| {
        panic!("SBX_TEST_DATABASE_URL is not set: run ./scripts/test, which starts PostgreSQL")
    });
    sbx_store::TestDatabase::create(&url)
        .unwrap_or_else(|e| panic!("creating a test database: {e}"))
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

    let conn = install(
        &d,
        &api,
        "connector-items",
        "items",
        json!({"pageSize": 100, "maxPages": 2}),
    )
    .await;

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
