//! Connect jobs and their output: connection test, Run now, runs, logs, records, checkpoint.

use super::{connect_views as views, envelope, parse_query, ApiError, AppState, Workspace};
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Extension;
use sbx_connect::api::{PageQuery, RecordsQuery};
use serde_json::json;

/// `POST /v1/connect/connections/{connectionId}/test` (200 with the finished run)
pub async fn test(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let run = views::runtime(&svc)?
        .test_connection(&ws.0, &id)
        .await
        .map_err(views::other)?;
    Ok(envelope::data(StatusCode::OK, views::run(run)))
}

/// `POST /v1/connect/connections/{connectionId}/syncs/{sync}/runs` (202 with the queued run)
pub async fn run_now(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path((id, sync)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let run = views::blocking(&svc, move |c| c.start_sync(&ws.0, &id, &sync))
        .await?
        .map_err(views::other)?;
    Ok(envelope::data(StatusCode::ACCEPTED, views::run(run)))
}

/// `GET /v1/connect/connections/{connectionId}/runs?limit&cursor`
pub async fn list(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
    RawQuery(q): RawQuery,
) -> Result<Response, ApiError> {
    let q: PageQuery = parse_query(q.as_deref())?;
    let limit = q.limit();
    let page = views::blocking(&svc, move |c| c.list_runs(&ws.0, &id, &q))
        .await?
        .map_err(views::other)?;
    let items = page.items.into_iter().map(views::run).collect();
    Ok(envelope::list(items, limit, page.next_cursor))
}

/// `GET /v1/connect/runs/{runId}`
pub async fn get(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let run = views::blocking(&svc, move |c| c.get_run(&ws.0, &id))
        .await?
        .map_err(views::other)?;
    Ok(envelope::data(StatusCode::OK, views::run(run)))
}

/// `GET /v1/connect/runs/{runId}/logs?limit&cursor`
pub async fn run_logs(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
    RawQuery(q): RawQuery,
) -> Result<Response, ApiError> {
    let q: PageQuery = parse_query(q.as_deref())?;
    let limit = q.limit();
    let page = views::blocking(&svc, move |c| c.list_logs(&ws.0, None, Some(&id), &q))
        .await?
        .map_err(views::other)?;
    Ok(envelope::list(page.items, limit, page.next_cursor))
}

/// `GET /v1/connect/connections/{connectionId}/logs?limit&cursor`
pub async fn connection_logs(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
    RawQuery(q): RawQuery,
) -> Result<Response, ApiError> {
    let q: PageQuery = parse_query(q.as_deref())?;
    let limit = q.limit();
    let page = views::blocking(&svc, move |c| c.list_logs(&ws.0, Some(&id), None, &q))
        .await?
        .map_err(views::other)?;
    Ok(envelope::list(page.items, limit, page.next_cursor))
}

/// `GET /v1/connect/connections/{connectionId}/syncs/{sync}/records?limit&cursor&key` (NDJSON;
/// the next page's cursor in `x-next-cursor`)
pub async fn records(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path((id, sync)): Path<(String, String)>,
    RawQuery(q): RawQuery,
) -> Result<Response, ApiError> {
    let q: RecordsQuery = parse_query(q.as_deref())?;
    let page = views::blocking(&svc, move |c| c.read_records(&ws.0, &id, &sync, &q))
        .await?
        .map_err(views::other)?;
    let lines = page.items.into_iter().map(|r| r.data).collect();
    Ok(views::ndjson(lines, page.next_cursor))
}

/// `GET /v1/connect/connections/{connectionId}/syncs/{sync}/checkpoint`
pub async fn checkpoint(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path((id, sync)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let checkpoint = views::blocking(&svc, move |c| c.get_checkpoint(&ws.0, &id, &sync))
        .await?
        .map_err(views::other)?;
    Ok(envelope::data(
        StatusCode::OK,
        json!({"checkpoint": checkpoint}),
    ))
}
