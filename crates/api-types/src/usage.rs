//! Per-sandbox usage (`GET /v1/sandboxes/{id}/metrics`).

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// A sandbox's recent usage: its limits and samples, oldest first.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SandboxMetrics {
    /// Sandbox id.
    pub sandbox_id: Uuid,
    /// vCPUs of the sandbox (`cpuPercent` is relative to all of them).
    pub vcpu: u32,
    /// Memory limit, MiB.
    pub memory_mb: u32,
    /// Seconds between samples while the sandbox runs.
    pub interval_secs: u64,
    /// Samples of the last minutes, oldest first (none while paused or right after a start).
    pub samples: Vec<UsageSample>,
}

/// One usage sample of a sandbox.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct UsageSample {
    /// When it was taken (RFC 3339, UTC).
    pub timestamp: String,
    /// CPU used over the interval before it, percent of the sandbox's vCPUs (0-100).
    pub cpu_percent: f64,
    /// The same, percent of one core (up to 100 × vCPUs).
    pub cpu_core_percent: f64,
    /// CPU time used since the sandbox started, ms (the sandbox's host processes).
    pub cpu_time_ms: u64,
    /// Memory in use, bytes (guest memory plus the sandbox kernel's own).
    pub memory_bytes: u64,
    /// Highest memory use so far, bytes.
    pub memory_peak_bytes: u64,
    /// Host page cache of the sandbox's files, bytes.
    pub memory_cache_bytes: u64,
    /// Bytes used on the sandbox's disk.
    pub disk_used_bytes: u64,
    /// Size of the sandbox's disk, bytes; 0 when sandboxes have no disk limit.
    pub disk_total_bytes: u64,
    /// Processes in the sandbox (pids in its `/proc`, the sbx agent included);
    /// null when the sandbox's agent did not answer in time.
    pub processes: Option<u64>,
}
