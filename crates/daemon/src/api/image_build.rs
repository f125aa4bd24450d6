//! `POST /v1/images/build`: a Dockerfile build. The body is the context
//! tarball; the answer streams the build's NDJSON log (one
//! [`BuildEvent`] a line) once the Dockerfile passed its checks; errors
//! found before any work are ordinary JSON errors.

use super::{parse_query, ApiError, AppState, Workspace};
use crate::service::build::BuildRequest;
use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use sbx_api_types::{BuildEvent, NetworkMode, NetworkPolicy};
use serde::Deserialize;
use std::collections::BTreeMap;
use tokio_stream::StreamExt as _;

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct BuildQuery {
    name: Option<String>,
    tag: Option<String>,
    dockerfile: Option<String>,
    /// A JSON object of `ARG` values, e.g. `{"VERSION":"2"}`.
    build_args: Option<String>,
    /// `public` (default), `https-only` or `none`.
    network: Option<String>,
    vcpu: Option<u64>,
    memory_mb: Option<u64>,
    timeout_secs: Option<u64>,
}

fn parse(q: Option<&str>) -> Result<BuildRequest, ApiError> {
    let q: BuildQuery = parse_query(q)?;
    let build_args: BTreeMap<String, String> = match q.build_args.as_deref() {
        None | Some("") => BTreeMap::new(),
        Some(raw) => serde_json::from_str(raw).map_err(|e| {
            ApiError::new(
                sbx_api_types::ErrorCode::InvalidFieldFormat,
                format!("buildArgs: a JSON object of strings: {e}"),
            )
        })?,
    };
    let network = match q.network.as_deref() {
        None => None,
        Some(m) => match NetworkMode::parse(m) {
            Some(NetworkMode::Allowlist) | None => {
                return Err(ApiError::new(
                    sbx_api_types::ErrorCode::InvalidFieldFormat,
                    format!("network: {m:?} is not public, https-only or none"),
                ))
            }
            Some(mode) => Some(NetworkPolicy::mode(mode)),
        },
    };
    Ok(BuildRequest {
        name: q.name,
        tag: q.tag,
        dockerfile: q.dockerfile,
        build_args,
        network,
        vcpu: q.vcpu,
        memory_mb: q.memory_mb,
        timeout_secs: q.timeout_secs,
    })
}

/// `POST /v1/images/build?name=&tag=[&dockerfile=&buildArgs=&network=&vcpu=&memoryMb=&timeoutSecs=]`
pub async fn build(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    RawQuery(q): RawQuery,
    body: Body,
) -> Response {
    let started = async move {
        let req = parse(q.as_deref())?;
        let rx = svc.build_image(&ws.0, req, body.into_data_stream()).await?;
        Ok::<_, ApiError>(rx)
    }
    .await;
    let rx = match started {
        Ok(rx) => rx,
        Err(e) => {
            // Refused before the body was read to its end: hyper closes the
            // connection; say so, so that a client does not reuse it.
            let mut resp = e.into_response();
            resp.headers_mut()
                .insert("connection", HeaderValue::from_static("close"));
            return resp;
        }
    };
    let lines = tokio_stream::wrappers::ReceiverStream::new(rx).map(|item| {
        let event = match item {
            Ok(event) => event,
            Err(f) => {
                let message = f.error.to_string();
                let code = match f.exit_code {
                    Some(_) => "build_failed".to_string(),
                    None => ApiError::from(f.error).code.as_str().to_string(),
                };
                BuildEvent::Error {
                    code,
                    message,
                    line: f.line,
                    exit_code: f.exit_code,
                    output_tail: f.output_tail,
                }
            }
        };
        let mut line = serde_json::to_vec(&event).unwrap_or_default();
        line.push(b'\n');
        Ok::<_, std::convert::Infallible>(bytes::Bytes::from(line))
    });
    let mut resp = Response::new(Body::from_stream(lines));
    *resp.status_mut() = StatusCode::OK;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    resp
}
