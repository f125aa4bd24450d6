//! The Connect API (`/v1/connect/...`): packages, builds, connections, OAuth, runs, logs,
//! committed records. Wire types are camelCase, as the daemon sends them.

mod types;

pub use types::{
    Build, ConnectPackage, Connection, CreateConnection, Credentials, Delivery, LogLine, OauthDone,
    OauthStart, PackageVersion, RecordsPage, Run, UpdateConnection, Uploaded,
};

use crate::{Client, ClientError, Env};
use reqwest::Method;
use sbx_api_types::Page;
use serde::Deserialize;
use serde_json::Value;

#[derive(Deserialize)]
struct CheckpointBody {
    #[serde(default)]
    checkpoint: Option<Value>,
}

/// Splits an NDJSON body into values (blank lines skipped).
pub fn parse_ndjson(body: &[u8]) -> Result<Vec<Value>, ClientError> {
    body.split(|b| *b == b'\n')
        .filter(|line| !line.trim_ascii().is_empty())
        .map(|line| {
            serde_json::from_slice(line)
                .map_err(|e| ClientError::Decode(format!("records line: {e}")))
        })
        .collect()
}

impl Client {
    /// `POST /v1/connect/packages`: uploads a package tarball (gzip).
    pub async fn connect_upload_package(&self, tarball: Vec<u8>) -> Result<Uploaded, ClientError> {
        let rb = self
            .request_typed(
                Method::POST,
                &["v1", "connect", "packages"],
                "application/gzip",
            )
            .body(tarball);
        let resp = self.send(rb).await?;
        let created = resp.status().as_u16() == 201;
        let version = Self::data(resp).await?;
        Ok(Uploaded { version, created })
    }

    /// `GET /v1/connect/packages`.
    pub async fn connect_packages(&self) -> Result<Vec<ConnectPackage>, ClientError> {
        let resp = self
            .send(self.request(Method::GET, &["v1", "connect", "packages"]))
            .await?;
        Ok(Self::list(resp).await?.0)
    }

    /// `GET /v1/connect/packages/{package}/versions`.
    pub async fn connect_versions(
        &self,
        package: &str,
    ) -> Result<Vec<PackageVersion>, ClientError> {
        let path = ["v1", "connect", "packages", package, "versions"];
        let resp = self.send(self.request(Method::GET, &path)).await?;
        Ok(Self::list(resp).await?.0)
    }

    /// `GET /v1/connect/packages/{package}/versions/{version}`.
    pub async fn connect_version(
        &self,
        package: &str,
        version: &str,
    ) -> Result<PackageVersion, ClientError> {
        let path = ["v1", "connect", "packages", package, "versions", version];
        Self::data(self.send(self.request(Method::GET, &path)).await?).await
    }

    /// `DELETE /v1/connect/packages/{package}/versions/{version}`: a version no connection uses.
    pub async fn connect_version_delete(
        &self,
        name: &str,
        version: &str,
    ) -> Result<(), ClientError> {
        let path = ["v1", "connect", "packages", name, "versions", version];
        self.send(self.request(Method::DELETE, &path))
            .await
            .map(drop)
    }

    /// `POST /v1/connect/packages/{package}/versions/{version}/builds`: the queued build.
    pub async fn connect_build_start(
        &self,
        package: &str,
        version: &str,
    ) -> Result<Build, ClientError> {
        let path = [
            "v1", "connect", "packages", package, "versions", version, "builds",
        ];
        Self::data(self.send(self.request(Method::POST, &path)).await?).await
    }

    /// `GET /v1/connect/packages/{package}/versions/{version}/builds`, newest first.
    pub async fn connect_builds(
        &self,
        package: &str,
        version: &str,
    ) -> Result<Vec<Build>, ClientError> {
        let path = [
            "v1", "connect", "packages", package, "versions", version, "builds",
        ];
        let resp = self.send(self.request(Method::GET, &path)).await?;
        Ok(Self::list(resp).await?.0)
    }

    /// `GET /v1/connect/builds/{buildId}`.
    pub async fn connect_build(&self, id: &str) -> Result<Build, ClientError> {
        let path = ["v1", "connect", "builds", id];
        Self::data(self.send(self.request(Method::GET, &path)).await?).await
    }

    /// `POST /v1/connect/connections`.
    pub async fn connect_connection_create(
        &self,
        req: &CreateConnection,
    ) -> Result<Connection, ClientError> {
        let rb = self
            .request(Method::POST, &["v1", "connect", "connections"])
            .json(req);
        Self::data(self.send(rb).await?).await
    }

    /// `GET /v1/connect/connections`.
    pub async fn connect_connections(&self) -> Result<Vec<Connection>, ClientError> {
        let resp = self
            .send(self.request(Method::GET, &["v1", "connect", "connections"]))
            .await?;
        Ok(Self::list(resp).await?.0)
    }

    /// `GET /v1/connect/connections/{connectionId}`.
    pub async fn connect_connection(&self, id: &str) -> Result<Connection, ClientError> {
        let path = ["v1", "connect", "connections", id];
        Self::data(self.send(self.request(Method::GET, &path)).await?).await
    }

    /// `PATCH /v1/connect/connections/{connectionId}`.
    pub async fn connect_connection_update(
        &self,
        id: &str,
        req: &UpdateConnection,
    ) -> Result<Connection, ClientError> {
        let path = ["v1", "connect", "connections", id];
        let rb = self.request(Method::PATCH, &path).json(req);
        Self::data(self.send(rb).await?).await
    }

    /// `DELETE /v1/connect/connections/{connectionId}`.
    pub async fn connect_connection_delete(&self, id: &str) -> Result<(), ClientError> {
        let path = ["v1", "connect", "connections", id];
        self.send(self.request(Method::DELETE, &path))
            .await
            .map(drop)
    }

    /// `POST /v1/connect/connections/{connectionId}/oauth/start`.
    pub async fn connect_oauth_start(
        &self,
        id: &str,
        redirect_uri: &str,
    ) -> Result<OauthStart, ClientError> {
        let path = ["v1", "connect", "connections", id, "oauth", "start"];
        let rb = self
            .request(Method::POST, &path)
            .json(&serde_json::json!({ "redirectUri": redirect_uri }));
        Self::data(self.send(rb).await?).await
    }

    /// `POST /v1/connect/oauth/callback` with the provider's `state` and `code`.
    pub async fn connect_oauth_callback(
        &self,
        state: &str,
        code: &str,
    ) -> Result<OauthDone, ClientError> {
        let rb = self
            .request(Method::POST, &["v1", "connect", "oauth", "callback"])
            .json(&serde_json::json!({ "state": state, "code": code }));
        Self::data(self.send(rb).await?).await
    }

    /// `POST /v1/connect/connections/{connectionId}/test`: the finished verify run.
    pub async fn connect_test(&self, id: &str) -> Result<Run, ClientError> {
        let path = ["v1", "connect", "connections", id, "test"];
        Self::data(self.send(self.request(Method::POST, &path)).await?).await
    }

    /// `POST /v1/connect/connections/{connectionId}/syncs/{sync}/runs`: the queued run.
    pub async fn connect_run_sync(&self, id: &str, sync: &str) -> Result<Run, ClientError> {
        let path = ["v1", "connect", "connections", id, "syncs", sync, "runs"];
        Self::data(self.send(self.request(Method::POST, &path)).await?).await
    }

    /// `GET /v1/connect/connections/{connectionId}/runs`: one page, newest first.
    pub async fn connect_runs(
        &self,
        id: &str,
        limit: Option<u32>,
        cursor: Option<&str>,
    ) -> Result<(Vec<Run>, Page), ClientError> {
        let path = ["v1", "connect", "connections", id, "runs"];
        let rb = Self::list_query(self.request(Method::GET, &path), limit, cursor);
        Self::list(self.send(rb).await?).await
    }

    /// `GET /v1/connect/connections/{connectionId}/deliveries`: one page, newest first.
    pub async fn connect_deliveries(
        &self,
        id: &str,
        status: Option<&str>,
        limit: Option<u32>,
        cursor: Option<&str>,
    ) -> Result<(Vec<Delivery>, Page), ClientError> {
        let path = ["v1", "connect", "connections", id, "deliveries"];
        let mut rb = Self::list_query(self.request(Method::GET, &path), limit, cursor);
        if let Some(s) = status {
            rb = rb.query(&[("status", s)]);
        }
        Self::list(self.send(rb).await?).await
    }

    /// `POST /v1/connect/connections/{connectionId}/webhooks`: the URLs made and the new
    /// secret (shown once), as the server sends them.
    pub async fn connect_setup_webhooks(
        &self,
        id: &str,
        req: &Value,
    ) -> Result<Value, ClientError> {
        let path = ["v1", "connect", "connections", id, "webhooks"];
        let rb = self.request(Method::POST, &path).json(req);
        Self::data(self.send(rb).await?).await
    }

    /// `GET /v1/connect/runs/{runId}`.
    pub async fn connect_run(&self, id: &str) -> Result<Run, ClientError> {
        let path = ["v1", "connect", "runs", id];
        Self::data(self.send(self.request(Method::GET, &path)).await?).await
    }

    /// `GET /v1/connect/runs/{runId}/logs`: one page, oldest first.
    pub async fn connect_run_logs(
        &self,
        id: &str,
        limit: Option<u32>,
        cursor: Option<&str>,
    ) -> Result<(Vec<LogLine>, Page), ClientError> {
        let path = ["v1", "connect", "runs", id, "logs"];
        let rb = Self::list_query(self.request(Method::GET, &path), limit, cursor);
        Self::list(self.send(rb).await?).await
    }

    /// `GET /v1/connect/connections/{connectionId}/logs`: one page, oldest first.
    pub async fn connect_connection_logs(
        &self,
        id: &str,
        limit: Option<u32>,
        cursor: Option<&str>,
    ) -> Result<(Vec<LogLine>, Page), ClientError> {
        let path = ["v1", "connect", "connections", id, "logs"];
        let rb = Self::list_query(self.request(Method::GET, &path), limit, cursor);
        Self::list(self.send(rb).await?).await
    }

    /// `GET /v1/connect/connections/{connectionId}/syncs/{sync}/records`: one NDJSON page.
    pub async fn connect_records(
        &self,
        id: &str,
        sync: &str,
        limit: Option<u32>,
        cursor: Option<&str>,
    ) -> Result<RecordsPage, ClientError> {
        let path = ["v1", "connect", "connections", id, "syncs", sync, "records"];
        let rb = Self::list_query(self.request(Method::GET, &path), limit, cursor);
        let resp = self.send(rb).await?;
        let next_cursor = resp
            .headers()
            .get("x-next-cursor")
            .and_then(|v| v.to_str().ok())
            .filter(|c| !c.is_empty())
            .map(str::to_string);
        let body = resp.bytes().await.map_err(ClientError::Transport)?;
        Ok(RecordsPage {
            records: parse_ndjson(&body)?,
            next_cursor,
        })
    }

    /// `GET /v1/connect/connections/{connectionId}/syncs/{sync}/checkpoint` (None before the first commit).
    pub async fn connect_checkpoint(
        &self,
        id: &str,
        sync: &str,
    ) -> Result<Option<Value>, ClientError> {
        let path = [
            "v1",
            "connect",
            "connections",
            id,
            "syncs",
            sync,
            "checkpoint",
        ];
        let resp = self.send(self.request(Method::GET, &path)).await?;
        let env: Env<CheckpointBody> = Self::envelope(resp).await?;
        Ok(env.data.and_then(|d| d.checkpoint))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_wire_shape_and_debug() {
        let c = Credentials::Oauth2 {
            client_id: "cid".into(),
            client_secret: None,
        };
        assert_eq!(
            serde_json::to_value(&c).expect("json"),
            serde_json::json!({"type": "oauth2", "clientId": "cid"})
        );
        let k = Credentials::ApiKey {
            key: "sekrit".into(),
        };
        assert!(!format!("{k:?}").contains("sekrit"));
        let u = UpdateConnection {
            schedule_interval_seconds: Some(None),
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_value(&u).expect("json"),
            serde_json::json!({"scheduleIntervalSeconds": null})
        );
    }

    #[test]
    fn ndjson_lines() {
        let v = parse_ndjson(b"{\"a\":1}\n\n{\"b\":2}\n").expect("parse");
        assert_eq!(v.len(), 2);
        assert!(parse_ndjson(b"{oops\n").is_err());
        assert!(parse_ndjson(b"").expect("empty").is_empty());
    }
}
