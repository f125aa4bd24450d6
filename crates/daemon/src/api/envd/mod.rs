//! envd over HTTP (contract `protocol/e2b` §3): the Connect RPC services
//! `process.Process` and `filesystem.Filesystem`, and the plain `/files` and
//! `/health` routes, for the sandbox a request names.
//!
//! Which requests are envd's ([`is_envd`]): those carrying `E2b-Sandbox-Id`
//! (the SDKs send it on every envd request, in every mode, and never on the
//! control plane). Errors become Connect codes (RPC) or `{"code", "message"}`
//! bodies (plain routes) in one place: the `From<EnvdError>` impls here.

mod cluster;
mod connect;
mod files;
mod filesystem;
pub mod host;
mod process;
mod wire;

use crate::service::envd::{Caller, Envd, EnvdError};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use base64::Engine;
use connect::ConnectError;
use std::sync::Arc;

/// The header that routes a request to a sandbox's envd.
pub const SANDBOX_HEADER: &str = "e2b-sandbox-id";
/// envd's port in E2B sandboxes (the only port envd requests name).
pub const ENVD_PORT: u16 = 49983;

/// Does this request belong to envd? Those with `E2b-Sandbox-Id`, and
/// pre-signed file URLs (`/files?…&signature=…`, which a browser or curl
/// fetches without any header; no other API has a `/files` route).
pub fn is_envd(headers: &HeaderMap, uri: &axum::http::Uri) -> bool {
    headers.contains_key(SANDBOX_HEADER)
        || (uri.path() == "/files"
            && uri
                .query()
                .is_some_and(|q| q.split('&').any(|p| p.starts_with("signature="))))
}

/// Makes a request routed by its Host name its sandbox in `E2b-Sandbox-Id`
/// (what the envd routes read); a header that names another sandbox, or a
/// port other than envd's (those go to the preview proxy first), is refused.
pub fn routed_by_host(headers: &mut HeaderMap, port: u16, id: &str) -> Result<(), String> {
    if port != ENVD_PORT {
        return Err(format!(
            "port {port} is not open to envd (preview URLs go to the preview proxy)"
        ));
    }
    match sandbox_of(headers) {
        Some(named) if !named.eq_ignore_ascii_case(id) => {
            Err("E2b-Sandbox-Id and the Host name different sandboxes".into())
        }
        _ => {
            let value = axum::http::HeaderValue::from_str(id)
                .map_err(|_| "the sandbox id is not a header value".to_string())?;
            headers.insert(SANDBOX_HEADER, value);
            Ok(())
        }
    }
}

/// A router that answers every request with a 400 (a refused Host) or a
/// 502 (a closed port) in envd's plain error shape.
pub fn refusal(why: String) -> Router {
    let status = if why.contains("is not open") {
        StatusCode::BAD_GATEWAY
    } else {
        StatusCode::BAD_REQUEST
    };
    Router::new().fallback(move || {
        let why = why.clone();
        async move {
            tracing::info!(reason = %why, "refused a request by its Host");
            let body = serde_json::json!({"code": status.as_u16(), "message": why});
            (status, axum::Json(body)).into_response()
        }
    })
}

/// The envd router.
pub fn router(envd: Arc<Envd>, state: crate::api::AppState) -> Router {
    Router::new()
        .route("/process.Process/{method}", post(process::rpc))
        .route("/filesystem.Filesystem/{method}", post(filesystem::rpc))
        // Uploads stream each file into the sandbox under its file limit
        // (`upload_as`): no whole-body limit, which would stop multipart
        // uploads past axum's default 2 MB.
        .route(
            "/files",
            get(files::download)
                .post(files::upload)
                .layer(axum::extract::DefaultBodyLimit::disable()),
        )
        .route("/health", get(files::health))
        .fallback(|| async {
            ConnectError::new("unimplemented", "no such envd route").into_response()
        })
        // Another node's sandbox: forwarded there (cluster mode).
        .layer(axum::middleware::from_fn_with_state(
            (state.clone(), envd.clone()),
            cluster::layer,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state,
            cluster::context,
        ))
        .with_state(envd)
}

/// The sandbox id a request is routed by.
fn sandbox_of(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(SANDBOX_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

/// The user an RPC names: `Authorization: Basic base64("<user>:")`.
fn rpc_user(headers: &HeaderMap) -> Result<Option<String>, EnvdError> {
    let Some(value) = headers.get("authorization") else {
        return Ok(None);
    };
    let bad = || EnvdError::Unauthenticated("invalid Authorization header".into());
    let text = value.to_str().map_err(|_| bad())?;
    let encoded = text
        .strip_prefix("Basic ")
        .or_else(|| text.strip_prefix("basic "))
        .ok_or_else(bad)?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .map_err(|_| bad())?;
    let decoded = String::from_utf8(decoded).map_err(|_| bad())?;
    let user = decoded.split(':').next().unwrap_or_default();
    Ok((!user.is_empty()).then(|| user.to_string()))
}

/// The authenticated caller of an RPC.
async fn rpc_caller(envd: &Envd, headers: &HeaderMap) -> Result<Caller, EnvdError> {
    let sandbox = sandbox_of(headers).unwrap_or_default();
    let token = headers.get("x-access-token").and_then(|v| v.to_str().ok());
    let user = rpc_user(headers)?;
    envd.authorize(sandbox, token, user.as_deref()).await
}

/// The one place where envd errors become Connect codes.
impl From<EnvdError> for ConnectError {
    fn from(e: EnvdError) -> Self {
        let code = match &e {
            EnvdError::SandboxGone(_) | EnvdError::Unavailable(_) => "unavailable",
            EnvdError::Unauthenticated(_) => "unauthenticated",
            EnvdError::NotFound(_) => "not_found",
            EnvdError::InvalidArgument(_) => "invalid_argument",
            EnvdError::AlreadyExists(_) => "already_exists",
            EnvdError::PermissionDenied(_) => "permission_denied",
            EnvdError::DeadlineExceeded(_) => "deadline_exceeded",
            EnvdError::ResourceExhausted(_) | EnvdError::NoSpace(_) => "resource_exhausted",
            EnvdError::Unimplemented(_) => "unimplemented",
            EnvdError::Internal(_) => {
                tracing::error!(error = %e, "envd internal error");
                return ConnectError::new("internal", "internal error (see the sbxd log)");
            }
        };
        ConnectError::new(code, e.to_string())
    }
}

impl From<wire::WireError> for ConnectError {
    fn from(e: wire::WireError) -> Self {
        ConnectError::invalid(e.0)
    }
}

/// An error of a plain envd route: `{"code": <status>, "message": …}`.
#[derive(Debug)]
pub struct PlainError(EnvdError);

impl From<EnvdError> for PlainError {
    fn from(e: EnvdError) -> Self {
        PlainError(e)
    }
}

/// The one place where envd errors become statuses of the plain routes
/// (the SDKs map 400, 401, 404, 429, 502 and 507, contract §3.5).
impl IntoResponse for PlainError {
    fn into_response(self) -> Response {
        let status = match &self.0 {
            EnvdError::SandboxGone(_) => StatusCode::BAD_GATEWAY,
            EnvdError::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            EnvdError::NotFound(_) => StatusCode::NOT_FOUND,
            EnvdError::InvalidArgument(_) | EnvdError::AlreadyExists(_) => StatusCode::BAD_REQUEST,
            EnvdError::PermissionDenied(_) => StatusCode::FORBIDDEN,
            EnvdError::ResourceExhausted(_) => StatusCode::TOO_MANY_REQUESTS,
            EnvdError::NoSpace(_) => StatusCode::INSUFFICIENT_STORAGE,
            EnvdError::DeadlineExceeded(_) => StatusCode::GATEWAY_TIMEOUT,
            EnvdError::Unimplemented(_) => StatusCode::NOT_IMPLEMENTED,
            EnvdError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            EnvdError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let message = match &self.0 {
            EnvdError::Internal(_) => {
                tracing::error!(error = %self.0, "envd internal error");
                "internal error (see the sbxd log)".to_string()
            }
            other => other.to_string(),
        };
        let body = serde_json::json!({"code": status.as_u16(), "message": message});
        (status, axum::Json(body)).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn envd_requests_are_told_apart() {
        let mut h = HeaderMap::new();
        let uri = |u: &str| u.parse::<axum::http::Uri>().unwrap();
        assert!(!is_envd(&h, &uri("/files?path=a")));
        assert!(!is_envd(&h, &uri("/v2/sandboxes")));
        assert!(is_envd(&h, &uri("/files?path=a&signature=v1_x")));
        assert!(!is_envd(&h, &uri("/v2/files?signature=v1_x")));
        h.insert(SANDBOX_HEADER, HeaderValue::from_static("x"));
        assert!(is_envd(&h, &uri("/process.Process/Start")));
    }

    #[test]
    fn the_user_comes_from_basic_auth() {
        let mut h = HeaderMap::new();
        assert_eq!(rpc_user(&h).unwrap(), None);
        h.insert("authorization", HeaderValue::from_static("Basic cm9vdDo="));
        assert_eq!(rpc_user(&h).unwrap().as_deref(), Some("root"));
        h.insert("authorization", HeaderValue::from_static("Bearer x"));
        assert!(rpc_user(&h).is_err());
        h.insert("authorization", HeaderValue::from_static("Basic !!!"));
        assert!(rpc_user(&h).is_err());
    }
}
