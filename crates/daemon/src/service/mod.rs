//! The lifecycle service: every API action is one function here.
//!
//! Rules (DESIGN.md): every state change is written to the store before it is
//! acted on; transitions of one sandbox are serialised by a per-sandbox lock;
//! the daemon can die at any point and `reconcile` puts things right.

mod admission;
mod commands;
mod create;
mod error;
mod files;
mod idempotency;
mod lifecycle;
mod logs;
mod pause;
mod pool;
mod reconcile;
mod secrets;
mod snapshots;

pub use admission::{Capacity, Reservation};
pub use commands::{ExecOutcome, OutputSelection};
pub use error::{ServiceError, STORE_FULL};
pub use idempotency::{Claim, ClaimKey};
pub use lifecycle::{CreateOutcome, DestroyOutcome, SandboxPage};
pub use logs::LogChunk;
pub use pool::PoolShapeStatus;
pub use secrets::{KeyError, SecretBox, SecretInfo};
pub use snapshots::SnapshotPage;

use crate::config::Config;
use crate::runtime::{AgentCallError, AgentConn, Runtime};
use sbx_agent_proto::{AgentError, AgentErrorCode};
use sbx_api_types::SandboxStatus;
use sbx_store::{SandboxRecord, Store};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use uuid::Uuid;

/// Shared state behind every API call.
pub struct Service {
    config: Config,
    store: Arc<dyn Store>,
    runtime: Arc<dyn Runtime>,
    /// Open agent connections of RUNNING sandboxes.
    agents: Mutex<HashMap<Uuid, AgentConn>>,
    /// Per-sandbox transition locks.
    locks: Mutex<HashMap<Uuid, Arc<tokio::sync::Mutex<()>>>>,
    /// Boots in progress: create waits on these.
    boots: Mutex<HashMap<Uuid, tokio::sync::watch::Receiver<bool>>>,
    /// Teardowns in progress (retried until they succeed): a repeated destroy joins these.
    teardowns: Mutex<HashMap<Uuid, tokio::sync::watch::Receiver<bool>>>,
    /// The fixed network id shown as `vpcId`.
    vpc_id: Uuid,
    /// Key of the secret store.
    secrets: SecretBox,
    /// 64 hex digits naming the image (`sourceImageId` of snapshots).
    image_id: String,
    /// Egress policies and the broker behind the in-sandbox proxies.
    network: Arc<crate::network::Network>,
    /// Warm pool of booted, unassigned sandboxes.
    pool: pool::Pool,
    /// Node capacity and admitted creates.
    admission: admission::Admission,
    /// Id of this sbxd process: idempotency claims left by another one were interrupted.
    boot_id: Uuid,
    /// Ends of idempotency claims that a full disk kept from the store.
    unrecorded: idempotency::Unrecorded,
    /// The Connect runtime, set once at start (it needs this service to run its jobs).
    connect: std::sync::OnceLock<Arc<sbx_connect::service::ConnectService>>,
}

/// Result type of service calls.
pub type Result<T, E = ServiceError> = std::result::Result<T, E>;

impl Service {
    /// Builds the service; call [`Service::reconcile`] before serving.
    pub fn new(
        config: Config,
        store: Arc<dyn Store>,
        runtime: Arc<dyn Runtime>,
        secrets: SecretBox,
    ) -> Arc<Self> {
        use sha2::Digest;
        let image_id = hex::encode(sha2::Sha256::digest(
            format!("{}\0{}", config.image_ref, config.image_rootfs.display()).as_bytes(),
        ));
        let network = Arc::new(
            crate::network::Network::new(config.default_network, &config.network_test_public)
                .unwrap_or_else(|e| panic!("invalid network configuration: {e}")),
        );
        Arc::new(Service {
            pool: pool::Pool::new(config.warm_pool.clone()),
            admission: admission::Admission::new(admission::Capacity::detect(&config.capacity)),
            boot_id: Uuid::new_v4(),
            unrecorded: idempotency::Unrecorded::default(),
            connect: std::sync::OnceLock::new(),
            network,
            secrets,
            image_id,
            config,
            store,
            runtime,
            agents: Mutex::new(HashMap::new()),
            locks: Mutex::new(HashMap::new()),
            boots: Mutex::new(HashMap::new()),
            teardowns: Mutex::new(HashMap::new()),
            vpc_id: Uuid::from_u128(0x5bd0_0000_0000_4000_8000_0000_0000_0001),
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Installs the Connect runtime (once, at start).
    pub fn set_connect(&self, connect: Arc<sbx_connect::service::ConnectService>) {
        let _ = self.connect.set(connect);
    }

    /// The Connect runtime, or `Unavailable` before it is installed.
    pub fn connect(&self) -> Result<&Arc<sbx_connect::service::ConnectService>> {
        self.connect
            .get()
            .ok_or_else(|| ServiceError::Unavailable("the Connect runtime is not running".into()))
    }

    /// The caller's tenant scope (`workspace/env`) from its `Authorization` and `x-inngest-env` headers.
    pub fn authenticate(
        &self,
        authorization: Option<&str>,
        env: Option<&str>,
    ) -> std::result::Result<String, crate::tenants::TenantError> {
        crate::tenants::resolve(
            self.store.as_ref(),
            &self.config.signing_keys,
            self.config.dev,
            authorization,
            env,
        )
    }

    /// Policy and connection counters of a sandbox.
    pub fn network_status(&self, record: &SandboxRecord) -> sbx_api_types::NetworkStatus {
        self.network.status(record.id, &record.network)
    }

    /// The `vpcId` every sandbox of this node shows.
    pub fn vpc_id(&self) -> Uuid {
        self.vpc_id
    }

    fn lock_for(&self, id: Uuid) -> Arc<tokio::sync::Mutex<()>> {
        self.locks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(id)
            .or_default()
            .clone()
    }

    /// Loads a sandbox of the workspace, or `SandboxNotFound`.
    fn load(&self, workspace: &str, id: Uuid) -> Result<SandboxRecord> {
        match self.store.get_sandbox(id)? {
            Some(r) if r.workspace == workspace => Ok(r),
            _ => Err(ServiceError::SandboxNotFound),
        }
    }

    /// The agent of a RUNNING sandbox, reconnecting if the old connection dropped.
    async fn agent(self: &Arc<Self>, workspace: &str, id: Uuid) -> Result<AgentConn> {
        let record = self.load(workspace, id)?;
        if record.status != SandboxStatus::Running {
            return Err(ServiceError::not_running(record.status));
        }
        if let Some(conn) = self.cached_agent(id) {
            return Ok(conn);
        }
        let lock = self.lock_for(id);
        let _guard = lock.lock().await;
        if let Some(conn) = self.cached_agent(id) {
            return Ok(conn);
        }
        self.attach_locked(id)
            .await
            .map_err(|e| ServiceError::Unavailable(format!("sandbox agent unreachable: {e}")))
    }

    /// Opens a new agent connection and watches it. The caller holds the sandbox's lock.
    async fn attach_locked(
        self: &Arc<Self>,
        id: Uuid,
    ) -> Result<AgentConn, crate::runtime::RuntimeError> {
        let conn = self.runtime.connect(id).await?;
        self.register_agent(id, conn.clone());
        if let Ok(Some(r)) = self.store.get_sandbox(id) {
            self.network.serve(id, &r.network, &conn).await;
        }
        Ok(conn)
    }

    /// Makes `conn` the sandbox's connection and watches it.
    fn register_agent(self: &Arc<Self>, id: Uuid, conn: AgentConn) {
        self.agents
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, conn.clone());
        self.spawn_monitor(id, conn);
    }

    fn cached_agent(&self, id: Uuid) -> Option<AgentConn> {
        let agents = self.agents.lock().unwrap_or_else(|p| p.into_inner());
        agents.get(&id).filter(|c| !c.is_closed()).cloned()
    }

    fn forget_agent(&self, id: Uuid) {
        self.agents
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
    }
}

/// Maps an agent failure for an operation that is safe to repeat.
fn agent_error(e: AgentCallError) -> ServiceError {
    match e {
        AgentCallError::Agent(err) => agent_code_error(err),
        AgentCallError::Closed => {
            ServiceError::Unavailable("the sandbox's agent connection closed; retry".into())
        }
        other => ServiceError::Internal(other.to_string()),
    }
}

/// Maps an agent failure for an operation that is unsafe to repeat (exec, start, signal).
fn agent_error_unsafe(e: AgentCallError, what: &str) -> ServiceError {
    match e {
        AgentCallError::Closed => ServiceError::Ambiguous(format!(
            "the connection to the sandbox closed during {what}; it may or may not have happened"
        )),
        other => agent_error(other),
    }
}

fn agent_code_error(err: AgentError) -> ServiceError {
    match err.code {
        AgentErrorCode::NotFound => ServiceError::FileOperation(err.message),
        AgentErrorCode::InvalidArgument => ServiceError::BadRequest(err.message),
        AgentErrorCode::NotRegularFile => ServiceError::NotRegularFile(err.message),
        AgentErrorCode::OutputNotRetained => ServiceError::OutputNotRetained,
        AgentErrorCode::NotEmpty
        | AgentErrorCode::PermissionDenied
        | AgentErrorCode::SpawnFailed => ServiceError::FileOperation(err.message),
        AgentErrorCode::NoSpace => {
            ServiceError::FileOperation(format!("sandbox disk full: {}", err.message))
        }
        _ => ServiceError::Internal(format!("agent: {}", err.message)),
    }
}
