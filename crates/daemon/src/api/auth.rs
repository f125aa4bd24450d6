//! Authentication: the SDK sends `Bearer <prefix><hex(sha256(hexdecode(key)))>` (§1.3);
//! the key and the `x-inngest-env` header decide the caller's tenant (see `crate::tenants`).

use super::{ApiError, AppState, Workspace};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// Middleware: resolves the caller's tenant (`workspace/env`) or answers 401.
pub async fn authenticate(
    State(service): State<AppState>,
    mut req: Request,
    next: Next,
) -> Response {
    if req.uri().path() == "/healthz" {
        return next.run(req).await;
    }
    let authorization = header(&req, "authorization");
    let env = header(&req, "x-inngest-env");
    match service.authenticate(authorization.as_deref(), env.as_deref()) {
        Ok(tenant) => {
            req.extensions_mut().insert(Workspace(tenant));
            next.run(req).await
        }
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// A header's trimmed, non-empty text value.
fn header(req: &Request, name: &str) -> Option<String> {
    req.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_string)
}
