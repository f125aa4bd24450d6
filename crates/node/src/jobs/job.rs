//! Job sandboxes: read-only root, fresh `/tmp`, the build artifact and the SDK mounted
//! read-only, no network but the job channel; the runner started in it, and its end.

use super::memory::{tmp_bytes, watch_memory};
use super::{remove, AdmissionGuard, GvisorJobs, JobsError};
use crate::network::Network;
use crate::runtime::{AgentConn, JobOptions, Runtime};
use sbx_agent_proto::{CommandSpec, ProcessState, Reply, Request};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::DuplexStream;
use tokio::sync::oneshot;
use uuid::Uuid;

/// Where the SDK (runner included) is mounted in a job sandbox.
pub const SDK_MOUNT: &str = "/opt/sbx-connect";
/// Where the build artifact is mounted in a job sandbox.
pub const ARTIFACT_MOUNT: &str = "/pkg";
/// How long the runner gets to open the job channel after it started.
const CHANNEL_TIMEOUT: Duration = Duration::from_secs(30);

/// A job sandbox to start.
#[derive(Debug, Clone)]
pub struct JobRequest {
    /// Run id (one sandbox per attempt), for the logs.
    pub run_id: String,
    /// Attempt number, for the logs.
    pub attempt: u32,
    /// Job kind, for the logs.
    pub kind: String,
    /// Host directory of the build artifact, mounted read-only at `/pkg`.
    pub artifact_dir: PathBuf,
    /// Memory budget, MiB.
    pub memory_mib: u64,
}

/// How a job sandbox ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobEnd {
    /// The runner exited (code, if known).
    Exited(Option<i32>),
    /// The sandbox hit its memory limit (OOM kill).
    MemoryLimit,
    /// The sandbox itself failed (runsc error, killed by the host for a reason other than OOM).
    Crashed(String),
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

impl GvisorJobs {
    /// Starts a fresh no-network job sandbox: the artifact at `/pkg` (read-only), the SDK at
    /// `/opt/sbx-connect` (read-only), read-only root, fresh `/tmp`, the memory budget, no
    /// configuration environment variables; runs the runner, whose job channel
    /// [`JobSandbox::take_channel`] hands over.
    pub async fn start_job(&self, req: JobRequest) -> Result<JobSandbox, JobsError> {
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
        let mut job = JobSandbox {
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
            options: Default::default(),
        };
        match conn.call(start).await {
            Ok((Reply::Process { process }, _)) => job.process = Some(process.id),
            Ok((other, _)) => return Err(JobsError::Agent(format!("unexpected answer {other:?}"))),
            Err(e) => return Err(JobsError::Agent(format!("starting the runner: {e}"))),
        }
        tracing::debug!(
            sandbox = %id,
            run = %req.run_id,
            attempt = req.attempt,
            kind = %req.kind,
            boot_ms = begun.elapsed().as_millis() as u64,
            "job sandbox started"
        );
        Ok(job)
    }
}

/// One running job sandbox. Dropped without [`JobSandbox::finish`], it is removed in the
/// background.
pub struct JobSandbox {
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
    reservation: Option<AdmissionGuard>,
    begun: Instant,
    /// Set by the memory watchdog when it stopped the sandbox.
    memory_hit: Arc<AtomicBool>,
    watchdog: tokio::task::JoinHandle<()>,
}

impl JobSandbox {
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

    /// The accepted job channel (the runner's first connection to `sbx-job.internal:1`).
    /// Returns `None` when called twice or when the runner never connected.
    pub async fn take_channel(&mut self) -> Option<DuplexStream> {
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
                Some(stream)
            }
            None => {
                tracing::warn!(sandbox = %self.id, "the runner never opened the job channel");
                None
            }
        }
    }

    /// Waits up to `grace` for the runner to exit, then kills the sandbox; removes it and
    /// reports how it ended.
    pub async fn finish(mut self, grace: Duration) -> JobEnd {
        let runner = self.wait_runner(grace).await;
        self.watchdog.abort();
        // Read before the removal deletes the cgroup that records the OOM kill.
        let end = if self.memory_hit.load(Ordering::SeqCst)
            || self.runtime.death_reason(self.id).is_some()
        {
            JobEnd::MemoryLimit
        } else {
            match runner {
                Some(p) if p.state == ProcessState::Exited => JobEnd::Exited(p.exit_code),
                Some(p) if p.state == ProcessState::Killed => {
                    JobEnd::Exited(p.signal.map(|s| 128 + s))
                }
                Some(p) => JobEnd::Crashed(format!(
                    "runner {}: {}",
                    format!("{:?}", p.state).to_lowercase(),
                    p.error.unwrap_or_default()
                )),
                None => match self.runtime.is_alive(self.id).await {
                    // Still running after the grace period: it is killed below.
                    Ok(true) if self.conn.as_ref().is_some_and(|c| !c.is_closed()) => {
                        JobEnd::Exited(None)
                    }
                    _ => JobEnd::Crashed("the job sandbox stopped unexpectedly".into()),
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

impl Drop for JobSandbox {
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
