//! Authentication: the SDK sends `Bearer <prefix><hex(sha256(hexdecode(key)))>` (§1.3);
//! the key and the `x-inngest-env` header decide the caller's tenant (see `crate::tenants`).
//! A console session cookie stands in for the header (see `crate::console`).

use super::{ApiError, AppState, Workspace};
use crate::console::Sessions;
use crate::service::Service;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

pub use sbx_api_types::signing_key::hashed_signing_key;

/// Middleware: resolves the caller's tenant (`workspace/env`) or answers 401.
pub async fn authenticate(
    State(service): State<AppState>,
    mut req: Request,
    next: Next,
) -> Response {
    let path = req.uri().path();
    // `/metrics` checks its own token (service::metrics): a signing key is a tenant's.
    // A webhook delivery URL is its own credential (checked by the Connect service).
    let delivery = path.starts_with(sbx_connect::service::DELIVERY_PATH);
    if path == "/healthz"
        || path == "/metrics"
        || delivery
        || crate::console::is_public(req.method(), path)
    {
        return next.run(req).await;
    }
    let mut authorization = header(&req, "authorization");
    if authorization.is_none() && !service.config().dev {
        // Without a header, a console session cookie gives the key's header (CSRF-checked).
        if let Some(sessions) = req.extensions().get::<Arc<Sessions>>() {
            match sessions.bearer_for(req.method(), req.headers()) {
                Ok(h) => authorization = h,
                Err(e) => return ApiError::from(e).into_response(),
            }
        }
    }
    let env = header(&req, "x-inngest-env");
    match service
        .authenticate(authorization.as_deref(), env.as_deref())
        .await
    {
        Ok(tenant) => {
            req.extensions_mut().insert(Workspace(tenant));
            // A console session lives on the node that signed it in: a request
            // forwarded to another node carries the key's header it stands for.
            if !req.headers().contains_key("authorization") {
                if let Some(v) = authorization
                    .as_deref()
                    .and_then(|a| axum::http::HeaderValue::from_str(a).ok())
                {
                    req.headers_mut().insert("authorization", v);
                }
            }
            next.run(req).await
        }
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// Checks a raw key (console sign-in) exactly as the header the SDK would send for it.
pub async fn verify_key(service: &Service, key: &str) -> Result<(), ApiError> {
    if service.config().dev {
        return Ok(());
    }
    let bearer = format!("Bearer {}", hashed_signing_key(key));
    service
        .authenticate(Some(&bearer), None)
        .await
        .map(|_| ())
        .map_err(ApiError::from)
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
