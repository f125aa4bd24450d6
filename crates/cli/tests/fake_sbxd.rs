//! The `sbx` binary against an in-process fake of sbxd.

use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::Router;
use base64::Engine;
use futures::StreamExt;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

const ACTIVE: &str = "b066bdf7-a57b-4d8b-a1a7-76eab1f91273";
const ENDED: &str = "0e1f2a3b-4c5d-4e6f-8a9b-0c1d2e3f4a5b";
const PROC: &str = "45cef567-a28c-4109-b464-bc9c504ea900";

fn envelope(data: Value) -> Response {
    (
        [("content-type", "application/json")],
        json!({"data": data, "metadata": {"fetchedAt": "2026-07-30T12:00:00Z"}}).to_string(),
    )
        .into_response()
}

fn sandbox(id: &str, status: &str) -> Value {
    json!({
        "id": id, "name": "web", "status": status,
        "vpcId": "5f82a217-9d54-4fa8-a9be-d1dbba8a8db2", "imageRef": "default",
        "resources": {"vcpu": 1, "memoryMb": 1024},
        "createdAt": "2026-07-30T12:00:00.123Z"
    })
}

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

#[derive(Default)]
struct Seen {
    exec_bodies: Vec<Value>,
    uploads: Vec<(String, usize)>,
    stream_queries: Vec<String>,
}

async fn serve(seen: Arc<Mutex<Seen>>) -> String {
    let s_exec = seen.clone();
    let s_up = seen.clone();
    let s_stream = seen.clone();
    let connections = Arc::new(AtomicU32::new(0));
    let app = Router::new()
        .route(
            "/v2/sandboxes",
            get(|| async {
                (
                    [("content-type", "application/json")],
                    json!({
                        "data": [sandbox(ENDED, "TERMINATED"), sandbox(ACTIVE, "RUNNING")],
                        "metadata": {"fetchedAt": "2026-07-30T12:00:00Z"},
                        "page": {"hasMore": false, "limit": 250}
                    })
                    .to_string(),
                )
            }),
        )
        .route(
            "/v2/sandboxes/{id}",
            get(|Path(id): Path<String>| async move {
                if id == ACTIVE {
                    envelope(sandbox(ACTIVE, "RUNNING"))
                } else {
                    (
                        StatusCode::NOT_FOUND,
                        [
                            ("content-type", "application/json"),
                            ("x-request-id", "req-404"),
                        ],
                        json!({"errors": [{"code": "sandbox_not_found", "message": "sandbox not found"}]})
                            .to_string(),
                    )
                        .into_response()
                }
            }),
        )
        .route(
            "/v1/sandboxes/{id}",
            get(|Path(id): Path<String>| async move {
                if id != ACTIVE {
                    return (
                        StatusCode::NOT_FOUND,
                        [
                            ("content-type", "application/json"),
                            ("x-request-id", "req-404"),
                        ],
                        json!({"errors": [{"code": "sandbox_not_found", "message": "sandbox not found"}]})
                            .to_string(),
                    )
                        .into_response();
                }
                let mut v = sandbox(ACTIVE, "RUNNING");
                v.as_object_mut().unwrap().extend(
                    json!({
                        "environment": {}, "secrets": [],
                        "activeRuntimeMs": 10, "activeRuntimeLimitMs": 3600000,
                        "network": {"policy": {"mode": "public"}, "allowed": 3, "denied": 1,
                                    "failed": 0, "recentDenials": []}
                    })
                    .as_object()
                    .unwrap()
                    .clone(),
                );
                envelope(v)
            }),
        )
        .route(
            "/v2/sandboxes/{id}/exec",
            post(move |Path(id): Path<String>, body: Bytes| {
                let seen = s_exec.clone();
                async move {
                    assert_eq!(id, ACTIVE);
                    seen.lock()
                        .unwrap()
                        .exec_bodies
                        .push(serde_json::from_slice(&body).unwrap());
                    envelope(json!({
                        "stdout": b64(b"to stdout\n"), "stderr": b64(b"to stderr\n"),
                        "encoding": "base64", "exitCode": 7
                    }))
                }
            }),
        )
        .route(
            "/v2/sandboxes/{id}/files",
            put(move |RawQuery(q): RawQuery, req: Request| {
                let seen = s_up.clone();
                async move {
                    let mut body = req.into_body().into_data_stream();
                    let mut n = 0;
                    while let Some(b) = body.next().await {
                        n += b.unwrap().len();
                    }
                    seen.lock().unwrap().uploads.push((q.unwrap_or_default(), n));
                    envelope(json!({"path": "/x", "bytesWritten": n}))
                }
            }),
        )
        .route(
            "/v2/sandboxes/{id}/processes/{pid}",
            get(|| async {
                envelope(json!({"id": PROC, "command": ["sh"], "pid": 9, "state": "EXITED", "exitCode": 0}))
            }),
        )
        .route(
            "/v2/sandboxes/{id}/processes/{pid}/output/stream",
            get(move |RawQuery(q): RawQuery| {
                let seen = s_stream.clone();
                let n = connections.fetch_add(1, Ordering::SeqCst);
                async move {
                    seen.lock().unwrap().stream_queries.push(q.unwrap_or_default());
                    let frame = |offset: u64, data: &[u8]| {
                        Ok::<_, std::io::Error>(Bytes::from(format!(
                            "{}\n",
                            json!({"type": "log", "stream": "STDOUT", "data": b64(data),
                                   "encoding": "base64", "offset": offset})
                        )))
                    };
                    let items = if n == 0 {
                        // The first connection drops mid-stream.
                        vec![
                            frame(0, b"hello "),
                            Err(std::io::Error::other("connection lost")),
                        ]
                    } else {
                        vec![frame(6, b"world\n")]
                    };
                    // A pause per item so the first frame is flushed before the drop.
                    Body::from_stream(futures::stream::iter(items).then(|item| async {
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        item
                    }))
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
async fn exec_by_name_exits_with_the_command_exit_code() {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let url = serve(seen.clone()).await;

    let out = sbx(
        &url,
        &[
            "exec",
            "web",
            "--cwd",
            "/srv",
            "-e",
            "A=1",
            "--timeout",
            "2m",
            "--",
            "echo hi there",
            "-n",
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(7));
    assert_eq!(out.stdout, b"to stdout\n");
    assert_eq!(out.stderr, b"to stderr\n");

    let out = sbx(&url, &["exec", ACTIVE, "--shell", "ls | wc -l"]).await;
    assert_eq!(out.status.code(), Some(7));

    let bodies = std::mem::take(&mut seen.lock().unwrap().exec_bodies);
    assert_eq!(
        bodies[0],
        json!({"command": ["echo hi there", "-n"], "environment": {"A": "1"},
               "cwd": "/srv", "timeout": "120000ms"})
    );
    assert_eq!(
        bodies[1],
        json!({"command": ["/bin/sh", "-c", "ls | wc -l"], "timeout": "30000ms"})
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn api_errors_print_code_message_and_request_id() {
    let url = serve(Arc::default()).await;
    let out = sbx(&url, &["get", ENDED]).await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        "error: sandbox_not_found: sandbox not found (request req-404)\n"
    );

    let out = sbx(&url, &["get", "nope"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        "error: no active sandbox named \"nope\"\n"
    );

    let out = sbx(&url, &["get", "web"]).await;
    assert!(out.status.success());
    let sb: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(sb["id"], ACTIVE);
    assert_eq!(sb["network"]["policy"]["mode"], "public");
    assert_eq!(sb["network"]["allowed"], 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn cp_uploads_a_local_file() {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let url = serve(seen.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("data.bin");
    std::fs::write(&local, vec![1u8; 200_000]).unwrap();
    let out = sbx(
        &url,
        &["cp", local.to_str().unwrap(), "web:/tmp/", "--mode", "600"],
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let uploads = &seen.lock().unwrap().uploads;
    assert_eq!(
        uploads[0],
        ("path=%2Ftmp%2Fdata.bin&mode=0600".to_string(), 200_000)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn logs_follow_resumes_after_a_dropped_connection() {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let url = serve(seen.clone()).await;
    let out = sbx(&url, &["logs", "web", "--process", PROC, "-f"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "hello world\n");
    let queries = &seen.lock().unwrap().stream_queries;
    assert_eq!(queries[0], "tailBytes=0");
    assert_eq!(queries[1], "tailBytes=0&fromOffset=6");
}

/// A node as `GET /v1/nodes` shows it.
fn node(id: &str, state: &str) -> Value {
    json!({
        "id": id, "advertiseUrl": format!("http://{id}:8731"), "version": "0.1.0",
        "labels": {"zone": "a"}, "capacity": {"vcpu": 32.0, "memoryMb": 7168},
        "load": {"vcpu": 2.0, "memoryMb": 2048}, "sandboxes": 2,
        "state": state, "epoch": 2, "leaseExpiresAt": "2026-07-30T12:00:15Z",
        "lastHeartbeatAt": "2026-07-30T12:00:00Z", "registeredAt": "2026-07-30T11:00:00Z"
    })
}

#[tokio::test]
async fn nodes_lists_a_table_and_drains_and_undrains() {
    let app = Router::new()
        .route(
            "/v1/nodes",
            get(|| async {
                (
                    [("content-type", "application/json")],
                    json!({
                        "data": [node("node-a", "active"), node("node-b", "lost")],
                        "metadata": {"fetchedAt": "2026-07-30T12:00:00Z"}
                    })
                    .to_string(),
                )
            }),
        )
        .route(
            "/v1/nodes/{id}/drain",
            post(|Path(id): Path<String>| async move {
                if id == "node-a" {
                    envelope(node("node-a", "draining"))
                } else {
                    (
                        StatusCode::NOT_FOUND,
                        [("content-type", "application/json"), ("x-request-id", "req-n")],
                        json!({"errors": [{"code": "node_not_found", "message": "node \"x\" not found"}]})
                            .to_string(),
                    )
                        .into_response()
                }
            }),
        )
        .route(
            "/v1/nodes/{id}/undrain",
            post(|Path(id): Path<String>| async move { envelope(node(&id, "active")) }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let out = sbx(&url, &["nodes"]).await;
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines[0].starts_with("ID"), "{text}");
    assert!(
        lines[1].contains("node-a") && lines[1].contains("active"),
        "{text}"
    );
    assert!(
        lines[1].contains("zone=a") && lines[1].contains("2048/7168"),
        "{text}"
    );
    assert!(lines[0].contains("SANDBOXES"), "{text}");
    assert!(
        lines[2].contains("node-b") && lines[2].contains("lost"),
        "{text}"
    );

    let out = sbx(&url, &["nodes", "drain", "node-a"]).await;
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("node node-a is draining"));
    let out = sbx(&url, &["nodes", "undrain", "node-a"]).await;
    assert!(String::from_utf8_lossy(&out.stderr).contains("node node-a is active"));

    let out = sbx(&url, &["nodes", "drain", "nope"]).await;
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("node_not_found"),
        "{out:?}"
    );
}
