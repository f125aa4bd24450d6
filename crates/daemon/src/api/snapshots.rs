//! Pause/resume, snapshot and secret routes.

use super::envelope;
use super::{parse_body, parse_id, parse_query, ApiError, AppState, Workspace};
use crate::service::Snapshot;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use sbx_api_types::SnapshotStatus;
use sbx_api_types::{format_time, validate, ErrorCode, Resources, SnapshotCreateRequest};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// `POST /v2/sandboxes/{id}/pause` (200 with the sandbox, PAUSED)
pub async fn pause(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = parse_id(&id, "sandboxId")?;
    let r = svc.pause(&ws.0, id).await?;
    Ok(envelope::data(
        StatusCode::OK,
        envelope::sandbox(&r, svc.vpc_id()),
    ))
}

/// `POST /v2/sandboxes/{id}/resume` (200 with the sandbox, RUNNING)
pub async fn resume(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = parse_id(&id, "sandboxId")?;
    let r = svc.resume(&ws.0, id).await?;
    Ok(envelope::data(
        StatusCode::OK,
        envelope::sandbox(&r, svc.vpc_id()),
    ))
}

/// The wire view of a snapshot (contract §3.6).
pub fn snapshot(s: &Snapshot) -> serde_json::Value {
    let mut v = json!({
        "id": s.id,
        "name": s.name.clone().unwrap_or_default(),
        "sourceImageId": s.source_image_id,
        "status": s.status.as_str(),
        "resources": Resources { vcpu: s.vcpu, memory_mb: s.memory_mb },
        "memoryPackCount": if s.status == SnapshotStatus::Ready { 1 } else { 0 },
        "diskPackCount": if s.status == SnapshotStatus::Ready { 1 } else { 0 },
        "storedBytes": s.stored_bytes,
        "createdAt": format_time(s.created_at),
        "updatedAt": format_time(s.updated_at),
        "expiresAt": format_time(s.expires_at),
        "sourceSandboxId": s.source_sandbox,
    });
    if s.status == SnapshotStatus::Ready {
        v["compatibilityId"] = json!(s.compatibility_id);
    }
    if let Some(e) = &s.error {
        v["error"] = json!(e);
    }
    v
}

/// `POST /v2/sandboxes/{id}/snapshots` (201 READY or 202 CREATING)
pub async fn create(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let id = parse_id(&id, "sandboxId")?;
    let req: SnapshotCreateRequest = parse_body(&body)?;
    let s = svc.snapshot_create(&ws.0, id, req.name).await?;
    let status = match s.status {
        SnapshotStatus::Ready => StatusCode::CREATED,
        SnapshotStatus::Creating => StatusCode::ACCEPTED,
        _ => {
            // An unreachable object store is a retryable outage, not a bug.
            let upload = s
                .error
                .as_deref()
                .is_some_and(|e| e.starts_with(crate::service::SNAPSHOT_UPLOAD_FAILED));
            return Err(ApiError::new(
                if upload {
                    ErrorCode::ComputeUnavailable
                } else {
                    ErrorCode::InternalError
                },
                format!("snapshot {} failed: {}", s.id, s.error.unwrap_or_default()),
            ));
        }
    };
    Ok(envelope::data(status, snapshot(&s)))
}

#[derive(Deserialize)]
struct ListQuery {
    limit: Option<String>,
    cursor: Option<String>,
    name: Option<String>,
}

/// `GET /v2/snapshots?limit&cursor&name`
pub async fn list(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    RawQuery(q): RawQuery,
) -> Result<Response, ApiError> {
    let q: ListQuery = parse_query(q.as_deref())?;
    let limit = validate::list_limit(q.limit.as_deref())?;
    let cursor = q.cursor.filter(|c| !c.is_empty());
    let page = svc
        .snapshot_list(&ws.0, q.name.as_deref(), limit, cursor.as_deref())
        .await?;
    Ok(envelope::list(
        page.items.iter().map(snapshot).collect(),
        limit,
        page.next_cursor,
    ))
}

/// `GET /v2/snapshots/{id}`
pub async fn get(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = parse_id(&id, "snapshotId")?;
    Ok(envelope::data(
        StatusCode::OK,
        snapshot(&svc.snapshot_get(&ws.0, id).await?),
    ))
}

/// `DELETE /v2/snapshots/{id}` (204, repeatable)
pub async fn delete(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = parse_id(&id, "snapshotId")?;
    svc.snapshot_delete(&ws.0, id).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct SecretBody {
    value: Option<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SecretView {
    name: String,
    created_at: String,
    updated_at: String,
}

fn secret_view(s: &crate::service::SecretInfo) -> SecretView {
    SecretView {
        name: s.name.clone(),
        created_at: format_time(s.created_at),
        updated_at: format_time(s.updated_at),
    }
}

/// `PUT /v1/secrets/{name}` with `{"value": "..."}`; the value is never returned.
pub async fn secret_put(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let b: SecretBody = parse_body(&body)?;
    let info = svc.secret_put(&ws.0, &name, b.value).await?;
    Ok(envelope::data(StatusCode::OK, secret_view(&info)))
}

/// `GET /v1/secrets`
pub async fn secret_list(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
) -> Result<Response, ApiError> {
    let items: Vec<_> = svc
        .secret_list(&ws.0)
        .await?
        .iter()
        .map(secret_view)
        .collect();
    let n = items.len().max(1) as u32;
    Ok(envelope::list(items, n, None))
}

/// `DELETE /v1/secrets/{name}` (204, repeatable)
pub async fn secret_delete(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    svc.secret_delete(&ws.0, &name).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
