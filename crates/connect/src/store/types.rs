//! Values the store takes and gives besides the model's types.

use crate::model::{AuthKind, ConnectionStatus, RunKind};

/// A connection to insert.
#[derive(Debug, Clone)]
pub struct NewConnection {
    /// Display name.
    pub name: String,
    /// Package name.
    pub package: String,
    /// Version.
    pub version: String,
    /// Validated config.
    pub config: serde_json::Value,
    /// Normalized origin.
    pub origin: String,
    /// Auth kind.
    pub auth_kind: AuthKind,
    /// Initial status.
    pub status: ConnectionStatus,
    /// Schedule interval, seconds.
    pub schedule_interval_seconds: Option<u64>,
}

/// A pending OAuth sign-in (by `state`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OauthPending {
    /// Connection id.
    pub connection_id: String,
    /// PKCE verifier.
    pub verifier: String,
    /// Redirect URI given at start (must be repeated in the code exchange).
    pub redirect_uri: String,
}

/// What deleting a package version did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionDeletion {
    /// The version, its builds and (if it was its last version) the package are gone.
    Deleted {
        /// Ids of the deleted builds (their artifact directories can go).
        build_ids: Vec<String>,
    },
    /// Nothing changed: these connections use the version.
    UsedBy(Vec<String>),
    /// Nothing changed: a build of the version is queued or running.
    Building,
}

/// A connection's move to another version of its package, with what the caller checked it
/// against: the store makes the move only if that is still so (see
/// [`crate::store::Connections::set_connection_version`]).
#[derive(Debug, Clone)]
pub struct VersionChange {
    /// The version the connection must still be at.
    pub from: String,
    /// The version to move to.
    pub to: String,
    /// The config, validated against `to`'s definition.
    pub config: serde_json::Value,
    /// The syncs that had committed when the move was checked (any order): the move is
    /// refused if the set is not the same any more.
    pub committed_syncs: Vec<String>,
}

/// How a guarded version change ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionChangeOutcome {
    /// The connection is at the new version.
    Changed,
    /// Nothing changed: the connection is at this version now, not at `from`.
    VersionMoved(String),
    /// Nothing changed: a sync run of the connection is queued or running.
    SyncRunning,
    /// Nothing changed: another sync has committed since the check.
    CommittedChanged,
}

/// A version to insert.
#[derive(Debug, Clone)]
pub struct NewPackageVersion {
    /// Package name.
    pub name: String,
    /// Version.
    pub version: String,
    /// Hex sha256 of the tarball.
    pub sha256: String,
    /// Tarball bytes.
    pub size: u64,
    /// Entry module path inside the package.
    pub entry: String,
}

/// A run to insert (queued).
#[derive(Debug, Clone)]
pub struct NewRun {
    /// Connection (none for describe).
    pub connection_id: Option<String>,
    /// Package.
    pub package: String,
    /// Version.
    pub version: String,
    /// Kind.
    pub kind: RunKind,
    /// Sync or hook name.
    pub sync: Option<String>,
}

/// One connection's sealed credentials, for key rotation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialBlob {
    /// Workspace.
    pub workspace: String,
    /// Connection id.
    pub connection_id: String,
    /// The sealed credentials, as stored.
    pub blob: Vec<u8>,
}
