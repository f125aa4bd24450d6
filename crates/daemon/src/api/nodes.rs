//! `GET /v1/nodes`, `POST /v1/nodes/{id}/drain` and `/undrain` (cluster mode).

use super::{envelope, ApiError, AppState, Workspace};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Extension;

/// `GET /v1/nodes`
pub async fn list(State(svc): State<AppState>) -> Result<Response, ApiError> {
    Ok(envelope::data(StatusCode::OK, svc.list_nodes().await?))
}

/// `POST /v1/nodes/{id}/drain` (200 with the node)
pub async fn drain(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let node = svc.set_node_draining(&ws.0, &id, true).await?;
    Ok(envelope::data(StatusCode::OK, node))
}

/// `POST /v1/nodes/{id}/undrain` (200 with the node)
pub async fn undrain(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let node = svc.set_node_draining(&ws.0, &id, false).await?;
    Ok(envelope::data(StatusCode::OK, node))
}
