//! Snapshot calls: create from a sandbox, list, inspect, delete.

use crate::{Client, ClientError, Snapshot};
use reqwest::Method;
use sbx_api_types::Page;
use uuid::Uuid;

impl Client {
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
}
