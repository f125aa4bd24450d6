//! The client against a tiny in-process fake of sbxd.

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post, put};
use axum::Router;
use base64::Engine;
use futures::StreamExt;
use sbx_client::api::{ExecRequest, OutputStream, SandboxStatus};
use sbx_client::{Client, ClientError};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use tokio::io::AsyncReadExt;
use uuid::Uuid;

const SID: &str = "b066bdf7-a57b-4d8b-a1a7-76eab1f91273";
const PID: &str = "45cef567-a28c-4109-b464-bc9c504ea900";

/// What the fake saw of each request.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    uri: String,
    headers: HeaderMap,
}

type Log = Arc<Mutex<Vec<Seen>>>;

async fn record(State(log): State<Log>, req: Request, next: Next) -> Response {
    log.lock().unwrap().push(Seen {
        method: req.method().to_string(),
        uri: req.uri().to_string(),
        headers: req.headers().clone(),
    });
    next.run(req).await
}

/// Serves `router` on a free port; returns its base URL and the request log.
async fn serve(router: Router) -> (String, Log) {
    let log: Log = Arc::default();
    let app = router.layer(axum::middleware::from_fn_with_state(log.clone(), record));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), log)
}

fn json_resp(status: StatusCode, v: Value) -> Response {
    (
        status,
        [
            ("content-type", "application/json"),
            ("x-request-id", "req-fake-1"),
        ],
        v.to_string(),
    )
        .into_response()
}

fn sandbox_json(status: &str) -> Value {
    json!({
        "id": SID, "name": "build-42", "status": status,
        "vpcId": "5f82a217-9d54-4fa8-a9be-d1dbba8a8db2", "imageRef": "default",
        "resources": {"vcpu": 2, "memoryMb": 2048},
        "createdAt": "2026-07-30T12:00:00.123Z", "startedAt": null, "endedAt": null
    })
}

fn data(v: Value) -> Value {
    json!({"data": v, "metadata": {"fetchedAt": "2026-07-30T12:00:00Z"}})
}

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

fn sid() -> Uuid {
    SID.parse().unwrap()
}

fn pid() -> Uuid {
    PID.parse().unwrap()
}

#[tokio::test]
async fn sends_the_hashed_signing_key_and_json_content_type() {
    let (url, log) = serve(Router::new().route(
        "/v2/sandboxes/{id}",
        get(|| async { json_resp(StatusCode::OK, data(sandbox_json("RUNNING"))) }),
    ))
    .await;
    let client = Client::new(&url, Some("signkey-prod-0123abcd")).unwrap();
    let sb = client.get_sandbox(sid()).await.unwrap();
    assert_eq!(sb.status, SandboxStatus::Running);
    assert_eq!(sb.resources.memory_mb, 2048);

    let anonymous = Client::new(&format!("{url}/"), None).unwrap();
    anonymous.get_sandbox(sid()).await.unwrap();

    let seen = log.lock().unwrap().clone();
    assert_eq!(seen[0].uri, format!("/v2/sandboxes/{SID}"));
    assert_eq!(
        seen[0].headers["authorization"],
        "Bearer signkey-prod-2647356804523c847ca70dc0f6c66a28d4cec5f53b9119a9022984ceec35e9da"
    );
    assert_eq!(seen[0].headers["content-type"], "application/json");
    assert!(seen[1].headers.get("authorization").is_none());
    assert_eq!(seen[1].uri, format!("/v2/sandboxes/{SID}"));
}

#[tokio::test]
async fn decodes_the_error_envelope_and_request_id() {
    let (url, _) = serve(
        Router::new()
            .route(
                "/v2/sandboxes/{id}",
                get(|| async {
                    json_resp(
                        StatusCode::NOT_FOUND,
                        json!({"errors": [
                            {"code": "sandbox_not_found", "message": "no such sandbox", "extra": 1},
                            {"code": "second", "message": "ignored"}
                        ]}),
                    )
                }),
            )
            .route(
                "/v2/sandboxes",
                get(|| async { (StatusCode::BAD_GATEWAY, "upstream down").into_response() }),
            ),
    )
    .await;
    let client = Client::new(&url, None).unwrap();
    let err = client.get_sandbox(sid()).await.unwrap_err();
    match &err {
        ClientError::Api {
            status,
            code,
            message,
            request_id,
        } => {
            assert_eq!(*status, 404);
            assert_eq!(code, "sandbox_not_found");
            assert_eq!(message, "no such sandbox");
            assert_eq!(request_id.as_deref(), Some("req-fake-1"));
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(err.is_not_found());
    assert_eq!(
        err.to_string(),
        "sandbox_not_found: no such sandbox (request req-fake-1)"
    );

    let err = client.list_sandboxes(Some(10), None).await.unwrap_err();
    assert_eq!(err.code(), Some("internal_error"));
    assert_eq!(err.status(), Some(502));
    assert!(err.to_string().contains("Sandbox API returned HTTP 502"));
    assert!(!err.is_retryable());

    // Nothing listening: a transport error.
    let dead = Client::new("http://127.0.0.1:9", None).unwrap();
    assert!(matches!(
        dead.get_sandbox(sid()).await.unwrap_err(),
        ClientError::Transport(_)
    ));
}

/// A body delivered in awkward pieces, as a slow server would.
fn pieces(parts: Vec<&'static str>) -> Body {
    Body::from_stream(futures::stream::iter(
        parts
            .into_iter()
            .map(|p| Ok::<_, std::io::Error>(Bytes::from_static(p.as_bytes()))),
    ))
}

#[tokio::test]
async fn decodes_ndjson_streams_with_split_lines_and_a_final_line_without_newline() {
    let (url, log) = serve(
        Router::new()
            .route(
                "/v2/sandboxes/{id}/processes/{pid}/output/stream",
                get(|| async {
                    (
                        [("content-type", "application/x-ndjson")],
                        pieces(vec![
                            "{\"type\":\"log\",\"stream\":\"STDOUT\",\"da",
                            "ta\":\"aGVsbG8K\",\"encoding\":\"base64\",\"offset\":0}\r\n",
                            "\n   \n",
                            "{\"type\":\"log\",\"stream\":\"STDERR\",\"data\":\"b29wcw==\",\"encoding\":\"base64\",\"offset\":6}\n",
                            "{\"type\":\"log\",\"stream\":\"STDOUT\",\"encoding\":\"base64\",\"offset\":10}",
                        ]),
                    )
                }),
            )
            .route(
                "/v2/sandboxes/{id}/logs",
                get(|| async {
                    pieces(vec![
                        "{\"type\":\"log\",\"stream\":\"STDOUT\",\"data\":\"Ym9vdAo=\",\"encoding\":\"base64\",\"at\":\"2026-07-30T12:00:00Z\"}",
                    ])
                }),
            ),
    )
    .await;
    let client = Client::new(&url, None).unwrap();
    let chunks: Vec<_> = client
        .process_stream(sid(), pid(), 100, Some(42))
        .await
        .unwrap()
        .collect()
        .await;
    let chunks: Vec<_> = chunks.into_iter().map(Result::unwrap).collect();
    assert_eq!(chunks.len(), 3);
    assert_eq!(chunks[0].data, b"hello\n");
    assert_eq!(chunks[0].stream, OutputStream::Stdout);
    assert_eq!(chunks[0].end_offset(), Some(6));
    assert_eq!(chunks[1].data, b"oops");
    assert_eq!(chunks[1].stream, OutputStream::Stderr);
    assert_eq!(chunks[2].data, b"");
    assert_eq!(chunks[2].offset, Some(10));

    let logs: Vec<_> = client.logs(sid(), true).await.unwrap().collect().await;
    assert_eq!(logs.len(), 1);
    let first = logs[0].as_ref().unwrap();
    assert_eq!(first.data, b"boot\n");
    assert_eq!(first.at.as_deref(), Some("2026-07-30T12:00:00Z"));

    let seen = log.lock().unwrap().clone();
    assert!(seen[0]
        .uri
        .ends_with("/output/stream?tailBytes=100&fromOffset=42"));
    assert!(seen[1].uri.ends_with("/logs?follow=true"));
}

#[tokio::test]
async fn an_error_frame_ends_the_stream_with_an_api_error() {
    let (url, _) = serve(Router::new().route(
        "/v2/sandboxes/{id}/processes/{pid}/output/stream",
        get(|| async {
            (
                [("x-request-id", "req-stream-9")],
                pieces(vec![
                    "{\"type\":\"log\",\"stream\":\"STDOUT\",\"data\":\"aGkK\",\"encoding\":\"base64\"}\n",
                    "{\"type\":\"error\",\"error\":{\"code\":\"compute_unavailable\",\"message\":\"the connection to the sandbox closed\"}}\n",
                    "{\"type\":\"log\",\"stream\":\"STDOUT\",\"data\":\"aGkK\",\"encoding\":\"base64\"}\n",
                ]),
            )
        }),
    ))
    .await;
    let client = Client::new(&url, None).unwrap();
    let items: Vec<_> = client
        .process_stream(sid(), pid(), 0, None)
        .await
        .unwrap()
        .collect()
        .await;
    assert_eq!(items.len(), 2, "nothing after the error frame: {items:?}");
    assert_eq!(items[0].as_ref().unwrap().data, b"hi\n");
    let err = items[1].as_ref().unwrap_err();
    match err {
        ClientError::Api {
            status,
            code,
            message,
            request_id,
        } => {
            assert_eq!(*status, 200);
            assert_eq!(code, "compute_unavailable");
            assert_eq!(message, "the connection to the sandbox closed");
            assert_eq!(request_id.as_deref(), Some("req-stream-9"));
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(err.is_retryable());
}

/// Reads a streamed upload body and reports what arrived.
async fn upload_handler(headers: HeaderMap, req: Request) -> Response {
    assert_eq!(headers["content-type"], "application/octet-stream");
    let uri = req.uri().to_string();
    let mut body = req.into_body().into_data_stream();
    let (mut total, mut sum, mut pieces) = (0u64, 0u64, 0u32);
    while let Some(piece) = body.next().await {
        let piece = piece.unwrap();
        pieces += 1;
        total += piece.len() as u64;
        sum += piece.iter().map(|b| *b as u64).sum::<u64>();
    }
    json_resp(
        StatusCode::OK,
        data(json!({"path": uri, "bytesWritten": total, "sum": sum, "pieces": pieces})),
    )
}

#[tokio::test]
async fn upload_streams_the_body() {
    let (url, log) =
        serve(Router::new().route("/v2/sandboxes/{id}/files", put(upload_handler))).await;
    let client = Client::new(&url, None).unwrap();

    // 3 MiB from a reader that is never held in memory whole.
    let size = 3 * 1024 * 1024u64;
    let reader = tokio::io::repeat(7).take(size);
    let written = client
        .upload(sid(), "/tmp/dir with space/a+b.bin", Some(0o640), reader)
        .await
        .unwrap();
    assert_eq!(written, size);

    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("f.txt");
    std::fs::write(&local, b"file contents\n").unwrap();
    let written = client
        .upload_file(sid(), "/f.txt", None, &local)
        .await
        .unwrap();
    assert_eq!(written, 14);
    assert!(matches!(
        client
            .upload_file(sid(), "/f.txt", None, dir.path().join("missing"))
            .await,
        Err(ClientError::Io(_))
    ));

    let seen = log.lock().unwrap().clone();
    assert_eq!(seen[0].method, "PUT");
    assert_eq!(
        seen[0].uri,
        format!("/v2/sandboxes/{SID}/files?path=%2Ftmp%2Fdir+with+space%2Fa%2Bb.bin&mode=0640")
    );
    // Streamed: chunked, no length known up front.
    assert!(seen[0].headers.get("content-length").is_none());
    assert_eq!(seen[0].headers["transfer-encoding"], "chunked");
    assert_eq!(
        seen[1].uri,
        format!("/v2/sandboxes/{SID}/files?path=%2Ff.txt")
    );
}

#[tokio::test]
async fn exec_decodes_base64_output() {
    let (url, _) = serve(Router::new().route(
        "/v2/sandboxes/{id}/exec",
        post(|body: Bytes| async move {
            let req: Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(req["command"], json!(["/bin/sh", "-c", "echo hi"]));
            assert_eq!(req["timeout"], "5000ms");
            assert!(req.get("cwd").is_none());
            json_resp(
                StatusCode::OK,
                data(json!({
                    "stdout": b64(&[0, 159, 146, 150, 255, b'\n']),
                    "stderr": b64(b"warn\n"),
                    "encoding": "base64",
                    "exitCode": 3
                })),
            )
        }),
    ))
    .await;
    let client = Client::new(&url, None).unwrap();
    let out = client
        .exec(
            sid(),
            &ExecRequest {
                command: Some(vec!["/bin/sh".into(), "-c".into(), "echo hi".into()]),
                timeout: Some("5000ms".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(out.stdout, vec![0, 159, 146, 150, 255, b'\n']);
    assert_eq!(out.stderr, b"warn\n");
    assert_eq!(out.exit_code, 3);
}

#[tokio::test]
async fn exec_rejects_bad_base64() {
    let (url, _) = serve(Router::new().route(
        "/v2/sandboxes/{id}/exec",
        post(|| async {
            json_resp(
                StatusCode::OK,
                data(json!({"stdout": "aGk", "encoding": "base64", "exitCode": 0})),
            )
        }),
    ))
    .await;
    let client = Client::new(&url, None).unwrap();
    let err = client
        .exec(sid(), &ExecRequest::default())
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::Decode(_)), "{err:?}");
}

#[tokio::test]
async fn lists_destroys_downloads_and_other_shapes() {
    let download_body = vec![42u8; 70_000];
    let dl = download_body.clone();
    let bodies: Arc<Mutex<Vec<(String, Bytes)>>> = Arc::default();
    let seen_bodies = bodies.clone();
    let (url, log) = serve(
        Router::new()
            .route(
                "/v2/sandboxes",
                get(|| async {
                    json_resp(
                        StatusCode::OK,
                        json!({
                            "data": [sandbox_json("RUNNING"), sandbox_json("TERMINATED")],
                            "metadata": {"fetchedAt": "2026-07-30T12:00:00Z"},
                            "page": {"cursor": "next-1", "hasMore": true, "limit": 2}
                        }),
                    )
                }),
            )
            .route(
                "/v2/sandboxes/{id}",
                axum::routing::delete(|| async { StatusCode::NO_CONTENT }),
            )
            .route(
                "/v2/sandboxes/{id}/files",
                get(move || {
                    let dl = dl.clone();
                    async move { ([("content-type", "application/octet-stream")], dl) }
                }),
            )
            .route(
                "/v2/sandboxes/{id}/processes/{pid}/output",
                get(|| async { json_resp(StatusCode::OK, data(json!({}))) }),
            )
            .fallback(any(move |req: Request| {
                let bodies = seen_bodies.clone();
                async move {
                    let key = format!("{} {}", req.method(), req.uri());
                    let body = axum::body::to_bytes(req.into_body(), 1 << 20)
                        .await
                        .unwrap();
                    bodies.lock().unwrap().push((key, body));
                    StatusCode::NO_CONTENT
                }
            })),
    )
    .await;
    let client = Client::new(&url, None).unwrap();

    let (items, page) = client.list_sandboxes(Some(2), Some("c0")).await.unwrap();
    assert_eq!(items.len(), 2);
    assert_eq!(page.cursor.as_deref(), Some("next-1"));
    assert!(page.has_more);

    assert_eq!(client.destroy_sandbox(sid()).await.unwrap(), None);

    let mut out = Vec::new();
    let n = client
        .download_to(sid(), "/data.bin", &mut out)
        .await
        .unwrap();
    assert_eq!(n, 70_000);
    assert_eq!(out, download_body);

    assert!(client
        .process_output(sid(), pid(), 0)
        .await
        .unwrap()
        .is_empty());

    client.snapshot_delete(pid()).await.unwrap();
    client.remove(sid(), "/a b", true).await.unwrap();
    client.rename(sid(), "/a", "/b").await.unwrap();
    client.secret_set("API KEY/x", "s3cr3t").await.unwrap();
    client.secret_delete("TOKEN").await.unwrap();

    let seen = log.lock().unwrap().clone();
    assert_eq!(seen[0].uri, "/v2/sandboxes?limit=2&cursor=c0");
    assert_eq!(
        seen[2].uri,
        format!("/v2/sandboxes/{SID}/files?path=%2Fdata.bin")
    );
    assert_eq!(
        seen[3].uri,
        format!("/v2/sandboxes/{SID}/processes/{PID}/output?tailBytes=0")
    );
    let bodies = bodies.lock().unwrap().clone();
    assert_eq!(bodies[0].0, format!("DELETE /v2/snapshots/{PID}"));
    assert_eq!(
        bodies[1].0,
        format!("POST /v1/sandboxes/{SID}/fs/remove?path=%2Fa+b&recursive=true")
    );
    assert_eq!(
        serde_json::from_slice::<Value>(&bodies[2].1).unwrap(),
        json!({"from": "/a", "to": "/b"})
    );
    assert_eq!(bodies[3].0, "PUT /v1/secrets/API%20KEY%2Fx");
    assert_eq!(
        serde_json::from_slice::<Value>(&bodies[3].1).unwrap(),
        json!({"value": "s3cr3t"})
    );
    assert_eq!(bodies[4].0, "DELETE /v1/secrets/TOKEN");
}

#[tokio::test]
async fn snapshots_pause_and_secrets() {
    let snapshot = json!({
        "id": PID, "name": "deps", "sourceImageId": "ab".repeat(32), "status": "CREATING",
        "resources": {"vcpu": 1, "memoryMb": 1024}, "storedBytes": 0,
        "createdAt": "2026-07-30T12:00:00Z", "updatedAt": "2026-07-30T12:00:00Z",
        "expiresAt": "2026-08-06T12:00:00Z"
    });
    let bodies: Arc<Mutex<Vec<Bytes>>> = Arc::default();
    let b2 = bodies.clone();
    let s2 = snapshot.clone();
    let (url, log) = serve(
        Router::new()
            .route(
                "/v2/sandboxes/{id}/snapshots",
                post(move |body: Bytes| {
                    b2.lock().unwrap().push(body);
                    let s = s2.clone();
                    async move { json_resp(StatusCode::ACCEPTED, data(s)) }
                }),
            )
            .route(
                "/v2/sandboxes/{id}/pause",
                post(|body: Bytes| async move {
                    assert!(body.is_empty());
                    json_resp(StatusCode::ACCEPTED, data(sandbox_json("PAUSING")))
                }),
            )
            .route(
                "/v2/sandboxes/{id}/resume",
                post(|| async {
                    json_resp(StatusCode::OK, json!({"metadata": {"fetchedAt": "x"}}))
                }),
            )
            .route(
                "/v2/snapshots",
                get(move || {
                    let s = snapshot.clone();
                    async move {
                        json_resp(
                            StatusCode::OK,
                            json!({"data": [s], "metadata": {"fetchedAt": "x"},
                                   "page": {"hasMore": false, "limit": 50}}),
                        )
                    }
                }),
            )
            .route(
                "/v1/secrets",
                get(|| async {
                    json_resp(
                        StatusCode::OK,
                        data(
                            json!([{"name": "TOKEN", "createdAt": "2026-07-30T12:00:00Z",
                                     "updatedAt": "2026-07-30T12:00:01Z"}]),
                        ),
                    )
                }),
            ),
    )
    .await;
    let client = Client::new(&url, None).unwrap();
    let named = client.snapshot_create(sid(), Some("deps")).await.unwrap();
    assert_eq!(named.name.as_deref(), Some("deps"));
    client.snapshot_create(sid(), None).await.unwrap();
    let bodies = bodies.lock().unwrap().clone();
    assert_eq!(
        serde_json::from_slice::<Value>(&bodies[0]).unwrap(),
        json!({"name": "deps"})
    );
    assert!(bodies[1].is_empty(), "unnamed create sends no body");

    let paused = client.pause(sid()).await.unwrap().unwrap();
    assert_eq!(paused.status, SandboxStatus::Pausing);
    assert_eq!(client.resume(sid()).await.unwrap(), None);

    let all = client.snapshot_list_all(Some("deps")).await.unwrap();
    assert_eq!(all.len(), 1);

    let secrets = client.secret_list().await.unwrap();
    assert_eq!(secrets[0].name, "TOKEN");
    assert_eq!(
        secrets[0].updated_at.as_deref(),
        Some("2026-07-30T12:00:01Z")
    );

    let seen = log.lock().unwrap().clone();
    assert_eq!(seen[4].uri, "/v2/snapshots?limit=250&name=deps");
    for s in &seen {
        assert_eq!(s.headers["content-type"], "application/json", "{}", s.uri);
    }
}

#[tokio::test]
async fn an_upload_refused_early_reports_the_api_error() {
    let (url, _) = serve(Router::new().route(
        "/v2/sandboxes/{id}/files",
        put(|| async {
            json_resp(
                StatusCode::PAYLOAD_TOO_LARGE,
                json!({"errors": [{"code": "sandbox_file_too_large", "message": "over 100 MiB"}]}),
            )
        }),
    ))
    .await;
    let client = Client::new(&url, None).unwrap();
    let reader = tokio::io::repeat(0).take(200 * 1024 * 1024);
    let err = client
        .upload(sid(), "/big", None, reader)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("sandbox_file_too_large"), "{err:?}");
}

#[tokio::test]
async fn create_v1_sends_the_network_policy_and_detail_decodes_counters() {
    use sbx_client::api::{AllowRule, CreateSandboxV1Request, NetworkMode, NetworkPolicy};
    let (url, log) = serve(
        Router::new()
            .route(
                "/v1/sandboxes",
                post(|body: Bytes| async move {
                    let req: Value = serde_json::from_slice(&body).unwrap();
                    assert_eq!(req["name"], "build-42");
                    assert_eq!(
                        req["network"],
                        json!({"mode": "allowlist", "allow": [
                            {"host": "example.com", "ports": [443]},
                            {"cidr": "1.2.3.0/24"}
                        ]})
                    );
                    assert!(req.get("vcpu").is_none());
                    json_resp(StatusCode::ACCEPTED, data(sandbox_json("STARTING")))
                }),
            )
            .route(
                "/v1/sandboxes/{id}",
                get(|| async {
                    let mut v = sandbox_json("RUNNING");
                    let extra = json!({
                        "environment": {"A": "1"}, "secrets": ["tok"],
                        "activeRuntimeMs": 1200, "activeRuntimeLimitMs": 3600000,
                        "network": {
                            "policy": {"mode": "https-only"},
                            "allowed": 4, "denied": 2, "failed": 1,
                            "recentDenials": [{"host": "10.0.0.1", "port": 80,
                                "reason": "private", "at": "2026-07-30T12:00:01Z"}]
                        }
                    });
                    v.as_object_mut()
                        .unwrap()
                        .extend(extra.as_object().unwrap().clone());
                    json_resp(StatusCode::OK, data(v))
                }),
            ),
    )
    .await;
    let client = Client::new(&url, None).unwrap();
    let sb = client
        .create_sandbox_v1(&CreateSandboxV1Request {
            name: Some("build-42".into()),
            network: Some(NetworkPolicy {
                mode: NetworkMode::Allowlist,
                allow: vec![
                    AllowRule {
                        host: Some("example.com".into()),
                        ports: Some(vec![443]),
                        ..Default::default()
                    },
                    AllowRule {
                        cidr: Some("1.2.3.0/24".into()),
                        ..Default::default()
                    },
                ],
            }),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(sb.status, SandboxStatus::Starting);

    let d = client.sandbox_detail(sid()).await.unwrap();
    assert_eq!(d.sandbox.status, SandboxStatus::Running);
    assert_eq!(d.environment["A"], "1");
    assert_eq!(d.network.policy.mode, NetworkMode::HttpsOnly);
    assert_eq!(
        (d.network.allowed, d.network.denied, d.network.failed),
        (4, 2, 1)
    );
    assert_eq!(d.network.recent_denials[0].reason, "private");

    let seen = log.lock().unwrap().clone();
    assert_eq!(
        (seen[0].method.as_str(), seen[0].uri.as_str()),
        ("POST", "/v1/sandboxes")
    );
    assert_eq!(seen[1].uri, format!("/v1/sandboxes/{SID}"));
}
