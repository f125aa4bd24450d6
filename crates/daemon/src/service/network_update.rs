//! Changing a running sandbox's egress policy (`PUT /v1/sandboxes/{id}/network`,
//! E2B's `updateNetwork`).

use super::{Result, Sandbox, Service, ServiceError};
use sbx_agent_proto::Request;
use sbx_api_types::validate::ValidationError;
use sbx_api_types::{NetworkMode, NetworkPolicy, SandboxStatus};
use std::sync::Arc;
use uuid::Uuid;

impl Service {
    /// The policy of a sandbox created without one (`--default-network`).
    pub fn default_network_policy(&self) -> NetworkPolicy {
        self.network.default_policy().clone()
    }

    /// Puts `policy` in force for a RUNNING sandbox of `workspace`: stored
    /// first (a compare-and-set, so that a pause or destroy that got there
    /// first wins and this call answers as it would in that state), then its
    /// broker decides every new connection and DNS lookup by it. Connections
    /// already open keep the decision they got. Proxy variables are added to
    /// (or removed from) the environment of processes started from now on
    /// when the sandbox gains (or loses) a network.
    pub async fn update_network(
        self: &Arc<Self>,
        workspace: &str,
        id: Uuid,
        policy: NetworkPolicy,
    ) -> Result<Sandbox> {
        let policy = policy
            .validate()
            .map_err(|reason| ValidationError::Format {
                field: "network",
                reason,
            })?;
        // Checks the tenant and the state, and reconnects a dropped agent.
        let conn = self.agent(workspace, id).await?;
        // Held across the broker update too: two updates of one sandbox are
        // put in force in the order they were stored.
        let lock = self.lock_for(id);
        let _guard = lock.lock().await;
        let record = self.load(workspace, id).await?;
        let had_network = record.network.mode != NetworkMode::None;
        let (record, _) = self
            .change_row(record, |r| {
                if r.status == SandboxStatus::Running {
                    r.network = policy.clone();
                }
            })
            .await?;
        if record.status != SandboxStatus::Running {
            return Err(ServiceError::not_running(record.status));
        }
        self.network.update(id, &record.network, &conn).await;
        if had_network != (record.network.mode != NetworkMode::None) {
            let env = self
                .sandbox_environment(&record)
                .await
                .map_err(ServiceError::Unavailable)?;
            conn.call(Request::Configure { env }).await.map_err(|e| {
                ServiceError::Unavailable(format!(
                    "the policy is stored, but the sandbox agent did not take the new environment: {e}"
                ))
            })?;
        }
        tracing::info!(sandbox = %id, mode = ?record.network.mode, "network policy updated");
        Ok(Sandbox::from(record))
    }
}
