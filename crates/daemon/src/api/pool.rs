//! `GET /v1/pool`: the warm pool per shape; `GET /v1/shapes`: the shapes offered.

use super::{envelope, ApiError, AppState};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

/// `GET /v1/pool`
pub async fn status(State(svc): State<AppState>) -> Result<Response, ApiError> {
    Ok(envelope::data(StatusCode::OK, svc.pool_status()))
}

/// `GET /v1/shapes`
pub async fn shapes(State(svc): State<AppState>) -> Result<Response, ApiError> {
    Ok(envelope::data(StatusCode::OK, svc.shapes()))
}
