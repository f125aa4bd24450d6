//! Sandbox lifecycle, exec and logs routes.

use super::envelope::{self, b64};
use super::{parse_body, parse_id, parse_query, ApiError, AppState, Workspace};
use crate::service::{CreateOutcome, DestroyOutcome};
use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use sbx_api_types::{validate, CreateSandboxRequest, ExecRequest, ExecResult, SandboxStatus};
use serde::Deserialize;

/// `POST /v2/sandboxes`
pub async fn create(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let req: CreateSandboxRequest = parse_body(&body)?;
    let outcome = svc.create(&ws.0, req).await?;
    let (record, fresh) = match outcome {
        CreateOutcome::Created(r) => (r, true),
        CreateOutcome::Existing(r) => (r, false),
    };
    let status = match record.status {
        SandboxStatus::Running if fresh => StatusCode::CREATED,
        SandboxStatus::Starting if fresh => StatusCode::ACCEPTED,
        _ => StatusCode::OK,
    };
    Ok(envelope::data(
        status,
        envelope::sandbox(&record, svc.vpc_id()),
    ))
}

/// `POST /v1/sandboxes`: the v2 body plus `network`; answers like v2.
pub async fn create_v1(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let req: sbx_api_types::CreateSandboxV1Request = parse_body(&body)?;
    // In a cluster, placement chose this node by the selector; checked here
    // again for a single node and for a create that reached this node directly.
    if let Some(selector) = &req.node_selector {
        svc.check_node_selector(selector)?;
    }
    let (req, network, preview, volumes, image, template) = req.split();
    let (record, fresh) = match svc
        .create_v1(&ws.0, req, network, preview, volumes, image, template)
        .await?
    {
        CreateOutcome::Created(r) => (r, true),
        CreateOutcome::Existing(r) => (r, false),
    };
    let status = match record.status {
        SandboxStatus::Running if fresh => StatusCode::CREATED,
        SandboxStatus::Starting if fresh => StatusCode::ACCEPTED,
        _ => StatusCode::OK,
    };
    let mut body = serde_json::to_value(envelope::sandbox(&record, svc.vpc_id()))
        .map_err(|e| ApiError::new(sbx_api_types::ErrorCode::InternalError, e.to_string()))?;
    // A create from a template says so, as `GET /v1/sandboxes/{id}` does.
    if let (Some(t), Some(obj)) = (&record.template, body.as_object_mut()) {
        obj.insert("template".into(), t.clone().into());
    }
    Ok(envelope::data(status, body))
}

#[derive(Deserialize)]
struct ListQuery {
    limit: Option<String>,
    cursor: Option<String>,
}

/// `GET /v2/sandboxes`
pub async fn list(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    RawQuery(q): RawQuery,
) -> Result<Response, ApiError> {
    let q: ListQuery = parse_query(q.as_deref())?;
    let limit = validate::list_limit(q.limit.as_deref())?;
    let cursor = q.cursor.filter(|c| !c.is_empty());
    let page = svc.list(&ws.0, limit, cursor.as_deref()).await?;
    let items = page
        .items
        .iter()
        .map(|r| envelope::sandbox(r, svc.vpc_id()))
        .collect();
    Ok(envelope::list(items, page.limit, page.next_cursor))
}

/// `GET /v2/sandboxes/{id}`
pub async fn get(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = parse_id(&id, "sandboxId")?;
    let record = svc.get(&ws.0, id).await?;
    Ok(envelope::data(
        StatusCode::OK,
        envelope::sandbox(&record, svc.vpc_id()),
    ))
}

/// `GET /v1/sandboxes/{id}`: the v2 resource plus sbx extras (environment, secret names, runtime used).
pub async fn detail(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = parse_id(&id, "sandboxId")?;
    let (r, mounts) = svc.get_detail(&ws.0, id).await?;
    Ok(envelope::data(
        StatusCode::OK,
        detail_view(&svc, &r, mounts),
    ))
}

/// `PUT /v1/sandboxes/{id}/network`: a running sandbox's new egress policy
/// (for new connections); answers the detail as `GET` does.
pub async fn update_network(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let id = parse_id(&id, "sandboxId")?;
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::new(
            sbx_api_types::ErrorCode::MissingField,
            "the body is the new network policy, e.g. {\"mode\": \"public\"}",
        ));
    }
    let policy: sbx_api_types::NetworkPolicy = parse_body(&body)?;
    let (r, mounts) = svc.update_network_detail(&ws.0, id, policy).await?;
    Ok(envelope::data(
        StatusCode::OK,
        detail_view(&svc, &r, mounts),
    ))
}

/// The `/v1` view of a sandbox: the v2 resource plus sbx extras.
fn detail_view(
    svc: &AppState,
    r: &crate::service::Sandbox,
    mounts: Vec<sbx_api_types::VolumeMount>,
) -> sbx_api_types::SandboxDetail {
    sbx_api_types::SandboxDetail {
        sandbox: envelope::sandbox(r, svc.vpc_id()),
        environment: r.environment.clone(),
        secrets: r.secrets.clone(),
        snapshot_id: r.snapshot_id,
        active_runtime_ms: r.active_runtime_ms,
        active_runtime_limit_ms: svc.config().limits.active_runtime.as_millis() as u64,
        network: svc.network_status(r),
        mounts,
        template: r.template.clone(),
    }
}

/// `GET /v1/sandboxes/{id}/metrics`: the sandbox's recent usage samples.
pub async fn metrics(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = parse_id(&id, "sandboxId")?;
    let metrics = svc.sandbox_metrics(&ws.0, id).await?;
    Ok(envelope::data(StatusCode::OK, metrics))
}

/// `DELETE /v2/sandboxes/{id}`
pub async fn destroy(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = parse_id(&id, "sandboxId")?;
    Ok(match svc.destroy(&ws.0, id).await? {
        DestroyOutcome::Terminating(r) => {
            envelope::data(StatusCode::ACCEPTED, envelope::sandbox(&r, svc.vpc_id()))
        }
        DestroyOutcome::Terminated => StatusCode::NO_CONTENT.into_response(),
    })
}

/// `POST /v2/sandboxes/{id}/exec`
pub async fn exec(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let id = parse_id(&id, "sandboxId")?;
    let req: ExecRequest = parse_body(&body)?;
    let out = svc.exec(&ws.0, id, req).await?;
    Ok(envelope::data(
        StatusCode::OK,
        ExecResult {
            stdout: b64(&out.stdout),
            stderr: b64(&out.stderr),
            encoding: "base64".into(),
            exit_code: out.exit_code,
        },
    ))
}

#[derive(Deserialize)]
struct LogsQuery {
    follow: Option<String>,
}

/// `GET /v2/sandboxes/{id}/logs?follow=`: the console log as NDJSON.
pub async fn logs(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
    RawQuery(q): RawQuery,
) -> Result<Response, ApiError> {
    let id = parse_id(&id, "sandboxId")?;
    let q: LogsQuery = parse_query(q.as_deref())?;
    let follow = match q.follow.as_deref() {
        None | Some("false") | Some("0") | Some("") => false,
        Some("true") | Some("1") => true,
        Some(_) => {
            return Err(ApiError::new(
                sbx_api_types::ErrorCode::InvalidFieldFormat,
                "follow: must be true or false",
            ))
        }
    };
    let chunks = svc.logs(&ws.0, id, follow).await?;
    let lines = futures::StreamExt::map(chunks, |c| {
        let frame = serde_json::json!({
            "type": "log",
            "stream": "STDOUT",
            "data": b64(&c.bytes),
            "encoding": "base64",
            "at": sbx_api_types::format_unix_ms(c.at_ms),
        });
        let mut line = serde_json::to_vec(&frame).unwrap_or_default();
        line.push(b'\n');
        Ok::<_, std::convert::Infallible>(Bytes::from(line))
    });
    Ok(ndjson(Body::from_stream(lines)))
}

/// An NDJSON streaming response.
pub fn ndjson(body: Body) -> Response {
    let mut resp = (StatusCode::OK, body).into_response();
    resp.headers_mut().insert(
        "content-type",
        HeaderValue::from_static("application/x-ndjson"),
    );
    resp
}
