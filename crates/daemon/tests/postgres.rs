//! sbxd with its sandbox store on PostgreSQL (`--database-url`): the lifecycle
//! across a kill -9, and the start-up refusals (unreachable server, wrong
//! password, schema from the future), and an outage: 503 then recovery, at most
//! one 503 when the server ends every session.
//!
//! Needs what the other integration tests need, plus a PostgreSQL server whose
//! URL `./scripts/test` exports as `SBX_TEST_DATABASE_URL`; each test gets a
//! database of its own.

mod common;

use common::Daemon;
use sbx_store::{PostgresStore, Store, TestDatabase};
use std::time::{Duration, Instant};

fn database() -> TestDatabase {
    let url = std::env::var("SBX_TEST_DATABASE_URL").unwrap_or_else(|_| {
        panic!("SBX_TEST_DATABASE_URL is not set: run ./scripts/test, which starts PostgreSQL")
    });
    TestDatabase::create(&url).unwrap_or_else(|e| panic!("creating a test database: {e}"))
}

/// sbxd on `database_url`, expected to refuse to start: its exit code and stderr.
fn refused(database_url: &str) -> (Option<i32>, String) {
    common::start_refused(&["--database-url", database_url], Duration::from_secs(30))
}

#[tokio::test]
#[ignore = "needs root, runsc, the image and PostgreSQL; run ./scripts/test"]
async fn sandboxes_live_in_postgres_and_survive_a_kill9() {
    let db = database();
    let mut d = Daemon::start(&["--database-url", db.url()]).await;
    let id = d.create_running("on-postgres").await;
    let (code, out, _) = d
        .exec(&id, &["sh", "-c", "echo hello > /tmp/f; cat /tmp/f"])
        .await;
    assert_eq!((code, out.as_str()), (0, "hello\n"));
    // The row is in PostgreSQL, and sbxd made no SQLite sandbox store beside it.
    let store = PostgresStore::open(db.url()).expect("open the test database");
    let uuid = id.parse().expect("uuid id");
    let row = store
        .get_sandbox(uuid)
        .expect("read")
        .expect("row in PostgreSQL");
    assert_eq!(row.name, "on-postgres");
    assert!(
        !d.data_dir().join("sbx.sqlite").exists(),
        "sandbox store went to SQLite"
    );

    d.kill9();
    d.spawn().await;
    assert_eq!(
        d.assert_truthful(&id, Duration::from_secs(60)).await,
        "RUNNING"
    );
    let (_, out, _) = d.exec(&id, &["cat", "/tmp/f"]).await;
    assert_eq!(out, "hello\n", "the same sandbox, reattached");

    let (status, _) = d.call("DELETE", &format!("/v2/sandboxes/{id}"), None).await;
    assert!(status == 204 || status == 202, "destroy status {status}");
    d.wait_status(&id, "TERMINATED", Duration::from_secs(30))
        .await;
    d.assert_no_containers(Duration::from_secs(30), "after destroy")
        .await;
    let row = store.get_sandbox(uuid).expect("read").expect("row kept");
    assert_eq!(row.status, sbx_api_types::SandboxStatus::Terminated);
    // The name is free again, in the shared store.
    assert!(store
        .active_sandbox_named(&row.workspace, "on-postgres")
        .expect("read")
        .is_none());
    d.kill9();
    drop(store);
    drop(db);
}

#[tokio::test]
#[ignore = "needs the image, the agent and PostgreSQL; run ./scripts/test"]
async fn a_database_that_cannot_be_used_stops_sbxd_at_start() {
    // Nothing listens in an empty directory; the password must not be printed.
    let empty = tempfile::tempdir().expect("tempdir");
    let host = empty.path().display().to_string().replace('/', "%2F");
    let url = format!("postgres://sbx:hunter2@{host}/sbx");
    let (code, stderr) = refused(&url);
    assert_ne!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!("postgres://sbx:***@{host}/sbx")),
        "names the database: {stderr}"
    );
    assert!(
        stderr.contains("unavailable") && stderr.contains("error connecting to server"),
        "says why: {stderr}"
    );
    assert!(!stderr.contains("hunter2"), "leaks the password: {stderr}");

    // A schema written by a newer sbxd.
    let db = database();
    let current = PostgresStore::open(db.url())
        .expect("migrate")
        .schema_version()
        .expect("version");
    let url = db.url().to_string();
    std::thread::spawn(move || {
        let mut c = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
        c.execute(
            "INSERT INTO schema_version (version) VALUES ($1)",
            &[&((current + 1) as i32)],
        )
        .expect("future version");
    })
    .join()
    .expect("thread");
    let (code, stderr) = refused(db.url());
    assert_ne!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "database schema version {} is newer than this sbxd ({current}); upgrade sbxd",
            current + 1
        )),
        "{stderr}"
    );
}

#[tokio::test]
#[ignore = "needs root, runsc, the image and PostgreSQL; run ./scripts/test"]
async fn a_wrong_password_stops_sbxd_at_start_without_printing_it() {
    // scripts/lib/postgres.sh makes one role that must give its password.
    let good = std::env::var("SBX_TEST_PASSWORD_DATABASE_URL").unwrap_or_else(|_| {
        panic!("SBX_TEST_PASSWORD_DATABASE_URL is not set: run ./scripts/test")
    });
    let (userinfo, host_and_db) = good
        .strip_prefix("postgres://")
        .and_then(|rest| rest.split_once('@'))
        .expect("postgres://user:password@host/db");
    let (user, password) = userinfo.split_once(':').expect("a password in the URL");
    let wrong_password = "not-the-Password-7f3a";
    let wrong = format!("postgres://{user}:{wrong_password}@{host_and_db}");

    // The right password is accepted and none at all is not: the server really
    // checks this role's password, so the refusal below is about the password.
    let probe = |url: String| {
        std::thread::spawn(move || {
            postgres::Client::connect(&url, postgres::NoTls)
                .map(|_| ())
                .map_err(|e| e.to_string())
        })
        .join()
        .expect("thread")
    };
    assert_eq!(probe(good.clone()), Ok(()), "the right password");
    assert!(
        probe(format!("postgres://{user}@{host_and_db}")).is_err(),
        "{user} got in without a password"
    );

    let (code, stderr) = refused(&wrong);
    assert_ne!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!("postgres://{user}:***@{host_and_db}")),
        "names the database: {stderr}"
    );
    assert!(
        stderr.contains("the server refused the login")
            && stderr.contains(&format!(
                "password authentication failed for user \"{user}\""
            )),
        "says why: {stderr}"
    );
    // No retry mends a wrong password: it is not reported as the database being away.
    assert!(
        !stderr.contains("unavailable"),
        "called retryable: {stderr}"
    );
    assert!(
        !stderr.contains(wrong_password),
        "leaks the password: {stderr}"
    );
    assert!(
        !stderr.contains(password),
        "leaks the real password: {stderr}"
    );

    // With the right password the same role runs sbxd (on a database it owns).
    let db = database();
    let name = db
        .url()
        .rsplit("dbname=")
        .next()
        .expect("test database name")
        .to_string();
    let admin_url = std::env::var("SBX_TEST_DATABASE_URL").expect("SBX_TEST_DATABASE_URL");
    admin(&admin_url, format!("ALTER DATABASE {name} OWNER TO {user}"));
    let url = format!("{}?dbname={name}", good.trim_end_matches('/'));
    let d = Daemon::start(&["--database-url", &url]).await;
    let (status, body) = d.call("GET", "/v2/sandboxes", None).await;
    assert_eq!(status, 200, "{body}");
    drop(d);
    drop(db);
}

/// Runs one statement on the server of `url` (as its admin), off the async runtime.
fn admin(url: &str, sql: String) {
    let url = url.to_string();
    std::thread::spawn(move || {
        let mut c = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
        c.batch_execute(&sql).expect("admin statement");
    })
    .join()
    .expect("thread");
}

#[tokio::test]
#[ignore = "needs root, runsc, the image and PostgreSQL; run ./scripts/test"]
async fn a_database_that_goes_away_is_503_then_sbxd_recovers() {
    let admin_url = std::env::var("SBX_TEST_DATABASE_URL").expect("SBX_TEST_DATABASE_URL");
    let db = database();
    let d = Daemon::start(&["--database-url", db.url()]).await;
    let id = d.create_running("outlives-the-outage").await;
    let name = db
        .url()
        .rsplit("dbname=")
        .next()
        .expect("test database name")
        .to_string();
    // The database refuses new connections and drops the ones sbxd holds.
    admin(
        &admin_url,
        format!(
            "ALTER DATABASE {name} ALLOW_CONNECTIONS false; \
             SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"
        ),
    );
    for _ in 0..6 {
        let got = d.call("GET", &format!("/v2/sandboxes/{id}"), None).await;
        common::assert_error(&got, 503, "compute_unavailable");
    }
    admin(
        &admin_url,
        format!("ALTER DATABASE {name} ALLOW_CONNECTIONS true"),
    );
    // Back: every connection is replaced on its next use, nothing was lost.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, body) = d.call("GET", &format!("/v2/sandboxes/{id}"), None).await;
        if status == 200 {
            assert_eq!(body["data"]["status"], "RUNNING", "{body}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "sbxd did not recover: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (code, out, _) = d.exec(&id, &["echo", "still here"]).await;
    assert_eq!((code, out.as_str()), (0, "still here\n"));
    d.destroy_all(Duration::from_secs(30)).await;
    drop(d);
    drop(db);
}

#[tokio::test]
#[ignore = "needs root, runsc, the image and PostgreSQL; run ./scripts/test"]
async fn sessions_ended_by_the_server_cost_at_most_one_503() {
    // A server restart or failover ends every session sbxd holds; its clients
    // learn that only when they next talk. One failed call must make every
    // connection be replaced, not one 503 per pooled connection.
    let admin_url = std::env::var("SBX_TEST_DATABASE_URL").expect("SBX_TEST_DATABASE_URL");
    let db = database();
    let d = Daemon::start(&["--database-url", db.url()]).await;
    let name = db
        .url()
        .rsplit("dbname=")
        .next()
        .expect("test database name")
        .to_string();
    // Every pooled connection open: more concurrent reads than connections.
    let mut reads = Vec::new();
    for _ in 0..16 {
        let (http, url) = (d.http.clone(), d.url("/v2/sandboxes"));
        reads.push(tokio::spawn(async move {
            http.get(url).send().await.map(|r| r.status().as_u16())
        }));
    }
    for r in reads {
        assert_eq!(r.await.expect("task").expect("request"), 200);
    }
    admin(
        &admin_url,
        format!("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"),
    );
    let mut failed = Vec::new();
    for i in 0..12 {
        let (status, body) = d.call("GET", "/v2/sandboxes", None).await;
        match status {
            200 => {}
            503 => {
                assert_eq!(body["errors"][0]["code"], "compute_unavailable", "{body}");
                failed.push(i);
            }
            other => panic!("GET /v2/sandboxes: {other} {body}"),
        }
    }
    assert!(
        failed.len() <= 1,
        "503 on requests {failed:?} after the sessions ended"
    );
    drop(d);
    drop(db);
}
