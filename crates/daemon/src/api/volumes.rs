//! `/v1/volumes`: a tenant's persistent volumes (local kind).

use super::envelope;
use super::{parse_body, parse_query, ApiError, AppState, Workspace};
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use sbx_api_types::validate::ValidationError;
use sbx_api_types::CreateVolumeRequest;
use serde::Deserialize;

/// `POST /v1/volumes`
pub async fn create(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let req: CreateVolumeRequest = parse_body(&body)?;
    let volume = svc.create_volume(&ws.0, req).await?;
    Ok(envelope::data(StatusCode::CREATED, volume))
}

/// `GET /v1/volumes`
pub async fn list(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
) -> Result<Response, ApiError> {
    let volumes = svc.list_volumes(&ws.0).await?;
    Ok(envelope::data(StatusCode::OK, volumes))
}

/// `GET /v1/volumes/{name}` (a name, or the volume's id)
pub async fn get(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let volume = svc.get_volume(&ws.0, &name).await?;
    Ok(envelope::data(StatusCode::OK, volume))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeleteQuery {
    force: Option<String>,
}

/// `DELETE /v1/volumes/{name}[?force=true]`
pub async fn delete(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(name): Path<String>,
    RawQuery(q): RawQuery,
) -> Result<Response, ApiError> {
    let q: DeleteQuery = parse_query(q.as_deref())?;
    let force = match q.force.as_deref() {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(ValidationError::Format {
                field: "force",
                reason: format!("{other:?} is not true or false"),
            }
            .into())
        }
    };
    svc.delete_volume(&ws.0, &name, force).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
