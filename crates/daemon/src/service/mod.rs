//! The lifecycle service: every API action is one function here.
//!
//! Rules (DESIGN.md): every state change is written to the store before it is
//! acted on, as a compare-and-set that the store decides (`transition.rs`):
//! only the caller whose write made a transition acts on the runtime. A
//! per-sandbox lock keeps this process from racing itself (an optimisation,
//! not what makes the state machine right); the daemon can die at any point
//! and `reconcile` puts things right.
//!
//! The agent is untrusted (it runs inside the sandbox): opening a connection
//! to it is serialised by a separate per-sandbox *attach gate*, never by the
//! transition lock, so an agent that stalls its handshake delays only
//! requests that need that agent, never a destroy, a runtime limit or another
//! sandbox. Every agent exchange has a deadline (`runtime::agent_conn`).

mod admission;
pub mod build;
mod commands;
mod create;
pub mod e2b;
pub mod envd;
mod error;
mod files;
mod idempotency;
mod idle;
mod image_quota;
mod image_remote;
mod image_tags;
mod images;
mod job_placement;
mod lifecycle;
mod logs;
pub mod metrics;
mod network_update;
mod nodes;
mod pause;
mod placement;
mod pool;
mod pool_sizing;
pub mod preview;
mod preview_access;
mod reconcile;
mod secrets;
mod snapshot_capture;
mod snapshots;
mod templates;
pub mod terminal;
#[cfg(test)]
mod tests;
mod transition;
mod usage;
mod views;
mod volumes;

pub use admission::{Capacity, Reservation};
pub use commands::{ExecOutcome, OutputSelection};
pub use error::{ServiceError, STORE_FULL};
pub use idempotency::{Claim, ClaimKey, CLAIM_LEASE, LEASE_RENEWAL};
pub use job_placement::JobPlacement;
pub use lifecycle::{CreateOutcome, DestroyOutcome, SandboxPage};
pub use logs::LogChunk;
pub use nodes::Heartbeat;
pub use placement::{NodeSelector, Placement};
pub use pool::PoolShapeStatus;
pub use preview_access::Access as PreviewAccess;
pub use secrets::{KeyError, SecretBox, SecretInfo};
pub use snapshots::{SnapshotPage, SNAPSHOT_UPLOAD_FAILED};
pub use usage::USAGE_HISTORY;
pub use views::{Sandbox, Snapshot};

use crate::config::Config;
use crate::runtime::{AgentCallError, AgentConn, Runtime};
use sbx_agent_proto::{AgentError, AgentErrorCode};
use sbx_api_types::SandboxStatus;
use sbx_store::{AsyncStore, SandboxRecord, Store};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use uuid::Uuid;

/// Shared state behind every API call.
pub struct Service {
    config: Config,
    store: AsyncStore,
    runtime: Arc<dyn Runtime>,
    /// Open agent connections of RUNNING sandboxes.
    agents: Mutex<HashMap<Uuid, AgentConn>>,
    /// Per-sandbox transition locks (this process only; the store decides between processes).
    locks: Mutex<HashMap<Uuid, Arc<tokio::sync::Mutex<()>>>>,
    /// Per-sandbox attach gates: one agent connection attempt at a time.
    gates: Mutex<HashMap<Uuid, Arc<tokio::sync::Mutex<()>>>>,
    /// Recent reconnects of each sandbox (a guest that keeps killing its relay).
    reconnects: Mutex<HashMap<Uuid, Vec<std::time::Instant>>>,
    /// Sandboxes whose active-runtime end is being recorded (one task each).
    ending: Mutex<std::collections::HashSet<Uuid>>,
    /// Boots in progress: create waits on these.
    boots: Mutex<HashMap<Uuid, tokio::sync::watch::Receiver<bool>>>,
    /// Teardowns in progress (retried until they succeed): a repeated destroy joins these.
    teardowns: Mutex<HashMap<Uuid, tokio::sync::watch::Receiver<bool>>>,
    /// Mounts and releases of S3 volumes, one at a time (see `mount_volumes`).
    volume_turn: tokio::sync::Mutex<()>,
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
    /// Lease epoch this node holds in the `nodes` table (0 before it registers).
    node_epoch: std::sync::atomic::AtomicU64,
    /// Where snapshot files live besides the data dir (`--snapshot-store`).
    snapshot_store: Arc<dyn sbx_node::snapshot_store::SnapshotStore>,
    /// When the janitor last looked for local copies of deleted snapshots.
    cache_sweep: Mutex<Option<std::time::Instant>>,
    /// Recent usage samples of this node's sandboxes (`usage.rs`).
    usage: Mutex<sbx_node::usage::History>,
    /// Root filesystems of the custom images on this node (`images.rs`).
    images: sbx_node::images::ImageStore,
    /// Imports and sweeps of images, one at a time: a sweep never removes
    /// an image between its unpacking and its name's row.
    image_turn: tokio::sync::Mutex<()>,
    /// Where images go for other nodes (`image_remote.rs`); `None`: node-local.
    image_objects: Option<Arc<dyn sbx_node::snapshot_store::SnapshotStore>>,
    /// Working directory of each sandbox's image, once looked up.
    workdirs: Mutex<HashMap<Uuid, images::ImageDefaults>>,
    /// This service, for the background work of `&self` calls (template
    /// rebuilds started where an image name moves).
    me: std::sync::Weak<Service>,
}

/// Longest wait for a sandbox's attach gate.
const GATE_WAIT: std::time::Duration = std::time::Duration::from_secs(60);
/// Reconnects of one sandbox's agent allowed within [`RECONNECT_WINDOW`]
/// before the sandbox is failed: each costs a `runsc exec` on the host.
const MAX_RECONNECTS: usize = 30;
/// See [`MAX_RECONNECTS`].
const RECONNECT_WINDOW: std::time::Duration = std::time::Duration::from_secs(60);

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
        let snapshot_store = config
            .snapshot_store
            .open(secrets.keys())
            .unwrap_or_else(|e| panic!("invalid snapshot store configuration: {e}"));
        let image_objects = config
            .snapshot_store
            .open_images(secrets.keys())
            .unwrap_or_else(|e| panic!("invalid snapshot store configuration: {e}"));
        let capacity = admission::Capacity::detect(&config.capacity);
        let unfit = capacity.unfit(&config.shapes);
        if !unfit.is_empty() {
            // Offered, yet never admitted here: the operator should narrow --shapes.
            tracing::warn!(
                shapes = %sbx_api_types::validate::describe_shapes(&unfit),
                capacity_mb = capacity.memory_mb,
                capacity_vcpu_milli = capacity.vcpu_milli,
                "shapes larger than this node's capacity: their creates get compute_unavailable (narrow --shapes)"
            );
        }
        let images = sbx_node::images::ImageStore::open(&config.images_dir())
            .unwrap_or_else(|e| panic!("cannot open the image store: {e}"));
        Arc::new_cyclic(|me| Service {
            me: me.clone(),
            images,
            image_turn: tokio::sync::Mutex::new(()),
            image_objects,
            workdirs: Mutex::new(HashMap::new()),
            snapshot_store,
            cache_sweep: Mutex::new(None),
            usage: Mutex::new(sbx_node::usage::History::new(usage::USAGE_HISTORY)),
            pool: pool::Pool::new(&config.warm_pool, &config.shapes, capacity.memory_mb),
            admission: admission::Admission::new(capacity),
            boot_id: Uuid::new_v4(),
            unrecorded: idempotency::Unrecorded::default(),
            node_epoch: std::sync::atomic::AtomicU64::new(0),
            network,
            secrets,
            image_id,
            config,
            store: AsyncStore::new(store),
            runtime,
            agents: Mutex::new(HashMap::new()),
            locks: Mutex::new(HashMap::new()),
            gates: Mutex::new(HashMap::new()),
            reconnects: Mutex::new(HashMap::new()),
            ending: Mutex::new(std::collections::HashSet::new()),
            boots: Mutex::new(HashMap::new()),
            teardowns: Mutex::new(HashMap::new()),
            volume_turn: tokio::sync::Mutex::new(()),
            vpc_id: Uuid::from_u128(0x5bd0_0000_0000_4000_8000_0000_0000_0001),
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The caller's tenant scope (`workspace/env`) from its `Authorization` and `x-inngest-env` headers.
    pub async fn authenticate(
        &self,
        authorization: Option<&str>,
        env: Option<&str>,
    ) -> std::result::Result<String, crate::tenants::TenantError> {
        let (keys, dev) = (self.config.signing_keys.clone(), self.config.dev);
        let (authorization, env) = (authorization.map(str::to_string), env.map(str::to_string));
        let resolved = self
            .store
            .run(move |store| {
                Ok(crate::tenants::resolve(
                    store,
                    &keys,
                    dev,
                    authorization.as_deref(),
                    env.as_deref(),
                ))
            })
            .await;
        resolved.map_err(crate::tenants::TenantError::from)?
    }

    /// Policy and connection counters of a sandbox.
    pub fn network_status(&self, sandbox: &Sandbox) -> sbx_api_types::NetworkStatus {
        self.network.status(sandbox.id, &sandbox.network)
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
    async fn load(&self, workspace: &str, id: Uuid) -> Result<SandboxRecord> {
        match self.store.get_sandbox(id).await? {
            Some(r) if r.workspace == workspace => Ok(r),
            _ => Err(ServiceError::SandboxNotFound),
        }
    }

    fn gate_for(&self, id: Uuid) -> Arc<tokio::sync::Mutex<()>> {
        self.gates
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(id)
            .or_default()
            .clone()
    }

    /// Waits for the sandbox's attach gate, at most [`GATE_WAIT`] (a snapshot
    /// holds it while it checkpoints; a stalled handshake for its deadline).
    async fn enter_gate(&self, id: Uuid) -> Result<tokio::sync::OwnedMutexGuard<()>> {
        tokio::time::timeout(GATE_WAIT, self.gate_for(id).lock_owned())
            .await
            .map_err(|_| {
                ServiceError::Unavailable(
                    "the sandbox's agent is busy reconnecting or being snapshotted; retry".into(),
                )
            })
    }

    /// The agent of a RUNNING sandbox, reconnecting if the old connection dropped.
    async fn agent(self: &Arc<Self>, workspace: &str, id: Uuid) -> Result<AgentConn> {
        let record = self.load(workspace, id).await?;
        if record.status != SandboxStatus::Running {
            return Err(ServiceError::not_running(record.status));
        }
        if let Some(conn) = self.cached_agent(id) {
            return Ok(conn);
        }
        let _gate = self.enter_gate(id).await?;
        if let Some(conn) = self.cached_agent(id) {
            return Ok(conn);
        }
        self.attach_gated(id)
            .await
            .map_err(|e| ServiceError::Unavailable(format!("sandbox agent unreachable: {e}")))
    }

    /// Opens a new agent connection (bounded by the handshake deadline) and
    /// watches it, if the sandbox is still RUNNING. The caller holds the
    /// sandbox's attach gate, not its transition lock.
    async fn attach_gated(
        self: &Arc<Self>,
        id: Uuid,
    ) -> Result<AgentConn, crate::runtime::RuntimeError> {
        let conn = self.runtime.connect(id).await?;
        self.adopt(id, conn).await
    }

    /// Makes a freshly opened connection the sandbox's own (watched, with its
    /// network served) if the sandbox is still RUNNING; otherwise closes it.
    async fn adopt(
        self: &Arc<Self>,
        id: Uuid,
        conn: AgentConn,
    ) -> Result<AgentConn, crate::runtime::RuntimeError> {
        let record = match self.store.get_sandbox(id).await {
            Ok(Some(r)) if r.status == SandboxStatus::Running => r,
            _ => {
                conn.shutdown().await;
                return Err(crate::runtime::RuntimeError::NotRunning);
            }
        };
        self.register_agent(id, conn.clone());
        self.network.serve(id, &record.network, &conn).await;
        Ok(conn)
    }

    /// Counts a reconnect of `id`; false when there were too many lately.
    fn note_reconnect(&self, id: Uuid) -> bool {
        let now = std::time::Instant::now();
        let mut all = self.reconnects.lock().unwrap_or_else(|p| p.into_inner());
        let recent = all.entry(id).or_default();
        recent.retain(|t| now.duration_since(*t) < RECONNECT_WINDOW);
        recent.push(now);
        recent.len() <= MAX_RECONNECTS
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
        AgentCallError::TimedOut(limit) => ServiceError::Unavailable(format!(
            "the sandbox's agent did not answer within {}s; retry",
            limit.as_secs()
        )),
        other => ServiceError::Internal(other.to_string()),
    }
}

/// Maps an agent failure for an operation that is unsafe to repeat (exec, start, signal).
fn agent_error_unsafe(e: AgentCallError, what: &str) -> ServiceError {
    match e {
        AgentCallError::Closed => ServiceError::Ambiguous(format!(
            "the connection to the sandbox closed during {what}; it may or may not have happened"
        )),
        AgentCallError::TimedOut(limit) => ServiceError::Ambiguous(format!(
            "the sandbox's agent did not answer {what} within {}s; it may or may not have happened",
            limit.as_secs()
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
