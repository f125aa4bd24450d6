//! `/v1/templates`: a tenant's templates (an image booted, started and
//! snapshotted; creates from one are clones). Parsing only.

use super::envelope;
use super::{parse_body, parse_query, ApiError, AppState, Workspace};
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Extension;
use sbx_api_types::TemplateSpec;
use serde::Deserialize;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct WaitQuery {
    wait: Option<bool>,
}

/// `POST /v1/templates[?wait=true]`: records the template and starts its build.
pub async fn create(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    RawQuery(q): RawQuery,
    body: Bytes,
) -> Result<Response, ApiError> {
    let q: WaitQuery = parse_query(q.as_deref())?;
    let spec: TemplateSpec = parse_body(&body)?;
    let wait = q.wait.unwrap_or(false);
    let template = svc.template_create(&ws.0, spec, wait).await?;
    // `200` once the build ended (it waited), else `202` (BUILDING).
    let status = if wait {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    Ok(envelope::data(status, template))
}

/// `GET /v1/templates`
pub async fn list(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
) -> Result<Response, ApiError> {
    Ok(envelope::data(
        StatusCode::OK,
        svc.template_list(&ws.0).await?,
    ))
}

/// `GET /v1/templates/{name}`
pub async fn get(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    Ok(envelope::data(
        StatusCode::OK,
        svc.template_get(&ws.0, &name).await?,
    ))
}

/// `DELETE /v1/templates/{name}`: `204`; the template's snapshot goes with it.
pub async fn delete(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    svc.template_delete(&ws.0, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /v1/templates/{name}/rebuild[?wait=true]`
pub async fn rebuild(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(name): Path<String>,
    RawQuery(q): RawQuery,
) -> Result<Response, ApiError> {
    let q: WaitQuery = parse_query(q.as_deref())?;
    let wait = q.wait.unwrap_or(false);
    let template = svc.template_rebuild(&ws.0, &name, wait).await?;
    // `200` once the build ended (it waited), else `202` (BUILDING).
    let status = if wait {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    Ok(envelope::data(status, template))
}
