//! Wire types of the Connect API (camelCase JSON).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A package of the workspace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConnectPackage {
    /// npm name.
    pub name: String,
    /// Creation time.
    pub created_at: String,
    /// Versions, oldest first.
    pub versions: Vec<String>,
}

/// One immutable version of a package.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PackageVersion {
    /// Package name.
    pub name: String,
    /// Version.
    pub version: String,
    /// Hex SHA-256 of the tarball.
    pub sha256: String,
    /// Tarball size, bytes.
    pub size: u64,
    /// Entry module.
    pub entry: String,
    /// Upload time.
    pub created_at: String,
    /// The latest successful build.
    #[serde(default)]
    pub build_id: Option<String>,
    /// The definition read by that build (auth, config schema, syncs, hasVerify, oauth).
    #[serde(default)]
    pub definition: Option<Value>,
}

/// The answer to an upload: the version, and whether it is new (201) or the same bytes again (200).
#[derive(Debug, Clone, PartialEq)]
pub struct Uploaded {
    /// The stored version.
    pub version: PackageVersion,
    /// True for a new version.
    pub created: bool,
}

/// A build of a package version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Build {
    /// Build id.
    pub id: String,
    /// Package name.
    pub name: String,
    /// Version.
    pub version: String,
    /// `queued`, `running`, `succeeded` or `failed`.
    pub status: String,
    /// npm output.
    #[serde(default)]
    pub log: String,
    /// Why it failed, for people.
    #[serde(default)]
    pub failure: Option<String>,
    /// Creation time.
    pub created_at: String,
    /// End time.
    #[serde(default)]
    pub finished_at: Option<String>,
}

impl Build {
    /// Whether the build ended (succeeded or failed).
    pub fn is_finished(&self) -> bool {
        matches!(self.status.as_str(), "succeeded" | "failed")
    }
}

/// Credentials of a connection: write-only, never returned. `Debug` hides the secrets.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum Credentials {
    /// API key.
    #[serde(rename_all = "camelCase")]
    ApiKey {
        /// The key.
        key: String,
    },
    /// Bearer token.
    #[serde(rename_all = "camelCase")]
    Bearer {
        /// The token.
        token: String,
    },
    /// HTTP basic auth.
    #[serde(rename_all = "camelCase")]
    Basic {
        /// User name.
        username: String,
        /// Password.
        password: String,
    },
    /// OAuth2 client (tokens come from the sign-in).
    #[serde(rename_all = "camelCase")]
    Oauth2 {
        /// Client id.
        client_id: String,
        /// Client secret (absent for public clients).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        client_secret: Option<String>,
    },
    /// No credentials.
    None,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self {
            Credentials::ApiKey { .. } => "apiKey",
            Credentials::Bearer { .. } => "bearer",
            Credentials::Basic { .. } => "basic",
            Credentials::Oauth2 { .. } => "oauth2",
            Credentials::None => "none",
        };
        write!(f, "Credentials({kind})")
    }
}

/// Body of a connection create.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateConnection {
    /// Display name.
    pub name: String,
    /// Package name.
    pub package: String,
    /// Package version (built).
    pub version: String,
    /// Config for the package's schema.
    pub config: Value,
    /// The origin requests go to (`https://api.example.com`).
    pub origin: String,
    /// Credentials.
    pub credentials: Credentials,
    /// Sync interval, seconds (none: Run now only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schedule_interval_seconds: Option<u64>,
}

/// Body of a connection change; `None` fields are not sent (kept as they are).
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UpdateConnection {
    /// New name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// New config.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config: Option<Value>,
    /// New credentials.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credentials: Option<Credentials>,
    /// `Some(Some(n))` sets the schedule, `Some(None)` clears it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schedule_interval_seconds: Option<Option<u64>>,
    /// `active` or `disabled`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Another built version of the connection's package to move to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// A connection (without credentials).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Connection {
    /// Connection id.
    pub id: String,
    /// Display name.
    pub name: String,
    /// Package name.
    pub package: String,
    /// Package version.
    pub version: String,
    /// Config with defaults applied.
    pub config: Value,
    /// Origin.
    pub origin: String,
    /// Auth kind.
    pub auth_kind: String,
    /// `active`, `reauthorization_required` or `disabled`.
    pub status: String,
    /// Sync interval, seconds.
    #[serde(default)]
    pub schedule_interval_seconds: Option<u64>,
    /// Creation time.
    pub created_at: String,
    /// Last change.
    pub updated_at: String,
}

/// A job run (never carries an error message).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Run {
    /// Run id.
    pub id: String,
    /// Connection.
    #[serde(default)]
    pub connection_id: Option<String>,
    /// Package name.
    pub package: String,
    /// Package version.
    pub version: String,
    /// `verify`, `oauth`, `sync`, `describe`.
    pub kind: String,
    /// Sync or hook name.
    #[serde(default)]
    pub sync: Option<String>,
    /// `queued`, `running`, `succeeded`, `failed`.
    pub status: String,
    /// Attempt number.
    #[serde(default)]
    pub attempt: u32,
    /// Creation time.
    pub created_at: String,
    /// Start time.
    #[serde(default)]
    pub started_at: Option<String>,
    /// End time.
    #[serde(default)]
    pub finished_at: Option<String>,
    /// Milliseconds from start to end.
    #[serde(default)]
    pub duration_ms: Option<i64>,
    /// Records committed.
    #[serde(default)]
    pub records_committed: u64,
    /// `package_error`, `time_limit`, `memory_limit`, `output_limit`, `platform`, ...
    #[serde(default)]
    pub failure_category: Option<String>,
    /// A short machine word for the failure.
    #[serde(default)]
    pub failure_kind: Option<String>,
    /// The node that ran it (cluster mode).
    #[serde(default)]
    pub node_id: Option<String>,
}

impl Run {
    /// Whether the run ended (succeeded or failed).
    pub fn is_finished(&self) -> bool {
        matches!(self.status.as_str(), "succeeded" | "failed")
    }
}

/// One recorded log line of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogLine {
    /// Line id.
    pub id: i64,
    /// Run id.
    pub run_id: String,
    /// Time.
    pub ts: String,
    /// `debug`, `info`, `warn`, `error`.
    pub level: String,
    /// Message text.
    pub message: String,
}

/// Where to send the user for an OAuth sign-in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OauthStart {
    /// Authorization URL.
    pub authorize_url: String,
    /// State the callback must carry back.
    pub state: String,
}

/// The result of an OAuth callback.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OauthDone {
    /// The connection.
    pub connection: Connection,
    /// The `afterAuthorize` run, when the package has the hook.
    #[serde(default)]
    pub run: Option<Run>,
}

/// One page of committed records.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordsPage {
    /// The records, in commit order.
    pub records: Vec<Value>,
    /// Cursor of the next page (from `x-next-cursor`); `None` on the last page.
    pub next_cursor: Option<String>,
}

/// A webhook delivery (never carries an error message).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Delivery {
    /// sbx's id.
    pub id: String,
    /// Connection.
    pub connection_id: String,
    /// Webhook name.
    pub webhook: String,
    /// The sender's delivery id.
    pub sender_id: String,
    /// `pending`, `committed`, `failed`.
    pub status: String,
    /// Jobs started for it.
    #[serde(default)]
    pub attempts: u32,
    /// When it was stored.
    pub received_at: String,
    /// When it was committed or failed.
    #[serde(default)]
    pub finished_at: Option<String>,
    /// Records committed with it.
    #[serde(default)]
    pub records_committed: u64,
    /// Failure category.
    #[serde(default)]
    pub failure_category: Option<String>,
    /// A short machine word for the failure.
    #[serde(default)]
    pub failure_kind: Option<String>,
    /// The run of its last job.
    #[serde(default)]
    pub run_id: Option<String>,
}
