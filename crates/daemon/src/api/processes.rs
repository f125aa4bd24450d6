//! Managed process routes, including the NDJSON output stream.

use super::envelope::{self};
use super::sandboxes::ndjson;
use super::{parse_body, parse_id, parse_query, ApiError, AppState, Workspace};
use crate::runtime::StreamItem;
use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use sbx_agent_proto::{Event, Reply};
use sbx_api_types::validate::{self, MAX_TAIL_BYTES};
use sbx_api_types::{ErrorCode, ProcessOutput, ProcessStartRequest, SignalRequest};
use serde::Deserialize;
use serde_json::json;

type Ids = Path<(String, String)>;

fn ids(raw: (String, String)) -> Result<(uuid::Uuid, uuid::Uuid), ApiError> {
    Ok((
        parse_id(&raw.0, "sandboxId")?,
        parse_id(&raw.1, "processId")?,
    ))
}

/// `POST /v2/sandboxes/{id}/processes` (201 with a RUNNING process)
pub async fn start(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let id = parse_id(&id, "sandboxId")?;
    let req: ProcessStartRequest = parse_body(&body)?;
    let p = svc.process_start(&ws.0, id, req).await?;
    Ok(envelope::data(StatusCode::CREATED, envelope::process(&p)))
}

#[derive(Deserialize)]
struct ListQuery {
    limit: Option<String>,
    cursor: Option<String>,
}

/// `GET /v2/sandboxes/{id}/processes`
pub async fn list(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
    RawQuery(q): RawQuery,
) -> Result<Response, ApiError> {
    let id = parse_id(&id, "sandboxId")?;
    let q: ListQuery = parse_query(q.as_deref())?;
    let limit = validate::list_limit(q.limit.as_deref())?;
    let cursor = q.cursor.filter(|c| !c.is_empty());
    let (items, next) = svc
        .process_list(&ws.0, id, limit, cursor.as_deref())
        .await?;
    Ok(envelope::list(
        items.iter().map(envelope::process).collect(),
        limit,
        next,
    ))
}

/// `GET /v2/sandboxes/{id}/processes/{pid}`
pub async fn get(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(raw): Ids,
) -> Result<Response, ApiError> {
    let (id, pid) = ids(raw)?;
    let p = svc.process_get(&ws.0, id, pid).await?;
    Ok(envelope::data(StatusCode::OK, envelope::process(&p)))
}

/// `POST .../processes/{pid}/signals` (204)
pub async fn signal(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(raw): Ids,
    body: Bytes,
) -> Result<Response, ApiError> {
    let (id, pid) = ids(raw)?;
    let req: SignalRequest = parse_body(&body)?;
    svc.process_signal(&ws.0, id, pid, req).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Deserialize)]
struct WaitQuery {
    timeout: Option<String>,
}

/// `POST .../processes/{pid}/wait?timeout=` (long poll)
pub async fn wait(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(raw): Ids,
    RawQuery(q): RawQuery,
) -> Result<Response, ApiError> {
    let (id, pid) = ids(raw)?;
    let q: WaitQuery = parse_query(q.as_deref())?;
    let p = svc
        .process_wait(&ws.0, id, pid, q.timeout.as_deref())
        .await?;
    let mut view = serde_json::to_value(envelope::process(&p)).unwrap_or_default();
    if let Some(obj) = view.as_object_mut() {
        obj.remove("command");
    }
    Ok(envelope::data(StatusCode::OK, view))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct OutputQuery {
    tail_bytes: Option<String>,
    from_offset: Option<String>,
}

fn tail_bytes(q: &OutputQuery) -> Result<u64, ApiError> {
    match q.tail_bytes.as_deref() {
        None | Some("") => Ok(0),
        Some(v) => match v.parse::<u64>() {
            Ok(n) if n <= MAX_TAIL_BYTES => Ok(n),
            _ => Err(ApiError::new(
                ErrorCode::InvalidFieldFormat,
                "tailBytes: must be an integer from 0 to 524288",
            )),
        },
    }
}

/// `GET .../processes/{pid}/output?tailBytes=`
pub async fn output(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(raw): Ids,
    RawQuery(q): RawQuery,
) -> Result<Response, ApiError> {
    let (id, pid) = ids(raw)?;
    let q: OutputQuery = parse_query(q.as_deref())?;
    let out = svc.process_output(&ws.0, id, pid, tail_bytes(&q)?).await?;
    let chunks = out
        .chunks
        .iter()
        .map(|(m, b)| envelope::chunk(m, b))
        .collect();
    Ok(envelope::data(StatusCode::OK, ProcessOutput { chunks }))
}

/// `GET .../processes/{pid}/output/stream?tailBytes=[&fromOffset=]`: NDJSON.
///
/// `fromOffset` (an sbx extra) resumes a dropped stream: pass the `offset` plus
/// the decoded length of the last chunk received.
pub async fn stream(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(raw): Ids,
    RawQuery(q): RawQuery,
) -> Result<Response, ApiError> {
    let (id, pid) = ids(raw)?;
    let q: OutputQuery = parse_query(q.as_deref())?;
    let tail = tail_bytes(&q)?;
    let from_offset = match q.from_offset.as_deref() {
        None | Some("") => None,
        Some(v) => Some(v.parse::<u64>().map_err(|_| {
            ApiError::new(
                ErrorCode::InvalidFieldFormat,
                "fromOffset: must be a non-negative integer",
            )
        })?),
    };
    let mut agent_stream = svc
        .process_stream(&ws.0, id, pid, tail, from_offset)
        .await?;
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::convert::Infallible>>(16);
    tokio::spawn(async move {
        loop {
            let line = match agent_stream.next().await {
                Some(StreamItem::Event(Event::Chunk { chunk }, bytes)) => {
                    let mut frame =
                        serde_json::to_value(envelope::chunk(&chunk, &bytes)).unwrap_or_default();
                    frame["type"] = json!("log");
                    frame
                }
                Some(StreamItem::Event(..)) => continue,
                Some(StreamItem::End(Reply::StreamEnd { .. }, _)) | Some(StreamItem::End(..)) => {
                    break
                }
                Some(StreamItem::Failed(e)) => {
                    let code = match e.code {
                        sbx_agent_proto::AgentErrorCode::OutputNotRetained => {
                            "sandbox_process_output_not_retained"
                        }
                        sbx_agent_proto::AgentErrorCode::NotFound => "sandbox_process_not_found",
                        _ => "internal_error",
                    };
                    error_frame(code, &e.message)
                }
                None => error_frame(
                    "compute_unavailable",
                    "the connection to the sandbox closed",
                ),
            };
            let is_error = line["type"] == "error";
            let mut bytes = serde_json::to_vec(&line).unwrap_or_default();
            bytes.push(b'\n');
            // A closed receiver means the client went away: dropping the agent stream cancels it.
            if tx.send(Ok(Bytes::from(bytes))).await.is_err() || is_error {
                break;
            }
        }
    });
    Ok(ndjson(Body::from_stream(
        tokio_stream::wrappers::ReceiverStream::new(rx),
    )))
}

/// A terminal stream error frame (`error`, plus `errors` for older readers).
pub fn error_frame(code: &str, message: &str) -> serde_json::Value {
    json!({
        "type": "error",
        "error": { "code": code, "message": message },
        "errors": [{ "code": code, "message": message }],
    })
}
