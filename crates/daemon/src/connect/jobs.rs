//! [`sbx_connect::sandbox::JobSandboxes`] on this daemon's gVisor runtime: job sandboxes
//! (read-only root, fresh `/tmp`, the build artifact and the SDK mounted read-only, no
//! network but the job channel).

use super::JobsError;
use crate::network::Network;
use crate::runtime::{AgentConn, JobOptions, Runtime, SandboxSpec};
use crate::service::{Reservation, Service};
use sbx_agent_proto::{CommandSpec, ProcessState, Reply, Request};
use sbx_connect::job::JobChannel;
use sbx_connect::sandbox::{
    BuildOutput, BuildRequest, JobSandbox, JobSandboxRequest, JobSandboxes, SandboxEnd,
    SandboxError,
};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use uuid::Uuid;

/// Where the SDK (runner included) is mounted in a job sandbox.
pub const SDK_MOUNT: &str = "/opt/sbx-connect";
/// Where the build artifact is mounted in a job sandbox.
pub const ARTIFACT_MOUNT: &str = "/pkg";
/// vCPUs of a job or build sandbox.
pub(super) const JOB_VCPUS: u32 = 1;
/// Largest fresh `/tmp` (it lives in the sandbox's memory, so also at most half the budget).
const TMP_MAX_BYTES: u64 = 256 * 1024 * 1024;
/// How long a job or build sandbox may take to boot.
pub(super) const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the runner gets to open the job channel after it started.
const CHANNEL_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a job sandbox's cgroup is checked for an OOM kill.
const MEMORY_WATCH_INTERVAL: Duration = Duration::from_millis(200);

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
    /// The lifecycle service, for admission (a job's sandbox takes its share of the
    /// node). One way only: the service knows nothing of Connect.
    service: Arc<Service>,
    pub(super) runtime: Arc<dyn Runtime>,
    /// Job sandboxes' own network state (denials are counted per sandbox there).
    pub(super) network: Arc<Network>,
    pub(super) config: JobsConfig,
}

impl GvisorJobs {
    /// Job sandboxes run by `service` on `runtime`; `test_public` as `--network-test-public-cidr`.
    pub fn new(
        service: &Arc<Service>,
        runtime: Arc<dyn Runtime>,
        config: JobsConfig,
        test_public: &[String],
    ) -> Result<Self, String> {
        let network = Network::new(sbx_api_types::NetworkMode::None, test_public)?;
        super::build::registry_host(&config.npm_registry).map_err(|e| e.to_string())?;
        Ok(GvisorJobs {
            service: Arc::clone(service),
            runtime,
            network: Arc::new(network),
            config,
        })
    }

    /// Admits a sandbox of `memory_mib` on the node.
    pub(super) async fn admit(&self, memory_mib: u64) -> Result<(Reservation, u32), JobsError> {
        let service = &self.service;
        let memory_mb = u32::try_from(memory_mib).unwrap_or(u32::MAX);
        let reservation = service
            .admit_job(JOB_VCPUS, memory_mb)
            .await
            .map_err(|e| JobsError::Admission(e.to_string()))?;
        Ok((reservation, memory_mb))
    }

    /// Boots a fresh sandbox with `job`; destroys it again when the boot fails.
    pub(super) async fn boot(
        &self,
        id: Uuid,
        memory_mb: u32,
        job: JobOptions,
    ) -> Result<AgentConn, JobsError> {
        let spec = SandboxSpec {
            id,
            vcpu: JOB_VCPUS,
            memory_mb,
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

/// The size of a job's fresh `/tmp`.
pub(super) fn tmp_bytes(memory_mb: u32) -> u64 {
    (u64::from(memory_mb) * 1024 * 1024 / 2).min(TMP_MAX_BYTES)
}

/// Stops the sandbox as soon as its cgroup records an OOM kill: a gVisor sandbox at its
/// memory limit can stall instead of dying, and a job or build must not wait for its deadline.
pub(super) async fn watch_memory(runtime: Arc<dyn Runtime>, id: Uuid, hit: Arc<AtomicBool>) {
    loop {
        tokio::time::sleep(MEMORY_WATCH_INTERVAL).await;
        if runtime.death_reason(id).is_some() {
            hit.store(true, Ordering::SeqCst);
            tracing::info!(sandbox = %id, "job sandbox reached its memory limit; stopping it");
            if let Err(e) = runtime.destroy(id).await {
                tracing::error!(sandbox = %id, error = %e, "stopping a job sandbox at its memory limit");
            }
            return;
        }
    }
}

/// Removes a job or build sandbox and its network counters; logs a failure.
pub(super) async fn remove(runtime: &Arc<dyn Runtime>, network: &Network, id: Uuid) {
    if let Err(e) = runtime.destroy(id).await {
        tracing::error!(sandbox = %id, error = %e, "removing a Connect sandbox");
    }
    network.forget(id);
}

/// The runner's argv: a shell that discards stdout and stderr (never captured) and
/// execs Node with a heap limit above the job's memory budget, so the sandbox's memory
/// limit (not V8's smaller default) is what stops a hungry package.
fn runner_argv(memory_mb: u32) -> Vec<String> {
    let heap_mb = u64::from(memory_mb) * 2;
    let node = format!(
        "exec node --max-old-space-size={heap_mb} {SDK_MOUNT}/runner.mjs \
         --proxy 127.0.0.1:3128 --target {}:{} >/dev/null 2>&1",
        crate::network::broker::JOB_CHANNEL_HOST,
        crate::network::broker::JOB_CHANNEL_PORT
    );
    vec!["/bin/sh".into(), "-c".into(), node]
}

#[async_trait::async_trait]
impl JobSandboxes for GvisorJobs {
    async fn start_job(&self, req: JobSandboxRequest) -> Result<Box<dyn JobSandbox>, SandboxError> {
        let begun = Instant::now();
        let (reservation, memory_mb) = self.admit(req.memory_mib).await?;
        let id = Uuid::new_v4();
        let options = JobOptions {
            readonly_root: true,
            tmp_bytes: tmp_bytes(memory_mb),
            binds: vec![
                (req.artifact_dir.clone(), ARTIFACT_MOUNT.to_string(), true),
                (self.config.sdk_dir.clone(), SDK_MOUNT.to_string(), true),
            ],
        };
        let conn = self.boot(id, memory_mb, options).await?;
        let memory_hit = Arc::new(AtomicBool::new(false));
        let watchdog = tokio::spawn(watch_memory(self.runtime.clone(), id, memory_hit.clone()));
        let mut job = GvisorJob {
            id,
            conn: Some(conn.clone()),
            process: None,
            channel: None,
            runtime: self.runtime.clone(),
            network: self.network.clone(),
            reservation: Some(reservation),
            begun,
            memory_hit,
            watchdog,
        };
        // Dropping `job` on an error below removes the sandbox.
        let channel = self
            .network
            .serve_job(id, &conn)
            .await
            .map_err(JobsError::Agent)?;
        job.channel = Some(channel);
        let start = Request::ProcessStart {
            command: CommandSpec {
                argv: runner_argv(memory_mb),
                env: Default::default(),
                cwd: Some("/tmp".into()),
            },
        };
        match conn.call(start).await {
            Ok((Reply::Process { process }, _)) => job.process = Some(process.id),
            Ok((other, _)) => {
                return Err(JobsError::Agent(format!("unexpected answer {other:?}")).into())
            }
            Err(e) => return Err(JobsError::Agent(format!("starting the runner: {e}")).into()),
        }
        tracing::debug!(
            sandbox = %id,
            run = %req.run_id,
            attempt = req.attempt,
            kind = ?req.kind,
            boot_ms = begun.elapsed().as_millis() as u64,
            "job sandbox started"
        );
        Ok(Box::new(job))
    }

    async fn run_build(&self, req: BuildRequest) -> Result<BuildOutput, SandboxError> {
        Ok(super::build::run(self, req).await?)
    }
}

/// One running job sandbox.
struct GvisorJob {
    id: Uuid,
    /// Taken by `finish`.
    conn: Option<AgentConn>,
    /// The runner's process id in the agent.
    process: Option<Uuid>,
    /// Receives the job channel from the broker; taken by `take_channel`.
    channel: Option<oneshot::Receiver<tokio::io::DuplexStream>>,
    runtime: Arc<dyn Runtime>,
    network: Arc<Network>,
    /// The sandbox's share of the node, released once it is removed.
    reservation: Option<Reservation>,
    begun: Instant,
    /// Set by the memory watchdog when it stopped the sandbox.
    memory_hit: Arc<AtomicBool>,
    watchdog: tokio::task::JoinHandle<()>,
}

impl GvisorJob {
    /// Waits up to `grace` for the runner; `None` when it did not end (or the agent is gone).
    async fn wait_runner(&self, grace: Duration) -> Option<sbx_agent_proto::ProcessInfo> {
        let (conn, process) = (self.conn.as_ref()?, self.process?);
        let wait = Request::ProcessWait {
            process,
            timeout_ms: grace.as_millis() as u64,
        };
        let answer = tokio::time::timeout(grace + Duration::from_secs(2), conn.call(wait)).await;
        match answer {
            Ok(Ok((Reply::Process { process }, _))) if process.state.is_terminal() => Some(process),
            _ => None,
        }
    }
}

#[async_trait::async_trait]
impl JobSandbox for GvisorJob {
    async fn take_channel(&mut self) -> Option<Box<dyn JobChannel>> {
        let rx = self.channel.take()?;
        let (conn, process) = (self.conn.clone()?, self.process?);
        // Stop waiting early when the runner ends without connecting.
        let runner_ended = async move {
            let wait = Request::ProcessWait {
                process,
                timeout_ms: CHANNEL_TIMEOUT.as_millis() as u64,
            };
            let _ = conn.call(wait).await;
        };
        let got = tokio::select! {
            got = rx => got.ok(),
            _ = runner_ended => None,
            _ = tokio::time::sleep(CHANNEL_TIMEOUT) => None,
        };
        match got {
            Some(stream) => {
                tracing::info!(
                    sandbox = %self.id,
                    start_ms = self.begun.elapsed().as_millis() as u64,
                    "job channel open"
                );
                Some(Box::new(stream))
            }
            None => {
                tracing::warn!(sandbox = %self.id, "the runner never opened the job channel");
                None
            }
        }
    }

    async fn finish(mut self: Box<Self>, grace: Duration) -> SandboxEnd {
        let runner = self.wait_runner(grace).await;
        self.watchdog.abort();
        // Read before the removal deletes the cgroup that records the OOM kill.
        let end = if self.memory_hit.load(Ordering::SeqCst)
            || self.runtime.death_reason(self.id).is_some()
        {
            SandboxEnd::MemoryLimit
        } else {
            match runner {
                Some(p) if p.state == ProcessState::Exited => SandboxEnd::Exited(p.exit_code),
                Some(p) if p.state == ProcessState::Killed => {
                    SandboxEnd::Exited(p.signal.map(|s| 128 + s))
                }
                Some(p) => SandboxEnd::Crashed(format!(
                    "runner {}: {}",
                    format!("{:?}", p.state).to_lowercase(),
                    p.error.unwrap_or_default()
                )),
                None => match self.runtime.is_alive(self.id).await {
                    // Still running after the grace period: it is killed below.
                    Ok(true) if self.conn.as_ref().is_some_and(|c| !c.is_closed()) => {
                        SandboxEnd::Exited(None)
                    }
                    _ => SandboxEnd::Crashed("the job sandbox stopped unexpectedly".into()),
                },
            }
        };
        if let Some(conn) = self.conn.take() {
            conn.shutdown().await;
        }
        let denied = self.network.denied_count(self.id);
        remove(&self.runtime, &self.network, self.id).await;
        self.reservation = None;
        tracing::debug!(
            sandbox = %self.id,
            ?end,
            denied,
            total_ms = self.begun.elapsed().as_millis() as u64,
            "job sandbox removed"
        );
        end
    }
}

impl Drop for GvisorJob {
    /// A job dropped without `finish` (an error while starting, a cancelled task): remove
    /// its sandbox in the background.
    fn drop(&mut self) {
        self.watchdog.abort();
        let Some(conn) = self.conn.take() else {
            return;
        };
        let (runtime, network, id) = (self.runtime.clone(), self.network.clone(), self.id);
        let reservation = self.reservation.take();
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                conn.shutdown().await;
                remove(&runtime, &network, id).await;
                drop(reservation);
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runner_discards_output_and_takes_no_environment() {
        let argv = runner_argv(512);
        assert_eq!(argv[0], "/bin/sh");
        assert!(argv[2].starts_with("exec node --max-old-space-size=1024 /opt/sbx-connect/runner.mjs --proxy 127.0.0.1:3128 --target sbx-job.internal:1"));
        assert!(argv[2].ends_with(">/dev/null 2>&1"));
        assert_eq!(tmp_bytes(1024), 256 * 1024 * 1024);
        assert_eq!(tmp_bytes(256), 128 * 1024 * 1024);
    }
}
