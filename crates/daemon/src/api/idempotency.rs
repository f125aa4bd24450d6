//! The `Idempotency-Key` header on exec, process start, signal and snapshot
//! create. A layer on those routes only: without the header the request goes
//! straight to its handler; with it, the first request runs to completion
//! (even if its client goes away) and its response is stored, and a repeat
//! with the same key gets that response back, marked `Idempotent-Replayed: true`.

use super::{ApiError, AppState, Workspace};
use crate::service::{Claim, ClaimKey};
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use sbx_api_types::ErrorCode;
use sha2::{Digest, Sha256};

/// The request header.
pub const HEADER: &str = "idempotency-key";
/// Set on a response that repeats a stored one.
pub const REPLAYED: &str = "idempotent-replayed";
/// Longest key accepted.
const MAX_KEY_BYTES: usize = 255;
/// Largest response stored (exec output is capped below this).
const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// Checks a key: 1–255 visible ASCII characters.
fn parse_key(raw: &HeaderValue) -> Result<String, ApiError> {
    let bytes = raw.as_bytes();
    if bytes.is_empty() || bytes.len() > MAX_KEY_BYTES || !bytes.iter().all(u8::is_ascii_graphic) {
        return Err(ApiError::new(
            ErrorCode::InvalidFieldFormat,
            "Idempotency-Key: 1-255 visible ASCII characters",
        ));
    }
    Ok(String::from_utf8_lossy(bytes).into_owned())
}

/// hex(sha256) of the method, the query and the body (JSON bodies in canonical form).
fn fingerprint(method: &str, query: &str, body: &[u8]) -> String {
    let canonical = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| serde_json::to_vec(&v).ok())
        .unwrap_or_else(|| body.to_vec());
    let mut h = Sha256::new();
    h.update(method.as_bytes());
    h.update(b"\n");
    h.update(query.as_bytes());
    h.update(b"\n");
    h.update(&canonical);
    hex::encode(h.finalize())
}

/// Whether a response means the request did nothing (so a retry should run it):
/// validation, quota, unknown resources, wrong state, capacity.
fn did_nothing(status: StatusCode, body: &[u8]) -> bool {
    match status.as_u16() {
        // 403 is the snapshot quota: nothing was stored, and a retry after a delete may pass.
        400 | 403 | 404 | 429 | 503 => true,
        409 => serde_json::from_slice::<sbx_api_types::ErrorBody>(body)
            .ok()
            .and_then(|b| b.errors.into_iter().next())
            .is_some_and(|e| e.code == ErrorCode::InvalidState.as_str()),
        _ => false,
    }
}

fn stored_response(status: u16, body: Vec<u8>, replayed: bool) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let has_body = !body.is_empty();
    let mut resp = (status, body).into_response();
    let headers = resp.headers_mut();
    if has_body {
        headers.insert("content-type", HeaderValue::from_static("application/json"));
    }
    if replayed {
        headers.insert(REPLAYED, HeaderValue::from_static("true"));
    }
    resp
}

/// Middleware for the four unsafe routes.
pub async fn layer(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    req: Request,
    next: Next,
) -> Response {
    let Some(raw) = req.headers().get(HEADER) else {
        return next.run(req).await;
    };
    let key = match parse_key(raw) {
        Ok(k) => k,
        Err(e) => return e.into_response(),
    };
    let (parts, body) = req.into_parts();
    let limit = svc.config().limits.json_body_bytes;
    let Ok(bytes) = axum::body::to_bytes(body, limit).await else {
        return ApiError::new(ErrorCode::PayloadTooLarge, "request body is too large")
            .into_response();
    };
    let claim = ClaimKey {
        tenant: ws.0.clone(),
        path: parts.uri.path().to_string(),
        key,
    };
    let print = fingerprint(
        parts.method.as_str(),
        parts.uri.query().unwrap_or(""),
        &bytes,
    );
    match svc.idempotency_claim(&claim, &print).await {
        Err(e) => ApiError::from(e).into_response(),
        Ok(Claim::Replay(status, body)) => stored_response(status, body, true),
        Ok(Claim::Run) => {
            let req = Request::from_parts(parts, Body::from(bytes));
            // Its own task: the request finishes and is recorded even if the client goes away.
            let task = tokio::spawn(run_and_record(svc.clone(), claim.clone(), req, next));
            match task.await {
                Ok(resp) => resp,
                Err(e) => {
                    let err = ApiError::new(
                        ErrorCode::OperationAmbiguous,
                        format!("the request failed unexpectedly ({e}); it may or may not have happened"),
                    );
                    let (status, body) = (err.code.http_status(), error_bytes(&err));
                    svc.idempotency_finish(&claim, status, &body).await;
                    stored_response(status, body, false)
                }
            }
        }
    }
}

fn error_bytes(e: &ApiError) -> Vec<u8> {
    serde_json::to_vec(&sbx_api_types::ErrorBody::new(
        e.code.as_str(),
        e.message.clone(),
    ))
    .unwrap_or_default()
}

async fn run_and_record(svc: AppState, claim: ClaimKey, req: Request, next: Next) -> Response {
    let resp = next.run(req).await;
    let status = resp.status();
    let body: Bytes = match axum::body::to_bytes(resp.into_body(), MAX_RESPONSE_BYTES).await {
        Ok(b) => b,
        Err(e) => {
            let err = ApiError::new(
                ErrorCode::OperationAmbiguous,
                format!("the response could not be recorded ({e}); the request may or may not have happened"),
            );
            let body = error_bytes(&err);
            svc.idempotency_finish(&claim, err.code.http_status(), &body)
                .await;
            return stored_response(err.code.http_status(), body, false);
        }
    };
    if did_nothing(status, &body) {
        svc.idempotency_forget(&claim).await;
    } else {
        svc.idempotency_finish(&claim, status.as_u16(), &body).await;
    }
    stored_response(status.as_u16(), body.to_vec(), false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_ignore_json_formatting_only() {
        let a = fingerprint("POST", "", br#"{"command":["echo"], "timeout":"1ms"}"#);
        let b = fingerprint("POST", "", br#"{"timeout":"1ms","command":["echo"]}"#);
        let c = fingerprint("POST", "", br#"{"command":["echo","x"],"timeout":"1ms"}"#);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(
            fingerprint("POST", "", b""),
            fingerprint("POST", "a=1", b"")
        );
    }

    #[test]
    fn keys_are_visible_ascii() {
        assert!(parse_key(&HeaderValue::from_static("retry-1")).is_ok());
        assert!(parse_key(&HeaderValue::from_static("")).is_err());
        assert!(parse_key(&HeaderValue::from_static("a b")).is_err());
        assert!(parse_key(&HeaderValue::from_str(&"k".repeat(256)).unwrap()).is_err());
    }

    #[test]
    fn only_refusals_release_the_key() {
        let body =
            |code: &str| serde_json::to_vec(&sbx_api_types::ErrorBody::new(code, "m")).unwrap();
        assert!(did_nothing(
            StatusCode::NOT_FOUND,
            &body("sandbox_not_found")
        ));
        assert!(did_nothing(
            StatusCode::SERVICE_UNAVAILABLE,
            &body("compute_unavailable")
        ));
        assert!(did_nothing(StatusCode::CONFLICT, &body("invalid_request")));
        assert!(did_nothing(
            StatusCode::FORBIDDEN,
            &body("sandbox_snapshot_limit_exceeded")
        ));
        assert!(!did_nothing(
            StatusCode::CONFLICT,
            &body("operation_ambiguous")
        ));
        assert!(!did_nothing(StatusCode::OK, b"{}"));
        assert!(!did_nothing(
            StatusCode::GATEWAY_TIMEOUT,
            &body("sandbox_exec_timed_out")
        ));
    }
}
