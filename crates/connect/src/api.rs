//! Request and response bodies of the Connect API (camelCase JSON), for the daemon's HTTP layer.

use crate::credentials::Credentials;
use crate::model::{Build, Connection, ConnectionStatus, LogLine, PackageVersion, RecordRow, Run};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Answer to a package upload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UploadPackageResponse {
    /// The stored version.
    pub version: PackageVersion,
    /// False when the same bytes were uploaded before (idempotent re-upload).
    pub created: bool,
}

/// Creates a connection.
#[derive(Debug, Clone, Serialize, Deserialize)]
// Unknown fields are refused: a misspelt field (`packageVersion` for `version`) would
// otherwise be dropped silently and the request would do something else than asked.
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateConnectionRequest {
    /// Display name.
    pub name: String,
    /// Package name.
    pub package: String,
    /// Package version (must be built).
    pub version: String,
    /// Config, validated against the package's schema (defaults applied).
    #[serde(default = "empty_object")]
    pub config: Value,
    /// Origin all requests go to (`https://api.example.com`).
    pub origin: String,
    /// Credentials of the package's auth kind (for OAuth2: the client id and secret).
    pub credentials: Credentials,
    /// Sync schedule interval, seconds (none: only Run now).
    #[serde(default)]
    pub schedule_interval_seconds: Option<u64>,
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

/// Changes a connection; absent fields stay as they are.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
// Unknown fields are refused: a misspelt field (`packageVersion` for `version`) would
// otherwise be dropped silently and the request would do something else than asked.
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpdateConnectionRequest {
    /// New name.
    #[serde(default)]
    pub name: Option<String>,
    /// New config (validated again).
    #[serde(default)]
    pub config: Option<Value>,
    /// New credentials (OAuth2: new client; the connection then needs authorizing again).
    #[serde(default)]
    pub credentials: Option<Credentials>,
    /// New schedule: a number sets it, `null` clears it, absent keeps it.
    #[serde(default, with = "double_option")]
    pub schedule_interval_seconds: Option<Option<u64>>,
    /// `active` or `disabled` (`reauthorization_required` is set by the platform only).
    #[serde(default)]
    pub status: Option<ConnectionStatus>,
    /// Another built version of the connection's package to move to; committed records and
    /// checkpoints are kept when every committed sync keeps its mode and primary key.
    #[serde(default)]
    pub version: Option<String>,
}

mod double_option {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<Option<u64>>, s: S) -> Result<S::Ok, S::Error> {
        v.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<u64>>, D::Error> {
        // Present (number or null) → Some(..); absent → the field default, None.
        Option::<u64>::deserialize(d).map(Some)
    }
}

/// Starts an OAuth sign-in.
#[derive(Debug, Clone, Serialize, Deserialize)]
// Unknown fields are refused: a misspelt field (`packageVersion` for `version`) would
// otherwise be dropped silently and the request would do something else than asked.
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OauthStartRequest {
    /// The daemon's callback URL registered with the provider.
    pub redirect_uri: String,
}

/// Where to send the user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OauthStartResponse {
    /// Authorization URL (with PKCE challenge and state).
    pub authorize_url: String,
    /// The state (the callback must carry it back).
    pub state: String,
}

/// The provider's redirect back.
#[derive(Debug, Clone, Serialize, Deserialize)]
// Unknown fields are refused: a misspelt field (`packageVersion` for `version`) would
// otherwise be dropped silently and the request would do something else than asked.
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OauthCallbackRequest {
    /// State from the start.
    pub state: String,
    /// Authorization code.
    pub code: String,
}

/// Result of the callback.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OauthCallbackResponse {
    /// The connection (active when the hook succeeded or there is none).
    pub connection: Connection,
    /// The `afterAuthorize` run, when the package has that hook.
    pub run: Option<Run>,
}

/// Starts a sync run now.
#[derive(Debug, Clone, Serialize, Deserialize)]
// Unknown fields are refused: a misspelt field (`packageVersion` for `version`) would
// otherwise be dropped silently and the request would do something else than asked.
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunSyncRequest {
    /// Sync name.
    pub sync: String,
}

/// Pagination of lists.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PageQuery {
    /// Cursor from the previous page's `nextCursor`.
    #[serde(default)]
    pub cursor: Option<String>,
    /// Page size (default 100, at most 1000).
    #[serde(default)]
    pub limit: Option<u32>,
}

impl PageQuery {
    /// The effective page size.
    pub fn limit(&self) -> u32 {
        self.limit.unwrap_or(100).clamp(1, 1000)
    }
}

/// The records read query: a page, optionally only the record of one primary key.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordsQuery {
    /// Cursor from the previous page's `x-next-cursor`.
    #[serde(default)]
    pub cursor: Option<String>,
    /// Page size (default 100, at most 1000).
    #[serde(default)]
    pub limit: Option<u32>,
    /// Only the record with this primary key (merge syncs and webhooks): the key field's
    /// value as text, or the JSON array of the values of a composite key.
    #[serde(default)]
    pub key: Option<String>,
}

impl RecordsQuery {
    /// The paging part.
    pub fn page(&self) -> PageQuery {
        PageQuery {
            cursor: self.cursor.clone(),
            limit: self.limit,
        }
    }
}

/// One page of a list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Page<T> {
    /// Items.
    pub items: Vec<T>,
    /// Cursor of the next page, absent on the last page.
    pub next_cursor: Option<String>,
}

/// A page of runs.
pub type RunsPage = Page<Run>;
/// A page of log lines.
pub type LogsPage = Page<LogLine>;
/// A page of committed records (serve as JSON lines if preferred: one `data` per line).
pub type RecordsPage = Page<RecordRow>;
/// A list of builds.
pub type BuildsPage = Page<Build>;
