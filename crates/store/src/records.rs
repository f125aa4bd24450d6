//! Rows as Rust values.

use chrono::{DateTime, Utc};
use sbx_api_types::SandboxStatus;
use std::collections::BTreeMap;
use uuid::Uuid;

/// Everything sbxd stores about a sandbox.
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxRecord {
    /// Public id.
    pub id: Uuid,
    /// Owning workspace.
    pub workspace: String,
    /// Name (unique among active sandboxes of the workspace).
    pub name: String,
    /// Lifecycle state.
    pub status: SandboxStatus,
    /// vCPUs.
    pub vcpu: u32,
    /// Memory in MiB.
    pub memory_mb: u32,
    /// Base environment.
    pub environment: BTreeMap<String, String>,
    /// Selected secret names (values live only in the secret store).
    pub secrets: Vec<String>,
    /// Clone source.
    pub snapshot_id: Option<Uuid>,
    /// Image reference.
    pub image_ref: String,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// First time RUNNING.
    pub started_at: Option<DateTime<Utc>>,
    /// TERMINATED/FAILED time.
    pub ended_at: Option<DateTime<Utc>>,
    /// Why it failed or stopped.
    pub error: Option<String>,
    /// Active runtime used before the current running period, ms.
    pub active_ms: u64,
    /// Start of the current running period (None while not running).
    pub running_since: Option<DateTime<Utc>>,
}

impl SandboxRecord {
    /// Active runtime used up to `now`, ms.
    pub fn active_runtime_ms(&self, now: DateTime<Utc>) -> u64 {
        let current = self
            .running_since
            .map(|since| (now - since).num_milliseconds().max(0) as u64)
            .unwrap_or(0);
        self.active_ms + current
    }
}
