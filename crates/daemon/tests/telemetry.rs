//! Logs and traces of a real sbxd: `--log-format json` writes one JSON object per
//! stderr line, and `--otlp-endpoint` exports the spans of requests and of the
//! sandbox boot, checkpoint, restore and teardown they caused to an OTLP/HTTP
//! collector, flushed at SIGTERM.
//!
//! The collector is a stand-in inside the test: an HTTP server on 127.0.0.1 that
//! accepts `POST /v1/traces` and decodes the protobuf body with the
//! OpenTelemetry project's own message types (`opentelemetry-proto`).
//!
//! Needs root, runsc, the image and the agent (`./scripts/test`).

mod common;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, KeyValue};
use prost::Message;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn env_path(name: &str) -> PathBuf {
    PathBuf::from(std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run the integration tests through ./scripts/test")
    }))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts a dev-mode sbxd with `args` and `envs`, stderr piped; waits for /healthz.
async fn start(
    data_dir: &std::path::Path,
    port: u16,
    args: &[&str],
    envs: &[(&str, &str)],
) -> Child {
    let mut child = Command::new(common::sbxd_binary())
        .arg("--dev")
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--data-dir")
        .arg(data_dir)
        .arg("--image-rootfs")
        .arg(env_path("SBX_TEST_IMAGE_ROOTFS"))
        .arg("--agent-dir")
        .arg(env_path("SBX_TEST_AGENT_DIR"))
        .arg("--connect-sdk-dir")
        .arg(common::connect_sdk_dir())
        // No warm pool: its members would outlive the sbxd each test kills.
        .arg("--warm-pool")
        .arg("none")
        .args(args)
        .envs(envs.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sbxd");
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Ok(r) = http
            .get(format!("http://127.0.0.1:{port}/healthz"))
            .send()
            .await
        {
            if r.status().is_success() {
                return child;
            }
        }
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            panic!(
                "sbxd exited early: {status}\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert!(Instant::now() < deadline, "sbxd did not become healthy");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// SIGTERM, then the process's (stdout, stderr) once it exited.
fn terminate(child: Child) -> (String, String) {
    // SAFETY: kill(2) on the pid of a child this test spawned and has not reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().expect("sbxd output");
    assert!(
        out.status.success(),
        "sbxd exit after SIGTERM: {:?}",
        out.status
    );
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn data_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("sbx-it-")
        .tempdir_in("/var/tmp")
        .unwrap()
}

/// Creates a 1/1024 sandbox (waits for RUNNING); returns (sandbox id, X-Request-Id of the create).
async fn create_sandbox(port: u16) -> (String, String) {
    let resp = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{port}/v2/sandboxes"))
        .header("content-type", "application/json")
        .body(json!({"name": "traced", "vcpu": 1, "memoryMb": 1024}).to_string())
        .send()
        .await
        .expect("create");
    let request_id = resp
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .expect("x-request-id")
        .to_string();
    let status = resp.status().as_u16();
    let body: Value = resp.json().await.expect("create body");
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["data"]["status"], "RUNNING", "{body}");
    (
        body["data"]["id"].as_str().expect("id").to_string(),
        request_id,
    )
}

/// Destroys the sandbox and waits until it is TERMINATED (its teardown over).
async fn destroy(port: u16, id: &str) {
    let http = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{port}/v2/sandboxes/{id}");
    let resp = http.delete(&url).send().await.expect("destroy");
    assert!(resp.status().is_success(), "{}", resp.status());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let body: Value = http
            .get(&url)
            .send()
            .await
            .expect("get")
            .json()
            .await
            .expect("json");
        if body["data"]["status"] == "TERMINATED" {
            return;
        }
        assert!(Instant::now() < deadline, "not torn down: {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
#[ignore = "needs root, runsc, the image and the agent; run ./scripts/test"]
async fn json_logs_are_one_object_per_stderr_line() {
    let dir = data_dir();
    // Anything the test leaves running under its data dir is killed at the end.
    let _leftovers = common::KillLeftovers(dir.path().to_path_buf());
    let port = free_port();
    let child = start(
        dir.path(),
        port,
        &["--log-format", "json"],
        &[("SBX_LOG", "info,sbx_daemon=debug")],
    )
    .await;
    let (id, request_id) = create_sandbox(port).await;
    destroy(port, &id).await;
    let (stdout, stderr) = terminate(child);
    assert!(
        stdout.trim().is_empty(),
        "logs go to stderr, not stdout: {stdout}"
    );
    let mut lines = 0;
    let mut in_request = 0;
    for line in stderr.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("a stderr line is not JSON ({e}): {line}"));
        assert!(v["level"].is_string(), "no level: {line}");
        assert!(v["message"].is_string(), "no message: {line}");
        assert!(v["timestamp"].is_string(), "no timestamp: {line}");
        if v["span"]["request_id"] == request_id.as_str() {
            in_request += 1;
        }
        lines += 1;
    }
    assert!(lines >= 3, "too few log lines: {stderr}");
    assert!(
        stderr.contains("\"sbxd ready\""),
        "the ready line is missing: {stderr}"
    );
    // The create's debug "response" line runs in its request span, id included.
    assert!(
        in_request >= 1,
        "no line carries the create's request id {request_id}: {stderr}"
    );
}

/// The collector stand-in: every decoded export request.
type Received = Arc<Mutex<Vec<ExportTraceServiceRequest>>>;

/// Serves `POST /v1/traces` on 127.0.0.1 (OTLP/HTTP, protobuf); returns its port.
async fn collector(received: Received) -> u16 {
    use axum::body::Bytes;
    use axum::http::{HeaderMap, StatusCode};
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |headers: HeaderMap, body: Bytes| {
            let received = received.clone();
            async move {
                let content_type = headers
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("");
                if content_type != "application/x-protobuf" {
                    return (StatusCode::UNSUPPORTED_MEDIA_TYPE, Vec::new());
                }
                match ExportTraceServiceRequest::decode(body) {
                    Ok(req) => {
                        received.lock().unwrap().push(req);
                        // An empty ExportTraceServiceResponse: all accepted.
                        (StatusCode::OK, Vec::new())
                    }
                    Err(_) => (StatusCode::BAD_REQUEST, Vec::new()),
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    port
}

fn attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a any_value::Value> {
    attrs
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.as_ref())
}

fn attr_str<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a str> {
    match attr(attrs, key) {
        Some(any_value::Value::StringValue(s)) => Some(s),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root, runsc, the image and the agent; run ./scripts/test"]
async fn spans_of_a_request_and_its_boot_reach_an_otlp_collector() {
    let received = Received::default();
    let collector_port = collector(received.clone()).await;
    let dir = data_dir();
    // Anything the test leaves running under its data dir is killed at the end.
    let _leftovers = common::KillLeftovers(dir.path().to_path_buf());
    let port = free_port();
    let endpoint = format!("http://127.0.0.1:{collector_port}");
    let child = start(
        dir.path(),
        port,
        &["--otlp-endpoint", &endpoint],
        // Logs quiet and no export by timer within the test: what the collector
        // gets comes from the flush at shutdown, which this also tests.
        &[("SBX_LOG", "warn"), ("OTEL_BSP_SCHEDULE_DELAY", "600000")],
    )
    .await;
    let (id, request_id) = create_sandbox(port).await;
    let snapshot_request_id = snapshot(port, &id).await;
    destroy(port, &id).await;
    let (_, stderr) = terminate(child);

    let exports = received.lock().unwrap().clone();
    assert!(
        !exports.is_empty(),
        "the collector got nothing; sbxd said: {stderr}"
    );
    let mut spans = Vec::new();
    for export in &exports {
        for rs in &export.resource_spans {
            let resource = rs.resource.as_ref().expect("resource");
            assert_eq!(attr_str(&resource.attributes, "service.name"), Some("sbxd"));
            for ss in &rs.scope_spans {
                spans.extend(ss.spans.iter().cloned());
            }
        }
    }
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    let request = spans
        .iter()
        .find(|s| s.name == "request" && attr_str(&s.attributes, "request_id") == Some(&request_id))
        .unwrap_or_else(|| panic!("no request span with request_id {request_id}: {names:?}"));
    assert_eq!(attr_str(&request.attributes, "method"), Some("POST"));
    assert_eq!(attr_str(&request.attributes, "path"), Some("/v2/sandboxes"));
    assert_eq!(
        attr(&request.attributes, "status"),
        Some(&any_value::Value::IntValue(201))
    );
    let boot = spans
        .iter()
        .find(|s| s.name == "sandbox.boot" && attr_str(&s.attributes, "sandbox_id") == Some(&id))
        .unwrap_or_else(|| panic!("no sandbox.boot span for {id}: {names:?}"));
    // The boot runs in a background task, still in the create's trace.
    assert_eq!(
        boot.trace_id, request.trace_id,
        "boot is not in the create's trace"
    );
    assert!(boot.end_time_unix_nano > boot.start_time_unix_nano);
    let teardown = spans
        .iter()
        .find(|s| {
            s.name == "sandbox.teardown" && attr_str(&s.attributes, "sandbox_id") == Some(&id)
        })
        .unwrap_or_else(|| panic!("no sandbox.teardown span for {id}: {names:?}"));
    assert_ne!(
        teardown.trace_id, request.trace_id,
        "the destroy is another request"
    );
    // The snapshot: a checkpoint of the sandbox, then (verify) a restore of a probe,
    // both in the trace of the request that asked for the snapshot.
    let snap_request = spans
        .iter()
        .find(|s| {
            s.name == "request"
                && attr_str(&s.attributes, "request_id") == Some(&snapshot_request_id)
        })
        .unwrap_or_else(|| panic!("no request span for the snapshot: {names:?}"));
    let checkpoint = spans
        .iter()
        .find(|s| {
            s.name == "sandbox.checkpoint" && attr_str(&s.attributes, "sandbox_id") == Some(&id)
        })
        .unwrap_or_else(|| panic!("no sandbox.checkpoint span for {id}: {names:?}"));
    assert_eq!(checkpoint.trace_id, snap_request.trace_id);
    let restore = spans
        .iter()
        .find(|s| s.name == "sandbox.restore")
        .unwrap_or_else(|| panic!("no sandbox.restore span (the verify probe): {names:?}"));
    assert_eq!(restore.trace_id, snap_request.trace_id);
}

/// Snapshots the sandbox (waits for READY); returns the X-Request-Id of the request.
async fn snapshot(port: u16, id: &str) -> String {
    let http = reqwest::Client::new();
    let resp = http
        .post(format!(
            "http://127.0.0.1:{port}/v2/sandboxes/{id}/snapshots"
        ))
        .header("content-type", "application/json")
        .body(json!({"name": "traced"}).to_string())
        .send()
        .await
        .expect("snapshot");
    let request_id = resp
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .expect("x-request-id")
        .to_string();
    let body: Value = resp.json().await.expect("snapshot body");
    let snap = body["data"]["id"]
        .as_str()
        .expect("snapshot id")
        .to_string();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let got: Value = http
            .get(format!("http://127.0.0.1:{port}/v2/snapshots/{snap}"))
            .send()
            .await
            .expect("get snapshot")
            .json()
            .await
            .expect("json");
        if got["data"]["status"] == "READY" {
            return request_id;
        }
        assert_ne!(got["data"]["status"], "FAILED", "{got}");
        assert!(Instant::now() < deadline, "snapshot not READY: {got}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
