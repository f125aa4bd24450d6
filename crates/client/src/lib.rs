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
mod files;
mod images;
mod ndjson;
mod nodes;
mod processes;
mod sandboxes;
mod secrets;
mod snapshots;
mod templates;
mod types;
mod volumes;

pub use auth::{authorization_header, hashed_signing_key};
pub use error::ClientError;
pub use files::ByteStream;
pub use images::{BuildLog, BuildOptions};
pub use ndjson::{decode_stream, parse_frame, ChunkStream, LineDecoder};
/// The wire types, re-exported.
pub use sbx_api_types as api;
pub use types::{Chunk, ExecOutput, SecretInfo, Snapshot, SnapshotStatus, WaitResult};

use futures::stream::StreamExt;
use reqwest::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use reqwest::{Method, RequestBuilder, Response, Url};
use sbx_api_types::Page;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use std::time::Duration;

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
}
