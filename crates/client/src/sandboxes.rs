//! Sandbox lifecycle calls: create, inspect, list, destroy, pause, resume, console log.

use crate::{ChunkStream, Client, ClientError};
use reqwest::Method;
use sbx_api_types::{
    CreateSandboxRequest, CreateSandboxV1Request, Page, PreviewRequest, Sandbox, SandboxDetail,
    SandboxMetrics, SandboxPreview,
};
use uuid::Uuid;

impl Client {
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

    /// `GET /v1/sandboxes/{id}/preview`: whether the sandbox's preview URLs
    /// answer and who may call them; with `port`, the host of that port.
    pub async fn preview(
        &self,
        id: Uuid,
        port: Option<u16>,
    ) -> Result<SandboxPreview, ClientError> {
        let mut req = self.request(
            Method::GET,
            &["v1", "sandboxes", &id.to_string(), "preview"],
        );
        if let Some(port) = port {
            req = req.query(&[("port", port)]);
        }
        Self::data(self.send(req).await?).await
    }

    /// `PUT /v1/sandboxes/{id}/preview`: turns preview URLs on (public, or
    /// behind a token).
    pub async fn enable_preview(
        &self,
        id: Uuid,
        public: bool,
    ) -> Result<SandboxPreview, ClientError> {
        let path = ["v1", "sandboxes", &id.to_string(), "preview"];
        let body = PreviewRequest { public };
        let resp = self
            .send(self.request(Method::PUT, &path).json(&body))
            .await?;
        Self::data(resp).await
    }

    /// `DELETE /v1/sandboxes/{id}/preview`: turns preview URLs off.
    pub async fn disable_preview(&self, id: Uuid) -> Result<SandboxPreview, ClientError> {
        let path = ["v1", "sandboxes", &id.to_string(), "preview"];
        Self::data(self.send(self.request(Method::DELETE, &path)).await?).await
    }

    /// `PUT /v1/sandboxes/{id}/network`: a running sandbox's new egress policy.
    pub async fn update_network(
        &self,
        id: Uuid,
        policy: &crate::api::NetworkPolicy,
    ) -> Result<SandboxDetail, ClientError> {
        let resp = self
            .send(
                self.request(
                    Method::PUT,
                    &["v1", "sandboxes", &id.to_string(), "network"],
                )
                .json(policy),
            )
            .await?;
        Self::data(resp).await
    }

    /// `GET /v1/sandboxes/{id}/metrics`: the sandbox's recent CPU, memory, disk
    /// and process samples, oldest first.
    pub async fn sandbox_metrics(&self, id: Uuid) -> Result<SandboxMetrics, ClientError> {
        let path = ["v1", "sandboxes", &id.to_string(), "metrics"];
        let resp = self.send(self.request(Method::GET, &path)).await?;
        Self::data(resp).await
    }

    /// `GET /v1/shapes`: the shapes `(vcpu, memoryMb)` fresh sandboxes may have on the server.
    pub async fn shapes(&self) -> Result<Vec<crate::api::ShapeInfo>, ClientError> {
        let resp = self
            .send(self.request(Method::GET, &["v1", "shapes"]))
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

    /// `GET /v2/sandboxes/{id}/logs?follow=`: the console log as a chunk stream.
    pub async fn logs(&self, id: Uuid, follow: bool) -> Result<ChunkStream, ClientError> {
        let rb = self
            .request(Method::GET, &["v2", "sandboxes", &id.to_string(), "logs"])
            .query(&[("follow", if follow { "true" } else { "false" })]);
        Ok(Self::chunk_stream(self.send(rb).await?))
    }
}
