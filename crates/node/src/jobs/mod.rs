//! Connect's job and build sandboxes on this node's gVisor runtime: a job sandbox
//! (`job`: read-only root, fresh `/tmp`, the build artifact and the SDK mounted
//! read-only, no network but the job channel), a build sandbox (`build`: `npm ci
//! --ignore-scripts` with the npm registry as the only reachable host), and the
//! watchdog that stops either at its memory limit (`memory`).
//!
//! The node decides nothing here: whether the node has room for a sandbox is asked of
//! the control plane through [`Admission`], and what a job does over its channel is the
//! Connect runtime's business (the daemon adapts these types to `sbx-connect`'s).
//!
//! Job and build sandboxes have no store row: they are not in anyone's
//! sandbox list, and a restart of sbxd removes any that a crash left behind
//! (their containers are `sbx-<uuid>` like every sandbox, and start-up
//! reconciliation destroys every container no active sandbox owns).

mod build;
mod job;
mod memory;

pub use build::{BuildOutcome, BuildRequest};
pub use job::{JobEnd, JobRequest, JobSandbox, ARTIFACT_MOUNT, SDK_MOUNT};

use crate::network::Network;
use crate::runtime::{AgentConn, JobOptions, Runtime, SandboxSpec};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

/// vCPUs of a job or build sandbox.
pub const JOB_VCPUS: u32 = 1;
/// How long a job or build sandbox may take to boot.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// Errors of the Connect sandboxes.
#[derive(Debug, thiserror::Error)]
pub enum JobsError {
    /// The node has no room for the sandbox.
    #[error("no room for the sandbox: {0}")]
    Admission(String),
    /// The runtime could not start the sandbox.
    #[error("starting the sandbox: {0}")]
    Start(String),
    /// The sandbox's agent refused or failed a request.
    #[error("sandbox agent: {0}")]
    Agent(String),
    /// The configured npm registry is not a usable URL.
    #[error("npm registry {0:?} is not an http(s) URL with a host")]
    Registry(String),
}

/// The control plane's answer when the node has no room for a sandbox (its text is
/// shown after "no room for the sandbox: ").
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct AdmissionRefused(pub String);

/// A sandbox's share of the node, held while the sandbox exists; dropping it releases the share.
pub type AdmissionGuard = Box<dyn Send + Sync>;

/// Room on the node, as the control plane decides it: a job or build sandbox starts
/// only once admitted and holds the returned guard until it is removed.
#[async_trait::async_trait]
pub trait Admission: Send + Sync {
    /// Admits a sandbox of `vcpu` vCPUs and `memory_mb` MiB, or says why not.
    async fn admit(&self, vcpu: u32, memory_mb: u32) -> Result<AdmissionGuard, AdmissionRefused>;
}

/// Settings of the Connect sandboxes.
#[derive(Debug, Clone)]
pub struct JobsConfig {
    /// Host directory holding the installed SDK (`runner.mjs`, `index.mjs`, `lib/`), mounted
    /// read-only at `/opt/sbx-connect`.
    pub sdk_dir: PathBuf,
    /// The npm registry builds may reach (its host only), e.g. `https://registry.npmjs.org/`.
    pub npm_registry: String,
    /// PEM roots npm in a build sandbox trusts on top of Node's own (a registry behind a
    /// TLS-inspecting proxy); mounted read-only into build sandboxes.
    pub npm_ca_file: Option<PathBuf>,
}

/// Job and build sandboxes for the Connect runtime.
pub struct GvisorJobs {
    /// Admission (a job's sandbox takes its share of the node). One way only: the
    /// control plane's service knows nothing of Connect.
    admission: Arc<dyn Admission>,
    runtime: Arc<dyn Runtime>,
    /// Job sandboxes' own network state (denials are counted per sandbox there).
    network: Arc<Network>,
    config: JobsConfig,
}

impl GvisorJobs {
    /// Job sandboxes admitted by `admission` on `runtime`; `test_public` as
    /// `--network-test-public-cidr`.
    pub fn new(
        admission: Arc<dyn Admission>,
        runtime: Arc<dyn Runtime>,
        config: JobsConfig,
        test_public: &[String],
    ) -> Result<Self, String> {
        let network = Network::new(sbx_api_types::NetworkMode::None, test_public)?;
        build::registry_host(&config.npm_registry).map_err(|e| e.to_string())?;
        Ok(GvisorJobs {
            admission,
            runtime,
            network: Arc::new(network),
            config,
        })
    }

    /// Runs one build to its end in a fresh sandbox; the sandbox is always removed.
    pub async fn run_build(&self, req: BuildRequest) -> Result<BuildOutcome, JobsError> {
        build::run(self, req).await
    }

    /// Admits a sandbox of `memory_mib` on the node.
    async fn admit(&self, memory_mib: u64) -> Result<(AdmissionGuard, u32), JobsError> {
        let memory_mb = u32::try_from(memory_mib).unwrap_or(u32::MAX);
        let reservation = self
            .admission
            .admit(JOB_VCPUS, memory_mb)
            .await
            .map_err(|e| JobsError::Admission(e.to_string()))?;
        Ok((reservation, memory_mb))
    }

    /// Boots a fresh sandbox with `job`; destroys it again when the boot fails.
    async fn boot(
        &self,
        id: Uuid,
        memory_mb: u32,
        job: JobOptions,
    ) -> Result<AgentConn, JobsError> {
        let spec = SandboxSpec {
            id,
            vcpu: JOB_VCPUS,
            memory_mb,
            volumes: Vec::new(),
            rootfs: None,
        };
        let started = tokio::time::timeout(START_TIMEOUT, self.runtime.start_job(spec, job)).await;
        let error = match started {
            Ok(Ok(conn)) => return Ok(conn),
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("did not start within {}s", START_TIMEOUT.as_secs()),
        };
        remove(&self.runtime, &self.network, id).await;
        Err(JobsError::Start(error))
    }
}

/// Removes a job or build sandbox and its network counters; logs a failure.
async fn remove(runtime: &Arc<dyn Runtime>, network: &Network, id: Uuid) {
    if let Err(e) = runtime.destroy(id).await {
        tracing::error!(sandbox = %id, error = %e, "removing a Connect sandbox");
    }
    network.forget(id);
}
