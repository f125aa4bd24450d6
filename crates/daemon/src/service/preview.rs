//! Preview URLs (E2B `getHost(port)`): who may reach which sandbox port,
//! and the connection to it.
//!
//! A request for `{port}-{id}.{domain}` reaches the server listening on that
//! port inside the sandbox through a `port_open` stream over the agent
//! channel (the sandbox stays on `--network=none`). Preview URLs carry no API
//! key, so the sandbox's own settings are the gate:
//! * only sandboxes whose preview URLs are on have any (E2B sandboxes
//!   always; `/v1` sandboxes when their owner turned them on, see
//!   `preview_access`; Connect job sandboxes never): others are "not found";
//! * a sandbox created with `network.allowPublicTraffic: false` (and one
//!   first connected through E2B after being made elsewhere) needs its
//!   `trafficAccessToken` in `e2b-traffic-access-token` (missing: 401,
//!   wrong: 403; compared in constant time); otherwise anyone may call;
//! * the sandbox must be RUNNING.
//!
//! In cluster mode the node that receives the request checks all of this
//! against the shared store, then hands a sandbox of another node to that
//! node ([`Route::Node`]), which checks again (one hop, like every forward).

use super::e2b::E2b;
use super::preview_access::Access;
use super::ServiceError;
use sbx_agent_proto::client::{AgentCallError, PortStream};
use sbx_agent_proto::AgentErrorCode;
use sbx_api_types::SandboxStatus;
use std::sync::Arc;
use subtle::ConstantTimeEq;
use uuid::Uuid;

/// The header that carries a restricted sandbox's traffic access token.
pub const TRAFFIC_TOKEN_HEADER: &str = "e2b-traffic-access-token";

/// Why a preview request was not connected.
#[derive(Debug, thiserror::Error)]
pub enum PreviewError {
    /// No such sandbox, or it has no preview URLs.
    #[error("The sandbox {0} was not found")]
    NotFound(String),
    /// The sandbox exists but is not running (paused, stopped, starting).
    #[error("The sandbox {0} is {1}: preview URLs answer only while it runs")]
    NotRunning(String, &'static str),
    /// A restricted sandbox and no token.
    #[error("this sandbox's preview URLs need the e2b-traffic-access-token header")]
    TokenMissing,
    /// A restricted sandbox and another token.
    #[error("invalid e2b-traffic-access-token")]
    TokenWrong,
    /// Nothing listens on the port inside the sandbox.
    #[error("nothing listens on port {0} in the sandbox")]
    NothingListening(u16),
    /// The agent could not be reached or could not connect.
    #[error("cannot reach port {0} in the sandbox: {1}")]
    Unavailable(u16, String),
}

/// Where a preview request goes once it is allowed.
pub enum Route {
    /// The sandbox runs here: bytes to and from the server listening on the port.
    Here(PortStream),
    /// The sandbox runs on the node at this advertise URL.
    Node(String),
}

/// The preview face of the service.
pub struct Preview {
    e2b: Arc<E2b>,
}

impl Preview {
    /// Preview URLs over the E2B records and the lifecycle service.
    pub fn new(e2b: Arc<E2b>) -> Arc<Preview> {
        Arc::new(Preview { e2b })
    }

    /// Checks access to `port` of the sandbox `sandbox` (as routed) and opens
    /// a connection to it, or names the node to forward to (only when
    /// `may_forward`: in cluster mode and not forwarded already).
    pub async fn open(
        &self,
        sandbox: &str,
        port: u16,
        token: Option<&str>,
        may_forward: bool,
    ) -> Result<Route, PreviewError> {
        let gone = || PreviewError::NotFound(sandbox.to_string());
        let id = Uuid::parse_str(sandbox).map_err(|_| gone())?;
        let svc = self.e2b.service();
        let (workspace, access) = svc
            .preview_access_of(id)
            .await
            .map_err(|e| PreviewError::Unavailable(port, e.to_string()))?
            .ok_or_else(gone)?;
        match access {
            Access::Off => return Err(gone()),
            Access::Public => {}
            Access::Token(expected) => check_token(Some(&expected), token)?,
        }
        let status = match svc.get(&workspace, id).await {
            Ok(s) => s.status,
            Err(ServiceError::SandboxNotFound) => return Err(gone()),
            Err(e) => return Err(PreviewError::Unavailable(port, e.to_string())),
        };
        if status != SandboxStatus::Running {
            return Err(PreviewError::NotRunning(id.to_string(), status.as_str()));
        }
        if may_forward {
            let owner = svc
                .remote_owner(&workspace, id)
                .await
                .map_err(|e| PreviewError::Unavailable(port, e.to_string()))?;
            if let Some(url) = owner {
                return Ok(Route::Node(url));
            }
        }
        let conn = svc
            .agent(&workspace, id)
            .await
            .map_err(|e| PreviewError::Unavailable(port, e.to_string()))?;
        match conn.open_port(port).await {
            Ok(stream) => Ok(Route::Here(stream)),
            Err(AgentCallError::Agent(e)) if e.code == AgentErrorCode::ConnectionRefused => {
                Err(PreviewError::NothingListening(port))
            }
            Err(AgentCallError::Agent(e)) if e.code == AgentErrorCode::Protocol => Err(
                PreviewError::Unavailable(port, "this sandbox's agent cannot open ports".into()),
            ),
            Err(e) => Err(PreviewError::Unavailable(port, e.to_string())),
        }
    }
}

/// The token rule: no expected token → public; else it must match.
fn check_token(expected: Option<&str>, given: Option<&str>) -> Result<(), PreviewError> {
    let Some(expected) = expected else {
        return Ok(());
    };
    let Some(given) = given.filter(|t| !t.is_empty()) else {
        return Err(PreviewError::TokenMissing);
    };
    if bool::from(given.as_bytes().ct_eq(expected.as_bytes())) {
        Ok(())
    } else {
        Err(PreviewError::TokenWrong)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_gate_only_restricted_sandboxes() {
        assert!(check_token(None, None).is_ok());
        assert!(check_token(None, Some("x")).is_ok());
        assert!(matches!(
            check_token(Some("t"), None),
            Err(PreviewError::TokenMissing)
        ));
        assert!(matches!(
            check_token(Some("t"), Some("")),
            Err(PreviewError::TokenMissing)
        ));
        assert!(matches!(
            check_token(Some("t"), Some("u")),
            Err(PreviewError::TokenWrong)
        ));
        assert!(check_token(Some("t"), Some("t")).is_ok());
    }
}
