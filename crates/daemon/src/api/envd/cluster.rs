//! envd requests in cluster mode: a request about a sandbox that runs on
//! another node is forwarded there as it came (`api::forward`: Connect
//! streams, `/files` uploads and downloads streamed both ways, the same
//! request id). The caller is authenticated here first, as the owner will do
//! again: a request that fails here is answered here (by the handler, which
//! refuses it), so a wrong token never leaves this node.

use super::{connect, files, rpc_caller, sandbox_of, ConnectError, PlainError};
use crate::api::{forward, ApiError, AppState};
use crate::service::envd::{Envd, EnvdError, FileOp};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use uuid::Uuid;

/// Whether a path is a Connect RPC (errors as Connect codes) rather than a plain route.
fn is_rpc(path: &str) -> bool {
    path.starts_with("/process.Process/") || path.starts_with("/filesystem.Filesystem/")
}

/// The tenant and sandbox of an authenticated request; `None` when it names
/// none or fails authentication (the handler here answers it).
async fn owner_of(
    envd: &Envd,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
) -> Option<(String, Uuid)> {
    let path = uri.path();
    let caller = if path == "/health" {
        return envd.sandbox_of(sandbox_of(headers)?).await.ok();
    } else if path == "/files" {
        let op = if method == Method::POST {
            FileOp::Write
        } else {
            FileOp::Read
        };
        files::caller_of(envd, headers, uri.query(), op).await
    } else if is_rpc(path) {
        rpc_caller(envd, headers).await.map_err(PlainError::from)
    } else {
        return None;
    };
    caller.ok().map(|c| (c.workspace, c.sandbox))
}

/// A failure to reach the owner, in the shape of the route.
fn refused(rpc: bool, headers: &HeaderMap, e: ApiError) -> Response {
    if rpc {
        connect::error_response(headers, ConnectError::new("unavailable", e.message))
    } else {
        PlainError::from(EnvdError::Unavailable(e.message)).into_response()
    }
}

/// A refusal of the request context (a forged forwarded request), in the
/// plain envd error shape.
fn refused_plain(e: ApiError) -> Response {
    let status = axum::http::StatusCode::from_u16(e.code.http_status())
        .unwrap_or(axum::http::StatusCode::FORBIDDEN);
    let body = serde_json::json!({"code": status.as_u16(), "message": e.message});
    (status, axum::Json(body)).into_response()
}

/// Middleware, first in line: the cluster token of a forwarded request, and
/// the request id (see `forward::request_context`).
pub async fn context(State(state): State<AppState>, req: Request, next: Next) -> Response {
    forward::request_context(&state.forwarder, req, next, refused_plain).await
}

/// Middleware: forwards a request about another node's sandbox to that node.
pub async fn layer(
    State((state, envd)): State<(AppState, Arc<Envd>)>,
    req: Request,
    next: Next,
) -> Response {
    if !forward::may_forward(&state, &req) {
        return next.run(req).await;
    }
    // Copies: a request (its body) cannot be held across an await of another task.
    let (method, uri, headers) = (
        req.method().clone(),
        req.uri().clone(),
        req.headers().clone(),
    );
    let Some((tenant, id)) = owner_of(&envd, &method, &uri, &headers).await else {
        return next.run(req).await;
    };
    let rpc = is_rpc(uri.path());
    forward::on_owner(&state, &tenant, id, req, next, move |e| {
        refused(rpc, &headers, e)
    })
    .await
}
