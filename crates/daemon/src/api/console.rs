//! Web console routes: the page and its assets, sign-in, session and sign-out.

use super::{envelope, ApiError, AppState};
use crate::console::{assets, ConsoleError, Sessions};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use sbx_api_types::ErrorCode;
use serde::Serialize;
use std::sync::Arc;

impl From<ConsoleError> for ApiError {
    fn from(e: ConsoleError) -> Self {
        let code = match &e {
            ConsoleError::SessionInvalid => ErrorCode::ConsoleSessionInvalid,
            ConsoleError::CsrfMismatch
            | ConsoleError::CrossOrigin
            | ConsoleError::CrossOriginSocket => ErrorCode::CsrfTokenInvalid,
            ConsoleError::KeyMissing => ErrorCode::MissingField,
            ConsoleError::BadBody(_) => ErrorCode::InvalidRequest,
            ConsoleError::AssetNotFound(_) => ErrorCode::RouteNotFound,
        };
        ApiError::new(code, e.to_string())
    }
}

/// What the page learns about its session.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SessionView {
    /// sbxd runs in dev mode: no sign-in needed.
    dev: bool,
    /// The token to send in `X-CSRF-Token`; null when not signed in by cookie.
    csrf_token: Option<String>,
}

/// `GET /`: the console page.
pub async fn index(headers: HeaderMap) -> Result<Response, ApiError> {
    serve("index.html", &headers, StatusCode::OK)
}

/// `GET /console/assets/{file}`: an embedded script, style sheet or icon.
pub async fn asset(Path(file): Path<String>, headers: HeaderMap) -> Result<Response, ApiError> {
    serve(&file, &headers, StatusCode::OK)
}

/// `POST /console/session`: verifies the key like the `Authorization` header and sets the cookie.
pub async fn sign_in(
    State(svc): State<AppState>,
    Extension(sessions): Extension<Arc<Sessions>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let key = crate::console::sign_in_key(&headers, &body)?;
    super::auth::verify_key(&svc, &key).await?;
    let new = sessions.create(&headers, key);
    let view = SessionView {
        dev: svc.config().dev,
        csrf_token: Some(new.csrf),
    };
    let mut resp = envelope::data(StatusCode::OK, view);
    set_cookie(&mut resp, &sessions.set_cookie(&new.id));
    Ok(resp)
}

/// `GET /console/session`: dev mode and the CSRF token of the caller's session.
pub async fn session(
    State(svc): State<AppState>,
    Extension(sessions): Extension<Arc<Sessions>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let view = SessionView {
        dev: svc.config().dev,
        csrf_token: sessions.csrf_for(&headers),
    };
    Ok(envelope::data(StatusCode::OK, view))
}

/// `DELETE /console/session`: forgets the session and deletes the cookie.
pub async fn sign_out(
    Extension(sessions): Extension<Arc<Sessions>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    sessions.remove(&headers);
    let mut resp = StatusCode::NO_CONTENT.into_response();
    set_cookie(&mut resp, &sessions.clear_cookie());
    Ok(resp)
}

fn set_cookie(resp: &mut Response, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        resp.headers_mut().insert("set-cookie", v);
    }
}

/// An embedded asset with its type, the CSP, `Cache-Control` and an `ETag` (304 when it matches).
fn serve(name: &str, headers: &HeaderMap, status: StatusCode) -> Result<Response, ApiError> {
    let asset = assets::find(name).ok_or_else(|| ConsoleError::AssetNotFound(name.to_string()))?;
    let etag = assets::etag(asset);
    let fresh = headers
        .get("if-none-match")
        .is_some_and(|v| v.as_bytes() == etag.as_bytes());
    let mut resp = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (status, asset.bytes).into_response()
    };
    let h = resp.headers_mut();
    h.insert("content-type", HeaderValue::from_static(asset.content_type));
    h.insert(
        "content-security-policy",
        HeaderValue::from_static(assets::CONTENT_SECURITY_POLICY),
    );
    h.insert(
        "cache-control",
        HeaderValue::from_static(assets::CACHE_CONTROL),
    );
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    h.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert("etag", v);
    }
    Ok(resp)
}
