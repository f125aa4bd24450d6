//! Rust client of the sbx HTTP API (`sbxd`).
//!
//! Speaks the `/v2` contract of `inngest-sandboxes-v2.md` plus the sbx `/v1` extras
//! (filesystem calls, secrets, the Connect API in [`connect`]). Every method maps to one HTTP request; nothing is
//! retried or polled behind the caller's back.
//!
//! ```no_run
//! # async fn demo() -> Result<(), sbx_client::ClientError> {
//! use sbx_client::{api::ExecRequest, Client};
//! let client = Client::new("http://127.0.0.1:8731", None)?;
//! let (sandboxes, _page) = client.list_sandboxes(None, None).await?;
//! let out = client
//!     .exec(
//!         sandboxes[0].id,
//!         &ExecRequest {
//!             command: Some(vec!["uname".into(), "-a".into()]),
//!             ..Default::default()
//!         },
//!     )
//!     .await?;
//! println!("{}", String::from_utf8_lossy(&out.stdout));
//! # Ok(()) }
//! ```

mod auth;
pub mod connect;
mod error;
mod ndjson;
mod types;

pub use auth::{authorization_header, hashed_signing_key};
pub use error::ClientError;
pub use ndjson::{decode_stream, parse_frame, ChunkStream, LineDecoder};
/// The wire types, re-exported.
pub use sbx_api_types as api;
pub use types::{Chunk, ExecOutput, SecretInfo, Snapshot, SnapshotStatus, WaitResult};

use bytes::{Bytes, BytesMut};
use futures::stream::{BoxStream, Stream, StreamExt};
use reqwest::header::{HeaderValue, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE};
use reqwest::{Method, RequestBuilder, Response, Url};
use sbx_api_types::{
    CreateSandboxRequest, CreateSandboxV1Request, ExecRequest, FileInfo, Page, Process,
    ProcessStartRequest, Sandbox, SandboxDetail, SignalRequest,
};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use std::path::Path;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use types::WireChunk;
use uuid::Uuid;

/// A stream of raw bytes (file downloads).
pub type ByteStream = BoxStream<'static, Result<Bytes, ClientError>>;

/// Read size when streaming an upload body.
const UPLOAD_CHUNK: usize = 64 * 1024;

/// Async client of one sbxd. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: Url,
    auth: Option<HeaderValue>,
    env: Option<HeaderValue>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base.as_str())
            .field("auth", &self.auth.is_some())
            .finish()
    }
}

/// Success body `{data, metadata, page?}`, read leniently.
#[derive(Deserialize)]
struct Env<T> {
    data: Option<T>,
    page: Option<Page>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireExec {
    stdout: Option<String>,
    stderr: Option<String>,
    encoding: Option<String>,
    exit_code: i32,
}

#[derive(Deserialize, Default)]
struct WireOutput {
    #[serde(default)]
    chunks: Vec<WireChunk>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireUpload {
    #[serde(default)]
    bytes_written: u64,
}

fn request_id(resp: &Response) -> Option<String> {
    resp.headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

fn decode_err(what: &str, e: impl std::fmt::Display, rid: &Option<String>) -> ClientError {
    match rid {
        Some(id) => ClientError::Decode(format!("{what}: {e} (request {id})")),
        None => ClientError::Decode(format!("{what}: {e}")),
    }
}

fn ms(d: Duration) -> String {
    format!("{}ms", d.as_millis().max(1))
}

/// Streams an `AsyncRead` without holding more than one read buffer.
fn reader_stream<R>(reader: R) -> impl Stream<Item = std::io::Result<Bytes>> + Send + 'static
where
    R: AsyncRead + Send + 'static,
{
    futures::stream::unfold(Some(Box::pin(reader)), |state| async move {
        let mut reader = state?;
        let mut buf = BytesMut::with_capacity(UPLOAD_CHUNK);
        match reader.read_buf(&mut buf).await {
            Ok(0) => None,
            Ok(_) => Some((Ok(buf.freeze()), Some(reader))),
            Err(e) => Some((Err(e), None)),
        }
    })
}

impl Client {
    /// A client for `base_url` (e.g. `http://127.0.0.1:8731`). With a signing key, every
    /// request carries `Authorization: Bearer <hashed key>` exactly as the inngest SDK sends it.
    pub fn new(base_url: &str, signing_key: Option<&str>) -> Result<Client, ClientError> {
        let http = reqwest::Client::builder()
            .user_agent(concat!("sbx-client/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(ClientError::Transport)?;
        Client::with_http(http, base_url, signing_key)
    }

    /// Like [`Client::new`] with a caller-configured `reqwest::Client`.
    pub fn with_http(
        http: reqwest::Client,
        base_url: &str,
        signing_key: Option<&str>,
    ) -> Result<Client, ClientError> {
        let base = Url::parse(base_url.trim())
            .map_err(|e| ClientError::Invalid(format!("base URL {base_url:?}: {e}")))?;
        if !matches!(base.scheme(), "http" | "https") || base.cannot_be_a_base() {
            return Err(ClientError::Invalid(format!(
                "base URL {base_url:?}: must be an http:// or https:// URL"
            )));
        }
        let auth = match signing_key.and_then(authorization_header) {
            Some(v) => Some(HeaderValue::from_str(&v).map_err(|_| {
                ClientError::Invalid("signing key: not a valid header value".into())
            })?),
            None => None,
        };
        Ok(Client {
            http,
            base,
            auth,
            env: None,
        })
    }

    /// The same client working in environment `env` (sent as `x-inngest-env`, as the SDK does).
    pub fn with_env(mut self, env: &str) -> Result<Client, ClientError> {
        let env = env.trim();
        self.env = if env.is_empty() {
            None
        } else {
            Some(HeaderValue::from_str(env).map_err(|_| {
                ClientError::Invalid(format!("environment {env:?}: not a valid header value"))
            })?)
        };
        Ok(self)
    }

    /// The base URL.
    pub fn base_url(&self) -> &Url {
        &self.base
    }

    fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        url
    }

    /// A request with the JSON content type (sent on every request, as the SDK does) and auth.
    fn request(&self, method: Method, segments: &[&str]) -> RequestBuilder {
        self.request_typed(method, segments, "application/json")
    }

    fn request_typed(
        &self,
        method: Method,
        segments: &[&str],
        content_type: &'static str,
    ) -> RequestBuilder {
        let rb = self
            .http
            .request(method, self.url(segments))
            .header(CONTENT_TYPE, content_type);
        let rb = match &self.env {
            Some(v) => rb.header("x-inngest-env", v.clone()),
            None => rb,
        };
        match &self.auth {
            Some(v) => rb.header(AUTHORIZATION, v.clone()),
            None => rb,
        }
    }

    /// Sends; any non-2xx status becomes [`ClientError::Api`].
    async fn send(&self, rb: RequestBuilder) -> Result<Response, ClientError> {
        let resp = rb.send().await.map_err(ClientError::Transport)?;
        if resp.status().is_success() {
            return Ok(resp);
        }
        let status = resp.status().as_u16();
        let rid = request_id(&resp);
        let body = resp.bytes().await.unwrap_or_default();
        Err(ClientError::from_response_parts(status, &body, rid))
    }

    async fn envelope<T: DeserializeOwned>(resp: Response) -> Result<Env<T>, ClientError> {
        let rid = request_id(&resp);
        let body = resp.bytes().await.map_err(ClientError::Transport)?;
        serde_json::from_slice(&body).map_err(|e| decode_err("response body", e, &rid))
    }

    async fn data<T: DeserializeOwned>(resp: Response) -> Result<T, ClientError> {
        let rid = request_id(&resp);
        Self::envelope(resp)
            .await?
            .data
            .ok_or_else(|| decode_err("response body", "no data", &rid))
    }

    /// `data` when the response has a body; `None` for 204 or an empty body.
    async fn optional_data<T: DeserializeOwned>(resp: Response) -> Result<Option<T>, ClientError> {
        let rid = request_id(&resp);
        let body = resp.bytes().await.map_err(ClientError::Transport)?;
        if body.trim_ascii().is_empty() {
            return Ok(None);
        }
        let env: Env<T> =
            serde_json::from_slice(&body).map_err(|e| decode_err("response body", e, &rid))?;
        Ok(env.data)
    }

    async fn list<T: DeserializeOwned>(resp: Response) -> Result<(Vec<T>, Page), ClientError> {
        let rid = request_id(&resp);
        let env: Env<Vec<T>> = Self::envelope(resp).await?;
        let page = env
            .page
            .ok_or_else(|| decode_err("list response", "no page", &rid))?;
        Ok((env.data.unwrap_or_default(), page))
    }

    fn list_query(rb: RequestBuilder, limit: Option<u32>, cursor: Option<&str>) -> RequestBuilder {
        let mut q: Vec<(&str, String)> = Vec::new();
        if let Some(l) = limit {
            q.push(("limit", l.to_string()));
        }
        if let Some(c) = cursor.filter(|c| !c.is_empty()) {
            q.push(("cursor", c.to_string()));
        }
        if q.is_empty() {
            rb
        } else {
            rb.query(&q)
        }
    }

    fn chunk_stream(resp: Response) -> ChunkStream {
        let status = resp.status().as_u16();
        let rid = request_id(&resp);
        let body = resp
            .bytes_stream()
            .map(|r| r.map_err(ClientError::Transport))
            .boxed();
        decode_stream(body, status, rid)
    }

    /// `GET /healthz`.
    pub async fn health(&self) -> Result<(), ClientError> {
        self.send(self.request(Method::GET, &["healthz"]))
            .await
            .map(drop)
    }

    // ---- sandboxes -------------------------------------------------------------------

    /// `POST /v2/sandboxes`: a fresh sandbox, or a clone when `snapshot_id` is set.
    /// Idempotent by active name; the returned sandbox may still be STARTING.
    pub async fn create_sandbox(&self, req: &CreateSandboxRequest) -> Result<Sandbox, ClientError> {
        let resp = self
            .send(self.request(Method::POST, &["v2", "sandboxes"]).json(req))
            .await?;
        Self::data(resp).await
    }

    /// `POST /v1/sandboxes`: like [`Client::create_sandbox`] plus an egress policy
    /// (`network`; absent means the server's default). Answers like v2.
    pub async fn create_sandbox_v1(
        &self,
        req: &CreateSandboxV1Request,
    ) -> Result<Sandbox, ClientError> {
        let resp = self
            .send(self.request(Method::POST, &["v1", "sandboxes"]).json(req))
            .await?;
        Self::data(resp).await
    }

    /// `GET /v1/sandboxes/{id}`: the v2 resource plus sbx extras (environment, secret
    /// names, runtime used, network policy and connection counters).
    pub async fn sandbox_detail(&self, id: Uuid) -> Result<SandboxDetail, ClientError> {
        let resp = self
            .send(self.request(Method::GET, &["v1", "sandboxes", &id.to_string()]))
            .await?;
        Self::data(resp).await
    }

    /// `GET /v2/sandboxes/{id}`.
    pub async fn get_sandbox(&self, id: Uuid) -> Result<Sandbox, ClientError> {
        let resp = self
            .send(self.request(Method::GET, &["v2", "sandboxes", &id.to_string()]))
            .await?;
        Self::data(resp).await
    }

    /// `GET /v2/sandboxes?limit&cursor`: one page, newest first.
    pub async fn list_sandboxes(
        &self,
        limit: Option<u32>,
        cursor: Option<&str>,
    ) -> Result<(Vec<Sandbox>, Page), ClientError> {
        let rb = Self::list_query(
            self.request(Method::GET, &["v2", "sandboxes"]),
            limit,
            cursor,
        );
        Self::list(self.send(rb).await?).await
    }

    /// Every sandbox, following cursors.
    pub async fn list_all_sandboxes(&self) -> Result<Vec<Sandbox>, ClientError> {
        let mut all = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let (items, page) = self.list_sandboxes(Some(250), cursor.as_deref()).await?;
            all.extend(items);
            match page.cursor.filter(|c| page.has_more && !c.is_empty()) {
                Some(c) if Some(&c) != cursor.as_ref() => cursor = Some(c),
                _ => return Ok(all),
            }
        }
    }

    /// `DELETE /v2/sandboxes/{id}`: `Some` (TERMINATING) on 202, `None` once TERMINATED (204).
    pub async fn destroy_sandbox(&self, id: Uuid) -> Result<Option<Sandbox>, ClientError> {
        let resp = self
            .send(self.request(Method::DELETE, &["v2", "sandboxes", &id.to_string()]))
            .await?;
        Self::optional_data(resp).await
    }

    /// `POST /v2/sandboxes/{id}/pause` (no body). The sandbox may still be PAUSING.
    pub async fn pause(&self, id: Uuid) -> Result<Option<Sandbox>, ClientError> {
        let resp = self
            .send(self.request(Method::POST, &["v2", "sandboxes", &id.to_string(), "pause"]))
            .await?;
        Self::optional_data(resp).await
    }

    /// `POST /v2/sandboxes/{id}/resume` (no body). The sandbox may still be RESUMING.
    pub async fn resume(&self, id: Uuid) -> Result<Option<Sandbox>, ClientError> {
        let resp = self
            .send(self.request(
                Method::POST,
                &["v2", "sandboxes", &id.to_string(), "resume"],
            ))
            .await?;
        Self::optional_data(resp).await
    }

    /// `POST /v2/sandboxes/{id}/exec`: runs a command to completion, output decoded.
    /// A non-zero exit is a success here; look at `exit_code`.
    pub async fn exec(&self, id: Uuid, req: &ExecRequest) -> Result<ExecOutput, ClientError> {
        let resp = self
            .send(
                self.request(Method::POST, &["v2", "sandboxes", &id.to_string(), "exec"])
                    .json(req),
            )
            .await?;
        let w: WireExec = Self::data(resp).await?;
        if let Some(enc) = w.encoding.as_deref().filter(|e| *e != "base64") {
            return Err(ClientError::Decode(format!(
                "unsupported exec encoding {enc:?}"
            )));
        }
        Ok(ExecOutput {
            stdout: types::decode_b64(w.stdout.as_deref().unwrap_or(""), "stdout")?,
            stderr: types::decode_b64(w.stderr.as_deref().unwrap_or(""), "stderr")?,
            exit_code: w.exit_code,
        })
    }

    /// `GET /v2/sandboxes/{id}/logs?follow=`: the console log as a chunk stream.
    pub async fn logs(&self, id: Uuid, follow: bool) -> Result<ChunkStream, ClientError> {
        let rb = self
            .request(Method::GET, &["v2", "sandboxes", &id.to_string(), "logs"])
            .query(&[("follow", if follow { "true" } else { "false" })]);
        Ok(Self::chunk_stream(self.send(rb).await?))
    }

    // ---- processes -------------------------------------------------------------------

    /// `POST /v2/sandboxes/{id}/processes`: a background process, RUNNING with a pid.
    pub async fn process_start(
        &self,
        id: Uuid,
        req: &ProcessStartRequest,
    ) -> Result<Process, ClientError> {
        let resp = self
            .send(
                self.request(
                    Method::POST,
                    &["v2", "sandboxes", &id.to_string(), "processes"],
                )
                .json(req),
            )
            .await?;
        Self::data(resp).await
    }

    /// `GET /v2/sandboxes/{id}/processes?limit&cursor`.
    pub async fn process_list(
        &self,
        id: Uuid,
        limit: Option<u32>,
        cursor: Option<&str>,
    ) -> Result<(Vec<Process>, Page), ClientError> {
        let rb = Self::list_query(
            self.request(
                Method::GET,
                &["v2", "sandboxes", &id.to_string(), "processes"],
            ),
            limit,
            cursor,
        );
        Self::list(self.send(rb).await?).await
    }

    /// Every process of a sandbox, following cursors.
    pub async fn process_list_all(&self, id: Uuid) -> Result<Vec<Process>, ClientError> {
        let mut all = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let (items, page) = self.process_list(id, Some(250), cursor.as_deref()).await?;
            all.extend(items);
            match page.cursor.filter(|c| page.has_more && !c.is_empty()) {
                Some(c) if Some(&c) != cursor.as_ref() => cursor = Some(c),
                _ => return Ok(all),
            }
        }
    }

    fn process_path<'a>(sid: &'a str, pid: &'a str, tail: &'a [&'a str]) -> Vec<&'a str> {
        let mut p = vec!["v2", "sandboxes", sid, "processes", pid];
        p.extend_from_slice(tail);
        p
    }

    /// `GET /v2/sandboxes/{id}/processes/{pid}`.
    pub async fn process_get(&self, id: Uuid, pid: Uuid) -> Result<Process, ClientError> {
        let (s, p) = (id.to_string(), pid.to_string());
        let resp = self
            .send(self.request(Method::GET, &Self::process_path(&s, &p, &[])))
            .await?;
        Self::data(resp).await
    }

    /// `POST .../processes/{pid}/signals` (204).
    pub async fn process_signal(
        &self,
        id: Uuid,
        pid: Uuid,
        req: &SignalRequest,
    ) -> Result<(), ClientError> {
        let (s, p) = (id.to_string(), pid.to_string());
        self.send(
            self.request(Method::POST, &Self::process_path(&s, &p, &["signals"]))
                .json(req),
        )
        .await
        .map(drop)
    }

    /// `POST .../processes/{pid}/wait?timeout=<n>ms`: a long poll for a terminal state.
    /// Fails with `sandbox_process_wait_timed_out` when the timeout (server default 30 s) passes.
    pub async fn process_wait(
        &self,
        id: Uuid,
        pid: Uuid,
        timeout: Option<Duration>,
    ) -> Result<WaitResult, ClientError> {
        let (s, p) = (id.to_string(), pid.to_string());
        let mut rb = self.request(Method::POST, &Self::process_path(&s, &p, &["wait"]));
        if let Some(t) = timeout {
            rb = rb.query(&[("timeout", ms(t))]);
        }
        Self::data(self.send(rb).await?).await
    }

    /// `GET .../processes/{pid}/output?tailBytes=`: retained output (0 means all), decoded.
    pub async fn process_output(
        &self,
        id: Uuid,
        pid: Uuid,
        tail_bytes: u64,
    ) -> Result<Vec<Chunk>, ClientError> {
        let (s, p) = (id.to_string(), pid.to_string());
        let rb = self
            .request(Method::GET, &Self::process_path(&s, &p, &["output"]))
            .query(&[("tailBytes", tail_bytes.to_string())]);
        let resp = self.send(rb).await?;
        let out: Option<WireOutput> = Self::envelope(resp).await?.data;
        out.unwrap_or_default()
            .chunks
            .into_iter()
            .map(WireChunk::decode)
            .collect()
    }

    /// `GET .../processes/{pid}/output/stream?tailBytes=[&fromOffset=]`: the retained tail,
    /// then live output, until the process ends. `from_offset` (an sbx extra) resumes a
    /// dropped stream: pass [`Chunk::end_offset`] of the last chunk received.
    pub async fn process_stream(
        &self,
        id: Uuid,
        pid: Uuid,
        tail_bytes: u64,
        from_offset: Option<u64>,
    ) -> Result<ChunkStream, ClientError> {
        let (s, p) = (id.to_string(), pid.to_string());
        let mut q = vec![("tailBytes", tail_bytes.to_string())];
        if let Some(o) = from_offset {
            q.push(("fromOffset", o.to_string()));
        }
        let rb = self
            .request(
                Method::GET,
                &Self::process_path(&s, &p, &["output", "stream"]),
            )
            .query(&q);
        Ok(Self::chunk_stream(self.send(rb).await?))
    }

    // ---- files -----------------------------------------------------------------------

    /// `PUT /v2/sandboxes/{id}/files?path&mode`: streams `body` (never held whole in
    /// memory) into `path`, replacing it atomically. Returns the bytes written.
    pub async fn upload<R>(
        &self,
        id: Uuid,
        path: &str,
        mode: Option<u32>,
        body: R,
    ) -> Result<u64, ClientError>
    where
        R: AsyncRead + Send + 'static,
    {
        let mut q = vec![("path", path.to_string())];
        if let Some(m) = mode {
            q.push(("mode", format!("{m:04o}")));
        }
        let rb = self
            .request_typed(
                Method::PUT,
                &["v2", "sandboxes", &id.to_string(), "files"],
                "application/octet-stream",
            )
            .query(&q)
            .body(reqwest::Body::wrap_stream(reader_stream(body)));
        let w: WireUpload = Self::data(self.send(rb).await?).await?;
        Ok(w.bytes_written)
    }

    /// [`Client::upload`] from a local file.
    pub async fn upload_file(
        &self,
        id: Uuid,
        path: &str,
        mode: Option<u32>,
        local: impl AsRef<Path>,
    ) -> Result<u64, ClientError> {
        let file = tokio::fs::File::open(local.as_ref()).await?;
        self.upload(id, path, mode, file).await
    }

    /// `GET /v2/sandboxes/{id}/files?path`: the file's bytes as a stream, plus its length
    /// when the server sent one. A stream that ends early is an error of the stream.
    pub async fn download(
        &self,
        id: Uuid,
        path: &str,
    ) -> Result<(ByteStream, Option<u64>), ClientError> {
        let rb = self
            .request(Method::GET, &["v2", "sandboxes", &id.to_string(), "files"])
            .query(&[("path", path)]);
        let resp = self.send(rb).await?;
        let len = resp
            .headers()
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let stream = resp
            .bytes_stream()
            .map(|r| r.map_err(ClientError::Transport))
            .boxed();
        Ok((stream, len))
    }

    /// [`Client::download`] into a writer; checks the length and flushes. Returns the bytes copied.
    pub async fn download_to<W>(
        &self,
        id: Uuid,
        path: &str,
        out: &mut W,
    ) -> Result<u64, ClientError>
    where
        W: AsyncWrite + Unpin + ?Sized,
    {
        let (mut stream, len) = self.download(id, path).await?;
        let mut copied = 0u64;
        while let Some(bytes) = stream.next().await {
            let bytes = bytes?;
            out.write_all(&bytes).await?;
            copied += bytes.len() as u64;
        }
        out.flush().await?;
        if let Some(expected) = len.filter(|l| *l != copied) {
            return Err(ClientError::Io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("download ended after {copied} of {expected} bytes"),
            )));
        }
        Ok(copied)
    }

    fn fs_request(&self, method: Method, id: Uuid, op: &str) -> RequestBuilder {
        self.request(method, &["v1", "sandboxes", &id.to_string(), "fs", op])
    }

    /// `GET /v1/sandboxes/{id}/fs/stat?path`.
    pub async fn stat(&self, id: Uuid, path: &str) -> Result<FileInfo, ClientError> {
        let rb = self
            .fs_request(Method::GET, id, "stat")
            .query(&[("path", path)]);
        Self::data(self.send(rb).await?).await
    }

    /// `GET /v1/sandboxes/{id}/fs/list?path`: the entries of a directory.
    pub async fn list_dir(&self, id: Uuid, path: &str) -> Result<Vec<FileInfo>, ClientError> {
        let rb = self
            .fs_request(Method::GET, id, "list")
            .query(&[("path", path)]);
        let env: Env<Vec<FileInfo>> = Self::envelope(self.send(rb).await?).await?;
        Ok(env.data.unwrap_or_default())
    }

    /// `POST /v1/sandboxes/{id}/fs/mkdir?path` (with parents).
    pub async fn mkdir(&self, id: Uuid, path: &str) -> Result<(), ClientError> {
        let rb = self
            .fs_request(Method::POST, id, "mkdir")
            .query(&[("path", path)]);
        self.send(rb).await.map(drop)
    }

    /// `POST /v1/sandboxes/{id}/fs/remove?path&recursive`.
    pub async fn remove(&self, id: Uuid, path: &str, recursive: bool) -> Result<(), ClientError> {
        let rb = self.fs_request(Method::POST, id, "remove").query(&[
            ("path", path),
            ("recursive", if recursive { "true" } else { "false" }),
        ]);
        self.send(rb).await.map(drop)
    }

    /// `POST /v1/sandboxes/{id}/fs/rename` with `{from, to}`.
    pub async fn rename(&self, id: Uuid, from: &str, to: &str) -> Result<(), ClientError> {
        let rb = self
            .fs_request(Method::POST, id, "rename")
            .json(&serde_json::json!({ "from": from, "to": to }));
        self.send(rb).await.map(drop)
    }

    // ---- snapshots -------------------------------------------------------------------

    /// `POST /v2/sandboxes/{id}/snapshots`: `{name}` when named, no body otherwise.
    /// The snapshot may still be CREATING.
    pub async fn snapshot_create(
        &self,
        id: Uuid,
        name: Option<&str>,
    ) -> Result<Snapshot, ClientError> {
        let mut rb = self.request(
            Method::POST,
            &["v2", "sandboxes", &id.to_string(), "snapshots"],
        );
        if let Some(n) = name {
            rb = rb.json(&serde_json::json!({ "name": n }));
        }
        Self::data(self.send(rb).await?).await
    }

    /// `GET /v2/snapshots?limit&cursor&name`: one page, newest first; `name` filters exactly.
    pub async fn snapshot_list(
        &self,
        limit: Option<u32>,
        cursor: Option<&str>,
        name: Option<&str>,
    ) -> Result<(Vec<Snapshot>, Page), ClientError> {
        let mut rb = Self::list_query(
            self.request(Method::GET, &["v2", "snapshots"]),
            limit,
            cursor,
        );
        if let Some(n) = name {
            rb = rb.query(&[("name", n)]);
        }
        Self::list(self.send(rb).await?).await
    }

    /// Every snapshot (optionally with a name), following cursors.
    pub async fn snapshot_list_all(
        &self,
        name: Option<&str>,
    ) -> Result<Vec<Snapshot>, ClientError> {
        let mut all = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let (items, page) = self
                .snapshot_list(Some(250), cursor.as_deref(), name)
                .await?;
            all.extend(items);
            match page.cursor.filter(|c| page.has_more && !c.is_empty()) {
                Some(c) if Some(&c) != cursor.as_ref() => cursor = Some(c),
                _ => return Ok(all),
            }
        }
    }

    /// `GET /v2/snapshots/{id}`.
    pub async fn snapshot_get(&self, id: Uuid) -> Result<Snapshot, ClientError> {
        let resp = self
            .send(self.request(Method::GET, &["v2", "snapshots", &id.to_string()]))
            .await?;
        Self::data(resp).await
    }

    /// `DELETE /v2/snapshots/{id}` (204; idempotent).
    pub async fn snapshot_delete(&self, id: Uuid) -> Result<(), ClientError> {
        self.send(self.request(Method::DELETE, &["v2", "snapshots", &id.to_string()]))
            .await
            .map(drop)
    }

    // ---- secrets ---------------------------------------------------------------------

    /// `PUT /v1/secrets/{name}` with `{"value": ...}`: creates or replaces a secret.
    /// Returns the secret's names and times when the server sends them (never the value).
    pub async fn secret_set(
        &self,
        name: &str,
        value: &str,
    ) -> Result<Option<SecretInfo>, ClientError> {
        let rb = self
            .request(Method::PUT, &["v1", "secrets", name])
            .json(&serde_json::json!({ "value": value }));
        Self::optional_data(self.send(rb).await?).await
    }

    /// `GET /v1/secrets`: names and times (values are never returned).
    pub async fn secret_list(&self) -> Result<Vec<SecretInfo>, ClientError> {
        let resp = self
            .send(self.request(Method::GET, &["v1", "secrets"]))
            .await?;
        let env: Env<Vec<SecretInfo>> = Self::envelope(resp).await?;
        Ok(env.data.unwrap_or_default())
    }

    /// `DELETE /v1/secrets/{name}`.
    pub async fn secret_delete(&self, name: &str) -> Result<(), ClientError> {
        self.send(self.request(Method::DELETE, &["v1", "secrets", name]))
            .await
            .map(drop)
    }
}
