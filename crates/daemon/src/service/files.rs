//! File transfer (streamed both ways) and the `/v1` filesystem calls.

use super::{agent_error, Result, Service, ServiceError};
use crate::runtime::{AgentCallError, AgentStream, StreamItem};
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use sbx_agent_proto::file_metadata::FileMetadata;
use sbx_agent_proto::{
    direct_upload_trailer, AgentErrorCode, DirectDownloadHeader, DirectUploadResult, Event,
    FileStat, Reply, Request, AGENT_BINARY_PATH,
};
use sbx_api_types::validate;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::time::Instant;
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

/// How long a killed transfer process gets to be reaped: a host process
/// that outlives SIGKILL this long is not worth holding the request for.
const REAP_WAIT: Duration = Duration::from_secs(5);

/// A transfer that got nothing from the sandbox for `idle` (the guest froze
/// `sbx-agent read-file`/`write-file`, or its agent went silent): the answer
/// of any agent call that timed out, a retryable 503.
fn stalled(idle: Duration) -> ServiceError {
    ServiceError::Unavailable(format!(
        "the sandbox's agent did not answer within {}s during the file transfer, \
         so it was stopped; retry",
        idle.as_secs()
    ))
}

/// [`stalled`] as a body error (the headers of a download are gone by then).
fn stalled_io(idle: Duration) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::TimedOut, stalled(idle).to_string())
}

/// Kills a transfer's `runsc exec` and reaps it, so no host process is
/// left behind by a transfer that was given up on.
async fn stop(child: &mut Child) {
    let _ = child.start_kill();
    let _ = tokio::time::timeout(REAP_WAIT, child.wait()).await;
}

/// Writes `bytes` to a direct upload's stdin, each pipe-full within `idle`.
/// `Ok(false)`: the process closed its stdin (its answer says why).
async fn write_within(stdin: &mut ChildStdin, bytes: &[u8], idle: Duration) -> Result<bool> {
    for piece in bytes.chunks(DIRECT_PIPE_BYTES as usize) {
        match tokio::time::timeout(idle, stdin.write_all(piece)).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return Ok(false),
            Err(_) => return Err(stalled(idle)),
        }
    }
    Ok(true)
}

/// The bytes of a download; an `Err` item means it was cut short.
pub type DownloadBody = BoxStream<'static, std::io::Result<Bytes>>;

/// A download ready to stream: the file's metadata and exactly `stat.size` bytes.
pub struct Download {
    /// Metadata of the file being sent.
    pub stat: FileStat,
    /// The file's bytes.
    pub body: DownloadBody,
}

/// The file data of a framed `FileRead` stream, as a byte stream. Each
/// chunk must come within `idle` of the consumer asking for it (other
/// events do not count as progress); dropping the stream cancels the read.
fn framed_body(stream: AgentStream, idle: Duration) -> DownloadBody {
    futures::stream::unfold(Some(stream), move |state| async move {
        let mut s = state?;
        let deadline = Instant::now() + idle;
        loop {
            let Ok(next) = tokio::time::timeout_at(deadline, s.next()).await else {
                return Some((Err(stalled_io(idle)), None));
            };
            return match next {
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
/// item if the process ends early or sends nothing for `idle` (then it is
/// killed). The child lives as long as the stream. Only time spent waiting
/// for the process counts: a slow API client does not trip `idle`.
fn direct_body(
    reader: BufReader<ChildStdout>,
    child: Child,
    size: u64,
    idle: Duration,
) -> DownloadBody {
    futures::stream::unfold(Some((reader, child, size)), move |state| async move {
        let (mut reader, mut child, left) = state?;
        if left == 0 {
            // A process frozen after its last byte must not hold the request open.
            if tokio::time::timeout(idle, child.wait()).await.is_err() {
                stop(&mut child).await;
            }
            return None;
        }
        let want = DIRECT_READ_BYTES.min(usize::try_from(left).unwrap_or(usize::MAX));
        let mut buf = vec![0u8; want];
        let Ok(read) = tokio::time::timeout(idle, reader.read(&mut buf)).await else {
            stop(&mut child).await;
            return Some((Err(stalled_io(idle)), None));
        };
        match read {
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

/// How an uploaded file is made, besides its bytes.
#[derive(Debug, Default, Clone, Copy)]
pub struct UploadOptions<'a> {
    /// Permission bits in octal (`None`: the default, 0644).
    pub mode: Option<&'a str>,
    /// Guest user who owns the file and the parents it creates (`None`: root).
    pub owner: Option<&'a str>,
    /// User metadata stored on the new file as `user.e2b.*` xattrs.
    pub metadata: Option<&'a FileMetadata>,
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
        let options = UploadOptions {
            mode,
            ..UploadOptions::default()
        };
        self.upload_as(workspace, id, path, options, body).await
    }

    /// [`Service::upload`] with an owner and metadata (envd's uploads).
    pub async fn upload_as<S, E>(
        self: &Arc<Self>,
        workspace: &str,
        id: Uuid,
        path: &str,
        options: UploadOptions<'_>,
        body: S,
    ) -> Result<u64>
    where
        S: Stream<Item = std::result::Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        validate::file_path(path)?;
        let mode = validate::file_mode(options.mode)?;
        let owner = options.owner;
        let no_metadata = FileMetadata::new();
        let metadata = options.metadata.unwrap_or(&no_metadata);
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
                .upload_direct(id, path, (mode, owner, metadata), limit, prefix, body)
                .await;
        }
        let mut upload = conn
            .begin_upload(Request::FileWriteBegin {
                path: path.to_string(),
                mode,
                max_bytes: limit,
                owner: owner.map(str::to_string),
                metadata: metadata.clone(),
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
        (mode, owner, metadata): (u32, Option<&str>, &FileMetadata),
        limit: u64,
        prefix: Vec<u8>,
        mut body: S,
    ) -> Result<u64>
    where
        S: Stream<Item = std::result::Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        let mut argv = vec![
            AGENT_BINARY_PATH.to_string(),
            "write-file".to_string(),
            path.to_string(),
            format!("{mode:o}"),
            limit.to_string(),
        ];
        argv.extend(owner.map(str::to_string));
        for (key, value) in metadata {
            argv.push("--meta".to_string());
            argv.push(format!("{key}={value}"));
        }
        let mut child = self
            .runtime
            .spawn_exec(id, argv)
            .map_err(|e| ServiceError::Unavailable(format!("starting the upload: {e}")))?;
        let (Some(mut stdin), Some(mut stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(ServiceError::Internal("upload process has no stdio".into()));
        };
        set_pipe_size(&stdin);
        let idle = self.config.limits.file_transfer_idle;
        let mut total = prefix.len() as u64;
        // Every write to the process has `idle` to go through; waiting for
        // the API client's next chunk does not count (the HTTP server bounds that).
        let sent: Result<bool> = async {
            if !write_within(&mut stdin, &prefix, idle).await? {
                return Ok(false);
            }
            drop(prefix);
            while let Some(chunk) = body.next().await {
                let chunk = chunk.map_err(bad_body)?;
                total += chunk.len() as u64;
                if total > limit {
                    return Err(ServiceError::FileTooLarge(limit));
                }
                if !write_within(&mut stdin, &chunk, idle).await? {
                    return Ok(false);
                }
            }
            let trailer = direct_upload_trailer(total);
            if !write_within(&mut stdin, &trailer, idle).await? {
                return Ok(false);
            }
            match tokio::time::timeout(idle, stdin.shutdown()).await {
                Ok(done) => Ok(done.is_ok()),
                Err(_) => Err(stalled(idle)),
            }
        }
        .await;
        // Our failure (or a frozen writer): kill the writer before it sees a
        // trailer, so the destination is never touched.
        if let Err(e) = sent {
            stop(&mut child).await;
            return Err(e);
        }
        drop(stdin);
        // The answer comes once the file is synced and renamed: one line.
        let mut answer = Vec::new();
        match tokio::time::timeout(idle, stdout.read_to_end(&mut answer)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                stop(&mut child).await;
                return Err(ServiceError::Unavailable(format!(
                    "reading the upload's answer: {e}"
                )));
            }
            Err(_) => {
                stop(&mut child).await;
                return Err(stalled(idle));
            }
        }
        if tokio::time::timeout(idle, child.wait()).await.is_err() {
            stop(&mut child).await;
        }
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
        let idle = self.config.limits.file_transfer_idle;
        let Ok(first) = tokio::time::timeout(idle, stream.next()).await else {
            // Dropping the stream cancels the read in the agent.
            return Err(stalled(idle));
        };
        match first {
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
                body: framed_body(stream, idle),
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
        let idle = self.config.limits.file_transfer_idle;
        let mut reader = BufReader::with_capacity(DIRECT_READ_BYTES, stdout);
        let mut line = Vec::new();
        let mut head = (&mut reader).take(DIRECT_HEADER_MAX_BYTES);
        let header = tokio::time::timeout(idle, head.read_until(b'\n', &mut line)).await;
        match header {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                stop(&mut child).await;
                return Err(ServiceError::Unavailable(format!(
                    "reading the download header: {e}"
                )));
            }
            Err(_) => {
                stop(&mut child).await;
                return Err(stalled(idle));
            }
        }
        match serde_json::from_slice::<DirectDownloadHeader>(&line) {
            Ok(DirectDownloadHeader::Ready { stat }) => {
                let size = stat.size;
                Ok(Download {
                    stat,
                    body: direct_body(reader, child, size, idle),
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
            .fs_call(
                workspace,
                id,
                path,
                Request::ListDir {
                    path: path.into(),
                    depth: 1,
                },
            )
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
        self.fs_call(
            workspace,
            id,
            path,
            Request::Mkdir {
                path: path.into(),
                owner: None,
            },
        )
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
                parents_owner: None,
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
