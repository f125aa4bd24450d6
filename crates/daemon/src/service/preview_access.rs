//! Turning a `/v1` sandbox's preview URLs on and off, and reading who may
//! reach them.
//!
//! A sandbox has preview URLs when its owner turned them on (`preview` at
//! create, or `PUT /v1/sandboxes/{id}/preview`): public, or behind a random
//! token kept in the store (`sandbox_previews`). An E2B sandbox's access
//! lives in its E2B record, as E2B's API set it: the `/v1` calls read it,
//! and change it there, so that a sandbox always has one rule.

use super::{Result, Service, ServiceError};
use sbx_api_types::{SandboxPreview, PREVIEW_TOKEN_HEADER};
use sbx_store::PreviewRecord;
use uuid::Uuid;

/// Who may reach a sandbox's preview URLs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// Nobody: its owner never turned them on.
    Off,
    /// Anyone who knows the URL.
    Public,
    /// Requests that carry this token.
    Token(String),
}

impl Access {
    fn of(token: Option<String>) -> Access {
        token.map_or(Access::Public, Access::Token)
    }
}

impl Service {
    /// Who may reach the preview URLs of sandbox `id` (of any tenant: preview
    /// requests carry no key), and its tenant; `None` if there is no such sandbox.
    pub async fn preview_access_of(&self, id: Uuid) -> Result<Option<(String, Access)>> {
        if let Some(e2b) = self.store.get_e2b_record(id).await? {
            let token = (!e2b.allow_public_traffic).then_some(e2b.traffic_access_token);
            // Not public and no token (never written so): nobody.
            let access = match token {
                Some(None) => Access::Off,
                Some(Some(t)) => Access::Token(t),
                None => Access::Public,
            };
            return Ok(Some((e2b.workspace, access)));
        }
        let Some(sandbox) = self.store.get_sandbox(id).await? else {
            return Ok(None);
        };
        let access = match self.store.get_preview(id).await? {
            Some(row) => Access::of(row.token),
            None => Access::Off,
        };
        Ok(Some((sandbox.workspace, access)))
    }

    /// `GET /v1/sandboxes/{id}/preview`: the sandbox's preview access, and
    /// the host of `port` when asked.
    pub async fn preview(
        &self,
        workspace: &str,
        id: Uuid,
        port: Option<u16>,
    ) -> Result<SandboxPreview> {
        self.load(workspace, id).await?;
        let access = match self.preview_access_of(id).await? {
            Some((_, access)) => access,
            None => return Err(ServiceError::SandboxNotFound),
        };
        Ok(self.preview_view(id, access, port))
    }

    /// `PUT /v1/sandboxes/{id}/preview`: turns preview URLs on, public or
    /// behind a token. A restricted sandbox keeps its token when asked
    /// again (turn them off and on to get a new one).
    pub async fn enable_preview(
        &self,
        workspace: &str,
        id: Uuid,
        public: bool,
    ) -> Result<SandboxPreview> {
        let sandbox = self.load(workspace, id).await?;
        if !sandbox.status.is_active() {
            return Err(ServiceError::not_running(sandbox.status));
        }
        let current = self.preview_access_of(id).await?.map(|(_, a)| a);
        let token = match (public, current) {
            (true, _) => None,
            (false, Some(Access::Token(t))) => Some(t),
            (false, _) => Some(new_token()),
        };
        if let Some(mut e2b) = self.store.get_e2b_record(id).await? {
            e2b.allow_public_traffic = public;
            e2b.traffic_access_token = token.clone();
            self.store.update_e2b_record(&mut e2b).await?;
        } else {
            self.store
                .put_preview(&PreviewRecord {
                    sandbox_id: id,
                    workspace: workspace.to_string(),
                    token: token.clone(),
                })
                .await?;
        }
        tracing::info!(sandbox = %id, public, "preview URLs on");
        Ok(self.preview_view(id, Access::of(token), None))
    }

    /// `DELETE /v1/sandboxes/{id}/preview`: turns preview URLs off (an E2B
    /// sandbox's are E2B's to set: `Conflict`).
    pub async fn disable_preview(&self, workspace: &str, id: Uuid) -> Result<SandboxPreview> {
        self.load(workspace, id).await?;
        if self.store.get_e2b_record(id).await?.is_some() {
            return Err(ServiceError::Conflict(
                "this sandbox was made or connected through the E2B API, whose sandboxes always \
                 have preview URLs; make them need a token with PUT …/preview {\"public\": false}"
                    .into(),
            ));
        }
        self.store.delete_preview(id).await?;
        tracing::info!(sandbox = %id, "preview URLs off");
        Ok(self.preview_view(id, Access::Off, None))
    }

    fn preview_view(&self, id: Uuid, access: Access, port: Option<u16>) -> SandboxPreview {
        let domain = self.config.e2b_domain.clone();
        let enabled = access != Access::Off;
        SandboxPreview {
            enabled,
            public: access == Access::Public,
            token: match access {
                Access::Token(t) => Some(t),
                _ => None,
            },
            token_header: PREVIEW_TOKEN_HEADER.to_string(),
            host: match (&domain, port) {
                (Some(d), Some(p)) if enabled => Some(format!("{p}-{id}.{d}")),
                _ => None,
            },
            domain,
        }
    }
}

/// 64 random hex digits (two v4 UUIDs: 244 random bits), like E2B's tokens.
fn new_token() -> String {
    format!("{}{}", Uuid::new_v4().simple(), Uuid::new_v4().simple())
}
