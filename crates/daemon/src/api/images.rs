//! `/v1/images`: a tenant's custom images (import, list, get, tag, delete) and
//! `POST /v1/sandboxes/{id}/image` (an image of a running sandbox's files).

use super::envelope;
use super::{parse_body, parse_id, parse_query, ApiError, AppState, Workspace};
use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use sbx_api_types::{ImageFromSandboxRequest, ImageTagRequest};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ImportQuery {
    name: Option<String>,
    tag: Option<String>,
}

/// `POST /v1/images?name=&tag=`: the body is an OCI image layout or `docker save` tarball.
pub async fn import(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    RawQuery(q): RawQuery,
    body: Body,
) -> Response {
    let result: Result<Response, ApiError> = async move {
        let q: ImportQuery = parse_query(q.as_deref())?;
        let image = svc
            .import_image(&ws.0, q.name, q.tag, body.into_data_stream())
            .await?;
        Ok(envelope::data(StatusCode::CREATED, image))
    }
    .await;
    result.unwrap_or_else(|e| {
        // Refused before the body was read to its end: hyper closes the
        // connection; say so, so that a client does not reuse it.
        let mut resp = e.into_response();
        resp.headers_mut()
            .insert("connection", HeaderValue::from_static("close"));
        resp
    })
}

/// `GET /v1/images`
pub async fn list(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
) -> Result<Response, ApiError> {
    let images = svc.list_images(&ws.0).await?;
    Ok(envelope::data(StatusCode::OK, images))
}

/// `GET /v1/images/{ref}` (`name:tag`, `name` for `name:latest`, or a digest)
pub async fn get(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(reference): Path<String>,
) -> Result<Response, ApiError> {
    let image = svc.get_image(&ws.0, &reference).await?;
    Ok(envelope::data(StatusCode::OK, image))
}

/// `DELETE /v1/images/{ref}`
pub async fn delete(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(reference): Path<String>,
) -> Result<Response, ApiError> {
    svc.delete_image(&ws.0, &reference).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `POST /v1/images/{ref}/tag` with `{name, tag}`
pub async fn tag(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(reference): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let req: ImageTagRequest = parse_body(&body)?;
    let image = svc.tag_image(&ws.0, &reference, req).await?;
    Ok(envelope::data(StatusCode::CREATED, image))
}

/// `POST /v1/sandboxes/{id}/image` with `{name, tag}`
pub async fn from_sandbox(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let id = parse_id(&id, "sandboxId")?;
    let req: ImageFromSandboxRequest = parse_body(&body)?;
    let image = svc.image_from_sandbox(&ws.0, id, req).await?;
    Ok(envelope::data(StatusCode::CREATED, image))
}
