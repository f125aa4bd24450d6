//! The sandbox runtime: boots sandboxes and connects to their agents.
//!
//! [`Runtime`] is the seam between the lifecycle service and the isolation
//! technology; [`gvisor::GvisorRuntime`] drives the runsc CLI.

/// The agent connection lives beside the protocol it speaks.
pub use sbx_agent_proto::client as agent_conn;
mod channel;
pub mod console_log;
pub mod disk;
pub mod fake;
pub mod freezer;
pub mod gvisor;
mod leftovers;
mod oom;
pub mod quotafs;
pub mod s3_volumes;
pub mod volumes;

pub use agent_conn::{AgentCallError, AgentConn, AgentStream, StreamItem, Upload};

use futures::future::BoxFuture;
use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use uuid::Uuid;

/// Calls `open` until it gives a connection or `limit` has passed (then
/// `AgentNotReady` with the last error): right after a boot or a restore the
/// agent needs a few milliseconds before it answers. Both runtimes use it.
pub(crate) async fn open_within<F, Fut>(
    limit: Duration,
    mut open: F,
) -> Result<AgentConn, RuntimeError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<AgentConn, RuntimeError>>,
{
    let deadline = Instant::now() + limit;
    loop {
        match open().await {
            Ok(conn) => return Ok(conn),
            Err(e) if Instant::now() >= deadline => {
                return Err(RuntimeError::AgentNotReady(e.to_string()))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
}

/// What the runtime needs to boot one sandbox.
#[derive(Debug, Clone)]
pub struct SandboxSpec {
    /// Sandbox id.
    pub id: Uuid,
    /// vCPUs (cgroup CPU quota).
    pub vcpu: u32,
    /// Memory limit in MiB.
    pub memory_mb: u32,
    /// Volumes bound into it (a restore needs the same ones its checkpoint had).
    pub volumes: Vec<VolumeBind>,
    /// Root filesystem (the read-only lower layer); `None`: the default image's.
    /// A restore needs the one its checkpoint was taken on.
    pub rootfs: Option<PathBuf>,
}

/// One volume bound into a sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeBind {
    /// The volume (names its image and mount point on this node).
    pub volume_id: Uuid,
    /// Guest path (validated by the caller: absolute, normalised, not a system directory).
    pub path: String,
    /// Read-only inside the sandbox, enforced by gVisor (`ro` in the OCI spec).
    pub read_only: bool,
    /// Where its data lives (which host mount binds it).
    pub kind: sbx_api_types::VolumeKind,
    /// Its size limit, MiB (the S3 kind's quota layer enforces it).
    pub size_mb: u64,
}

/// What a Connect job or build sandbox has on top of a plain sandbox.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobOptions {
    /// Read-only root with no overlay (jobs); false keeps the writable root overlay (builds).
    pub readonly_root: bool,
    /// Size of the fresh `/tmp` tmpfs, bytes.
    pub tmp_bytes: u64,
    /// Bind mounts: host path, sandbox path, read-only.
    pub binds: Vec<(PathBuf, String, bool)>,
}

/// Runtime failures.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// runsc failed.
    #[error("runsc: {0}")]
    Runsc(#[from] sbx_runsc::Error),
    /// Host file system work failed.
    #[error("host i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The sandbox's disk could not be set up or removed.
    #[error("sandbox disk: {0}")]
    Disk(#[from] disk::DiskError),
    /// The agent did not answer in time.
    #[error("agent did not become ready: {0}")]
    AgentNotReady(String),
    /// The sandbox is not running.
    #[error("sandbox is not running")]
    NotRunning,
    /// Host processes of the sandbox survived SIGKILL for the whole wait.
    #[error("{0} host processes of the sandbox were still alive after SIGKILL")]
    Unkillable(usize),
    /// The sandbox's usage counters could not be read.
    #[error("usage: {0}")]
    Usage(#[from] crate::usage::read::ReadError),
    /// An S3 volume could not be mounted, unmounted or removed.
    #[error("s3 volume: {0}")]
    S3Volume(#[from] s3_volumes::S3VolumeError),
    /// The sandbox could not be frozen or thawed.
    #[error("freezer: {0}")]
    Freezer(#[from] freezer::FreezerError),
}

impl RuntimeError {
    /// Whether the failure was a full disk (ENOSPC) on the host.
    pub fn is_disk_full(&self) -> bool {
        match self {
            RuntimeError::Runsc(e) => e.is_disk_full(),
            RuntimeError::Io(e) => sbx_runsc::is_enospc(e),
            RuntimeError::Disk(e) => e.is_disk_full(),
            RuntimeError::AgentNotReady(_)
            | RuntimeError::NotRunning
            | RuntimeError::Unkillable(_)
            | RuntimeError::Usage(_)
            | RuntimeError::S3Volume(_)
            | RuntimeError::Freezer(_) => false,
        }
    }
}

/// Boots, attaches to and tears down sandboxes.
pub trait Runtime: Send + Sync {
    /// Boots a fresh sandbox and returns a connection to its agent.
    fn start(&self, spec: SandboxSpec) -> BoxFuture<'_, Result<AgentConn, RuntimeError>>;
    /// Boots a fresh Connect job or build sandbox (see [`JobOptions`]).
    fn start_job(
        &self,
        spec: SandboxSpec,
        job: JobOptions,
    ) -> BoxFuture<'_, Result<AgentConn, RuntimeError>>;
    /// Connects to a sandbox that has just booted or been restored, retrying
    /// while it settles.
    fn wait_ready(&self, id: Uuid) -> BoxFuture<'_, Result<AgentConn, RuntimeError>>;
    /// Opens a new connection to a running sandbox's agent (one attempt).
    fn connect(&self, id: Uuid) -> BoxFuture<'_, Result<AgentConn, RuntimeError>>;
    /// Starts `argv` inside the sandbox with piped stdin and stdout (stderr
    /// discarded), outside the agent connection: a direct file transfer. The
    /// caller owns the process (kill on drop).
    fn spawn_exec(
        &self,
        id: Uuid,
        argv: Vec<String>,
    ) -> Result<tokio::process::Child, RuntimeError>;
    /// Whether the sandbox's container is running (or paused).
    fn is_alive(&self, id: Uuid) -> BoxFuture<'_, Result<bool, RuntimeError>>;
    /// Whether the container is paused (`None` when it does not exist).
    fn is_paused(&self, id: Uuid) -> BoxFuture<'_, Result<Option<bool>, RuntimeError>>;
    /// Why a sandbox that stopped on its own stopped, when the host can tell.
    fn death_reason(&self, id: Uuid) -> Option<String>;
    /// Stops the sandbox and removes everything it left on the host. Safe to repeat.
    fn destroy(&self, id: Uuid) -> BoxFuture<'_, Result<(), RuntimeError>>;
    /// Ids of every sandbox the runtime has on this host (running or not).
    fn list(&self) -> BoxFuture<'_, Result<Vec<Uuid>, RuntimeError>>;
    /// Freezes every process of the sandbox, keeping its memory.
    fn pause(&self, id: Uuid) -> BoxFuture<'_, Result<(), RuntimeError>>;
    /// Thaws a paused sandbox.
    fn resume(&self, id: Uuid) -> BoxFuture<'_, Result<(), RuntimeError>>;
    /// Stops every host process of a running sandbox while it is idle (the
    /// cgroup freezer: no CPU at all, memory kept) until [`Runtime::thaw`].
    /// The caller makes sure nothing waits on the agent meanwhile
    /// (`AgentConn::sleep_if_idle`).
    fn freeze(&self, id: Uuid) -> BoxFuture<'_, Result<(), RuntimeError>>;
    /// Undoes [`Runtime::freeze`]; nothing when the sandbox is not frozen.
    fn thaw(&self, id: Uuid) -> BoxFuture<'_, Result<(), RuntimeError>>;
    /// Whether the sandbox is frozen now (a file read; false when unknown).
    fn is_frozen(&self, id: Uuid) -> bool;
    /// Writes memory and disk of a running sandbox into `dir`, leaving it running.
    fn checkpoint(&self, id: Uuid, dir: PathBuf) -> BoxFuture<'_, Result<(), RuntimeError>>;
    /// Boots a new sandbox from a checkpoint in `dir`. Its agent is running
    /// (restored with the memory) when this returns; connect with [`Runtime::connect`].
    fn restore(&self, spec: SandboxSpec, dir: PathBuf) -> BoxFuture<'_, Result<(), RuntimeError>>;
    /// Restores a throwaway copy of a checkpoint only to see its agent come
    /// up (destroyed right after): the runtime may leave out what such a
    /// copy never uses, such as the sandbox's size-limited disk.
    fn restore_probe(
        &self,
        spec: SandboxSpec,
        dir: PathBuf,
    ) -> BoxFuture<'_, Result<(), RuntimeError>> {
        self.restore(spec, dir)
    }
    /// Which runtimes can restore this runtime's checkpoints.
    fn compatibility_id(&self) -> String;
    /// Host path of the sandbox's console log (PID 1's stdout and stderr).
    fn console_log(&self, id: Uuid) -> PathBuf;
    /// Trims every sandbox's console log to at most `max_bytes` on disk
    /// (blocking file system calls; see [`console_log::trim`]).
    fn trim_console_logs(&self, max_bytes: u64);
    /// Reads the usage counters of a running sandbox (blocking file system
    /// calls: call it off the async workers).
    fn usage(&self, id: Uuid) -> Result<crate::usage::Reading, RuntimeError>;
    /// Makes a local volume of `size_mb` on this host. The default (a
    /// runtime without host volumes, such as the fake) keeps nothing.
    fn create_volume(&self, id: Uuid, size_mb: u64) -> BoxFuture<'_, Result<(), RuntimeError>> {
        let _ = (id, size_mb);
        Box::pin(async { Ok(()) })
    }
    /// Removes a volume's data: a local one's image, an S3 one's objects
    /// (safe to repeat).
    fn delete_volume(
        &self,
        id: Uuid,
        kind: sbx_api_types::VolumeKind,
    ) -> BoxFuture<'_, Result<(), RuntimeError>> {
        let _ = (id, kind);
        Box::pin(async { Ok(()) })
    }
    /// Bytes in use on a volume (blocking: file system calls, or a listing
    /// of an S3 volume's objects).
    fn volume_used_bytes(
        &self,
        id: Uuid,
        kind: sbx_api_types::VolumeKind,
    ) -> Result<u64, RuntimeError> {
        let _ = (id, kind);
        Ok(0)
    }
    /// Whether this node can hold volumes of `kind` (S3: an object store is configured).
    fn volume_kind_available(&self, kind: sbx_api_types::VolumeKind) -> bool {
        let _ = kind;
        true
    }
    /// Mounts the volume (of `size_mb` MiB) on this host if it is not mounted (boots call it
    /// again; this is for callers that must order a mount against an unmount).
    fn mount_volume(
        &self,
        id: Uuid,
        kind: sbx_api_types::VolumeKind,
        size_mb: u64,
    ) -> BoxFuture<'_, Result<(), RuntimeError>> {
        let _ = (id, kind, size_mb);
        Box::pin(async { Ok(()) })
    }
    /// Unmounts an S3 volume no sandbox of this host uses any more, after
    /// its uploads finished (local volumes stay mounted: a no-op).
    fn release_volume(
        &self,
        id: Uuid,
        kind: sbx_api_types::VolumeKind,
    ) -> BoxFuture<'_, Result<(), RuntimeError>> {
        let _ = (id, kind);
        Box::pin(async { Ok(()) })
    }
}
