//! The gVisor runtime: one runsc container per sandbox, the agent as PID 1,
//! reached through PID 1's stdin and stdout (one end of a socket pair sbxd
//! keeps; see `sbx_agent_proto::attach`). A sandbox this sbxd did not start
//! or restore (it ran before a restart) is reached through a long-lived
//! `runsc exec sbx-agent relay` process instead.

use super::channel::Channels;
use super::console_log::Trimmed;
use super::disk::{self, Disks};
use super::{AgentConn, JobOptions, Runtime, RuntimeError, SandboxSpec};
use futures::future::BoxFuture;
use futures::FutureExt;
use sbx_agent_proto::AGENT_BINARY_PATH;
use sbx_api_types::VolumeKind;
use sbx_runsc::{CheckpointOptions, ExecOptions, GlobalOptions, Network, Runsc};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};
use uuid::Uuid;

mod boot;
mod connect;
mod teardown;

/// Prefix of every container id sbxd creates; anything else under its runsc root is not ours.
pub const CONTAINER_PREFIX: &str = "sbx-";
/// Parent cgroup of every sandbox.
pub const CGROUP_PARENT: &str = "sbx";
/// How long the first connection to a restored sandbox is retried (as long
/// as a boot's agent gets: ten concurrent restores on 2 vCPUs can take > 10 s).
const RESTORE_READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a closed relay gets to exit before it is killed.
const RELAY_EXIT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the agent gets to answer the `hello` of a new connection.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long `start` waits for the agent to answer after runsc reports running.
const AGENT_READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long destroy keeps killing a sandbox's host processes before it gives up (and retries later).
const KILL_PATIENCE: Duration = Duration::from_secs(30);
/// How long `runsc delete` gets once the sandbox's processes are dead.
const DELETE_TIMEOUT: Duration = Duration::from_secs(15);

/// Host-side settings of the gVisor runtime.
#[derive(Debug, Clone)]
pub struct GvisorConfig {
    /// runsc binary.
    pub runsc_binary: PathBuf,
    /// runsc `--root`.
    pub runsc_root: PathBuf,
    /// Per-sandbox directories (bundle, overlay, console log).
    pub sandboxes_dir: PathBuf,
    /// Image root filesystem shared read-only by all sandboxes.
    pub image_rootfs: PathBuf,
    /// Host directory holding `sbx-agent`.
    pub agent_dir: PathBuf,
    /// pids cgroup limit.
    pub pids_limit: i64,
    /// RLIMIT_NPROC the agent gives guest commands; 0: none.
    pub guest_task_limit: u64,
    /// Reach agents over PID 1's stdio (else always through a relay).
    pub stdio_channel: bool,
    /// Extra global runsc flags.
    pub extra_flags: Vec<String>,
    /// Size of each sandbox's disk (its writable root layer), MiB; 0: no limit.
    pub sandbox_disk_mb: u64,
    /// Formatted disk images waiting for a sandbox (same filesystem as `sandboxes_dir`).
    pub spare_disks_dir: PathBuf,
    /// Local volumes: their images and mount points (S3 volumes' mount
    /// points and caches under `s3/`).
    pub volumes_dir: PathBuf,
    /// Where S3 volumes live (`None`: no object store; S3 volumes refused).
    pub s3_volumes: Option<super::s3_volumes::S3VolumeConfig>,
}

/// [`Runtime`] on gVisor.
pub struct GvisorRuntime {
    config: GvisorConfig,
    runsc: Runsc,
    /// Disk images for sandbox overlays; `None` when the limit is off.
    disks: Option<Arc<Disks>>,
    /// Local volumes of this node.
    volumes: super::volumes::LocalVolumes,
    /// S3 volumes this node mounts.
    s3_volumes: super::s3_volumes::S3Volumes,
    /// sbxd's end of each sandbox's stdio channel (sandboxes this process
    /// started or restored).
    channels: Channels,
    /// Freezes idle sandboxes (and thaws them before runsc talks to them).
    freezer: super::freezer::Freezer,
}

fn container_id(id: Uuid) -> String {
    format!("{CONTAINER_PREFIX}{id}")
}

fn parse_container_id(cid: &str) -> Option<Uuid> {
    cid.strip_prefix(CONTAINER_PREFIX)
        .and_then(|s| Uuid::parse_str(s).ok())
}

/// Whether `runsc ps` output lists a process started by `runsc exec`
/// (parent pid 0 and not PID 1): guest processes all descend from PID 1.
fn has_exec_process(ps: &str) -> bool {
    ps.lines().skip(1).any(|line| {
        let cols: Vec<&str> = line.split_whitespace().collect();
        matches!((cols.get(1), cols.get(2)), (Some(pid), Some(&"0")) if *pid != "1")
    })
}

impl GvisorRuntime {
    /// Builds the runtime; creates its directories and, with a disk limit,
    /// readies the spare disk images (failing when loop devices do not work).
    pub fn new(config: GvisorConfig) -> Result<Self, RuntimeError> {
        std::fs::create_dir_all(&config.runsc_root)?;
        std::fs::create_dir_all(&config.sandboxes_dir)?;
        let disks = match config.sandbox_disk_mb {
            0 => {
                Disks::remove_spares(&config.spare_disks_dir)?;
                None
            }
            mb => Some(Disks::open(&config.spare_disks_dir, mb)?),
        };
        let global = GlobalOptions {
            network: Network::None,
            extra: config.extra_flags.clone(),
            ..GlobalOptions::default()
        };
        let runsc = Runsc::new(&config.runsc_binary, &config.runsc_root)
            .with_global(global)
            .with_timeout(Some(Duration::from_secs(60)));
        let volumes = super::volumes::LocalVolumes::new(&config.volumes_dir)?;
        let s3_volumes = super::s3_volumes::S3Volumes::new(
            &config.volumes_dir.join("s3"),
            config.s3_volumes.clone(),
        )?;
        let freezer = super::freezer::Freezer::new(
            Path::new(sbx_runsc::cleanup::DEFAULT_CGROUP_MOUNT),
            CGROUP_PARENT,
        );
        freezer.thaw_all(&config.sandboxes_dir, container_id);
        Ok(GvisorRuntime {
            config,
            runsc,
            disks,
            volumes,
            s3_volumes,
            channels: Channels::default(),
            freezer,
        })
    }

    /// Thaws the sandbox before runsc talks to it: a frozen sandbox answers
    /// no control call, and SIGKILL does not end a frozen process (cgroup v1).
    async fn thaw_for_runsc(&self, id: Uuid) -> Result<(), RuntimeError> {
        self.on_freezer(id, super::freezer::Freezer::thaw).await
    }

    /// Runs a freezer operation on the sandbox's container off the async
    /// workers (it reads and writes cgroup files, a freeze waits for them).
    async fn on_freezer(
        &self,
        id: Uuid,
        op: fn(&super::freezer::Freezer, &str) -> Result<(), super::freezer::FreezerError>,
    ) -> Result<(), RuntimeError> {
        let freezer = self.freezer.clone();
        let cid = container_id(id);
        tokio::task::spawn_blocking(move || op(&freezer, &cid))
            .await
            .map_err(|e| RuntimeError::Io(std::io::Error::other(e)))??;
        Ok(())
    }

    /// Thaws every sleeping sandbox of this data dir; returns how many.
    /// sbxd calls it when it stops, so that nothing it froze stays frozen
    /// without an sbxd to thaw it (runsc commands would wait on them).
    pub async fn thaw_all(&self) -> usize {
        let freezer = self.freezer.clone();
        let dir = self.config.sandboxes_dir.clone();
        tokio::task::spawn_blocking(move || freezer.thaw_all(&dir, container_id))
            .await
            .unwrap_or(0)
    }

    fn dir(&self, id: Uuid) -> PathBuf {
        self.config.sandboxes_dir.join(id.to_string())
    }

    /// Waits until no `runsc exec` process (relay) is left inside the sandbox:
    /// a checkpoint taken while one runs holds its host pipes and cannot be restored.
    async fn wait_for_no_exec(&self, id: Uuid) -> Result<(), RuntimeError> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let out = tokio::process::Command::new(&self.config.runsc_binary)
                .arg(format!("--root={}", self.config.runsc_root.display()))
                .arg("ps")
                .arg(container_id(id))
                .output()
                .await?;
            let text = String::from_utf8_lossy(&out.stdout);
            if out.status.success() && !has_exec_process(&text) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(RuntimeError::AgentNotReady(format!(
                    "exec processes still running in the sandbox: {text}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// The span of a long sandbox operation (boot, restore, checkpoint, teardown):
/// a child of the request or task that asked for it, in logs and exported traces.
fn long_span(name: &'static str, id: Uuid, spec: Option<&SandboxSpec>) -> tracing::Span {
    // Span names must be literals: one macro call per operation.
    let (vcpu, memory_mb) = spec.map_or((0, 0), |s| (s.vcpu, s.memory_mb));
    match name {
        "sandbox.boot" => {
            tracing::info_span!("sandbox.boot", sandbox_id = %id, vcpu, memory_mb, job = false, error = tracing::field::Empty, otel.status_code = tracing::field::Empty)
        }
        "sandbox.restore" => {
            tracing::info_span!("sandbox.restore", sandbox_id = %id, vcpu, memory_mb, error = tracing::field::Empty, otel.status_code = tracing::field::Empty)
        }
        "sandbox.checkpoint" => {
            tracing::info_span!("sandbox.checkpoint", sandbox_id = %id, error = tracing::field::Empty, otel.status_code = tracing::field::Empty)
        }
        _ => {
            tracing::info_span!("sandbox.teardown", sandbox_id = %id, error = tracing::field::Empty, otel.status_code = tracing::field::Empty)
        }
    }
}

/// Runs `op` in `span`, recording its error (and an error status for OpenTelemetry).
async fn traced<T>(
    op: impl std::future::Future<Output = Result<T, RuntimeError>>,
    span: tracing::Span,
) -> Result<T, RuntimeError> {
    use tracing::Instrument;
    let result = op.instrument(span.clone()).await;
    if let Err(e) = &result {
        span.record("error", tracing::field::display(e));
        span.record("otel.status_code", "ERROR");
    }
    result
}

impl Runtime for GvisorRuntime {
    fn start(&self, spec: SandboxSpec) -> BoxFuture<'_, Result<AgentConn, RuntimeError>> {
        let span = long_span("sandbox.boot", spec.id, Some(&spec));
        traced(self.start_inner(spec, None), span).boxed()
    }

    fn start_job(
        &self,
        spec: SandboxSpec,
        job: JobOptions,
    ) -> BoxFuture<'_, Result<AgentConn, RuntimeError>> {
        let span = long_span("sandbox.boot", spec.id, Some(&spec));
        span.record("job", true);
        traced(self.start_inner(spec, Some(job)), span).boxed()
    }

    fn connect(&self, id: Uuid) -> BoxFuture<'_, Result<AgentConn, RuntimeError>> {
        self.connect_inner(id).boxed()
    }

    fn spawn_exec(
        &self,
        id: Uuid,
        argv: Vec<String>,
    ) -> Result<tokio::process::Child, RuntimeError> {
        let opts = ExecOptions {
            argv,
            ..ExecOptions::default()
        };
        // Blocking, but one write of a cgroup file (a thaw is immediate).
        self.freezer.thaw(&container_id(id))?;
        let mut cmd = self.runsc.exec_command(&container_id(id), &opts);
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        Ok(cmd.spawn()?)
    }

    fn wait_ready(&self, id: Uuid) -> BoxFuture<'_, Result<AgentConn, RuntimeError>> {
        self.connect_within(id, RESTORE_READY_TIMEOUT).boxed()
    }

    fn is_alive(&self, id: Uuid) -> BoxFuture<'_, Result<bool, RuntimeError>> {
        async move {
            match self.runsc.state(&container_id(id)).await {
                Ok(s) => Ok(matches!(
                    s.status,
                    sbx_runsc::Status::Running | sbx_runsc::Status::Paused
                )),
                Err(e) if e.is_not_found() => Ok(false),
                Err(e) => Err(e.into()),
            }
        }
        .boxed()
    }

    fn is_paused(&self, id: Uuid) -> BoxFuture<'_, Result<Option<bool>, RuntimeError>> {
        async move {
            match self.runsc.state(&container_id(id)).await {
                Ok(s) => Ok(match s.status {
                    sbx_runsc::Status::Paused => Some(true),
                    sbx_runsc::Status::Running => Some(false),
                    _ => None,
                }),
                Err(e) if e.is_not_found() => Ok(None),
                Err(e) => Err(e.into()),
            }
        }
        .boxed()
    }

    fn death_reason(&self, id: Uuid) -> Option<String> {
        let cid = container_id(id);
        let mount = Path::new(sbx_runsc::cleanup::DEFAULT_CGROUP_MOUNT);
        // Both cgroup versions count OOM kills as an `oom_kill N` line:
        // v1 in memory.oom_control, v2 in memory.events.
        let oom_killed = |file: std::path::PathBuf| {
            std::fs::read_to_string(file).ok().is_some_and(|s| {
                s.lines().any(|l| {
                    l.strip_prefix("oom_kill ")
                        .and_then(|n| n.trim().parse::<u64>().ok())
                        .is_some_and(|n| n > 0)
                })
            })
        };
        let v1_hit = oom_killed(
            mount
                .join("memory")
                .join(CGROUP_PARENT)
                .join(&cid)
                .join("memory.oom_control"),
        );
        let v2_hit = oom_killed(mount.join(CGROUP_PARENT).join(&cid).join("memory.events"));
        (v1_hit || v2_hit).then(|| "sandbox exceeded its memory limit and was stopped".to_string())
    }

    fn destroy(&self, id: Uuid) -> BoxFuture<'_, Result<(), RuntimeError>> {
        traced(
            self.destroy_inner(id),
            long_span("sandbox.teardown", id, None),
        )
        .boxed()
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<Uuid>, RuntimeError>> {
        self.list_inner().boxed()
    }

    fn pause(&self, id: Uuid) -> BoxFuture<'_, Result<(), RuntimeError>> {
        async move {
            self.thaw_for_runsc(id).await?;
            Ok(self.runsc.pause(&container_id(id)).await?)
        }
        .boxed()
    }

    fn freeze(&self, id: Uuid) -> BoxFuture<'_, Result<(), RuntimeError>> {
        self.on_freezer(id, super::freezer::Freezer::freeze).boxed()
    }

    fn thaw(&self, id: Uuid) -> BoxFuture<'_, Result<(), RuntimeError>> {
        self.thaw_for_runsc(id).boxed()
    }

    fn is_frozen(&self, id: Uuid) -> bool {
        self.freezer.is_frozen(&container_id(id))
    }

    fn resume(&self, id: Uuid) -> BoxFuture<'_, Result<(), RuntimeError>> {
        async move { Ok(self.runsc.resume(&container_id(id)).await?) }.boxed()
    }

    fn checkpoint(&self, id: Uuid, dir: PathBuf) -> BoxFuture<'_, Result<(), RuntimeError>> {
        let span = long_span("sandbox.checkpoint", id, None);
        let checkpoint = async move {
            let opts = CheckpointOptions {
                image_path: dir,
                leave_running: true,
                compression: Some("none".into()),
            };
            self.thaw_for_runsc(id).await?;
            self.wait_for_no_exec(id).await?;
            Ok(self.runsc.checkpoint(&container_id(id), &opts).await?)
        };
        traced(checkpoint, span).boxed()
    }

    fn restore(&self, spec: SandboxSpec, dir: PathBuf) -> BoxFuture<'_, Result<(), RuntimeError>> {
        let span = long_span("sandbox.restore", spec.id, Some(&spec));
        traced(self.restore_inner(spec, dir, true), span).boxed()
    }

    fn restore_probe(
        &self,
        spec: SandboxSpec,
        dir: PathBuf,
    ) -> BoxFuture<'_, Result<(), RuntimeError>> {
        let span = long_span("sandbox.restore", spec.id, Some(&spec));
        traced(self.restore_inner(spec, dir, false), span).boxed()
    }

    fn compatibility_id(&self) -> String {
        "gvisor-runsc-systrap-amd64-v1".to_string()
    }

    fn console_log(&self, id: Uuid) -> PathBuf {
        self.dir(id).join("console.log")
    }

    fn usage(&self, id: Uuid) -> Result<crate::usage::Reading, RuntimeError> {
        use crate::usage::read;
        let cid = container_id(id);
        let mount = Path::new(sbx_runsc::cleanup::DEFAULT_CGROUP_MOUNT);
        let cgroup = read::cgroup_counters(mount, CGROUP_PARENT, &cid)?;
        // With a disk limit the overlay dir is the mount point of the sandbox's own filesystem.
        let disk = read::disk_counters(&self.dir(id).join("overlay"), self.disks.is_some())?;
        Ok(crate::usage::Reading {
            cgroup,
            processes: None,
            disk,
        })
    }

    fn create_volume(&self, id: Uuid, size_mb: u64) -> BoxFuture<'_, Result<(), RuntimeError>> {
        async move {
            self.volumes.create(id, size_mb).await?;
            Ok(())
        }
        .boxed()
    }

    fn delete_volume(&self, id: Uuid, kind: VolumeKind) -> BoxFuture<'_, Result<(), RuntimeError>> {
        async move {
            match kind {
                VolumeKind::Local => self.volumes.remove(id).await?,
                VolumeKind::S3 => self.s3_volumes.remove(id).await?,
            }
            Ok(())
        }
        .boxed()
    }

    fn volume_used_bytes(&self, id: Uuid, kind: VolumeKind) -> Result<u64, RuntimeError> {
        Ok(match kind {
            VolumeKind::Local => self.volumes.used_bytes(id)?,
            VolumeKind::S3 => self.s3_volumes.used_bytes(id)?,
        })
    }

    fn volume_kind_available(&self, kind: VolumeKind) -> bool {
        match kind {
            VolumeKind::Local => true,
            VolumeKind::S3 => self.s3_volumes.configured(),
        }
    }

    fn mount_volume(
        &self,
        id: Uuid,
        kind: VolumeKind,
        size_mb: u64,
    ) -> BoxFuture<'_, Result<(), RuntimeError>> {
        async move {
            match kind {
                VolumeKind::Local => {
                    self.volumes.mounted(id).await?;
                }
                VolumeKind::S3 => {
                    self.s3_volumes
                        .mounted(id, size_mb.saturating_mul(1 << 20))
                        .await?;
                }
            }
            Ok(())
        }
        .boxed()
    }

    fn release_volume(
        &self,
        id: Uuid,
        kind: VolumeKind,
    ) -> BoxFuture<'_, Result<(), RuntimeError>> {
        async move {
            if kind == VolumeKind::S3 {
                self.s3_volumes.unmount(id).await?;
            }
            Ok(())
        }
        .boxed()
    }

    fn trim_console_logs(&self, max_bytes: u64) {
        let Ok(entries) = std::fs::read_dir(&self.config.sandboxes_dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path().join("console.log");
            match super::console_log::trim(&path, max_bytes) {
                Ok(Trimmed::Within) => {}
                Ok(Trimmed::Collapsed(n)) => {
                    tracing::debug!(path = %path.display(), dropped_bytes = n, "console log trimmed")
                }
                Ok(Trimmed::Rewritten(n)) => {
                    tracing::debug!(path = %path.display(), dropped_bytes = n, "console log trimmed (copied, no collapse here)")
                }
                Err(e) => tracing::warn!(error = %e, "console log not trimmed"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_processes_are_told_apart_from_guest_ones() {
        let idle = "UID PID PPID C TTY STIME TIME CMD\n0 1 0 9 ? 08:23 0s sbx-agent\n0 7 1 0 ? 08:23 0s sleep\n";
        assert!(!has_exec_process(idle));
        let relay = format!("{idle}0 4 0 54 ? 08:23 30ms sbx-agent\n");
        assert!(has_exec_process(&relay));
    }
}
