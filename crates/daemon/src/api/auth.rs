//! Authentication: the SDK sends `Bearer <prefix><hex(sha256(hexdecode(key)))>` (§1.3).

use super::{ApiError, AppState, Workspace};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sbx_api_types::ErrorCode;
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
    if req.uri().path() == "/healthz" {
        return next.run(req).await;
    }
    let config = service.config();
    let header = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty());
    if !config.dev {
        let Some(header) = header else {
            return ApiError::new(
                ErrorCode::AuthorizationHeaderMissing,
                "Authorization header is required",
            )
            .into_response();
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
            return ApiError::new(ErrorCode::InvalidApiKey, "the API key is not valid")
                .into_response();
        }
    }
    req.extensions_mut()
        .insert(Workspace(DEFAULT_WORKSPACE.to_string()));
    next.run(req).await
}
