//! Shared pieces of the Connect routes: the runtime handle, wire views and NDJSON pages.

use super::error::ConnectOp;
use super::{ApiError, AppState};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use sbx_connect::model::{Build, Run};
use sbx_connect::service::{ConnectService, ServiceError};
use serde_json::{json, Value};
use std::sync::Arc;

/// The `limit` reported on lists that are not paginated (all items in one page).
pub const ALL: u32 = 1000;

/// The response header carrying the next page's cursor of an NDJSON page.
pub const NEXT_CURSOR_HEADER: &str = "x-next-cursor";

/// The Connect runtime, or `connect_unavailable`.
pub fn runtime(svc: &AppState) -> Result<&Arc<ConnectService>, ApiError> {
    svc.connect().ok_or_else(|| {
        ApiError::connect_unavailable(crate::service::ServiceError::Unavailable(
            "the Connect runtime is not running".into(),
        ))
    })
}

/// Runs a synchronous Connect call on the blocking pool: each one reads or writes the
/// Connect store (SQLite or PostgreSQL), which must not stall the async workers.
pub async fn blocking<T, F>(svc: &AppState, call: F) -> Result<Result<T, ServiceError>, ApiError>
where
    T: Send + 'static,
    F: FnOnce(&Arc<ConnectService>) -> Result<T, ServiceError> + Send + 'static,
{
    let connect = Arc::clone(runtime(svc)?);
    tokio::task::spawn_blocking(move || call(&connect))
        .await
        .map_err(|e| ApiError::new(sbx_api_types::ErrorCode::InternalError, e.to_string()))
}

/// [`blocking`] for the webhook delivery path, whose errors have their own codes.
pub async fn blocking_webhook<T, F>(
    svc: &AppState,
    call: F,
) -> Result<Result<T, ApiError>, ApiError>
where
    T: Send + 'static,
    F: FnOnce(&Arc<ConnectService>) -> Result<T, sbx_connect::service::WebhookError>
        + Send
        + 'static,
{
    let connect = Arc::clone(runtime(svc)?);
    tokio::task::spawn_blocking(move || call(&connect).map_err(ApiError::webhook))
        .await
        .map_err(|e| ApiError::new(sbx_api_types::ErrorCode::InternalError, e.to_string()))
}

/// Maps a Connect error of a use case without special codes.
pub fn other(e: ServiceError) -> ApiError {
    ApiError::connect(ConnectOp::Other, e)
}

/// Maps a Connect error of creating or changing a connection.
pub fn connection(e: ServiceError) -> ApiError {
    ApiError::connect(ConnectOp::Connection, e)
}

/// The wire view of a build: without the host path of its artifact.
pub fn build(b: Build) -> Value {
    json!({
        "id": b.id,
        "name": b.name,
        "version": b.version,
        "status": b.status,
        "log": b.log,
        "failure": b.failure,
        "createdAt": b.created_at,
        "finishedAt": b.finished_at,
        "nodeId": b.node_id,
    })
}

/// The wire view of a run: the stored run plus `durationMs` once it finished.
pub fn run(r: Run) -> Value {
    let duration = duration_ms(r.started_at.as_deref(), r.finished_at.as_deref());
    let mut v = serde_json::to_value(r).unwrap_or(Value::Null);
    if let Some(obj) = v.as_object_mut() {
        obj.insert("durationMs".into(), json!(duration));
    }
    v
}

/// Milliseconds between two RFC 3339 times (none unless both parse).
fn duration_ms(started: Option<&str>, finished: Option<&str>) -> Option<i64> {
    let start = chrono::DateTime::parse_from_rfc3339(started?).ok()?;
    let end = chrono::DateTime::parse_from_rfc3339(finished?).ok()?;
    Some((end - start).num_milliseconds().max(0))
}

/// One page of JSON lines (`application/x-ndjson`), one value per line; the next page's
/// cursor, when there is one, in the `x-next-cursor` header.
pub fn ndjson(lines: Vec<Value>, next_cursor: Option<String>) -> Response {
    let mut body = Vec::new();
    for line in &lines {
        if serde_json::to_writer(&mut body, line).is_ok() {
            body.push(b'\n');
        }
    }
    let mut resp = (StatusCode::OK, body).into_response();
    let headers = resp.headers_mut();
    headers.insert(
        "content-type",
        HeaderValue::from_static("application/x-ndjson"),
    );
    if let Some(v) = next_cursor.and_then(|c| HeaderValue::from_str(&c).ok()) {
        headers.insert(NEXT_CURSOR_HEADER, v);
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duration_needs_both_times() {
        assert_eq!(
            duration_ms(Some("2026-01-01T00:00:00Z"), Some("2026-01-01T00:00:01.5Z")),
            Some(1500)
        );
        assert_eq!(duration_ms(Some("2026-01-01T00:00:00Z"), None), None);
        assert_eq!(
            duration_ms(Some("nope"), Some("2026-01-01T00:00:00Z")),
            None
        );
    }

    #[tokio::test]
    async fn ndjson_lines_and_cursor_header() {
        let resp = ndjson(vec![json!({"a": 1}), json!({"b": "x"})], Some("42".into()));
        assert_eq!(resp.headers()["content-type"], "application/x-ndjson");
        assert_eq!(resp.headers()[NEXT_CURSOR_HEADER], "42");
        let body = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .expect("body");
        assert_eq!(&body[..], b"{\"a\":1}\n{\"b\":\"x\"}\n");
        let last = ndjson(Vec::new(), None);
        assert!(last.headers().get(NEXT_CURSOR_HEADER).is_none());
    }

    #[test]
    fn build_view_hides_the_artifact_path() {
        let b = Build {
            id: "b1".into(),
            name: "p".into(),
            version: "1.0.0".into(),
            status: sbx_connect::model::BuildStatus::Succeeded,
            log: "ok".into(),
            artifact_dir: Some("/var/lib/sbx/connect/artifacts/b1".into()),
            failure: None,
            created_at: "2026-01-01T00:00:00Z".into(),
            finished_at: None,
            node_id: Some("node-a".into()),
        };
        let v = build(b);
        assert!(!v.to_string().contains("/var/lib"), "{v}");
        assert_eq!(v["status"], "succeeded");
        assert_eq!(v["nodeId"], "node-a");
    }
}
