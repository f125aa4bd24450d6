//! Running commands: one-shot exec and background processes with their output.

use crate::types::{self, WireChunk};
use crate::{Chunk, ChunkStream, Client, ClientError, ExecOutput, WaitResult};
use reqwest::Method;
use sbx_api_types::{ExecRequest, Page, Process, ProcessStartRequest, SignalRequest};
use serde::Deserialize;
use std::time::Duration;
use uuid::Uuid;

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

fn ms(d: Duration) -> String {
    format!("{}ms", d.as_millis().max(1))
}

impl Client {
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
}
