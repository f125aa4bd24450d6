//! Connect connections and the OAuth sign-in (`/v1/connect/connections`, `/v1/connect/oauth`).

use super::{connect_views as views, envelope, parse_body, ApiError, AppState, Workspace};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use sbx_connect::api::{
    CreateConnectionRequest, OauthCallbackRequest, OauthStartRequest, UpdateConnectionRequest,
};
use serde_json::json;

/// Parses a required JSON body (an empty body is a missing field).
fn required<T: serde::de::DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| {
        let msg = e.to_string();
        if msg.starts_with("missing field") || body.iter().all(|b| b.is_ascii_whitespace()) {
            ApiError::new(sbx_api_types::ErrorCode::MissingField, msg)
        } else {
            ApiError::new(
                sbx_api_types::ErrorCode::InvalidRequest,
                format!("invalid JSON body: {msg}"),
            )
        }
    })
}

/// `POST /v1/connect/connections` (201)
pub async fn create(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let req: CreateConnectionRequest = required(&body)?;
    let c = views::blocking(&svc, move |c| c.create_connection(&ws.0, req))
        .await?
        .map_err(views::connection)?;
    Ok(envelope::data(StatusCode::CREATED, c))
}

/// `GET /v1/connect/connections`
pub async fn list(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
) -> Result<Response, ApiError> {
    let items = views::blocking(&svc, move |c| c.list_connections(&ws.0))
        .await?
        .map_err(views::other)?;
    Ok(envelope::list(items, views::ALL, None))
}

/// `GET /v1/connect/connections/{connectionId}`
pub async fn get(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let c = views::blocking(&svc, move |c| c.get_connection(&ws.0, &id))
        .await?
        .map_err(views::other)?;
    Ok(envelope::data(StatusCode::OK, c))
}

/// `PATCH /v1/connect/connections/{connectionId}`
pub async fn update(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let req: UpdateConnectionRequest = parse_body(&body)?;
    let c = views::blocking(&svc, move |c| c.update_connection(&ws.0, &id, req))
        .await?
        .map_err(views::connection)?;
    Ok(envelope::data(StatusCode::OK, c))
}

/// `DELETE /v1/connect/connections/{connectionId}` (204)
pub async fn delete(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    views::blocking(&svc, move |c| c.delete_connection(&ws.0, &id))
        .await?
        .map_err(views::other)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `POST /v1/connect/connections/{connectionId}/oauth/start`
pub async fn oauth_start(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let req: OauthStartRequest = required(&body)?;
    let start = views::blocking(&svc, move |c| c.start_oauth(&ws.0, &id, req))
        .await?
        .map_err(views::other)?;
    Ok(envelope::data(StatusCode::OK, start))
}

/// `POST /v1/connect/oauth/callback`
pub async fn oauth_callback(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let req: OauthCallbackRequest = required(&body)?;
    let done = views::runtime(&svc)?
        .finish_oauth(&ws.0, req)
        .await
        .map_err(views::other)?;
    Ok(envelope::data(
        StatusCode::OK,
        json!({"connection": done.connection, "run": done.run.map(views::run)}),
    ))
}
