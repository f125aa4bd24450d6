//! The E2B control plane (contract `protocol/e2b` §2) on the same listener as
//! the inngest-compatible API.
//!
//! Which API a request is for ([`is_e2b`]): a request that carries `X-API-KEY`
//! (E2B's auth header; the inngest SDK sends `Authorization`) is E2B's, and so
//! is every request to a path only E2B uses (`/sandboxes…`, `/snapshots…`,
//! `/templates…`, `/v2/sandboxes/{id}/connect`), so that a missing key there is
//! E2B's 401. The shared `/v2/sandboxes` (create, list) is the inngest API's
//! without `X-API-KEY`. envd traffic (a later slice) will be told apart by its
//! `E2b-Sandbox-Id` header or its `{port}-{id}.{domain}` Host before either.
//!
//! Errors are `{"code": <status>, "message": …}` JSON on every non-2xx answer
//! (§2.1), made in one place: [`E2bApiError`].

mod cluster;
mod routes;
pub mod wire;

use crate::api::browser_guard::{BrowserGuard, GuardError};
use crate::service::e2b::{E2b, E2bError};
use crate::service::ServiceError;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use std::sync::Arc;

/// Does this request belong to the E2B API?
pub fn is_e2b(headers: &HeaderMap, path: &str) -> bool {
    if headers.contains_key("x-api-key") {
        return true;
    }
    let under = |prefix: &str| path == prefix || path.starts_with(&format!("{prefix}/"));
    under("/sandboxes")
        || under("/snapshots")
        || under("/templates")
        || (path.starts_with("/v2/sandboxes/") && path.ends_with("/connect"))
}

/// The caller's tenant scope, set by [`authenticate`].
#[derive(Debug, Clone)]
pub struct Tenant(pub String);

/// The E2B router (its own auth, errors and fallback) behind the same browser
/// guard as the inngest API: in dev mode the guard's `Host` check is what stops
/// a DNS-rebound web page, which could otherwise send `X-API-KEY` same-origin.
pub fn router(e2b: Arc<E2b>, guard: Arc<BrowserGuard>, state: crate::api::AppState) -> Router {
    Router::new()
        .route("/v2/sandboxes", post(routes::create).get(routes::list))
        .route("/v2/sandboxes/{id}/connect", post(routes::connect))
        .route("/sandboxes/{id}", get(routes::info).delete(routes::kill))
        .route("/sandboxes/{id}/timeout", post(routes::set_timeout))
        .route("/sandboxes/{id}/pause", post(routes::pause))
        .route("/sandboxes/{id}/metrics", get(routes::metrics))
        .route(
            "/sandboxes/{id}/network",
            axum::routing::put(routes::network_update),
        )
        .route("/sandboxes/{id}/snapshots", post(routes::snapshot_create))
        .route("/sandboxes/{id}/fork", post(routes::fork))
        .route("/snapshots", get(routes::snapshot_list))
        .route(
            "/templates/{id}",
            axum::routing::delete(routes::snapshot_delete),
        )
        .fallback(|| async {
            E2bApiError::new(StatusCode::NOT_FOUND, "no such route in the E2B API")
        })
        // After authentication: another node's sandbox is forwarded there.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            cluster::layer,
        ))
        .layer(axum::middleware::from_fn_with_state(
            e2b.clone(),
            authenticate,
        ))
        .layer(axum::middleware::from_fn_with_state(guard, browser_guard))
        .layer(axum::middleware::from_fn(json_errors))
        .layer(axum::middleware::from_fn_with_state(
            state,
            cluster::context,
        ))
        .with_state(e2b)
}

/// Middleware: the browser guard (`--http-browser-guard`, on in dev mode), its
/// refusals in E2B's error shape.
async fn browser_guard(
    State(guard): State<Arc<BrowserGuard>>,
    req: Request,
    next: Next,
) -> Response {
    match guard.check(req.method(), req.uri(), req.headers()) {
        Ok(()) => next.run(req).await,
        Err(e) => {
            tracing::info!(error = %e, "browser guard refused an E2B request");
            let status = match e {
                GuardError::NotJson(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
                _ => StatusCode::FORBIDDEN,
            };
            E2bApiError::new(status, e.to_string()).into_response()
        }
    }
}

/// Middleware: `X-API-KEY` is a tenant's key (`sbxd keys create`, or a
/// `--signing-key`), checked exactly as the inngest SDK's hashed bearer header;
/// in dev mode any non-empty key is the default tenant. The header is required
/// even in dev mode: a web page cannot send it without a CORS preflight that
/// sbxd never grants, so dev mode stays safe from other origins.
async fn authenticate(State(e2b): State<Arc<E2b>>, mut req: Request, next: Next) -> Response {
    let key = req
        .headers()
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_string);
    let Some(key) = key else {
        return E2bApiError::new(StatusCode::UNAUTHORIZED, "X-API-KEY header is required")
            .into_response();
    };
    let bearer = format!(
        "Bearer {}",
        sbx_api_types::signing_key::hashed_signing_key(&key)
    );
    match e2b.service().authenticate(Some(&bearer), None).await {
        Ok(tenant) => {
            req.extensions_mut().insert(Tenant(tenant));
            next.run(req).await
        }
        Err(e) => {
            let api = crate::api::ApiError::from(e);
            let status = StatusCode::from_u16(api.code.http_status())
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            E2bApiError::new(status, api.message).into_response()
        }
    }
}

/// Middleware: the framework's own refusals (bad method, body too large, a
/// request id) become E2B error bodies too; the Python SDK cannot parse others.
async fn json_errors(req: Request, next: Next) -> Response {
    let resp = next.run(req).await;
    let status = resp.status();
    let is_json = resp
        .headers()
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if status.as_u16() >= 400 && !is_json {
        let message = match status.as_u16() {
            405 => "method not allowed on this route".to_string(),
            413 => "request body is too large".to_string(),
            _ => format!("request refused ({status})"),
        };
        return E2bApiError::new(status, message).into_response();
    }
    resp
}

/// An error on its way to an E2B client: `{"code": <status>, "message": …}`.
#[derive(Debug)]
pub struct E2bApiError {
    status: StatusCode,
    message: String,
}

impl E2bApiError {
    /// An error with this status.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        E2bApiError {
            status,
            message: message.into(),
        }
    }

    /// A 400.
    pub fn bad_request(message: impl Into<String>) -> Self {
        E2bApiError::new(StatusCode::BAD_REQUEST, message)
    }
}

impl IntoResponse for E2bApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({"code": self.status.as_u16(), "message": self.message});
        (self.status, axum::Json(body)).into_response()
    }
}

/// The one place where E2B service errors become statuses.
impl From<E2bError> for E2bApiError {
    fn from(e: E2bError) -> Self {
        let status = match &e {
            E2bError::NotFound(_) => StatusCode::NOT_FOUND,
            E2bError::BadRequest(_) => StatusCode::BAD_REQUEST,
            E2bError::Conflict(_) => StatusCode::CONFLICT,
            E2bError::NotSupported(_) => StatusCode::NOT_IMPLEMENTED,
            E2bError::Service(s) => return service_error(s),
        };
        E2bApiError::new(status, e.to_string())
    }
}

/// Lifecycle errors as E2B statuses (the Python SDK documents 400, 403, 404,
/// 409, 422, 429, 500 and 503 on these routes).
fn service_error(e: &ServiceError) -> E2bApiError {
    use ServiceError as S;
    let status = match e {
        S::Invalid(_) | S::BadRequest(_) | S::NotRegularFile(_) => StatusCode::BAD_REQUEST,
        S::SandboxNotFound | S::SnapshotNotFound | S::ProcessNotFound | S::FileNotFound(_) => {
            StatusCode::NOT_FOUND
        }
        S::WrongState { .. }
        | S::Conflict(_)
        | S::FileOperation(_)
        | S::SnapshotNotReady(_)
        | S::SnapshotNameTaken(_)
        | S::NameTaken(_) => StatusCode::CONFLICT,
        S::SnapshotLimit(_) | S::AccessDenied(_) => StatusCode::FORBIDDEN,
        // E2B's own answer to "too many concurrent sandboxes".
        S::WorkspaceQuota(_) => StatusCode::TOO_MANY_REQUESTS,
        S::IdempotencyKeyReused(_) => StatusCode::UNPROCESSABLE_ENTITY,
        S::Unavailable(_) | S::StorageFull(_) => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let message = match e {
        // Internal errors may name host paths: the text stays in the log.
        S::Internal(_) => {
            tracing::error!(error = %e, "E2B internal error");
            "internal error (see the sbxd log)".to_string()
        }
        _ => e.to_string(),
    };
    E2bApiError::new(status, message)
}
