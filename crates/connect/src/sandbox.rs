//! What the Connect runtime needs from the daemon's sandboxes: a fresh no-network job sandbox
//! with a job channel, and a build sandbox that can reach only the npm registry.

use crate::job::JobChannel;
use crate::model::JobKind;
use std::path::PathBuf;
use std::time::Duration;

/// Errors of the sandbox layer (a platform failure for the run).
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The sandbox could not be started or driven.
    #[error("sandbox: {0}")]
    Failed(String),
}

/// A job sandbox to start.
#[derive(Debug, Clone)]
pub struct JobSandboxRequest {
    /// Workspace (for accounting and names).
    pub workspace: String,
    /// Run id (one sandbox per attempt; also used in names).
    pub run_id: String,
    /// Attempt number.
    pub attempt: u32,
    /// Job kind.
    pub kind: JobKind,
    /// Host directory of the build artifact, mounted read-only at `/pkg`.
    pub artifact_dir: PathBuf,
    /// Memory budget, MiB.
    pub memory_mib: u64,
    /// Time budget (the host also enforces it over the channel).
    pub time_budget: Duration,
}

/// How a job sandbox ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SandboxEnd {
    /// The runner exited (code, if known).
    Exited(Option<i32>),
    /// The sandbox hit its memory limit (OOM kill).
    MemoryLimit,
    /// The sandbox itself failed (runsc error, killed by the host for a reason other than OOM).
    Crashed(String),
}

/// A running job sandbox.
#[async_trait::async_trait]
pub trait JobSandbox: Send {
    /// The accepted job channel (the runner's first connection to `sbx-job.internal:1`).
    /// Returns `None` when called twice or when the runner never connected.
    async fn take_channel(&mut self) -> Option<Box<dyn JobChannel>>;

    /// Waits up to `grace` for the runner to exit, then kills the sandbox; removes it and
    /// reports how it ended.
    async fn finish(self: Box<Self>, grace: Duration) -> SandboxEnd;
}

/// A build to run.
#[derive(Debug, Clone)]
pub struct BuildRequest {
    /// Workspace.
    pub workspace: String,
    /// Build id.
    pub build_id: String,
    /// Host directory holding the unpacked package (package.json, package-lock.json, code);
    /// mounted read-write at `/src`. After `npm ci --ignore-scripts` there it is the artifact.
    pub package_dir: PathBuf,
    /// Memory budget, MiB.
    pub memory_mib: u64,
    /// Time budget.
    pub time_budget: Duration,
}

/// How a build went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildOutput {
    /// Whether `npm ci --ignore-scripts` exited 0.
    pub success: bool,
    /// Its output (bounded by the implementation).
    pub log: String,
}

/// The daemon's sandboxes, as the Connect runtime uses them.
#[async_trait::async_trait]
pub trait JobSandboxes: Send + Sync {
    /// Starts a fresh no-network job sandbox: the artifact at `/pkg` (read-only), the SDK at
    /// `/opt/sbx-connect` (read-only), read-only root, fresh `/tmp`, the memory budget, no
    /// configuration environment variables; runs `node /opt/sbx-connect/runner.mjs --proxy
    /// 127.0.0.1:3128 --target sbx-job.internal:1` and hands over the job channel.
    async fn start_job(&self, req: JobSandboxRequest) -> Result<Box<dyn JobSandbox>, SandboxError>;

    /// Runs a build in a fresh sandbox whose only reachable host is the npm registry:
    /// `npm ci --ignore-scripts` in `/src` (= `req.package_dir`).
    async fn run_build(&self, req: BuildRequest) -> Result<BuildOutput, SandboxError>;
}
