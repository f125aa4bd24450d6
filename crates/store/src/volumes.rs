//! Persistent volumes and the mounts sandboxes took of them.

use chrono::{DateTime, Utc};
use uuid::Uuid;

/// A volume: one tenant's named, size-limited filesystem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeRecord {
    /// Public id (names the image and mount point on the node).
    pub id: Uuid,
    /// Its tenant scope (`workspace/env`).
    pub workspace: String,
    /// Name, unique in the tenant.
    pub name: String,
    /// `local` (the only kind built).
    pub kind: String,
    /// Size limit, MiB.
    pub size_mb: u64,
    /// The node holding its data.
    pub node_id: String,
    /// Creation time.
    pub created_at: DateTime<Utc>,
}

/// One volume mounted in one sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeMountRecord {
    /// The sandbox.
    pub sandbox_id: Uuid,
    /// The volume.
    pub volume_id: Uuid,
    /// Guest path.
    pub path: String,
    /// Mounted read-only.
    pub read_only: bool,
}

/// The columns of the `volumes` table, in the order both backends read them.
pub(crate) const VOLUME_COLUMNS: &str =
    "id, workspace, name, kind, size_mb, node_id, created_at_ms";
/// The columns of the `volume_mounts` table, in the order both backends read them.
pub(crate) const MOUNT_COLUMNS: &str = "sandbox_id, volume_id, path, read_only";
