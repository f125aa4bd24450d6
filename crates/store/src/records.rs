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
    /// Egress policy.
    pub network: sbx_api_types::NetworkPolicy,
    /// Compare-and-set version: 0 when inserted, bumped by every update.
    pub generation: u64,
    /// The node that runs it (its `--node-id`); it alone acts on the sandbox's host state.
    pub node_id: String,
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

/// Snapshot lifecycle states: the wire type, one for server, store and clients.
pub use sbx_api_types::SnapshotStatus;

/// A snapshot of a sandbox's memory and disk.
#[derive(Debug, Clone, PartialEq)]
pub struct SnapshotRecord {
    /// Public id.
    pub id: Uuid,
    /// Owning workspace.
    pub workspace: String,
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
    /// Environment of the source (configuration).
    pub environment: BTreeMap<String, String>,
    /// Secret names delivered to the source (values live in the memory image only).
    pub secrets: Vec<String>,
    /// Image of the source.
    pub image_ref: String,
    /// 64 hex digits identifying the image.
    pub source_image_id: String,
    /// Which runtimes can restore it.
    pub compatibility_id: String,
    /// Bytes on disk.
    pub stored_bytes: u64,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
    /// When the janitor deletes it.
    pub expires_at: DateTime<Utc>,
    /// Why it failed.
    pub error: Option<String>,
    /// Egress policy of the source (clones keep it).
    pub network: sbx_api_types::NetworkPolicy,
    /// Compare-and-set version: 0 when inserted, bumped by every update.
    pub generation: u64,
}

/// An encrypted workspace secret.
#[derive(Debug, Clone, PartialEq)]
pub struct SecretRecord {
    /// Owning workspace.
    pub workspace: String,
    /// Name (also the environment variable name).
    pub name: String,
    /// AEAD nonce.
    pub nonce: Vec<u8>,
    /// AEAD ciphertext of the value.
    pub ciphertext: Vec<u8>,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Last update.
    pub updated_at: DateTime<Utc>,
}

/// A signing key of a tenant, stored as a digest only.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiKeyRecord {
    /// Public id (shown by `keys list`, used by `keys revoke`).
    pub id: Uuid,
    /// Owning workspace.
    pub workspace: String,
    /// Environment the key is bound to; `None`: the `x-inngest-env` header selects it.
    pub env: Option<String>,
    /// Free-form label.
    pub name: Option<String>,
    /// `hex(sha256(bearer token))`: the key itself is never stored.
    pub digest: String,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Revocation time; a revoked key authenticates nothing.
    pub revoked_at: Option<DateTime<Utc>>,
}

/// One `Idempotency-Key` use: the request's fingerprint and, once finished, its response.
#[derive(Debug, Clone, PartialEq)]
pub struct IdempotencyRecord {
    /// Tenant scope (`workspace/env`).
    pub tenant: String,
    /// Request path (holds the sandbox and process ids).
    pub path: String,
    /// The client's key.
    pub key: String,
    /// hex(sha256) of the canonical request body and query.
    pub fingerprint: String,
    /// Boot id of the sbxd that runs (or ran) the request.
    pub owner: Uuid,
    /// First use.
    pub created_at: DateTime<Utc>,
    /// When the key may be reused for anything.
    pub expires_at: DateTime<Utc>,
    /// Until when the owner is known to be alive and running the request: it renews
    /// the lease while it runs. A claim without a response whose lease ran out was
    /// interrupted (its owner stopped); one whose lease is live is still running.
    pub lease_until: DateTime<Utc>,
    /// The stored response once the request finished: (HTTP status, body).
    pub response: Option<(u16, Vec<u8>)>,
}

/// Result of [`crate::Store::idempotency_begin`].
#[derive(Debug, Clone, PartialEq)]
pub enum IdempotencyBegin {
    /// The key was free (or expired): the caller runs the request.
    Started,
    /// The key is in use; here is its record.
    Existing(IdempotencyRecord),
}
