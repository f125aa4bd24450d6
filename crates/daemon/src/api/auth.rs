//! Authentication: the SDK sends `Bearer <prefix><hex(sha256(hexdecode(key)))>` (§1.3).

use super::{ApiError, AppState, Workspace};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sbx_api_types::ErrorCode;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The workspace every caller belongs to until tenants exist.
pub const DEFAULT_WORKSPACE: &str = "default";

/// What the SDK sends as the bearer token for a signing key.
pub fn hashed_signing_key(key: &str) -> String {
    let (prefix, rest) = split_prefix(key);
    let decoded = hex::decode(rest).unwrap_or_else(|_| rest.as_bytes().to_vec());
    format!("{prefix}{}", hex::encode(Sha256::digest(decoded)))
}

/// Splits `signkey-<word>-` off the key, as the SDK's `^signkey-\w+-` does.
fn split_prefix(key: &str) -> (&str, &str) {
    if let Some(after) = key.strip_prefix("signkey-") {
        let word_len = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(after.len());
        if word_len > 0 && after[word_len..].starts_with('-') {
            let cut = "signkey-".len() + word_len + 1;
            return (&key[..cut], &key[cut..]);
        }
    }
    ("", key)
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_sdk_example() {
        assert_eq!(
            hashed_signing_key("signkey-prod-0123abcd"),
            "signkey-prod-2647356804523c847ca70dc0f6c66a28d4cec5f53b9119a9022984ceec35e9da"
        );
        assert_eq!(split_prefix("plainhex"), ("", "plainhex"));
        assert_eq!(split_prefix("signkey--00"), ("", "signkey--00"));
    }
}
