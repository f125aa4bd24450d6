//! Authentication: the SDK sends `Bearer <prefix><hex(sha256(hexdecode(key)))>` (§1.3).
//! A console session cookie stands in for the header (see `crate::console`).

use super::{ApiError, AppState, Workspace};
use crate::config::Config;
use crate::console::Sessions;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sbx_api_types::ErrorCode;
use std::sync::Arc;
use subtle::ConstantTimeEq;

/// The workspace every caller belongs to until tenants exist.
pub const DEFAULT_WORKSPACE: &str = "default";

pub use sbx_api_types::signing_key::hashed_signing_key;

/// Middleware: resolves the caller's workspace or answers 401.
pub async fn authenticate(
    State(service): State<AppState>,
    mut req: Request,
    next: Next,
) -> Response {
    let path = req.uri().path();
    if path == "/healthz" || crate::console::is_public(req.method(), path) {
        return next.run(req).await;
    }
    let config = service.config();
    let header = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_string);
    if !config.dev {
        // Without a header, a console session cookie gives the key's header (CSRF-checked).
        let header = match header {
            Some(h) => Some(h),
            None => match req.extensions().get::<Arc<Sessions>>() {
                Some(sessions) => match sessions.bearer_for(req.method(), req.headers()) {
                    Ok(h) => h,
                    Err(e) => return ApiError::from(e).into_response(),
                },
                None => None,
            },
        };
        if let Err(e) = verify_header(config, header.as_deref()) {
            return e.into_response();
        }
    }
    req.extensions_mut()
        .insert(Workspace(DEFAULT_WORKSPACE.to_string()));
    next.run(req).await
}

/// Checks an `Authorization` header value against the configured keys.
fn verify_header(config: &Config, header: Option<&str>) -> Result<(), ApiError> {
    let Some(header) = header else {
        return Err(ApiError::new(
            ErrorCode::AuthorizationHeaderMissing,
            "Authorization header is required",
        ));
    };
    let token = header
        .strip_prefix("Bearer ")
        .unwrap_or("")
        .trim()
        .as_bytes();
    let known = config
        .signing_keys
        .iter()
        .map(|k| hashed_signing_key(k))
        .fold(false, |found, expected| {
            found | bool::from(expected.as_bytes().ct_eq(token))
        });
    if !known {
        return Err(ApiError::new(
            ErrorCode::InvalidApiKey,
            "the API key is not valid",
        ));
    }
    Ok(())
}

/// Checks a raw key (console sign-in) exactly as the header the SDK would send for it.
pub fn verify_key(config: &Config, key: &str) -> Result<(), ApiError> {
    if config.dev {
        return Ok(());
    }
    verify_header(config, Some(&format!("Bearer {}", hashed_signing_key(key))))
}
