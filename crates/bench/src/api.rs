//! The sbxd side: plain JSON calls over HTTP, with client-side polling as
//! the SDK does it.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::stats::Unsupported;

/// Upper bound on any wait for a state (RUNNING, TERMINATED, READY...).
const STATE_DEADLINE: Duration = Duration::from_secs(180);

/// A client of one sbxd, remembering what it created so it can remove it.
pub struct Api {
    http: reqwest::Client,
    base: String,
    poll: Duration,
    upload_chunk: usize,
    sandboxes: Mutex<BTreeSet<String>>,
    snapshots: Mutex<BTreeSet<String>>,
}

/// A decoded response: status and JSON body (`Null` when empty).
pub struct Resp {
    pub status: StatusCode,
    pub body: Value,
}

impl Resp {
    /// `data.<field>` as a string.
    pub fn data_str(&self, field: &str) -> Result<String> {
        self.body["data"][field]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| anyhow!("response has no data.{field}: {}", self.body))
    }
}

/// Whether an error status means "this server does not offer the operation".
fn unsupported(status: StatusCode, code: &str) -> bool {
    match status.as_u16() {
        501 => true,
        503 => matches!(code, "not_implemented" | "compute_unavailable"),
        404 | 405 => matches!(code, "not_found" | "method_not_allowed" | ""),
        _ => false,
    }
}

impl Api {
    /// A client of `base` (e.g. `http://127.0.0.1:8731`) polling every
    /// `poll`. Uploads are sent chunked in pieces of `upload_chunk` bytes, or
    /// as one body with a Content-Length when it is 0.
    pub fn new(base: &str, poll: Duration, upload_chunk: usize) -> Result<Self> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(300))
            .pool_max_idle_per_host(128)
            .build()?;
        Ok(Api {
            http,
            base: base.trim_end_matches('/').to_string(),
            poll,
            upload_chunk,
            sandboxes: Mutex::new(BTreeSet::new()),
            snapshots: Mutex::new(BTreeSet::new()),
        })
    }

    fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// Sends one request; an error status becomes an error (an
    /// [`Unsupported`] one when the server does not offer the operation).
    pub async fn call(&self, method: Method, path: &str, body: Option<Value>) -> Result<Resp> {
        let mut req = self.http.request(method.clone(), self.url(path));
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req
            .send()
            .await
            .with_context(|| format!("{method} {path}"))?;
        Self::decode(&method, path, resp).await
    }

    /// POSTs raw bytes with a content type (e.g. a package tarball).
    pub async fn post_bytes(&self, path: &str, content_type: &str, body: Bytes) -> Result<Resp> {
        let resp = self
            .http
            .post(self.url(path))
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .with_context(|| format!("POST {path}"))?;
        Self::decode(&Method::POST, path, resp).await
    }

    /// POSTs raw bytes and answers the whole body as text (NDJSON answers).
    pub async fn post_text(&self, path: &str, content_type: &str, body: Bytes) -> Result<String> {
        let resp = self
            .http
            .post(self.url(path))
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .with_context(|| format!("POST {path}"))?;
        let status = resp.status();
        let text = resp.text().await.with_context(|| format!("POST {path}"))?;
        if !status.is_success() {
            bail!(
                "POST {path}: HTTP {status}: {}",
                &text[..text.len().min(300)]
            );
        }
        Ok(text)
    }

    /// POSTs a body with extra headers and no error mapping: (status, elapsed). For
    /// senders that are not API callers (webhook deliveries).
    pub async fn post_raw(
        &self,
        path: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Result<(StatusCode, Duration)> {
        let mut req = self.http.post(self.url(path)).body(body);
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        let started = Instant::now();
        let resp = req.send().await.with_context(|| format!("POST {path}"))?;
        let status = resp.status();
        // The answer is complete (and the delivery durable) once its body is read.
        let text = resp.bytes().await.with_context(|| format!("POST {path}"))?;
        let took = started.elapsed();
        if !status.is_success() {
            bail!(
                "POST {path}: HTTP {status}: {}",
                String::from_utf8_lossy(&text[..text.len().min(300)])
            );
        }
        Ok((status, took))
    }

    async fn decode(method: &Method, path: &str, resp: reqwest::Response) -> Result<Resp> {
        let status = resp.status();
        let bytes = resp
            .bytes()
            .await
            .with_context(|| format!("{method} {path}: reading the body"))?;
        let body: Value = if bytes.iter().all(u8::is_ascii_whitespace) {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or_else(|_| {
                Value::String(String::from_utf8_lossy(&bytes[..bytes.len().min(500)]).into())
            })
        };
        if status.is_success() {
            return Ok(Resp { status, body });
        }
        let code = body["errors"][0]["code"].as_str().unwrap_or("").to_string();
        let msg = body["errors"][0]["message"].as_str().unwrap_or("");
        if unsupported(status, &code) {
            let label = if code.is_empty() {
                status.as_u16().to_string()
            } else {
                format!("{} {code}", status.as_u16())
            };
            return Err(Unsupported(label).into());
        }
        bail!("{method} {path}: HTTP {status} {code}: {msg}")
    }

    /// `GET /healthz`.
    pub async fn health(&self) -> Result<()> {
        let r = self.http.get(self.url("/healthz")).send().await?;
        if !r.status().is_success() {
            bail!("GET /healthz: HTTP {}", r.status());
        }
        Ok(())
    }

    /// `GET /metrics` (a dev-mode sbxd: no token): the exposition's text.
    pub async fn metrics(&self) -> Result<String> {
        let r = self.http.get(self.url("/metrics")).send().await?;
        if !r.status().is_success() {
            bail!("GET /metrics: HTTP {}", r.status());
        }
        Ok(r.text().await?)
    }

    /// Polls `GET path` until `data.status` is `want`; `bad` statuses fail.
    async fn wait_status(&self, path: &str, want: &str, bad: &[&str]) -> Result<()> {
        let deadline = Instant::now() + STATE_DEADLINE;
        loop {
            let r = self.call(Method::GET, path, None).await?;
            let status = r.data_str("status")?;
            if status == want {
                return Ok(());
            }
            if bad.contains(&status.as_str()) {
                bail!(
                    "{path} is {status} (waiting for {want}): {}",
                    r.body["data"]
                );
            }
            if Instant::now() > deadline {
                bail!("{path} still {status} after {STATE_DEADLINE:?} (waiting for {want})");
            }
            tokio::time::sleep(self.poll).await;
        }
    }

    /// `POST /v2/sandboxes` with `body`, then waits for RUNNING. Returns the id.
    pub async fn create(&self, body: Value) -> Result<String> {
        self.create_at("/v2/sandboxes", body).await
    }

    /// Like [`Api::create`] through `path` (`/v1/sandboxes` takes a `network` policy).
    pub async fn create_at(&self, path: &str, body: Value) -> Result<String> {
        let r = self.call(Method::POST, path, Some(body)).await?;
        let id = r.data_str("id")?;
        self.sandboxes.lock().unwrap().insert(id.clone());
        let status = r.data_str("status")?;
        if status != "RUNNING" {
            self.wait_status(
                &format!("/v2/sandboxes/{id}"),
                "RUNNING",
                &["FAILED", "TERMINATED", "TERMINATING", "PAUSED"],
            )
            .await?;
        }
        Ok(id)
    }

    /// `DELETE /v2/sandboxes/{id}` until TERMINATED (or gone).
    pub async fn destroy(&self, id: &str) -> Result<()> {
        let path = format!("/v2/sandboxes/{id}");
        let r = match self.call(Method::DELETE, &path, None).await {
            Ok(r) => r,
            Err(e) if e.to_string().contains("sandbox_not_found") => {
                self.sandboxes.lock().unwrap().remove(id);
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        if r.status == StatusCode::ACCEPTED {
            let deadline = Instant::now() + STATE_DEADLINE;
            loop {
                match self.call(Method::GET, &path, None).await {
                    Ok(r) if r.data_str("status")? == "TERMINATED" => break,
                    Ok(_) => {}
                    Err(e) if e.to_string().contains("sandbox_not_found") => break,
                    Err(e) => return Err(e),
                }
                if Instant::now() > deadline {
                    bail!("{path} not TERMINATED after {STATE_DEADLINE:?}");
                }
                tokio::time::sleep(self.poll).await;
            }
        }
        self.sandboxes.lock().unwrap().remove(id);
        Ok(())
    }

    /// `POST .../exec`; returns the exit code.
    pub async fn exec(&self, id: &str, command: &[&str]) -> Result<i64> {
        let r = self
            .call(
                Method::POST,
                &format!("/v2/sandboxes/{id}/exec"),
                Some(json!({ "command": command, "timeout": "120000ms" })),
            )
            .await?;
        r.body["data"]["exitCode"]
            .as_i64()
            .ok_or_else(|| anyhow!("exec result has no exitCode: {}", r.body))
    }

    /// The URL this client talks to.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// (advertise URL, active sandboxes) of every node, as `GET /v1/nodes` lists them.
    pub async fn node_sandboxes(&self) -> Result<Vec<(String, u64)>> {
        let resp = self
            .http
            .get(format!("{}/v1/nodes", self.base))
            .send()
            .await?
            .error_for_status()?;
        let body: Value = resp.json().await?;
        Ok(body["data"]
            .as_array()
            .map(|nodes| {
                nodes
                    .iter()
                    .map(|n| {
                        let url = n["advertiseUrl"].as_str().unwrap_or("").to_string();
                        (url, n["sandboxes"].as_u64().unwrap_or(0))
                    })
                    .collect()
            })
            .unwrap_or_default())
    }

    /// `exec` that must exit 0.
    pub async fn exec_ok(&self, id: &str, command: &[&str]) -> Result<()> {
        match self.exec(id, command).await? {
            0 => Ok(()),
            c => bail!("{command:?} exited {c}"),
        }
    }

    /// `POST .../processes` (201); returns the process id.
    pub async fn start_process(&self, id: &str, command: &[&str]) -> Result<String> {
        let r = self
            .call(
                Method::POST,
                &format!("/v2/sandboxes/{id}/processes"),
                Some(json!({ "command": command })),
            )
            .await?;
        if r.status != StatusCode::CREATED {
            bail!("process start answered {} (want 201)", r.status);
        }
        r.data_str("id")
    }

    /// `POST .../processes/{pid}/signals` with SIGKILL.
    pub async fn kill_process(&self, id: &str, pid: &str) -> Result<()> {
        self.call(
            Method::POST,
            &format!("/v2/sandboxes/{id}/processes/{pid}/signals"),
            Some(json!({ "signal": 9 })),
        )
        .await
        .map(drop)
    }

    /// `POST .../pause` or `.../resume`, then polls until `want`.
    pub async fn transition(&self, id: &str, verb: &str, want: &str) -> Result<()> {
        let path = format!("/v2/sandboxes/{id}");
        let r = self
            .call(Method::POST, &format!("{path}/{verb}"), None)
            .await?;
        if r.body["data"]["status"].as_str() == Some(want) {
            return Ok(());
        }
        self.wait_status(&path, want, &["FAILED", "TERMINATED", "TERMINATING"])
            .await
    }

    /// `POST .../snapshots {"name"}`, then polls until READY. Returns the id.
    pub async fn snapshot(&self, id: &str, name: &str) -> Result<String> {
        let r = self
            .call(
                Method::POST,
                &format!("/v2/sandboxes/{id}/snapshots"),
                Some(json!({ "name": name })),
            )
            .await?;
        let sid = r.data_str("id")?;
        self.snapshots.lock().unwrap().insert(sid.clone());
        if r.data_str("status")? != "READY" {
            self.wait_status(
                &format!("/v2/snapshots/{sid}"),
                "READY",
                &["FAILED", "LOST", "DELETING", "DELETED"],
            )
            .await?;
        }
        Ok(sid)
    }

    /// `DELETE /v2/snapshots/{sid}`.
    pub async fn delete_snapshot(&self, sid: &str) -> Result<()> {
        match self
            .call(Method::DELETE, &format!("/v2/snapshots/{sid}"), None)
            .await
        {
            Ok(_) => {}
            Err(e) if e.to_string().contains("sandbox_snapshot_not_found") => {}
            Err(e) => return Err(e),
        }
        self.snapshots.lock().unwrap().remove(sid);
        Ok(())
    }

    /// `PUT .../files?path=` streaming `data` from memory; returns bytesWritten.
    pub async fn upload(&self, id: &str, path: &str, data: &Bytes) -> Result<u64> {
        let body = match self.upload_chunk {
            0 => reqwest::Body::from(data.clone()),
            size => {
                let chunks: Vec<std::io::Result<Bytes>> = (0..data.len())
                    .step_by(size)
                    .map(|o| Ok(data.slice(o..(o + size).min(data.len()))))
                    .collect();
                reqwest::Body::wrap_stream(futures::stream::iter(chunks))
            }
        };
        let p = format!("/v2/sandboxes/{id}/files");
        let resp = self
            .http
            .put(self.url(&p))
            .query(&[("path", path)])
            .header("content-type", "application/octet-stream")
            .body(body)
            .send()
            .await
            .with_context(|| format!("PUT {p}"))?;
        let r = Self::decode(&Method::PUT, &p, resp).await?;
        let n = r.body["data"]["bytesWritten"]
            .as_u64()
            .ok_or_else(|| anyhow!("upload result has no bytesWritten: {}", r.body))?;
        if n != data.len() as u64 {
            bail!("upload wrote {n} bytes, sent {}", data.len());
        }
        Ok(n)
    }

    /// `GET .../files?path=`, counting the streamed bytes.
    pub async fn download(&self, id: &str, path: &str) -> Result<u64> {
        let p = format!("/v2/sandboxes/{id}/files");
        let mut resp = self
            .http
            .get(self.url(&p))
            .query(&[("path", path)])
            .send()
            .await
            .with_context(|| format!("GET {p}"))?;
        if !resp.status().is_success() {
            Self::decode(&Method::GET, &p, resp).await?;
            bail!("GET {p}: unexpected status");
        }
        let mut n = 0u64;
        while let Some(chunk) = resp.chunk().await.with_context(|| format!("GET {p}"))? {
            n += chunk.len() as u64;
        }
        Ok(n)
    }

    /// Ids of sandboxes (not TERMINATED/FAILED) and snapshots (not
    /// DELETED) whose name starts with `prefix`, from the list endpoints.
    async fn listed(&self, path: &str, prefix: &str, gone: &[&str]) -> Vec<String> {
        let mut ids = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..100 {
            let mut q = format!("{path}?limit=250");
            if let Some(c) = &cursor {
                q.push_str(&format!("&cursor={c}"));
            }
            let Ok(r) = self.call(Method::GET, &q, None).await else {
                break;
            };
            for item in r.body["data"].as_array().into_iter().flatten() {
                let name = item["name"].as_str().unwrap_or("");
                let status = item["status"].as_str().unwrap_or("");
                if name.starts_with(prefix) && !gone.contains(&status) {
                    if let Some(id) = item["id"].as_str() {
                        ids.push(id.to_string());
                    }
                }
            }
            cursor = r.body["page"]["cursor"].as_str().map(str::to_string);
            if cursor.is_none() || r.body["page"]["hasMore"] == Value::Bool(false) {
                break;
            }
        }
        ids
    }

    /// Destroys every sandbox and deletes every snapshot this client
    /// created, plus any listed whose name starts with `prefix` (a create
    /// interrupted before its answer). Best effort; returns what failed.
    pub async fn cleanup(&self, prefix: &str) -> Vec<String> {
        let mut failed = Vec::new();
        let mut boxes: BTreeSet<String> = self.sandboxes.lock().unwrap().clone();
        boxes.extend(
            self.listed("/v2/sandboxes", prefix, &["TERMINATED", "FAILED"])
                .await,
        );
        for id in boxes {
            if let Err(e) = self.destroy(&id).await {
                failed.push(format!("sandbox {id}: {e:#}"));
            }
        }
        let mut snaps: BTreeSet<String> = self.snapshots.lock().unwrap().clone();
        snaps.extend(
            self.listed("/v2/snapshots", prefix, &["DELETED", "DELETING"])
                .await,
        );
        for sid in snaps {
            if let Err(e) = self.delete_snapshot(&sid).await {
                if e.downcast_ref::<Unsupported>().is_none() {
                    failed.push(format!("snapshot {sid}: {e:#}"));
                }
            }
        }
        failed
    }
}
