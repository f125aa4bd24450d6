//! Metadata store of sbxd.
//!
//! [`Store`] is the seam: the embedded SQLite implementation ([`SqliteStore`]) serves a
//! single node; the PostgreSQL implementation ([`PostgresStore`]) fills the same trait
//! so that several nodes can share one database. Both apply their forward-only
//! migrations at open and refuse a schema newer than themselves.

mod async_store;
mod e2b;
mod images;
mod migrate;
mod nodes;
mod postgres;
mod previews;
mod records;
mod snapshots;
mod sqlite;
mod templates;
mod tenants;
mod volumes;

pub use async_store::AsyncStore;
pub use e2b::E2bRecord;
pub use images::{ImageBuildRecord, ImageRecord};
pub use migrate::{copy_store, Copied, CopyReport};
pub use nodes::{FailOver, NodeRecord, NodeRegistration, NodeState, NodeUsage, NODE_LOST};
pub use postgres::{
    redact_url, Pool as PostgresPool, PostgresStore, Session as PostgresSession, TestDatabase,
};
pub use previews::PreviewRecord;
pub use records::*;
pub use sqlite::{backup_sqlite, SqliteStore};
pub use templates::TemplateRecord;
pub use volumes::{VolumeMountRecord, VolumeRecord};

use uuid::Uuid;

/// The boxed cause of a [`StoreError`]: whatever the backend reported.
pub type Source = Box<dyn std::error::Error + Send + Sync>;

/// Store failures. No variant names a backend: each backend module turns its
/// own errors into these, keeping the original as the source.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The disk holding the database is full. The write was rolled back whole:
    /// stored rows are intact and the same write succeeds once space returns.
    #[error("the disk holding the database is full: {}", chain(.0.as_ref()))]
    Full(Source),
    /// The database could not be reached, or the connection was lost, or it is
    /// busy: nothing is known to have changed and the call may be repeated.
    #[error("the database is unavailable: {}", chain(.0.as_ref()))]
    Unavailable(Source),
    /// Another writer got there first (a unique row exists already, or a
    /// conditional update found the row changed).
    #[error("conflicting change: {}", chain(.0.as_ref()))]
    Conflict(Source),
    /// A stored row could not be decoded, or the database reports damage.
    #[error("corrupt data: {}", chain(.0.as_ref()))]
    Corrupt(Source),
    /// The database was written by a newer sbxd; this one refuses to touch it.
    #[error("database schema version {found} is newer than this sbxd ({supported}); upgrade sbxd")]
    SchemaTooNew {
        /// Schema version recorded in the database.
        found: u32,
        /// Newest schema version this build knows.
        supported: u32,
    },
    /// The database refused or failed an operation for another reason.
    #[error("database error: {}", chain(.0.as_ref()))]
    Database(Source),
    /// The row to update does not exist.
    #[error("not found")]
    NotFound,
    /// A node's heartbeat carried an old lease epoch: the node's lease ran out and it
    /// registered again since (or another process took its id). The caller must stop
    /// acting as that node.
    #[error("node {node} is fenced: it holds lease epoch {held}, the current one is {current}")]
    Fenced {
        /// The node id.
        node: String,
        /// The epoch the caller holds.
        held: u64,
        /// The stored epoch.
        current: u64,
    },
}

/// An error and its causes on one line (`connecting: No such file or directory`), so
/// that the message of a store failure says why even where only it is shown.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let text = cause.to_string();
        // Some errors repeat their cause in their own message.
        if !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        next = cause.source();
    }
    out
}

impl StoreError {
    /// Whether the same call may succeed if repeated later (space or the database returns).
    pub fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Full(_) | StoreError::Unavailable(_))
    }
}

/// Result of [`Store::create_sandbox`].
#[derive(Debug, Clone, PartialEq)]
pub enum CreateOutcome {
    /// The new row was inserted.
    Created,
    /// An active sandbox already holds the name; here it is.
    NameHeld(Box<SandboxRecord>),
    /// The workspace's active sandboxes hold this much: one more would pass
    /// its [`WorkspaceQuota`]. Nothing was inserted.
    QuotaReached(WorkspaceUsage),
}

/// What one workspace's active sandboxes may hold together, on every node
/// of the cluster (0: no limit).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkspaceQuota {
    /// Active sandboxes.
    pub sandboxes: u64,
    /// Their vCPUs together.
    pub vcpus: u64,
    /// Their memory together, MiB.
    pub memory_mb: u64,
}

impl WorkspaceQuota {
    /// No limit at all: nothing to count.
    pub fn is_unlimited(&self) -> bool {
        self.sandboxes == 0 && self.vcpus == 0 && self.memory_mb == 0
    }

    /// Whether `record` fits beside what the workspace holds (`used`).
    pub fn admits(&self, used: &WorkspaceUsage, record: &SandboxRecord) -> bool {
        let fits =
            |limit: u64, used: u64, more: u64| limit == 0 || used.saturating_add(more) <= limit;
        fits(self.sandboxes, used.sandboxes, 1)
            && fits(self.vcpus, used.vcpus, u64::from(record.vcpu))
            && fits(self.memory_mb, used.memory_mb, u64::from(record.memory_mb))
    }
}

/// What a workspace's active sandboxes hold together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkspaceUsage {
    /// Active sandboxes.
    pub sandboxes: u64,
    /// Their vCPUs.
    pub vcpus: u64,
    /// Their memory, MiB.
    pub memory_mb: u64,
}

/// Result of [`Store::create_snapshot`].
#[derive(Debug, Clone, PartialEq)]
pub enum SnapshotCreateOutcome {
    /// The new row was inserted.
    Created,
    /// A CREATING or unexpired READY snapshot already holds the name; here it is.
    NameHeld(Box<SnapshotRecord>),
    /// The workspace already has this many live (CREATING or unexpired READY) snapshots.
    LimitReached(u32),
}

/// Cursor position for sandbox listing (newest first).
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxCursor {
    /// `created_at` of the last item returned, ms since the epoch.
    pub created_at_ms: i64,
    /// id of the last item returned.
    pub id: Uuid,
}

/// Metadata operations. Each call is atomic.
pub trait Store: Send + Sync {
    /// Whether other processes may use the same database at once (PostgreSQL), or this
    /// one holds it alone (embedded SQLite in its data dir).
    fn is_shared(&self) -> bool;

    /// Inserts a sandbox unless an active one in the same workspace holds the name.
    fn create_sandbox(&self, record: &SandboxRecord) -> Result<CreateOutcome, StoreError> {
        self.create_sandbox_within(record, &WorkspaceQuota::default())
    }
    /// [`Store::create_sandbox`], and unless the workspace's active sandboxes
    /// with this one would pass `quota`; the name is checked first (a repeated
    /// create finds its sandbox even at the quota). Checked and inserted atomically.
    fn create_sandbox_within(
        &self,
        record: &SandboxRecord,
        quota: &WorkspaceQuota,
    ) -> Result<CreateOutcome, StoreError>;
    /// The active sandbox of the workspace holding `name`, if any.
    fn active_sandbox_named(
        &self,
        workspace: &str,
        name: &str,
    ) -> Result<Option<SandboxRecord>, StoreError>;
    /// One sandbox.
    fn get_sandbox(&self, id: Uuid) -> Result<Option<SandboxRecord>, StoreError>;
    /// Writes the mutable fields of a sandbox if its row is still at `record.generation`
    /// (compare-and-set), and advances `record.generation` to the row's new one.
    /// `Conflict` (nothing written) when another writer changed the row since it was read;
    /// `NotFound` when there is no such row.
    fn update_sandbox(&self, record: &mut SandboxRecord) -> Result<(), StoreError>;
    /// A page of a workspace's sandboxes, newest first.
    fn list_sandboxes(
        &self,
        workspace: &str,
        limit: u32,
        after: Option<&SandboxCursor>,
    ) -> Result<Vec<SandboxRecord>, StoreError>;
    /// Every sandbox of node `node_id` (of every node: `None`) whose status is in
    /// `statuses`, across workspaces (reconciliation, admission: a node's own duties).
    fn sandboxes_in_status(
        &self,
        node_id: Option<&str>,
        statuses: &[sbx_api_types::SandboxStatus],
    ) -> Result<Vec<SandboxRecord>, StoreError>;

    /// Inserts a snapshot unless its name is held by a CREATING/READY unexpired one, or its
    /// workspace already has `max_live` of those (0: no limit). Checked and inserted atomically.
    fn create_snapshot(
        &self,
        record: &SnapshotRecord,
        now: chrono::DateTime<chrono::Utc>,
        max_live: u32,
    ) -> Result<SnapshotCreateOutcome, StoreError>;
    /// One snapshot.
    fn get_snapshot(&self, id: Uuid) -> Result<Option<SnapshotRecord>, StoreError>;
    /// Writes status, size, times and error of a snapshot if its row is still at
    /// `record.generation`, and advances `record.generation`; `Conflict` or `NotFound`
    /// as [`Store::update_sandbox`].
    fn update_snapshot(&self, record: &mut SnapshotRecord) -> Result<(), StoreError>;
    /// A page of snapshots (not DELETED), newest first, optionally by exact name.
    fn list_snapshots(
        &self,
        workspace: &str,
        name: Option<&str>,
        limit: u32,
        after: Option<&SandboxCursor>,
    ) -> Result<Vec<SnapshotRecord>, StoreError>;
    /// Every snapshot in one of `statuses` (janitor, reconciliation).
    fn snapshots_in_status(
        &self,
        statuses: &[SnapshotStatus],
    ) -> Result<Vec<SnapshotRecord>, StoreError>;

    /// Creates or replaces a secret.
    fn put_secret(&self, record: &SecretRecord) -> Result<(), StoreError>;
    /// One secret.
    fn get_secret(&self, workspace: &str, name: &str) -> Result<Option<SecretRecord>, StoreError>;
    /// A workspace's secrets, by name.
    fn list_secrets(&self, workspace: &str) -> Result<Vec<SecretRecord>, StoreError>;
    /// Deletes a secret; false if it did not exist.
    fn delete_secret(&self, workspace: &str, name: &str) -> Result<bool, StoreError>;
    /// Every secret of every workspace, by workspace then name (key rotation).
    fn list_all_secrets(&self) -> Result<Vec<SecretRecord>, StoreError>;
    /// Replaces the nonce and ciphertext of `current`'s secret if the row still
    /// holds `current.nonce` and `current.ciphertext` (compare-and-set: a value
    /// changed or deleted meanwhile is left alone); false if it changed nothing.
    /// The times stay: the value is the same, only its encryption changed.
    fn replace_secret_ciphertext(
        &self,
        current: &SecretRecord,
        nonce: &[u8],
        ciphertext: &[u8],
    ) -> Result<bool, StoreError>;

    /// Stores a new signing key (its digest).
    fn create_api_key(&self, record: &ApiKeyRecord) -> Result<(), StoreError>;
    /// The key with this digest, revoked or not.
    fn find_api_key(&self, digest: &str) -> Result<Option<ApiKeyRecord>, StoreError>;
    /// Every key, oldest first.
    fn list_api_keys(&self) -> Result<Vec<ApiKeyRecord>, StoreError>;
    /// Revokes a key; false if no unrevoked key has this id.
    fn revoke_api_key(
        &self,
        id: Uuid,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<bool, StoreError>;

    /// Claims an idempotency key (an expired claim is replaced) or returns the existing claim.
    fn idempotency_begin(
        &self,
        record: &IdempotencyRecord,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<IdempotencyBegin, StoreError>;
    /// The current claim of a key.
    fn idempotency_get(
        &self,
        tenant: &str,
        path: &str,
        key: &str,
    ) -> Result<Option<IdempotencyRecord>, StoreError>;
    /// Stores the response of a claimed key.
    fn idempotency_finish(
        &self,
        tenant: &str,
        path: &str,
        key: &str,
        status: u16,
        body: &[u8],
    ) -> Result<(), StoreError>;
    /// Releases a claim whose request did nothing (so a retry runs it).
    fn idempotency_forget(&self, tenant: &str, path: &str, key: &str) -> Result<(), StoreError>;
    /// Deletes expired claims; returns how many.
    fn idempotency_expire(&self, now: chrono::DateTime<chrono::Utc>) -> Result<usize, StoreError>;
    /// Extends to `until` the lease of every unfinished claim of `owner` (it is alive and
    /// still running them); returns how many.
    fn idempotency_renew(
        &self,
        owner: Uuid,
        until: chrono::DateTime<chrono::Utc>,
    ) -> Result<usize, StoreError>;
    /// Ends the lease of every unfinished claim not owned by `owner`, for a process that
    /// knows it is the only one using the database (embedded SQLite): every other owner
    /// is an earlier run of itself, and stopped. Returns how many.
    fn idempotency_abandon_others(&self, owner: Uuid) -> Result<usize, StoreError>;

    /// Registers a node, or takes over its own row: the lease runs to `lease_until` and
    /// the described fields are replaced. The epoch is 1 for a new row, one more than the
    /// stored one if the stored lease had run out at `now`, else unchanged (a restart
    /// within the lease). The drain state stays. Returns the row as written.
    fn register_node(
        &self,
        node: &NodeRegistration,
        now: chrono::DateTime<chrono::Utc>,
        lease_until: chrono::DateTime<chrono::Utc>,
    ) -> Result<NodeRecord, StoreError>;
    /// Extends a node's lease to `lease_until` if its stored epoch is `epoch`
    /// (compare-and-set); `Fenced` when it is another, `NotFound` without a row.
    fn heartbeat_node(
        &self,
        id: &str,
        epoch: u64,
        now: chrono::DateTime<chrono::Utc>,
        lease_until: chrono::DateTime<chrono::Utc>,
    ) -> Result<NodeRecord, StoreError>;
    /// Every node, by id.
    fn list_nodes(&self) -> Result<Vec<NodeRecord>, StoreError>;
    /// Sets a node draining (or active again); `NotFound` without a row.
    fn set_node_draining(&self, id: &str, draining: bool) -> Result<NodeRecord, StoreError>;
    /// Fails a lost node over, once: if node `id` is still at `epoch`, its lease ran
    /// out by `now` and nobody failed it over since it registered, bumps its epoch
    /// (fencing it) and ends its active sandboxes ([`NODE_LOST`]) and their
    /// unfinished snapshots, in one transaction. `None` when any condition fails
    /// (another node did it first, or the node came back).
    fn fail_over_node(
        &self,
        id: &str,
        epoch: u64,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Option<FailOver>, StoreError>;
    /// Gives sandboxes recorded before nodes were (their node is '') to `node_id`.
    fn adopt_unowned_sandboxes(&self, node_id: &str) -> Result<usize, StoreError>;
    /// What each node's active sandboxes hold, by node id.
    fn node_usage(&self) -> Result<Vec<NodeUsage>, StoreError>;

    /// Inserts the E2B record of a sandbox unless it has one; false (nothing
    /// written) when it had.
    fn create_e2b_record(&self, record: &E2bRecord) -> Result<bool, StoreError>;
    /// The E2B record of a sandbox.
    fn get_e2b_record(&self, id: Uuid) -> Result<Option<E2bRecord>, StoreError>;
    /// Writes the mutable fields (metadata, end time, auto-pause, tokens) of an E2B
    /// record if its row is still at `record.generation`, and advances
    /// `record.generation`; `Conflict` or `NotFound` as [`Store::update_sandbox`].
    fn update_e2b_record(&self, record: &mut E2bRecord) -> Result<(), StoreError>;
    /// The E2B records of a workspace (of every workspace: `None`) whose metadata
    /// holds every pair of `metadata`, by sandbox id.
    fn list_e2b_records(
        &self,
        workspace: Option<&str>,
        metadata: &std::collections::BTreeMap<String, String>,
    ) -> Result<Vec<E2bRecord>, StoreError>;
    /// The E2B records whose end time is at or before `now` and whose sandbox is
    /// RUNNING on node `node_id` (the timeout sweep: each node ends its own).
    fn e2b_records_due(
        &self,
        node_id: &str,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Vec<E2bRecord>, StoreError>;
    /// Deletes the E2B record of a sandbox; false if there was none.
    fn delete_e2b_record(&self, id: Uuid) -> Result<bool, StoreError>;
    /// Deletes the E2B records whose sandbox is no longer active (or has no row);
    /// returns how many.
    fn delete_ended_e2b_records(&self) -> Result<usize, StoreError>;

    /// Sets a sandbox's preview-URL access (inserts or replaces its row).
    fn put_preview(&self, record: &PreviewRecord) -> Result<(), StoreError>;
    /// A sandbox's preview-URL access, if its owner turned it on.
    fn get_preview(&self, id: Uuid) -> Result<Option<PreviewRecord>, StoreError>;
    /// Turns a sandbox's preview URLs off; false if they were not on.
    fn delete_preview(&self, id: Uuid) -> Result<bool, StoreError>;
    /// Deletes the preview rows whose sandbox is no longer active (or has no
    /// row); returns how many.
    fn delete_ended_previews(&self) -> Result<usize, StoreError>;
    /// Every preview row, by sandbox id (for `migrate-store`).
    fn list_previews(&self) -> Result<Vec<PreviewRecord>, StoreError>;

    /// Inserts a volume; false (and nothing written) if its tenant has one of that name.
    fn insert_volume(&self, record: &VolumeRecord) -> Result<bool, StoreError>;
    /// A volume by id.
    fn get_volume(&self, id: Uuid) -> Result<Option<VolumeRecord>, StoreError>;
    /// A tenant's volume by name.
    fn volume_named(&self, workspace: &str, name: &str)
        -> Result<Option<VolumeRecord>, StoreError>;
    /// A tenant's volumes (`None`: every tenant's), by tenant and name.
    fn list_volumes(&self, workspace: Option<&str>) -> Result<Vec<VolumeRecord>, StoreError>;
    /// Deletes a volume and every mount row of it; false if there was none.
    fn delete_volume(&self, id: Uuid) -> Result<bool, StoreError>;
    /// Records mounts (inserts, or replaces the row of the same sandbox and path), in one transaction.
    fn put_volume_mounts(&self, mounts: &[VolumeMountRecord]) -> Result<(), StoreError>;
    /// The mounts of a sandbox, by path.
    fn sandbox_mounts(&self, sandbox_id: Uuid) -> Result<Vec<VolumeMountRecord>, StoreError>;
    /// Every mount row of a volume (active sandboxes or not), by sandbox.
    fn volume_mounts(&self, volume_id: Uuid) -> Result<Vec<VolumeMountRecord>, StoreError>;

    /// Points a tenant's `name:tag` at an image (inserts, or replaces the row of
    /// that name and tag); returns the row it replaced.
    fn put_image(&self, record: &ImageRecord) -> Result<Option<ImageRecord>, StoreError>;
    /// A tenant's image by name and tag.
    fn get_image(
        &self,
        workspace: &str,
        name: &str,
        tag: &str,
    ) -> Result<Option<ImageRecord>, StoreError>;
    /// A tenant's images (`None`: every tenant's), by tenant, name and tag.
    fn list_images(&self, workspace: Option<&str>) -> Result<Vec<ImageRecord>, StoreError>;
    /// Every row (of any tenant) naming `digest`.
    fn images_with_digest(&self, digest: &str) -> Result<Vec<ImageRecord>, StoreError>;
    /// Deletes a tenant's `name:tag`; false if there was none.
    fn delete_image(&self, workspace: &str, name: &str, tag: &str) -> Result<bool, StoreError>;

    /// Inserts a template; false if the tenant has one of that name.
    fn create_template(&self, record: &TemplateRecord) -> Result<bool, StoreError>;
    /// A tenant's template by name.
    fn get_template(
        &self,
        workspace: &str,
        name: &str,
    ) -> Result<Option<TemplateRecord>, StoreError>;
    /// A tenant's templates (`None`: every tenant's), by tenant and name.
    fn list_templates(&self, workspace: Option<&str>) -> Result<Vec<TemplateRecord>, StoreError>;
    /// Writes `record` if the stored row is still at `record.generation`
    /// (the stored generation becomes one more); false if it moved on or is gone.
    fn update_template(&self, record: &TemplateRecord) -> Result<bool, StoreError>;
    /// Deletes a template if it is still at `generation`; false otherwise.
    fn delete_template(
        &self,
        workspace: &str,
        name: &str,
        generation: i64,
    ) -> Result<bool, StoreError>;
    /// Records that a sandbox was created from `template`.
    fn set_sandbox_template(&self, sandbox_id: Uuid, template: &str) -> Result<(), StoreError>;
    /// The template a sandbox was created from.
    fn sandbox_template(&self, sandbox_id: Uuid) -> Result<Option<String>, StoreError>;
    /// Records (or replaces) a tenant's build cache entry.
    fn put_image_build(&self, record: &ImageBuildRecord) -> Result<(), StoreError>;
    /// A tenant's build cache entry by key.
    fn get_image_build(
        &self,
        workspace: &str,
        cache_key: &str,
    ) -> Result<Option<ImageBuildRecord>, StoreError>;
}
