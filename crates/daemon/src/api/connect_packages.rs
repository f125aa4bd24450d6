//! Connect packages and builds (`/v1/connect/packages`, `/v1/connect/builds`).

use super::error::ConnectOp;
use super::{connect_views as views, envelope, ApiError, AppState, Workspace};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Extension;

/// `POST /v1/connect/packages` (201 new version, 200 the same bytes again)
pub async fn upload(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let connect = views::runtime(&svc)?.clone();
    // Unpacking and hashing up to 64 MiB: off the async workers.
    let up = tokio::task::spawn_blocking(move || connect.upload_package(&ws.0, &body))
        .await
        .map_err(|e| ApiError::new(sbx_api_types::ErrorCode::InternalError, e.to_string()))?
        .map_err(|e| ApiError::connect(ConnectOp::Upload, e))?;
    let status = if up.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(envelope::data(status, up.version))
}

/// `GET /v1/connect/packages`
pub async fn list(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
) -> Result<Response, ApiError> {
    let packages = views::blocking(&svc, move |c| c.list_packages(&ws.0))
        .await?
        .map_err(views::other)?;
    Ok(envelope::list(packages, views::ALL, None))
}

/// `GET /v1/connect/packages/{package}/versions`
pub async fn versions(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(package): Path<String>,
) -> Result<Response, ApiError> {
    let versions = views::blocking(&svc, move |c| c.list_package_versions(&ws.0, &package))
        .await?
        .map_err(views::other)?;
    Ok(envelope::list(versions, views::ALL, None))
}

/// `GET /v1/connect/packages/{package}/versions/{version}`
pub async fn version(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path((package, version)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let v = views::blocking(&svc, move |c| {
        c.get_package_version(&ws.0, &package, &version)
    })
    .await?
    .map_err(views::other)?;
    Ok(envelope::data(StatusCode::OK, v))
}

/// `POST /v1/connect/packages/{package}/versions/{version}/builds` (202, queued)
pub async fn build_start(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path((package, version)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let b = views::blocking(&svc, move |c| c.start_build(&ws.0, &package, &version))
        .await?
        .map_err(views::other)?;
    Ok(envelope::data(StatusCode::ACCEPTED, views::build(b)))
}

/// `GET /v1/connect/packages/{package}/versions/{version}/builds`
pub async fn build_list(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path((package, version)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let builds = views::blocking(&svc, move |c| c.list_builds(&ws.0, &package, &version))
        .await?
        .map_err(views::other)?;
    Ok(envelope::list(
        builds.into_iter().map(views::build).collect(),
        views::ALL,
        None,
    ))
}

/// `GET /v1/connect/builds/{buildId}`
pub async fn build_get(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let b = views::blocking(&svc, move |c| c.get_build(&ws.0, &id))
        .await?
        .map_err(views::other)?;
    Ok(envelope::data(StatusCode::OK, views::build(b)))
}

/// `DELETE /v1/connect/packages/{package}/versions/{version}` (204; 409 while a connection
/// uses the version or a build of it runs)
// Registered by the router in api/mod.rs (outside this slice): until that line lands the
// handler is unused. Remove this allow with it.
pub async fn delete_version(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path((package, version)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    views::blocking(&svc, move |c| {
        c.delete_package_version(&ws.0, &package, &version)
    })
    .await?
    .map_err(views::other)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
