//! What the service answers about sandboxes and snapshots: domain values,
//! not store rows. The API turns these into wire types; the store's rows
//! (with their generations, workspaces, clocks and secrets) stay inside the
//! service, so a column can change without touching a route.

use chrono::{DateTime, Utc};
use sbx_api_types::{NetworkPolicy, SandboxStatus, SnapshotStatus};
use sbx_store::{SandboxRecord, SnapshotRecord};
use std::collections::BTreeMap;
use uuid::Uuid;

/// A sandbox as its owner sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Sandbox {
    /// Public id.
    pub id: Uuid,
    /// Name (unique among the workspace's active sandboxes).
    pub name: String,
    /// Lifecycle state.
    pub status: SandboxStatus,
    /// vCPUs.
    pub vcpu: u32,
    /// Memory in MiB.
    pub memory_mb: u32,
    /// Image reference.
    pub image_ref: String,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// First time RUNNING.
    pub started_at: Option<DateTime<Utc>>,
    /// TERMINATED/FAILED time.
    pub ended_at: Option<DateTime<Utc>>,
    /// Why it failed or stopped (never empty when present).
    pub error: Option<String>,
    /// Egress policy.
    pub network: NetworkPolicy,
    /// Clone source, if it was cloned.
    pub snapshot_id: Option<Uuid>,
    /// Base environment.
    pub environment: BTreeMap<String, String>,
    /// Names of the selected secrets (never their values).
    pub secrets: Vec<String>,
    /// Active runtime used when this view was taken, ms.
    pub active_runtime_ms: u64,
    /// Template it was created from (filled in by the `/v1` calls that show it).
    pub template: Option<String>,
}

impl From<&SandboxRecord> for Sandbox {
    fn from(r: &SandboxRecord) -> Self {
        Sandbox {
            id: r.id,
            name: r.name.clone(),
            status: r.status,
            vcpu: r.vcpu,
            memory_mb: r.memory_mb,
            image_ref: r.image_ref.clone(),
            created_at: r.created_at,
            started_at: r.started_at,
            ended_at: r.ended_at,
            error: r.error.clone().filter(|e| !e.is_empty()),
            network: r.network.clone(),
            snapshot_id: r.snapshot_id,
            environment: r.environment.clone(),
            secrets: r.secrets.clone(),
            active_runtime_ms: r.active_runtime_ms(Utc::now()),
            template: None,
        }
    }
}

impl From<SandboxRecord> for Sandbox {
    fn from(r: SandboxRecord) -> Self {
        Sandbox::from(&r)
    }
}

/// A snapshot as its owner sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// Public id.
    pub id: Uuid,
    /// Optional name.
    pub name: Option<String>,
    /// Sandbox it was taken from.
    pub source_sandbox: Uuid,
    /// Lifecycle state.
    pub status: SnapshotStatus,
    /// vCPUs of the source.
    pub vcpu: u32,
    /// Memory of the source, MiB.
    pub memory_mb: u32,
    /// Image the source ran.
    pub source_image_id: String,
    /// Which runtimes can restore it.
    pub compatibility_id: String,
    /// Bytes on disk (0 until READY).
    pub stored_bytes: u64,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
    /// When it expires.
    pub expires_at: DateTime<Utc>,
    /// Why it failed (never empty when present).
    pub error: Option<String>,
}

impl From<&SnapshotRecord> for Snapshot {
    fn from(s: &SnapshotRecord) -> Self {
        Snapshot {
            id: s.id,
            name: s.name.clone(),
            source_sandbox: s.source_sandbox,
            status: s.status,
            vcpu: s.vcpu,
            memory_mb: s.memory_mb,
            source_image_id: s.source_image_id.clone(),
            compatibility_id: s.compatibility_id.clone(),
            stored_bytes: s.stored_bytes,
            created_at: s.created_at,
            updated_at: s.updated_at,
            expires_at: s.expires_at,
            error: s.error.clone().filter(|e| !e.is_empty()),
        }
    }
}

impl From<SnapshotRecord> for Snapshot {
    fn from(s: SnapshotRecord) -> Self {
        Snapshot::from(&s)
    }
}
