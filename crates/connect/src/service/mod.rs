//! The Connect use cases the daemon calls: packages and builds, connections and OAuth, runs,
//! the scheduler tick, logs and committed records.

mod connections;
mod deliveries;
mod execute;
mod packages;
mod runs;
mod upgrade;
mod webhooks;

pub use connections::MIN_SCHEDULE_SECONDS;
pub use runs::DueSync;
pub use webhooks::{
    DeliveriesPage, Received, SignatureRequest, WebhookError, WebhookSetup, WebhookSetupRequest,
    WebhookUrl, DELIVERY_PATH, WEBHOOK_SECRET_SCOPE,
};

use crate::broker::TokenStore;
use crate::credentials::Credentials;
use crate::crypto::CredentialBox;
use crate::egress::BrokerConfig;
use crate::job::LogSink;
use crate::limits::Limits;
use crate::model::{ConnectionStatus, LogLevel};
use crate::sandbox::JobSandboxes;
use crate::store::{Location, Store, StoreError};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

/// Errors of the service.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The thing does not exist in this workspace.
    #[error("{0} not found")]
    NotFound(&'static str),
    /// The request conflicts with stored state (immutable version, running sync, ...).
    #[error("{0}")]
    Conflict(String),
    /// The request is invalid.
    #[error("{0}")]
    Invalid(String),
    /// The credentials do not fit the package's auth kind, or a secret is unusable (too short
    /// to redact): the HTTP layer names the field.
    #[error(transparent)]
    Credentials(#[from] crate::credentials::CredentialsError),
    /// The store failed.
    #[error(transparent)]
    Store(StoreError),
    /// Files under the data directory could not be written or read.
    #[error("connect data directory: {0}")]
    Io(String),
    /// The database is unreachable or busy: nothing is known to have changed (safe to repeat).
    #[error("{0}")]
    Unavailable(String),
    /// The data disk is full: nothing was changed (safe to repeat once space is freed).
    #[error("the data disk is full: {0}")]
    StorageFull(String),
    /// Stored credentials could not be used.
    #[error(transparent)]
    Crypto(#[from] crate::crypto::CryptoError),
    /// The configuration is invalid.
    #[error(transparent)]
    Limits(#[from] crate::limits::LimitsError),
    /// The OAuth token endpoint refused or failed.
    #[error("OAuth: {0}")]
    Oauth(#[from] crate::oauth::OauthError),
}

impl From<StoreError> for ServiceError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(what) => ServiceError::NotFound(what),
            StoreError::Exists(what) => ServiceError::Conflict(format!("{what} exists already")),
            StoreError::Changed(why) => ServiceError::Conflict(why),
            StoreError::Full(_) => ServiceError::StorageFull(
                "the Connect database could not record the change, so nothing changed; \
                 free space in the data dir, then retry"
                    .into(),
            ),
            StoreError::Unavailable(e) => ServiceError::Unavailable(format!(
                "the Connect database is unavailable, so nothing changed; retry: {e}"
            )),
            other => ServiceError::Store(other),
        }
    }
}

/// How the HTTP layer should answer an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// 404.
    NotFound,
    /// 409.
    Conflict,
    /// 400 / 422.
    Invalid,
    /// 502: an upstream (OAuth provider) failed.
    Upstream,
    /// 503: the data disk is full.
    StorageFull,
    /// 503: the database is unavailable; retry.
    Unavailable,
    /// 500.
    Internal,
}

impl ServiceError {
    /// The class of this error, for the daemon's error → HTTP map.
    pub fn class(&self) -> ErrorClass {
        match self {
            ServiceError::NotFound(_) => ErrorClass::NotFound,
            ServiceError::Conflict(_) => ErrorClass::Conflict,
            ServiceError::Invalid(_) | ServiceError::Credentials(_) => ErrorClass::Invalid,
            ServiceError::Oauth(crate::oauth::OauthError::Rejected) => ErrorClass::Invalid,
            ServiceError::Oauth(_) => ErrorClass::Upstream,
            ServiceError::StorageFull(_) => ErrorClass::StorageFull,
            ServiceError::Unavailable(_) => ErrorClass::Unavailable,
            _ => ErrorClass::Internal,
        }
    }
}

fn io_error(what: &Path, e: std::io::Error) -> ServiceError {
    // std maps ENOSPC to this kind.
    if e.kind() == std::io::ErrorKind::StorageFull {
        return ServiceError::StorageFull(format!(
            "writing {} failed, so nothing changed; free space in the data dir, then retry",
            what.display()
        ));
    }
    ServiceError::Io(format!("{}: {e}", what.display()))
}

/// Configuration of the service.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// Directory for the database (`connect.db`), tarballs, artifacts and spools.
    pub data_dir: PathBuf,
    /// Limits.
    pub limits: Limits,
    /// Broker configuration (the daemon sets the public-address filter).
    pub broker: BrokerConfig,
    /// Keys for credentials at rest (the daemon's secret keys).
    pub credential_keys: sbx_secrets::KeyRing,
    /// PostgreSQL for the Connect tables (sbxd's `--database-url`, the main store's
    /// database); without it, SQLite at `data_dir/connect.db`.
    pub database_url: Option<String>,
    /// This node's id when several nodes share the database (cluster mode): runs and builds
    /// are recorded as its, and package files go into the database for the other nodes.
    pub node_id: Option<String>,
}

/// The Connect service.
pub struct ConnectService {
    store: Arc<dyn Store>,
    sandboxes: Arc<dyn JobSandboxes>,
    crypto: CredentialBox,
    limits: Limits,
    broker: BrokerConfig,
    data_dir: PathBuf,
    /// (workspace, connection, sync) of syncs running on this node. The store decides
    /// (one queued or running run per sync); this only answers early without a query.
    active_syncs: Arc<Mutex<HashSet<SyncKey>>>,
    /// Whether other nodes share the store: package tarballs and built artifacts are kept
    /// in it too, so that any node can build or run any package.
    shared: bool,
    /// Per-connection rate buckets of webhook deliveries on this node.
    buckets: webhooks::Buckets,
    /// Wakes the delivery worker when a delivery was stored.
    deliveries_due: tokio::sync::Notify,
    /// Records spooled so far by the running attempt of each run on this node (run id →
    /// count): the live progress `GET .../runs/{id}` answers as `recordsReceived`.
    progress: Progress,
}

/// Run id → records its running attempt has spooled.
type Progress = Arc<Mutex<HashMap<String, Arc<AtomicU64>>>>;

/// Keeps a run's progress counter listed while its attempt runs.
pub(super) struct ProgressEntry {
    progress: Progress,
    run_id: String,
}

impl ProgressEntry {
    /// Lists a fresh counter for `run_id` (a retried attempt starts again from 0).
    pub(super) fn start(progress: &Progress, run_id: &str) -> (Self, Arc<AtomicU64>) {
        let counter = Arc::new(AtomicU64::new(0));
        progress
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(run_id.to_string(), Arc::clone(&counter));
        let entry = ProgressEntry {
            progress: Arc::clone(progress),
            run_id: run_id.to_string(),
        };
        (entry, counter)
    }
}

impl Drop for ProgressEntry {
    fn drop(&mut self) {
        self.progress
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.run_id);
    }
}

/// (workspace, connection, sync).
type SyncKey = (String, String, String);

impl std::fmt::Debug for ConnectService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectService")
            .field("data_dir", &self.data_dir)
            .finish()
    }
}

impl ConnectService {
    /// Opens the database under `data_dir` and recovers from a previous daemon: runs and builds
    /// left unfinished fail (platform) and their spools are deleted.
    pub fn open(
        config: ServiceConfig,
        sandboxes: Arc<dyn JobSandboxes>,
    ) -> Result<Arc<Self>, ServiceError> {
        config.limits.validate()?;
        std::fs::create_dir_all(&config.data_dir).map_err(|e| io_error(&config.data_dir, e))?;
        let location = Location::of_node(&config.data_dir, config.database_url.as_deref());
        let store = crate::store::open_for_node(&location, config.node_id.as_deref())?;
        let mut broker = config.broker;
        broker.max_response_bytes = config.limits.max_response_bytes;
        let service = ConnectService {
            store,
            sandboxes,
            crypto: CredentialBox::from_ring(config.credential_keys),
            limits: config.limits,
            broker,
            data_dir: config.data_dir,
            active_syncs: Arc::default(),
            shared: config.node_id.is_some(),
            buckets: Default::default(),
            deliveries_due: tokio::sync::Notify::new(),
            progress: Arc::default(),
        };
        service.recover()?;
        Ok(Arc::new(service))
    }

    fn recover(&self) -> Result<(), ServiceError> {
        let runs = self.store.fail_unfinished_runs()?;
        // Deliveries whose jobs those runs were need not wait for their lease.
        self.store.release_deliveries(&runs)?;
        let builds = self.store.fail_unfinished_builds()?;
        let spool_dir = self.spool_dir();
        let spools = crate::spool::clean_dir(&spool_dir)
            .map_err(|e| ServiceError::Io(format!("{}: {e}", spool_dir.display())))?;
        if !runs.is_empty() || builds > 0 || spools > 0 {
            tracing::info!(
                runs = runs.len(),
                builds,
                spools,
                "connect: failed work left by the previous daemon"
            );
        }
        Ok(())
    }

    /// Fails the unfinished runs and builds of a node that was declared lost (their sandboxes
    /// went with it); its syncs' intervals stay owed, so a live node's scheduler runs them.
    pub fn fail_work_of_lost_node(&self, node: &str) -> Result<usize, ServiceError> {
        let (runs, builds) = self.store.fail_work_of_lost_node(node)?;
        // Deliveries whose jobs ran there are due again now, on a live node.
        self.store.release_deliveries(&runs)?;
        if !runs.is_empty() || builds > 0 {
            tracing::warn!(
                node,
                runs = runs.len(),
                builds,
                "connect: failed the work of a lost node"
            );
        }
        Ok(runs.len() + builds)
    }

    /// The store (read access for the daemon's own needs).
    pub fn store(&self) -> &dyn Store {
        &*self.store
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Deletes log lines past the retention; call periodically.
    pub fn run_janitor(&self, now: chrono::DateTime<chrono::Utc>) -> Result<usize, ServiceError> {
        crate::logs::janitor(&*self.store, now, self.limits.log_retention).map_err(|e| match e {
            crate::logs::LogsError::Store(s) => s.into(),
        })
    }

    fn spool_dir(&self) -> PathBuf {
        self.data_dir.join("spool")
    }

    fn seal(
        &self,
        workspace: &str,
        connection_id: &str,
        c: &Credentials,
    ) -> Result<Vec<u8>, ServiceError> {
        let json = serde_json::to_vec(c).map_err(|e| ServiceError::Invalid(e.to_string()))?;
        Ok(self.crypto.seal(workspace, connection_id, &json)?)
    }

    fn open_credentials(
        &self,
        workspace: &str,
        connection_id: &str,
    ) -> Result<Credentials, ServiceError> {
        let blob = self
            .store
            .get_connection_credentials(workspace, connection_id)?;
        let json = self.crypto.open(workspace, connection_id, &blob)?;
        serde_json::from_slice(&json)
            .map_err(|_| ServiceError::Crypto(crate::crypto::CryptoError::Open))
    }
}

/// Persists broker token updates for one connection.
struct StoreTokens {
    store: Arc<dyn Store>,
    crypto: CredentialBox,
    workspace: String,
    connection_id: String,
}

impl TokenStore for StoreTokens {
    fn save(&self, credentials: &Credentials) -> Result<(), String> {
        let json = serde_json::to_vec(credentials).map_err(|e| e.to_string())?;
        let blob = self
            .crypto
            .seal(&self.workspace, &self.connection_id, &json)
            .map_err(|e| e.to_string())?;
        self.store
            .set_connection_credentials(&self.workspace, &self.connection_id, &blob, None)
            .map_err(|e| e.to_string())
    }

    fn reauthorization_required(&self) -> Result<(), String> {
        self.store
            .set_connection_status(
                &self.workspace,
                &self.connection_id,
                ConnectionStatus::ReauthorizationRequired,
            )
            .map_err(|e| e.to_string())
    }
}

/// Writes a run's recorded log lines to the store.
struct StoreLogs {
    store: Arc<dyn Store>,
    workspace: String,
    run_id: String,
    connection_id: Option<String>,
}

impl LogSink for StoreLogs {
    fn record(&self, level: LogLevel, message: &str) {
        if let Err(e) = self.store.insert_log(
            &self.workspace,
            &self.run_id,
            self.connection_id.as_deref(),
            level,
            message,
        ) {
            tracing::warn!(error = %e, run = %self.run_id, "recording a log line failed");
        }
    }
}

/// Holds a (workspace, connection, sync) slot while its run is going.
struct SyncSlot {
    set: Arc<Mutex<HashSet<SyncKey>>>,
    key: SyncKey,
}

impl SyncSlot {
    /// Claims the slot; `None` when a run of that sync is going.
    fn claim(set: &Arc<Mutex<HashSet<SyncKey>>>, key: SyncKey) -> Option<Self> {
        let mut guard = set.lock().unwrap_or_else(|p| p.into_inner());
        if !guard.insert(key.clone()) {
            return None;
        }
        Some(SyncSlot {
            set: set.clone(),
            key,
        })
    }
}

impl Drop for SyncSlot {
    fn drop(&mut self) {
        self.set
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.key);
    }
}
