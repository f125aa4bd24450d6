//! Resource shapes returned by the API (§3 of the contract).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use uuid::Uuid;

/// Success envelope: `{data, metadata, page?}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Envelope<T> {
    /// The resource (omitted for empty lists by some servers; sbx always sends it).
    #[serde(default = "Option::default", skip_serializing_if = "Option::is_none")]
    pub data: Option<T>,
    /// Response metadata.
    pub metadata: Metadata,
    /// Present on list responses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page: Option<Page>,
}

/// `metadata` of every envelope.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    /// When the server produced the response (RFC 3339).
    pub fetched_at: String,
}

/// Pagination state of a list response.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Page {
    /// Opaque, non-empty; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// Whether another page exists.
    pub has_more: bool,
    /// The limit applied.
    pub limit: u32,
}

/// Sandbox lifecycle states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SandboxStatus {
    /// Accepted, not started yet.
    Pending,
    /// Starting.
    Starting,
    /// Being paused.
    Pausing,
    /// Running.
    Running,
    /// Paused with memory kept.
    Paused,
    /// Being resumed.
    Resuming,
    /// Being destroyed.
    Terminating,
    /// Destroyed.
    Terminated,
    /// Failed; `error` says why.
    Failed,
}

impl SandboxStatus {
    /// Every status for which [`SandboxStatus::is_active`] holds: the
    /// sandboxes that hold their name and the node's capacity.
    pub const ACTIVE: [SandboxStatus; 7] = [
        SandboxStatus::Pending,
        SandboxStatus::Starting,
        SandboxStatus::Running,
        SandboxStatus::Pausing,
        SandboxStatus::Paused,
        SandboxStatus::Resuming,
        SandboxStatus::Terminating,
    ];

    /// Active sandboxes hold their name.
    pub fn is_active(self) -> bool {
        !matches!(self, SandboxStatus::Terminated | SandboxStatus::Failed)
    }

    /// The wire string.
    pub fn as_str(self) -> &'static str {
        use SandboxStatus::*;
        match self {
            Pending => "PENDING",
            Starting => "STARTING",
            Pausing => "PAUSING",
            Running => "RUNNING",
            Paused => "PAUSED",
            Resuming => "RESUMING",
            Terminating => "TERMINATING",
            Terminated => "TERMINATED",
            Failed => "FAILED",
        }
    }

    /// Parses the wire string.
    pub fn parse(s: &str) -> Option<Self> {
        use SandboxStatus::*;
        Some(match s {
            "PENDING" => Pending,
            "STARTING" => Starting,
            "PAUSING" => Pausing,
            "RUNNING" => Running,
            "PAUSED" => Paused,
            "RESUMING" => Resuming,
            "TERMINATING" => Terminating,
            "TERMINATED" => Terminated,
            "FAILED" => Failed,
            _ => return None,
        })
    }
}

/// Snapshot lifecycle states (contract §3.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SnapshotStatus {
    /// Being captured.
    Creating,
    /// Usable for clones.
    Ready,
    /// Being removed.
    Deleting,
    /// Removed.
    Deleted,
    /// Capture failed.
    Failed,
    /// Files lost.
    Lost,
}

impl SnapshotStatus {
    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            SnapshotStatus::Creating => "CREATING",
            SnapshotStatus::Ready => "READY",
            SnapshotStatus::Deleting => "DELETING",
            SnapshotStatus::Deleted => "DELETED",
            SnapshotStatus::Failed => "FAILED",
            SnapshotStatus::Lost => "LOST",
        }
    }

    /// Parses the wire string.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "CREATING" => SnapshotStatus::Creating,
            "READY" => SnapshotStatus::Ready,
            "DELETING" => SnapshotStatus::Deleting,
            "DELETED" => SnapshotStatus::Deleted,
            "FAILED" => SnapshotStatus::Failed,
            "LOST" => SnapshotStatus::Lost,
            _ => return None,
        })
    }
}

/// CPU and memory of a sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Resources {
    /// Virtual CPUs.
    pub vcpu: u32,
    /// Memory in MiB.
    pub memory_mb: u32,
}

/// A sandbox as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Sandbox {
    /// Lowercase UUID.
    pub id: Uuid,
    /// Caller-chosen name.
    pub name: String,
    /// Lifecycle state.
    pub status: SandboxStatus,
    /// Network id (one fixed id per node).
    pub vpc_id: Uuid,
    /// Image the sandbox runs.
    pub image_ref: String,
    /// Shape.
    pub resources: Resources,
    /// Creation time.
    pub created_at: String,
    /// When it first became RUNNING.
    pub started_at: Option<String>,
    /// When it became TERMINATED or FAILED.
    pub ended_at: Option<String>,
    /// Why it failed or stopped; never empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `/v1` view of a sandbox: the v2 resource plus sbx extras.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SandboxDetail {
    /// The v2 resource.
    #[serde(flatten)]
    pub sandbox: Sandbox,
    /// Environment keys (values are configuration, shown; secret values never are).
    pub environment: BTreeMap<String, String>,
    /// Names of the selected secrets.
    pub secrets: Vec<String>,
    /// Snapshot the sandbox was cloned from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_id: Option<Uuid>,
    /// Active runtime used so far, in milliseconds.
    pub active_runtime_ms: u64,
    /// Active runtime limit, in milliseconds.
    pub active_runtime_limit_ms: u64,
    /// Egress policy and connection counters.
    #[serde(default)]
    pub network: crate::network::NetworkStatus,
    /// Volumes mounted in the sandbox.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<crate::volumes::VolumeMount>,
    /// Template the sandbox was created from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
}

/// Process states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ProcessState {
    /// Being started.
    Starting,
    /// Running.
    Running,
    /// Exited; `exitCode` is set.
    Exited,
    /// Killed by a signal; `terminationSignal` is set.
    Killed,
    /// Could not run.
    Failed,
    /// Lost with its sandbox.
    Lost,
}

/// A managed process.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Process {
    /// Public id.
    pub id: Uuid,
    /// argv as run.
    pub command: Vec<String>,
    /// Guest pid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<i32>,
    /// State.
    pub state: ProcessState,
    /// Present iff EXITED.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Present iff KILLED.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_signal: Option<i32>,
    /// Start time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// End time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<String>,
}

/// Captured command result.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ExecResult {
    /// Padded standard base64 of stdout.
    pub stdout: String,
    /// Padded standard base64 of stderr.
    pub stderr: String,
    /// Always `"base64"`.
    pub encoding: String,
    /// Exit code (always present, including 0).
    pub exit_code: i32,
}

/// Output stream names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum OutputStream {
    /// stdout.
    Stdout,
    /// stderr.
    Stderr,
}

/// A run of output bytes.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct OutputChunk {
    /// Which stream.
    pub stream: OutputStream,
    /// Padded base64 of the bytes.
    pub data: String,
    /// Always `"base64"`.
    pub encoding: String,
    /// When the bytes were read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    /// sbx extra: byte offset of the chunk in the process's combined output (stream resume).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
}

/// `data` of the process output endpoint.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct ProcessOutput {
    /// Chunks, oldest first.
    #[serde(default)]
    pub chunks: Vec<OutputChunk>,
}

/// Result of a file upload.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct UploadResult {
    /// The path written.
    pub path: String,
    /// Bytes in the file.
    pub bytes_written: u64,
}

/// Kinds of filesystem entry (`/v1` file API).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileKind {
    /// Regular file.
    File,
    /// Directory.
    Dir,
    /// Symbolic link.
    Symlink,
    /// Anything else.
    Other,
}

/// Metadata of a path (`/v1` file API).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FileInfo {
    /// Absolute path.
    pub path: String,
    /// Last component.
    pub name: String,
    /// Kind.
    pub kind: FileKind,
    /// Size in bytes.
    pub size: u64,
    /// Permission bits as 4-digit octal, e.g. "0644".
    pub mode: String,
    /// Modification time.
    pub modified_at: String,
}

#[cfg(test)]
mod tests {
    use super::SandboxStatus;

    #[test]
    fn active_lists_exactly_the_active_statuses() {
        for s in SandboxStatus::ACTIVE {
            assert!(s.is_active(), "{s:?}");
        }
        for s in [SandboxStatus::Terminated, SandboxStatus::Failed] {
            assert!(!s.is_active() && !SandboxStatus::ACTIVE.contains(&s));
        }
    }
}

/// One shape a fresh sandbox may have, as listed by `GET /v1/shapes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShapeInfo {
    /// vCPUs.
    pub vcpu: u32,
    /// Memory in MiB.
    pub memory_mb: u32,
}

impl ShapeInfo {
    /// `VCPUxMIB`, as in `--shapes` and `--warm-pool`.
    pub fn key(&self) -> String {
        format!("{}x{}", self.vcpu, self.memory_mb)
    }
}
