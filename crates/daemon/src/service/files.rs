//! File transfer (streamed both ways) and the `/v1` filesystem calls.

use super::{agent_error, Result, Service, ServiceError};
use crate::runtime::{AgentCallError, AgentStream, StreamItem};
use bytes::Bytes;
use futures::{Stream, StreamExt};
use sbx_agent_proto::{AgentErrorCode, Event, FileStat, Reply, Request};
use sbx_api_types::validate;
use std::sync::Arc;
use uuid::Uuid;

/// Largest upload frame sent to the agent.
const UPLOAD_FRAME_BYTES: usize = 1024 * 1024;

/// A download ready to stream: the file's metadata and the rest of its bytes.
pub struct Download {
    /// Metadata of the file being sent.
    pub stat: FileStat,
    /// Remaining events (file data, then the end).
    pub stream: AgentStream,
}

fn file_error(path: &str, e: AgentCallError, limit: u64) -> ServiceError {
    match e {
        AgentCallError::Agent(err) => match err.code {
            AgentErrorCode::NotFound => ServiceError::FileNotFound(path.to_string()),
            AgentErrorCode::TooLarge => ServiceError::FileTooLarge(limit),
            // A failed filesystem call on the caller's path (mkdir over a file,
            // list of a file) is the caller's to fix, not a server fault.
            AgentErrorCode::Io => ServiceError::FileOperation(err.message),
            _ => agent_error(AgentCallError::Agent(err)),
        },
        other => agent_error(other),
    }
}

impl Service {
    /// `PUT /v2/sandboxes/{id}/files`: streams the body into the sandbox, replacing the file atomically.
    pub async fn upload<S, E>(
        self: &Arc<Self>,
        workspace: &str,
        id: Uuid,
        path: &str,
        mode: Option<&str>,
        body: S,
    ) -> Result<u64>
    where
        S: Stream<Item = std::result::Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        validate::file_path(path)?;
        let mode = validate::file_mode(mode)?;
        let limit = self.config.limits.file_bytes;
        let conn = self.agent(workspace, id).await?;
        let mut upload = conn
            .begin_upload(Request::FileWriteBegin {
                path: path.to_string(),
                mode,
                max_bytes: limit,
            })
            .await
            .map_err(|e| file_error(path, e, limit))?;
        let mut body = body;
        let mut total: u64 = 0;
        // Small body chunks are merged into frames of UPLOAD_FRAME_BYTES: every
        // frame costs copies and system calls inside gVisor; bytes are cheap.
        let mut frame = Vec::with_capacity(UPLOAD_FRAME_BYTES);
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| {
                ServiceError::BadRequest(format!("reading the request body failed: {e}"))
            })?;
            total += chunk.len() as u64;
            if total > limit {
                // Dropping `upload` aborts it; the agent removes its temp file.
                return Err(ServiceError::FileTooLarge(limit));
            }
            let mut rest = &chunk[..];
            while !rest.is_empty() {
                let take = rest.len().min(UPLOAD_FRAME_BYTES - frame.len());
                frame.extend_from_slice(&rest[..take]);
                rest = &rest[take..];
                if frame.len() == UPLOAD_FRAME_BYTES {
                    let full =
                        std::mem::replace(&mut frame, Vec::with_capacity(UPLOAD_FRAME_BYTES));
                    upload
                        .send(full)
                        .await
                        .map_err(|e| file_error(path, e, limit))?;
                }
            }
        }
        if !frame.is_empty() {
            upload
                .send(frame)
                .await
                .map_err(|e| file_error(path, e, limit))?;
        }
        match upload
            .finish()
            .await
            .map_err(|e| file_error(path, e, limit))?
        {
            (Reply::FileWritten { bytes_written }, _) => Ok(bytes_written),
            (other, _) => Err(ServiceError::Internal(format!(
                "unexpected agent reply {other:?}"
            ))),
        }
    }

    /// `GET /v2/sandboxes/{id}/files`: opens a download stream.
    pub async fn download(
        self: &Arc<Self>,
        workspace: &str,
        id: Uuid,
        path: &str,
    ) -> Result<Download> {
        validate::file_path(path)?;
        let limit = self.config.limits.file_bytes;
        let conn = self.agent(workspace, id).await?;
        let mut stream = conn
            .stream(Request::FileRead {
                path: path.to_string(),
                max_bytes: limit,
            })
            .await
            .map_err(|e| file_error(path, e, limit))?;
        match stream.next().await {
            Some(StreamItem::Event(Event::FileMeta { stat }, _)) => Ok(Download { stat, stream }),
            Some(StreamItem::Failed(err)) => {
                Err(file_error(path, AgentCallError::Agent(err), limit))
            }
            Some(other) => Err(ServiceError::Internal(format!(
                "unexpected agent event {other:?}"
            ))),
            None => Err(agent_error(AgentCallError::Closed)),
        }
    }

    /// `GET /v1/sandboxes/{id}/fs/stat`.
    pub async fn stat(self: &Arc<Self>, workspace: &str, id: Uuid, path: &str) -> Result<FileStat> {
        validate::file_path(path)?;
        match self
            .fs_call(workspace, id, path, Request::Stat { path: path.into() })
            .await?
        {
            Reply::Stat { stat } => Ok(stat),
            other => Err(ServiceError::Internal(format!(
                "unexpected agent reply {other:?}"
            ))),
        }
    }

    /// `GET /v1/sandboxes/{id}/fs/list`.
    pub async fn list_dir(
        self: &Arc<Self>,
        workspace: &str,
        id: Uuid,
        path: &str,
    ) -> Result<Vec<FileStat>> {
        validate::file_path(path)?;
        match self
            .fs_call(workspace, id, path, Request::ListDir { path: path.into() })
            .await?
        {
            Reply::Dir { entries } => Ok(entries),
            other => Err(ServiceError::Internal(format!(
                "unexpected agent reply {other:?}"
            ))),
        }
    }

    /// `POST /v1/sandboxes/{id}/fs/mkdir`.
    pub async fn mkdir(self: &Arc<Self>, workspace: &str, id: Uuid, path: &str) -> Result<()> {
        validate::file_path(path)?;
        self.fs_call(workspace, id, path, Request::Mkdir { path: path.into() })
            .await?;
        Ok(())
    }

    /// `POST /v1/sandboxes/{id}/fs/remove`.
    pub async fn remove(
        self: &Arc<Self>,
        workspace: &str,
        id: Uuid,
        path: &str,
        recursive: bool,
    ) -> Result<()> {
        validate::file_path(path)?;
        if path.trim_end_matches('/').is_empty() {
            return Err(ServiceError::BadRequest("refusing to remove /".into()));
        }
        self.fs_call(
            workspace,
            id,
            path,
            Request::Remove {
                path: path.into(),
                recursive,
            },
        )
        .await?;
        Ok(())
    }

    /// `POST /v1/sandboxes/{id}/fs/rename`.
    pub async fn rename(
        self: &Arc<Self>,
        workspace: &str,
        id: Uuid,
        from: &str,
        to: &str,
    ) -> Result<()> {
        validate::file_path(from)?;
        validate::file_path(to)?;
        self.fs_call(
            workspace,
            id,
            from,
            Request::Rename {
                from: from.into(),
                to: to.into(),
            },
        )
        .await?;
        Ok(())
    }

    async fn fs_call(
        self: &Arc<Self>,
        workspace: &str,
        id: Uuid,
        path: &str,
        request: Request,
    ) -> Result<Reply> {
        let conn = self.agent(workspace, id).await?;
        let limit = self.config.limits.file_bytes;
        conn.call(request)
            .await
            .map(|(reply, _)| reply)
            .map_err(|e| file_error(path, e, limit))
    }
}
