//! `sbx connect ...` against an in-process fake of the Connect API: missing things exit
//! non-zero, failed runs print their log tail, upgrades and version deletes are sent.

use axum::body::Bytes;
use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::Router;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};

const CONN: &str = "c1";

fn envelope(data: Value) -> Response {
    (
        [("content-type", "application/json")],
        json!({"data": data, "metadata": {"fetchedAt": "2026-07-30T12:00:00Z"}}).to_string(),
    )
        .into_response()
}

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    (
        status,
        [("content-type", "application/json")],
        json!({"errors": [{"code": code, "message": message}]}).to_string(),
    )
        .into_response()
}

fn failed_run() -> Value {
    json!({
        "id": "r1", "connectionId": CONN, "package": "conn", "version": "1.0.0",
        "kind": "verify", "sync": null, "status": "failed", "attempt": 1,
        "createdAt": "2026-07-30T12:00:00Z", "startedAt": "2026-07-30T12:00:00Z",
        "finishedAt": "2026-07-30T12:00:01Z", "durationMs": 1000, "recordsCommitted": 0,
        "failureCategory": "package_error", "failureKind": "http_401"
    })
}

fn connection() -> Value {
    json!({
        "id": CONN, "name": "c", "package": "conn", "version": "2.0.0", "config": {},
        "origin": "https://api.example.com", "authKind": "bearer", "status": "active",
        "scheduleIntervalSeconds": null, "createdAt": "2026-07-30T12:00:00Z",
        "updatedAt": "2026-07-30T12:00:00Z"
    })
}

async fn serve(patches: Arc<Mutex<Vec<Value>>>) -> String {
    let app = Router::new()
        .route(
            "/v1/connect/connections/{id}/syncs/{sync}/records",
            get(|Path((_, sync)): Path<(String, String)>| async move {
                if sync == "items" {
                    ([("content-type", "application/x-ndjson")], "{\"id\":1}\n").into_response()
                } else {
                    error(StatusCode::NOT_FOUND, "connect_sync_not_found", "sync not found")
                }
            }),
        )
        .route(
            "/v1/connect/connections/{id}/syncs/{sync}/checkpoint",
            get(|| async { error(StatusCode::NOT_FOUND, "connect_sync_not_found", "sync not found") }),
        )
        .route("/v1/connect/connections/{id}/test", post(|| async { envelope(failed_run()) }))
        .route(
            "/v1/connect/oauth/callback",
            post(|body: Bytes| async move {
                let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                // state "ok": the hook succeeded; anything else: it failed.
                let mut run = failed_run();
                run["kind"] = json!("oauth");
                run["sync"] = json!("afterAuthorize");
                if req["state"] == "ok" {
                    run["status"] = json!("succeeded");
                    run["failureCategory"] = Value::Null;
                    run["failureKind"] = Value::Null;
                }
                envelope(json!({"connection": connection(), "run": run}))
            }),
        )
        .route(
            "/v1/connect/runs/{id}/logs",
            get(|| async {
                let lines: Vec<Value> = (0..25)
                    .map(|i| {
                        json!({"id": i, "runId": "r1", "ts": "2026-07-30T12:00:00Z", "level": "info",
                               "message": if i == 24 { "Listing failed:\nHTTP 401".to_string() } else { format!("line {i}") }})
                    })
                    .collect();
                (
                    [("content-type", "application/json")],
                    json!({"data": lines, "metadata": {"fetchedAt": "2026-07-30T12:00:00Z"},
                           "page": {"cursor": null, "hasMore": false, "limit": 1000}})
                    .to_string(),
                )
                    .into_response()
            }),
        )
        .route(
            "/v1/connect/connections/{id}",
            axum::routing::patch(move |body: Bytes| {
                let patches = patches.clone();
                async move {
                    patches.lock().unwrap().push(serde_json::from_slice(&body).unwrap());
                    envelope(connection())
                }
            }),
        )
        .route(
            "/v1/connect/packages/{name}/versions/{version}",
            delete(|Path((_, version)): Path<(String, String)>| async move {
                if version == "1.0.0" {
                    StatusCode::NO_CONTENT.into_response()
                } else {
                    error(
                        StatusCode::CONFLICT,
                        "connect_invalid_state",
                        "conn@2.0.0 is used by connection c1; move or delete it first",
                    )
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

async fn sbx(url: &str, args: &[&str]) -> std::process::Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_sbx"))
        .args(args)
        .env("SBX_URL", url)
        .env_remove("SBX_SIGNING_KEY")
        .output()
        .await
        .expect("run sbx")
}

#[tokio::test(flavor = "multi_thread")]
async fn unknown_syncs_exit_non_zero() {
    let url = serve(Arc::default()).await;
    let out = sbx(
        &url,
        &["connect", "records", "--connection", CONN, "nosuch"],
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("connect_sync_not_found"));
    let out = sbx(
        &url,
        &["connect", "checkpoint", "--connection", CONN, "nosuch"],
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        out.stdout.is_empty(),
        "no `null` for a sync that does not exist"
    );
    let out = sbx(&url, &["connect", "records", "--connection", CONN, "items"]).await;
    assert!(out.status.success());
    assert_eq!(out.stdout, b"{\"id\":1}\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_test_prints_the_log_tail() {
    let url = serve(Arc::default()).await;
    let out = sbx(&url, &["connect", "connection", "test", CONN]).await;
    assert_eq!(out.status.code(), Some(1));
    let run: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(run["failureKind"], "http_401");
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("run r1 failed: package_error http_401"),
        "{err}"
    );
    assert!(err.contains("last 20 log line(s)"), "{err}");
    assert!(
        !err.contains("line 4\n") && err.contains("line 5\n"),
        "{err}"
    );
    assert!(
        err.contains("info  Listing failed:\n    | HTTP 401\n"),
        "a multi-line message stays one entry: {err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn upgrade_and_version_delete() {
    let patches = Arc::new(Mutex::new(Vec::new()));
    let url = serve(patches.clone()).await;
    let out = sbx(
        &url,
        &[
            "connect",
            "connection",
            "update",
            CONN,
            "--package-version",
            "2.0.0",
        ],
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(patches.lock().unwrap()[0], json!({"version": "2.0.0"}));
    let out = sbx(&url, &["connect", "package", "delete", "conn", "1.0.0"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = sbx(&url, &["connect", "package", "delete", "conn", "2.0.0"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("used by connection c1"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_after_authorize_exits_non_zero_with_the_log_tail() {
    let url = serve(Arc::default()).await;
    let args = |state: &'static str| {
        [
            "connect",
            "connection",
            "oauth-callback",
            "--state",
            state,
            "--code",
            "c",
        ]
    };
    let out = sbx(&url, &args("bad")).await;
    assert_eq!(out.status.code(), Some(1));
    // The connection is still printed: the tokens were stored.
    let conn: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(conn["id"], CONN);
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("afterAuthorize run r1: failed"), "{err}");
    assert!(
        err.contains("run r1 failed: package_error http_401"),
        "{err}"
    );
    assert!(err.contains("last 20 log line(s)"), "{err}");
    assert!(
        err.contains("info  Listing failed:\n    | HTTP 401\n"),
        "{err}"
    );

    let out = sbx(&url, &args("ok")).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("afterAuthorize run r1: succeeded"));
}
