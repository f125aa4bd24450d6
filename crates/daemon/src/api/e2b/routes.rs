//! E2B control-plane handlers: each parses into a typed request and calls one
//! `E2b` function; statuses are those of contract §2.2.

use super::wire::{
    parse_limit, ConnectBody, ListQuery, NetworkUpdate, NewSandbox, PauseBody, SandboxDetailOut,
    SandboxOut, SnapshotBody, SnapshotOut, SnapshotQuery, TimeoutBody,
};
use super::{E2bApiError, Tenant};
use crate::service::e2b::{E2b, E2bError};
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::de::DeserializeOwned;
use std::sync::Arc;
use uuid::Uuid;

type Res = Result<Response, E2bApiError>;

/// Parses an optional JSON object body (empty: the defaults).
fn body<T: DeserializeOwned + Default>(bytes: &Bytes) -> Result<T, E2bApiError> {
    match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
        None => Ok(T::default()),
        Some(b'{') => serde_json::from_slice(bytes)
            .map_err(|e| E2bApiError::bad_request(format!("invalid JSON body: {e}"))),
        Some(_) => Err(E2bApiError::bad_request(
            "invalid JSON body: expected a JSON object",
        )),
    }
}

fn query<T: DeserializeOwned>(raw: Option<&str>) -> Result<T, E2bApiError> {
    serde_urlencoded::from_str(raw.unwrap_or(""))
        .map_err(|e| E2bApiError::bad_request(format!("invalid query string: {e}")))
}

/// A sandbox id: a UUID (with or without dashes). Anything else names no sandbox.
fn sandbox_id(raw: &str) -> Result<Uuid, E2bApiError> {
    Uuid::parse_str(raw)
        .ok()
        .filter(|id| !id.is_nil())
        .ok_or_else(|| E2bError::NotFound(format!("sandbox {raw:?} not found")).into())
}

/// A JSON list with the `x-next-token` header when there is a next page.
fn page<T: serde::Serialize>(items: Vec<T>, next: Option<String>) -> Response {
    let mut resp = (StatusCode::OK, Json(items)).into_response();
    if let Some(v) = next.and_then(|n| HeaderValue::from_str(&n).ok()) {
        resp.headers_mut().insert("x-next-token", v);
    }
    resp
}

/// `POST /v2/sandboxes` → 201 `Sandbox`.
pub async fn create(
    State(e2b): State<Arc<E2b>>,
    Extension(t): Extension<Tenant>,
    raw: Bytes,
) -> Res {
    let spec = body::<NewSandbox>(&raw)?.into_spec()?;
    let created = e2b.create(&t.0, spec).await?;
    Ok((StatusCode::CREATED, Json(SandboxOut::from(&created))).into_response())
}

/// `POST /v2/sandboxes/{id}/connect` → 200 (was running) or 201 (resumed) `Sandbox`.
pub async fn connect(
    State(e2b): State<Arc<E2b>>,
    Extension(t): Extension<Tenant>,
    Path(id): Path<String>,
    raw: Bytes,
) -> Res {
    let id = sandbox_id(&id)?;
    let req: ConnectBody = body(&raw)?;
    if req.memory == Some(false) {
        return Err(E2bApiError::bad_request(
            "memory: false (reboot on resume) is not supported by sbx; a resume keeps memory",
        ));
    }
    let (sandbox, resumed) = e2b.connect(&t.0, id, req.timeout).await?;
    let status = if resumed {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(SandboxOut::from(&sandbox))).into_response())
}

/// `GET /sandboxes/{id}` → 200 `SandboxDetail`.
pub async fn info(
    State(e2b): State<Arc<E2b>>,
    Extension(t): Extension<Tenant>,
    Path(id): Path<String>,
) -> Res {
    let id = sandbox_id(&id)?;
    let s = e2b.info(&t.0, id).await?;
    let disk = e2b.service().config().limits.sandbox_disk_mb;
    Ok(Json(SandboxDetailOut::new(&s, disk, true)).into_response())
}

/// `GET /v2/sandboxes` → 200 `ListedSandbox[]` (+ `x-next-token`).
pub async fn list(
    State(e2b): State<Arc<E2b>>,
    Extension(t): Extension<Tenant>,
    RawQuery(q): RawQuery,
) -> Res {
    let (filter, limit, token) = query::<ListQuery>(q.as_deref())?.parse()?;
    let (items, next) = e2b.list(&t.0, &filter, limit, token.as_deref()).await?;
    let disk = e2b.service().config().limits.sandbox_disk_mb;
    let items = items
        .iter()
        .map(|s| SandboxDetailOut::new(s, disk, false))
        .collect();
    Ok(page::<SandboxDetailOut>(items, next))
}

/// `DELETE /sandboxes/{id}` → 204.
pub async fn kill(
    State(e2b): State<Arc<E2b>>,
    Extension(t): Extension<Tenant>,
    Path(id): Path<String>,
) -> Res {
    let id = sandbox_id(&id)?;
    e2b.kill(&t.0, id).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `POST /sandboxes/{id}/timeout` → 204.
pub async fn set_timeout(
    State(e2b): State<Arc<E2b>>,
    Extension(t): Extension<Tenant>,
    Path(id): Path<String>,
    raw: Bytes,
) -> Res {
    let id = sandbox_id(&id)?;
    let req: TimeoutBody = body(&raw)?;
    let timeout = req
        .timeout
        .ok_or_else(|| E2bApiError::bad_request("timeout: required (seconds)"))?;
    e2b.set_timeout(&t.0, id, timeout).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `POST /sandboxes/{id}/pause` → 204; 409 when already paused.
pub async fn pause(
    State(e2b): State<Arc<E2b>>,
    Extension(t): Extension<Tenant>,
    Path(id): Path<String>,
    raw: Bytes,
) -> Res {
    let id = sandbox_id(&id)?;
    let _: PauseBody = body(&raw)?;
    e2b.pause(&t.0, id).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `?start=&end=` of `getMetrics`: unix seconds, each optional (contract §2.5).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct MetricsQuery {
    start: Option<i64>,
    end: Option<i64>,
}

/// One `SandboxMetric` (contract §2.3; every field required by the Python SDK).
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct SandboxMetricOut {
    timestamp: String,
    timestamp_unix: i64,
    cpu_count: u32,
    /// Percent of the sandbox's vCPUs (0-100).
    cpu_used_pct: f64,
    mem_used: u64,
    mem_total: u64,
    mem_cache: u64,
    disk_used: u64,
    /// 0 when sandboxes have no disk limit.
    disk_total: u64,
}

/// `GET /sandboxes/{id}/metrics?start=&end=` → 200 `SandboxMetric[]`, oldest first.
pub async fn metrics(
    State(e2b): State<Arc<E2b>>,
    Extension(t): Extension<Tenant>,
    Path(id): Path<String>,
    RawQuery(q): RawQuery,
) -> Res {
    let id = sandbox_id(&id)?;
    let q: MetricsQuery = query(q.as_deref())?;
    let (sandbox, samples) = e2b.metrics(&t.0, id, q.start, q.end).await?;
    let out: Vec<SandboxMetricOut> = samples
        .iter()
        .map(|s| SandboxMetricOut {
            timestamp: sbx_api_types::format_unix_ms(s.unix_ms),
            timestamp_unix: (s.unix_ms / 1000) as i64,
            cpu_count: sandbox.vcpu,
            cpu_used_pct: (s.cpu_percent * 100.0).round() / 100.0,
            mem_used: s.memory_bytes,
            mem_total: u64::from(sandbox.memory_mb) * 1024 * 1024,
            mem_cache: s.memory_cache_bytes,
            disk_used: s.disk_used_bytes,
            disk_total: s.disk_total_bytes,
        })
        .collect();
    Ok(Json(out).into_response())
}

/// `PUT /sandboxes/{id}/network` → 204: the running sandbox's new egress policy.
pub async fn network_update(
    State(e2b): State<Arc<E2b>>,
    Extension(t): Extension<Tenant>,
    Path(id): Path<String>,
    raw: Bytes,
) -> Res {
    let id = sandbox_id(&id)?;
    let req: NetworkUpdate = body(&raw)?;
    let policy = req.into_policy()?;
    e2b.update_network(&t.0, id, policy).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `POST /sandboxes/{id}/snapshots` → 201 `SnapshotInfo`.
pub async fn snapshot_create(
    State(e2b): State<Arc<E2b>>,
    Extension(t): Extension<Tenant>,
    Path(id): Path<String>,
    raw: Bytes,
) -> Res {
    let id = sandbox_id(&id)?;
    let req: SnapshotBody = body(&raw)?;
    let snap = e2b.snapshot_create(&t.0, id, req.name).await?;
    Ok((StatusCode::CREATED, Json(SnapshotOut::from(&snap))).into_response())
}

/// `GET /snapshots` → 200 `SnapshotInfo[]` (+ `x-next-token`).
pub async fn snapshot_list(
    State(e2b): State<Arc<E2b>>,
    Extension(t): Extension<Tenant>,
    RawQuery(q): RawQuery,
) -> Res {
    let q: SnapshotQuery = query(q.as_deref())?;
    let limit = parse_limit(q.limit.as_deref())?;
    let sandbox = match q.sandbox_id.as_deref().filter(|s| !s.is_empty()) {
        // A sandbox id that is no UUID has no snapshots.
        Some(raw) => match Uuid::parse_str(raw) {
            Ok(id) => Some(id),
            Err(_) => return Ok(page::<SnapshotOut>(Vec::new(), None)),
        },
        None => None,
    };
    let name = q.name.filter(|n| !n.is_empty());
    let token = q.next_token.filter(|n| !n.is_empty());
    let (items, next) = e2b
        .snapshot_list(&t.0, sandbox, name.as_deref(), limit, token.as_deref())
        .await?;
    Ok(page(items.iter().map(SnapshotOut::from).collect(), next))
}

/// `DELETE /templates/{id}` → 204 (a snapshot id; 404 for anything else).
pub async fn snapshot_delete(
    State(e2b): State<Arc<E2b>>,
    Extension(t): Extension<Tenant>,
    Path(id): Path<String>,
) -> Res {
    e2b.snapshot_delete(&t.0, &id).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `POST /sandboxes/{id}/fork` → 201 `SandboxForkResult[]`.
pub async fn fork(
    State(e2b): State<Arc<E2b>>,
    Extension(t): Extension<Tenant>,
    Path(id): Path<String>,
    raw: Bytes,
) -> Res {
    #[derive(serde::Deserialize, Default)]
    struct ForkBody {
        timeout: Option<u64>,
        count: Option<u32>,
    }
    let id = sandbox_id(&id)?;
    let req: ForkBody = body(&raw)?;
    let count = req.count.unwrap_or(1);
    if !(1..=20).contains(&count) {
        return Err(E2bApiError::bad_request("count: must be 1 to 20"));
    }
    let results = e2b.fork(&t.0, id, req.timeout, count).await?;
    let items: Vec<serde_json::Value> = results
        .into_iter()
        .map(|r| match r {
            Ok(s) => serde_json::json!({ "sandbox": SandboxOut::from(&s) }),
            Err(e) => {
                let e = E2bApiError::from(e);
                serde_json::json!({ "error": { "code": e.status.as_u16(), "message": e.message } })
            }
        })
        .collect();
    Ok((StatusCode::CREATED, Json(items)).into_response())
}
