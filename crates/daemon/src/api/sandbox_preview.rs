//! `/v1/sandboxes/{id}/preview`: whether the sandbox's preview URLs
//! (`{port}-{id}.{domain}`) answer, and who may call them.

use super::envelope;
use super::{parse_body, parse_id, parse_query, ApiError, AppState, Workspace};
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Extension;
use sbx_api_types::validate::ValidationError;
use sbx_api_types::PreviewRequest;
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PreviewQuery {
    port: Option<String>,
}

/// `GET /v1/sandboxes/{id}/preview[?port=N]`: the access, and the host of port N.
pub async fn get(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
    RawQuery(q): RawQuery,
) -> Result<Response, ApiError> {
    let id = parse_id(&id, "sandboxId")?;
    let q: PreviewQuery = parse_query(q.as_deref())?;
    let port = q.port.as_deref().map(parse_port).transpose()?;
    let preview = svc.preview(&ws.0, id, port).await?;
    Ok(envelope::data(StatusCode::OK, preview))
}

/// `PUT /v1/sandboxes/{id}/preview` with `{"public": bool}`: turns them on.
pub async fn put(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let id = parse_id(&id, "sandboxId")?;
    let req: PreviewRequest = if body.iter().all(u8::is_ascii_whitespace) {
        PreviewRequest::default()
    } else {
        parse_body(&body)?
    };
    let preview = svc.enable_preview(&ws.0, id, req.public).await?;
    Ok(envelope::data(StatusCode::OK, preview))
}

/// `DELETE /v1/sandboxes/{id}/preview`: turns them off.
pub async fn delete(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = parse_id(&id, "sandboxId")?;
    let preview = svc.disable_preview(&ws.0, id).await?;
    Ok(envelope::data(StatusCode::OK, preview))
}

/// A TCP port, 1–65535.
fn parse_port(raw: &str) -> Result<u16, ValidationError> {
    raw.parse::<u16>()
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| ValidationError::Format {
            field: "port",
            reason: format!("{raw:?} is not a port (1-65535)"),
        })
}
