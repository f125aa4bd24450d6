//! File transfer (streamed both ways) and the `/v1` filesystem calls.

use super::{agent_error, Result, Service, ServiceError};
use crate::runtime::{AgentCallError, AgentStream, StreamItem};
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use sbx_agent_proto::{
    direct_upload_trailer, AgentErrorCode, DirectDownloadHeader, DirectUploadResult, Event,
    FileStat, Reply, Request, AGENT_BINARY_PATH,
};
use sbx_api_types::validate;
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::ChildStdout;
use uuid::Uuid;

/// Largest upload frame sent to the agent.
const UPLOAD_FRAME_BYTES: usize = 1024 * 1024;
/// Pipe buffer of a direct upload's stdin or download's stdout.
const DIRECT_PIPE_BYTES: libc::c_int = 1024 * 1024;
/// Uploads larger than this take the direct path (`sbx-agent write-file`).
const DIRECT_UPLOAD_MIN_BYTES: usize = 2 * 1024 * 1024;

fn bad_body(e: impl std::fmt::Display) -> ServiceError {
    ServiceError::BadRequest(format!("reading the request body failed: {e}"))
}

/// Files larger than this are downloaded through `sbx-agent read-file`.
const DIRECT_DOWNLOAD_MIN_BYTES: u64 = 2 * 1024 * 1024;
/// Bytes read from a direct download's stdout per chunk.
const DIRECT_READ_BYTES: usize = 1024 * 1024;
/// Longest header line `read-file` may print (a stat and a path).
const DIRECT_HEADER_MAX_BYTES: u64 = 64 * 1024;

/// The bytes of a download; an `Err` item means it was cut short.
pub type DownloadBody = BoxStream<'static, std::io::Result<Bytes>>;

/// A download ready to stream: the file's metadata and exactly `stat.size` bytes.
pub struct Download {
    /// Metadata of the file being sent.
    pub stat: FileStat,
    /// The file's bytes.
    pub body: DownloadBody,
}

/// The file data of a framed `FileRead` stream, as a byte stream.
fn framed_body(stream: AgentStream) -> DownloadBody {
    futures::stream::unfold(Some(stream), |state| async move {
        let mut s = state?;
        loop {
            return match s.next().await {
                Some(StreamItem::Event(Event::FileData, bytes)) => {
                    Some((Ok(Bytes::from(bytes)), Some(s)))
                }
                Some(StreamItem::Event(..)) => continue,
                Some(StreamItem::End(..)) => None,
                // Headers are gone: a short body is the only way left to say it failed.
                Some(StreamItem::Failed(e)) => Some((Err(std::io::Error::other(e.message)), None)),
                None => Some((
                    Err(std::io::Error::other("sandbox connection closed")),
                    None,
                )),
            };
        }
    })
    .boxed()
}

/// The bytes after a `read-file` header: exactly `size` of them, or an error
/// item if the process ends early. The child lives as long as the stream.
fn direct_body(
    reader: BufReader<ChildStdout>,
    child: tokio::process::Child,
    size: u64,
) -> DownloadBody {
    futures::stream::unfold(Some((reader, child, size)), |state| async move {
        let (mut reader, mut child, left) = state?;
        if left == 0 {
            let _ = child.wait().await;
            return None;
        }
        let want = DIRECT_READ_BYTES.min(usize::try_from(left).unwrap_or(usize::MAX));
        let mut buf = vec![0u8; want];
        match reader.read(&mut buf).await {
            Ok(0) => Some((
                Err(std::io::Error::other(
                    "the file changed or the sandbox stopped while it was being sent",
                )),
                None,
            )),
            Ok(n) => {
                buf.truncate(n);
                Some((Ok(Bytes::from(buf)), Some((reader, child, left - n as u64))))
            }
            Err(e) => Some((Err(e), None)),
        }
    })
    .boxed()
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

/// A 1 MiB pipe: the process inside gVisor then moves up to 1 MiB per
/// system call instead of 64 KiB.
fn set_pipe_size(pipe: &impl std::os::fd::AsRawFd) {
    // SAFETY: fcntl on a pipe fd we own; failure only keeps the default size.
    unsafe { libc::fcntl(pipe.as_raw_fd(), libc::F_SETPIPE_SZ, DIRECT_PIPE_BYTES) };
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
        let mut body = body;
        // A body that outgrows DIRECT_UPLOAD_MIN_BYTES skips the agent
        // connection (its relay and framing halve large uploads); smaller
        // ones are sent as frames. Either way at most this prefix is held.
        let mut prefix: Vec<u8> = Vec::new();
        let mut ended = false;
        while prefix.len() < DIRECT_UPLOAD_MIN_BYTES {
            match body.next().await {
                Some(chunk) => prefix.extend_from_slice(&chunk.map_err(bad_body)?),
                None => {
                    ended = true;
                    break;
                }
            }
        }
        if prefix.len() as u64 > limit {
            return Err(ServiceError::FileTooLarge(limit));
        }
        if !ended {
            return self
                .upload_direct(id, path, mode, limit, prefix, body)
                .await;
        }
        let mut upload = conn
            .begin_upload(Request::FileWriteBegin {
                path: path.to_string(),
                mode,
                max_bytes: limit,
            })
            .await
            .map_err(|e| file_error(path, e, limit))?;
        // Frames of UPLOAD_FRAME_BYTES: every frame costs copies and system
        // calls inside gVisor; bytes are cheap.
        for frame in prefix.chunks(UPLOAD_FRAME_BYTES) {
            upload
                .send(frame.to_vec())
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

    /// The direct upload path: `runsc exec sbx-agent write-file` reads the
    /// body on its stdin, then the trailer that lets it commit (see
    /// `sbx_agent_proto::direct`). Any failure on this side kills it before
    /// the trailer, so the destination is never touched.
    async fn upload_direct<S, E>(
        &self,
        id: Uuid,
        path: &str,
        mode: u32,
        limit: u64,
        prefix: Vec<u8>,
        mut body: S,
    ) -> Result<u64>
    where
        S: Stream<Item = std::result::Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        let argv = vec![
            AGENT_BINARY_PATH.to_string(),
            "write-file".to_string(),
            path.to_string(),
            format!("{mode:o}"),
            limit.to_string(),
        ];
        let mut child = self
            .runtime
            .spawn_exec(id, argv)
            .map_err(|e| ServiceError::Unavailable(format!("starting the upload: {e}")))?;
        let (Some(mut stdin), Some(mut stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(ServiceError::Internal("upload process has no stdio".into()));
        };
        set_pipe_size(&stdin);
        let mut total = prefix.len() as u64;
        let sent: Result<bool> = async {
            if stdin.write_all(&prefix).await.is_err() {
                return Ok(false);
            }
            drop(prefix);
            while let Some(chunk) = body.next().await {
                let chunk = chunk.map_err(bad_body)?;
                total += chunk.len() as u64;
                if total > limit {
                    return Err(ServiceError::FileTooLarge(limit));
                }
                if stdin.write_all(&chunk).await.is_err() {
                    return Ok(false);
                }
            }
            let trailer = direct_upload_trailer(total);
            Ok(stdin.write_all(&trailer).await.is_ok() && stdin.shutdown().await.is_ok())
        }
        .await;
        // Our failure: kill the writer before it sees a trailer (dropping
        // `child` kills `runsc exec`; closing stdin ends the stream early).
        sent?;
        drop(stdin);
        let mut answer = Vec::new();
        stdout
            .read_to_end(&mut answer)
            .await
            .map_err(|e| ServiceError::Unavailable(format!("reading the upload's answer: {e}")))?;
        let _ = child.wait().await;
        let line = String::from_utf8_lossy(&answer);
        match serde_json::from_str::<DirectUploadResult>(line.trim()) {
            Ok(DirectUploadResult::Written { bytes_written }) => Ok(bytes_written),
            Ok(DirectUploadResult::Failed(err)) => {
                Err(file_error(path, AgentCallError::Agent(err), limit))
            }
            Err(_) => Err(ServiceError::Unavailable(
                "the upload process ended without an answer".into(),
            )),
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
            // Large files skip the agent connection (its relay and framing
            // halve the throughput); dropping the stream cancels the read.
            Some(StreamItem::Event(Event::FileMeta { stat }, _))
                if stat.size > DIRECT_DOWNLOAD_MIN_BYTES =>
            {
                drop(stream);
                self.download_direct(id, path, limit).await
            }
            Some(StreamItem::Event(Event::FileMeta { stat }, _)) => Ok(Download {
                stat,
                body: framed_body(stream),
            }),
            Some(StreamItem::Failed(err)) => {
                Err(file_error(path, AgentCallError::Agent(err), limit))
            }
            Some(other) => Err(ServiceError::Internal(format!(
                "unexpected agent event {other:?}"
            ))),
            None => Err(agent_error(AgentCallError::Closed)),
        }
    }

    /// The direct download path: `runsc exec sbx-agent read-file` prints a
    /// header line, then the file (see `sbx_agent_proto::direct`).
    async fn download_direct(&self, id: Uuid, path: &str, limit: u64) -> Result<Download> {
        let argv = vec![
            AGENT_BINARY_PATH.to_string(),
            "read-file".to_string(),
            path.to_string(),
            limit.to_string(),
        ];
        let mut child = self
            .runtime
            .spawn_exec(id, argv)
            .map_err(|e| ServiceError::Unavailable(format!("starting the download: {e}")))?;
        drop(child.stdin.take());
        let Some(stdout) = child.stdout.take() else {
            return Err(ServiceError::Internal(
                "download process has no stdout".into(),
            ));
        };
        set_pipe_size(&stdout);
        let mut reader = BufReader::with_capacity(DIRECT_READ_BYTES, stdout);
        let mut line = Vec::new();
        (&mut reader)
            .take(DIRECT_HEADER_MAX_BYTES)
            .read_until(b'\n', &mut line)
            .await
            .map_err(|e| ServiceError::Unavailable(format!("reading the download header: {e}")))?;
        match serde_json::from_slice::<DirectDownloadHeader>(&line) {
            Ok(DirectDownloadHeader::Ready { stat }) => {
                let size = stat.size;
                Ok(Download {
                    stat,
                    body: direct_body(reader, child, size),
                })
            }
            Ok(DirectDownloadHeader::Failed(err)) => {
                Err(file_error(path, AgentCallError::Agent(err), limit))
            }
            Err(_) => Err(ServiceError::Unavailable(
                "the download process ended without a header".into(),
            )),
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
