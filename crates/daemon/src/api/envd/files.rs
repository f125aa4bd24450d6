//! envd's plain routes (contract §3.5): `GET /files` (download), `POST
//! /files` (multipart, several files, or one raw body, gzip allowed) and
//! `GET /health`.

use super::{sandbox_of, PlainError};
use crate::service::envd::{Caller, Envd, EnvdError, FileAuth, FileOp};
use axum::body::{to_bytes, Body, Bytes};
use axum::extract::{FromRequest, Multipart, RawQuery, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use sbx_agent_proto::file_metadata::{self, FileMetadata};
use serde::Deserialize;
use std::io::Read;
use std::sync::Arc;

/// Headers carrying a file's metadata, lower-case as `HeaderMap` keeps them.
const METADATA_HEADER_PREFIX: &str = "x-metadata-";

/// Query of both `/files` routes.
#[derive(Debug, Default, Deserialize)]
struct FilesQuery {
    path: Option<String>,
    username: Option<String>,
    signature: Option<String>,
    signature_expiration: Option<i64>,
}

/// The authenticated caller of a `/files` request (its raw query, its method's operation).
pub(super) async fn caller_of(
    envd: &Envd,
    headers: &HeaderMap,
    raw: Option<&str>,
    op: FileOp,
) -> Result<Caller, PlainError> {
    caller(envd, headers, &query(raw)?, op).await
}

fn query(raw: Option<&str>) -> Result<FilesQuery, PlainError> {
    serde_urlencoded::from_str(raw.unwrap_or(""))
        .map_err(|e| EnvdError::InvalidArgument(format!("invalid query string: {e}")).into())
}

async fn caller(
    envd: &Envd,
    headers: &HeaderMap,
    q: &FilesQuery,
    op: FileOp,
) -> Result<Caller, PlainError> {
    let auth = FileAuth {
        token: headers.get("x-access-token").and_then(|v| v.to_str().ok()),
        signature: q.signature.as_deref(),
        expiration: q.signature_expiration,
        path: q.path.as_deref().unwrap_or(""),
        op,
        user: q.username.as_deref(),
    };
    Ok(envd.authorize_file(sandbox_of(headers), auth).await?)
}

/// `GET /health`: 204 while the sandbox runs, 502 "was not found" otherwise.
pub async fn health(
    State(envd): State<Arc<Envd>>,
    headers: HeaderMap,
) -> Result<StatusCode, PlainError> {
    envd.health(sandbox_of(&headers).unwrap_or_default())
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /files?path=`: the file's bytes.
pub async fn download(
    State(envd): State<Arc<Envd>>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Result<Response, PlainError> {
    let q = query(raw.as_deref())?;
    let caller = caller(&envd, &headers, &q, FileOp::Read).await?;
    let download = envd
        .download(&caller, q.path.as_deref().unwrap_or(""))
        .await?;
    let size = download.stat.size;
    let mut resp = (StatusCode::OK, Body::from_stream(download.body)).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    // A size of 0 may still hide content (procfs): streamed without a length then.
    if size > 0 {
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(size));
    }
    Ok(resp)
}

/// `POST /files`: writes every file of the request; answers their entries.
pub async fn upload(
    State(envd): State<Arc<Envd>>,
    RawQuery(raw): RawQuery,
    req: Request,
) -> Result<Response, PlainError> {
    let headers = req.headers().clone();
    let q = query(raw.as_deref())?;
    let caller = caller(&envd, &headers, &q, FileOp::Write).await?;
    let metadata = metadata_of(&headers)?;
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let written = if content_type.starts_with("multipart/form-data") {
        let multipart = Multipart::from_request(req, &())
            .await
            .map_err(|e| EnvdError::InvalidArgument(format!("invalid multipart body: {e}")))?;
        upload_parts(&envd, &caller, q.path.as_deref(), &metadata, multipart).await?
    } else {
        let path = q.path.as_deref().ok_or_else(|| {
            EnvdError::InvalidArgument(
                "the path query parameter is required for a raw upload".into(),
            )
        })?;
        let gzip = headers
            .get(header::CONTENT_ENCODING)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.trim().to_ascii_lowercase());
        let body = match gzip.as_deref() {
            None | Some("identity") | Some("") => req.into_body(),
            Some("gzip") => Body::from(gunzip(req.into_body(), envd.file_limit()).await?),
            Some(other) => {
                return Err(EnvdError::InvalidArgument(format!(
                    "unsupported Content-Encoding {other:?} (gzip or identity)"
                ))
                .into())
            }
        };
        vec![
            envd.upload(&caller, path, &metadata, body.into_data_stream())
                .await?,
        ]
    };
    let entries: Vec<super::wire::WrittenEntry> = written
        .into_iter()
        .map(|path| super::wire::WrittenEntry {
            name: path.rsplit('/').next().unwrap_or_default().to_string(),
            kind: "file",
            path,
            metadata: metadata.clone(),
        })
        .collect();
    Ok((StatusCode::OK, axum::Json(entries)).into_response())
}

/// Each part with a file name is a file; its name is the target path
/// unless the query names one (single-file writes), contract §3.5.
async fn upload_parts(
    envd: &Envd,
    caller: &Caller,
    query_path: Option<&str>,
    metadata: &FileMetadata,
    mut multipart: Multipart,
) -> Result<Vec<String>, PlainError> {
    let mut written: Vec<String> = Vec::new();
    loop {
        let field = multipart
            .next_field()
            .await
            .map_err(|e| EnvdError::InvalidArgument(format!("invalid multipart body: {e}")))?;
        let Some(field) = field else { break };
        let target = match (query_path, field.file_name()) {
            (Some(p), _) if written.is_empty() => p.to_string(),
            (Some(_), _) => {
                return Err(EnvdError::InvalidArgument(
                    "a path query parameter allows one file; send several without it".into(),
                )
                .into())
            }
            (None, Some(name)) if !name.is_empty() => name.to_string(),
            (None, _) => {
                return Err(EnvdError::InvalidArgument(
                    "every part needs a filename (the file's path)".into(),
                )
                .into())
            }
        };
        let resolved = caller.user.resolve(&target)?;
        if written.contains(&resolved) {
            return Err(EnvdError::InvalidArgument(format!(
                "path '{resolved}' is written twice in one request"
            ))
            .into());
        }
        let field = futures::stream::unfold(field, |mut f| async move {
            match f.chunk().await {
                Ok(Some(bytes)) => Some((
                    Ok::<Bytes, axum::extract::multipart::MultipartError>(bytes),
                    f,
                )),
                Ok(None) => None,
                Err(e) => Some((Err(e), f)),
            }
        });
        let field = std::pin::pin!(field);
        written.push(envd.upload(caller, &target, metadata, field).await?);
    }
    if written.is_empty() {
        return Err(EnvdError::InvalidArgument("the multipart body has no file".into()).into());
    }
    Ok(written)
}

/// The `X-Metadata-<key>` headers (contract §3.5): the same map for every
/// file of the request; keys are lower-cased (HTTP already does), bad keys
/// or values are `400`.
fn metadata_of(headers: &HeaderMap) -> Result<FileMetadata, PlainError> {
    let mut pairs = Vec::new();
    for (name, value) in headers {
        let Some(key) = name.as_str().strip_prefix(METADATA_HEADER_PREFIX) else {
            continue;
        };
        let value = value.to_str().map_err(|_| {
            EnvdError::InvalidArgument(format!(
                "invalid metadata value for key {key:?}: printable US-ASCII only"
            ))
        })?;
        pairs.push((key, value));
    }
    file_metadata::normalize(pairs).map_err(|e| EnvdError::InvalidArgument(e.to_string()).into())
}

/// A gzip body, decompressed; refused past `limit` bytes either way.
async fn gunzip(body: Body, limit: u64) -> Result<Vec<u8>, PlainError> {
    let too_large =
        || EnvdError::ResourceExhausted(format!("the file is over the {limit}-byte limit"));
    let compressed = to_bytes(body, limit as usize)
        .await
        .map_err(|_| too_large())?;
    let out = tokio::task::spawn_blocking(move || {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&compressed[..])
            .take(limit + 1)
            .read_to_end(&mut out)
            .map(|_| out)
    })
    .await
    .map_err(|e| EnvdError::Internal(format!("decompressing: {e}")))?
    .map_err(|e| EnvdError::InvalidArgument(format!("invalid gzip body: {e}")))?;
    if out.len() as u64 > limit {
        return Err(too_large().into());
    }
    Ok(out)
}
