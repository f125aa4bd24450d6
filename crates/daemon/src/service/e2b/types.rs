//! What E2B calls take and give: the error, the create spec, list filters,
//! states and the sandbox view.

use super::records::E2bRecord;
use crate::service::{Sandbox, ServiceError};
use chrono::{DateTime, Utc};
use sbx_api_types::{NetworkPolicy, SandboxStatus};
use sbx_store::StoreError;
use std::collections::BTreeMap;

/// Why an E2B call failed.
#[derive(Debug, thiserror::Error)]
pub enum E2bError {
    /// No such sandbox, snapshot or template for this tenant.
    #[error("{0}")]
    NotFound(String),
    /// The request is invalid.
    #[error("{0}")]
    BadRequest(String),
    /// The sandbox is not in a state that allows the call (e.g. already paused).
    #[error("{0}")]
    Conflict(String),
    /// Accepted by the wire format but not built in sbx yet.
    #[error("{0}")]
    NotSupported(String),
    /// The lifecycle service refused or failed.
    #[error(transparent)]
    Service(#[from] ServiceError),
}

/// A store failure is reported as the lifecycle service reports it (503 when
/// the database is unavailable or full).
impl From<StoreError> for E2bError {
    fn from(e: StoreError) -> Self {
        E2bError::Service(ServiceError::from(e))
    }
}

/// Result type of E2B calls.
pub type Result<T, E = E2bError> = std::result::Result<T, E>;

/// A validated create request.
#[derive(Debug, Clone, Default)]
pub struct CreateSpec {
    /// Template id, alias or snapshot id (`base` when empty).
    pub template_id: String,
    /// Seconds until the sandbox ends (default [`super::DEFAULT_TIMEOUT_SECS`]).
    pub timeout_secs: Option<u64>,
    /// Caller metadata.
    pub metadata: BTreeMap<String, String>,
    /// Environment of every process.
    pub env_vars: BTreeMap<String, String>,
    /// Pause instead of destroy at the end of the timeout.
    pub auto_pause: bool,
    /// Egress policy (`None`: the server's default, the internet allowed).
    pub network: Option<NetworkPolicy>,
    /// Preview URLs open to anyone (E2B's default) rather than to holders
    /// of the traffic access token.
    pub allow_public_traffic: bool,
}

/// Filters of `GET /v2/sandboxes`.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    /// Every pair must be in the sandbox's metadata.
    pub metadata: BTreeMap<String, String>,
    /// States to keep (empty: running and paused).
    pub states: Vec<E2bState>,
    /// Only sandboxes started after this time.
    pub started_after: Option<DateTime<Utc>>,
    /// Only sandboxes of this template id.
    pub template: Option<String>,
}

/// The two states E2B shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum E2bState {
    /// Running (also while starting or resuming).
    Running,
    /// Paused (also while pausing).
    Paused,
}

impl E2bState {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            E2bState::Running => "running",
            E2bState::Paused => "paused",
        }
    }

    /// The E2B state of an sbx status; `None` for a sandbox that is gone or going.
    pub fn of(status: SandboxStatus) -> Option<E2bState> {
        match status {
            SandboxStatus::Pending
            | SandboxStatus::Starting
            | SandboxStatus::Running
            | SandboxStatus::Resuming => Some(E2bState::Running),
            SandboxStatus::Pausing | SandboxStatus::Paused => Some(E2bState::Paused),
            SandboxStatus::Terminating | SandboxStatus::Terminated | SandboxStatus::Failed => None,
        }
    }
}

/// A sandbox with its E2B fields.
#[derive(Debug, Clone)]
pub struct E2bSandbox {
    /// The sbx sandbox.
    pub sandbox: Sandbox,
    /// Its E2B fields (defaults for a sandbox created through `/v1` or `/v2`).
    pub record: E2bRecord,
    /// Its E2B state.
    pub state: E2bState,
    /// The domain its hosts are under (`--e2b-domain`), if one is configured.
    pub domain: Option<String>,
}

impl ListFilter {
    pub(super) fn matches(&self, s: &E2bSandbox) -> bool {
        let state_ok = self.states.is_empty() || self.states.contains(&s.state);
        let meta_ok = self
            .metadata
            .iter()
            .all(|(k, v)| s.record.metadata.get(k) == Some(v));
        let started_ok = self
            .started_after
            .is_none_or(|t| s.sandbox.started_at.unwrap_or(s.sandbox.created_at) > t);
        let template_ok = self
            .template
            .as_ref()
            .is_none_or(|t| *t == s.record.template_id);
        state_ok && meta_ok && started_ok && template_ok
    }
}
