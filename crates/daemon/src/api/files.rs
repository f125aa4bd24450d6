//! File transfer routes (v2) and filesystem calls (v1).

use super::envelope;
use super::{parse_body, parse_id, parse_query, ApiError, AppState, Workspace};
use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use sbx_api_types::{ErrorCode, UploadResult};
use serde::Deserialize;

#[derive(Deserialize)]
struct PathQuery {
    path: Option<String>,
    mode: Option<String>,
    recursive: Option<String>,
}

fn required_path(q: &PathQuery) -> Result<String, ApiError> {
    q.path
        .clone()
        .ok_or_else(|| ApiError::new(ErrorCode::MissingField, "path is required"))
}

/// `PUT /v2/sandboxes/{id}/files?path=&mode=`: streamed, atomic replace.
pub async fn upload(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
    RawQuery(q): RawQuery,
    headers: axum::http::HeaderMap,
    body: Body,
) -> Response {
    let result: Result<Response, ApiError> = async move {
        let id = parse_id(&id, "sandboxId")?;
        let q: PathQuery = parse_query(q.as_deref())?;
        let path = required_path(&q)?;
        // No Content-Length and no chunked encoding: there is no body at all (an
        // empty file is sent as `Content-Length: 0`).
        if !headers.contains_key("content-length") && !headers.contains_key("transfer-encoding") {
            return Err(ApiError::new(
                ErrorCode::MissingField,
                "the request has no body; send the file's bytes",
            ));
        }
        let stream = body.into_data_stream();
        let written = svc
            .upload(&ws.0, id, &path, q.mode.as_deref(), stream)
            .await?;
        Ok(envelope::data(
            StatusCode::OK,
            UploadResult {
                path,
                bytes_written: written,
            },
        ))
    }
    .await;
    result.unwrap_or_else(|e| {
        // Refused before the body was read to its end: the rest of it is
        // still on the wire, so hyper closes the connection; say so, or a
        // client may send its next request on it and get a broken pipe.
        let mut resp = e.into_response();
        resp.headers_mut()
            .insert("connection", HeaderValue::from_static("close"));
        resp
    })
}

/// `GET /v2/sandboxes/{id}/files?path=`: streamed raw bytes.
pub async fn download(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
    RawQuery(q): RawQuery,
) -> Result<Response, ApiError> {
    let id = parse_id(&id, "sandboxId")?;
    let q: PathQuery = parse_query(q.as_deref())?;
    let path = required_path(&q)?;
    let download = svc.download(&ws.0, id, &path).await?;
    let stat = download.stat.clone();
    let mut resp = (StatusCode::OK, Body::from_stream(download.body)).into_response();
    let h = resp.headers_mut();
    h.insert(
        "content-type",
        HeaderValue::from_static("application/octet-stream"),
    );
    // A file that reports size 0 may still have content (procfs, sysfs): it is streamed to
    // its end without a length rather than cut to the 0 bytes its stat promises.
    if stat.size > 0 {
        h.insert("content-length", HeaderValue::from(stat.size));
    }
    if let Ok(v) = HeaderValue::from_str(&format!("{:04o}", stat.mode & 0o7777)) {
        h.insert("x-sandbox-file-mode", v);
    }
    if let Some(t) = chrono::DateTime::<chrono::Utc>::from_timestamp_millis(stat.mtime_ms as i64) {
        if let Ok(v) = HeaderValue::from_str(&t.format("%a, %d %b %Y %H:%M:%S GMT").to_string()) {
            h.insert("last-modified", v);
        }
    }
    Ok(resp)
}

/// `GET /v1/sandboxes/{id}/fs/stat?path=`
pub async fn stat(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
    RawQuery(q): RawQuery,
) -> Result<Response, ApiError> {
    let id = parse_id(&id, "sandboxId")?;
    let q: PathQuery = parse_query(q.as_deref())?;
    let s = svc.stat(&ws.0, id, &required_path(&q)?).await?;
    Ok(envelope::data(StatusCode::OK, envelope::file_info(&s)))
}

/// `GET /v1/sandboxes/{id}/fs/list?path=`
pub async fn list(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
    RawQuery(q): RawQuery,
) -> Result<Response, ApiError> {
    let id = parse_id(&id, "sandboxId")?;
    let q: PathQuery = parse_query(q.as_deref())?;
    let entries = svc.list_dir(&ws.0, id, &required_path(&q)?).await?;
    let items: Vec<_> = entries.iter().map(envelope::file_info).collect();
    Ok(envelope::data(StatusCode::OK, items))
}

/// `POST /v1/sandboxes/{id}/fs/mkdir?path=` (mkdir -p)
pub async fn mkdir(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
    RawQuery(q): RawQuery,
) -> Result<Response, ApiError> {
    let id = parse_id(&id, "sandboxId")?;
    let q: PathQuery = parse_query(q.as_deref())?;
    svc.mkdir(&ws.0, id, &required_path(&q)?).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `POST /v1/sandboxes/{id}/fs/remove?path=&recursive=`
pub async fn remove(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
    RawQuery(q): RawQuery,
) -> Result<Response, ApiError> {
    let id = parse_id(&id, "sandboxId")?;
    let q: PathQuery = parse_query(q.as_deref())?;
    let recursive = matches!(q.recursive.as_deref(), Some("true") | Some("1"));
    svc.remove(&ws.0, id, &required_path(&q)?, recursive)
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RenameBody {
    from: Option<String>,
    to: Option<String>,
}

/// `POST /v1/sandboxes/{id}/fs/rename` with `{from, to}`
pub async fn rename(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let id = parse_id(&id, "sandboxId")?;
    let b: RenameBody = parse_body(&body)?;
    let from = b
        .from
        .ok_or_else(|| ApiError::new(ErrorCode::MissingField, "from is required"))?;
    let to =
        b.to.ok_or_else(|| ApiError::new(ErrorCode::MissingField, "to is required"))?;
    svc.rename(&ws.0, id, &from, &to).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
