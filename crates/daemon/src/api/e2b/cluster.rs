//! E2B requests in cluster mode: a request about a sandbox that runs on
//! another node is forwarded there (`api::forward`), and a create goes to the
//! node placement chooses, exactly as `/v1` and `/v2` creates do. Failures of
//! forwarding are answered in E2B's error shape.
//!
//! `GET /sandboxes/{id}` (info) and the list stay on the node that received
//! them: both read the store only, so they answer also while the owner is
//! gone and its fail-over is pending (as `GET /v2/sandboxes/{id}` does).

use super::{E2bApiError, Tenant};
use crate::api::forward::{self, CreateKind};
use crate::api::{ApiError, AppState};
use crate::service::e2b::{DEFAULT_SHAPE, DEFAULT_TEMPLATES};
use crate::service::NodeSelector;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use uuid::Uuid;

/// An API error of forwarding or placement as an E2B error.
fn refused(e: ApiError) -> Response {
    let status =
        StatusCode::from_u16(e.code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    E2bApiError::new(status, e.message).into_response()
}

/// What an E2B create asks for: a clone of a snapshot id, or else a fresh
/// sandbox in E2B's shape (the default image and its `--e2b-template` aliases;
/// an unknown template is refused by the node the create is placed on). A
/// body that does not parse stays here, whose handler answers it.
fn create_kind(body: &[u8]) -> Option<CreateKind> {
    let v: serde_json::Value = if body.iter().all(u8::is_ascii_whitespace) {
        serde_json::Value::Object(Default::default())
    } else {
        serde_json::from_slice(body).ok()?
    };
    let template = match v.get("templateID") {
        None | Some(serde_json::Value::Null) => DEFAULT_TEMPLATES[0],
        Some(t) => t.as_str()?,
    };
    if let Ok(snapshot) = Uuid::parse_str(template) {
        return Some(CreateKind::Clone(snapshot, NodeSelector::new()));
    }
    Some(CreateKind::Fresh(
        DEFAULT_SHAPE.0 as u32,
        DEFAULT_SHAPE.1 as u32,
        NodeSelector::new(),
    ))
}

/// The sandbox an E2B path is about: `/sandboxes/{id}/…` and
/// `/v2/sandboxes/{id}/connect` (ids with or without dashes).
fn sandbox_in_path(path: &str) -> Option<(Uuid, bool)> {
    let (rest, v2) = match path.strip_prefix("/sandboxes/") {
        Some(rest) => (rest, false),
        None => (path.strip_prefix("/v2/sandboxes/")?, true),
    };
    let mut parts = rest.split('/');
    let id = Uuid::parse_str(parts.next()?)
        .ok()
        .filter(|id| !id.is_nil())?;
    let sub = parts.next();
    if v2 && sub != Some("connect") {
        return None;
    }
    Some((id, sub.is_none()))
}

/// Middleware, first in line: the cluster token of a forwarded request, and
/// the request id (see `forward::request_context`).
pub async fn context(State(state): State<AppState>, req: Request, next: Next) -> Response {
    forward::request_context(&state.forwarder, req, next, refused).await
}

/// Middleware, after authentication: forwards, places, or runs here.
pub async fn layer(State(state): State<AppState>, req: Request, next: Next) -> Response {
    if !forward::may_forward(&state, &req) {
        return next.run(req).await;
    }
    let Some(Tenant(tenant)) = req.extensions().get::<Tenant>().cloned() else {
        return next.run(req).await;
    };
    let path = req.uri().path().to_string();
    if req.method() == Method::POST && path == "/v2/sandboxes" {
        return forward::place(state, tenant, req, next, create_kind, refused).await;
    }
    // Deleting a snapshot removes its files: on the node that holds them.
    if req.method() == Method::DELETE {
        if let Some(id) = path
            .strip_prefix("/templates/")
            .and_then(|raw| Uuid::parse_str(raw).ok())
        {
            return forward::snapshot_node(state, &tenant, id, req, next, refused).await;
        }
    }
    match sandbox_in_path(&path) {
        Some((_, true)) if req.method() == Method::GET => next.run(req).await,
        Some((id, _)) => forward::on_owner(&state, &tenant, id, req, next, refused).await,
        None => next.run(req).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e2b_creates_are_placed_like_v1_creates() {
        let fresh = Some(CreateKind::Fresh(2, 2048, NodeSelector::new()));
        assert_eq!(create_kind(b""), fresh);
        assert_eq!(
            create_kind(br#"{"templateID": "base", "timeout": 60}"#),
            fresh
        );
        assert_eq!(create_kind(br#"{"metadata": {"a": "b"}}"#), fresh);
        let snap = "0b9e6f3a-9d1c-4f6e-8a4e-2f1d3c5b7a90";
        assert_eq!(
            create_kind(format!(r#"{{"templateID": "{snap}"}}"#).as_bytes()),
            Some(CreateKind::Clone(
                Uuid::parse_str(snap).expect("uuid"),
                NodeSelector::new()
            ))
        );
        assert_eq!(create_kind(b"{"), None);
        assert_eq!(create_kind(br#"{"templateID": 1}"#), None);
    }

    #[test]
    fn sandbox_paths_name_their_sandbox() {
        let id = Uuid::new_v4();
        let simple = id.simple().to_string();
        assert_eq!(
            sandbox_in_path(&format!("/sandboxes/{id}")),
            Some((id, true))
        );
        assert_eq!(
            sandbox_in_path(&format!("/sandboxes/{simple}/timeout")),
            Some((id, false))
        );
        assert_eq!(
            sandbox_in_path(&format!("/v2/sandboxes/{id}/connect")),
            Some((id, false))
        );
        assert_eq!(sandbox_in_path(&format!("/v2/sandboxes/{id}")), None);
        assert_eq!(sandbox_in_path("/sandboxes/x/pause"), None);
        assert_eq!(sandbox_in_path("/v2/sandboxes"), None);
        assert_eq!(sandbox_in_path("/snapshots"), None);
    }
}
