//! Typed records of the Connect runtime: packages, builds, definitions, connections, runs, logs.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Errors of the model module.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// A stored or received word is not one of the enum's values.
    #[error("unknown {what} {value:?}")]
    UnknownWord {
        /// Which enum.
        what: &'static str,
        /// The word.
        value: String,
    },
}

/// Declares an enum stored as a lower-case word, with `as_str` and `parse`.
macro_rules! word_enum {
    ($(#[$meta:meta])* $name:ident, $what:literal, { $($(#[$vmeta:meta])* $variant:ident => $word:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum $name {
            $($(#[$vmeta])* #[serde(rename = $word)] $variant),+
        }

        impl $name {
            /// The stored word.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $word),+
                }
            }

            /// Parses a stored word.
            pub fn parse(word: &str) -> Result<Self, ModelError> {
                match word {
                    $($word => Ok($name::$variant),)+
                    _ => Err(ModelError::UnknownWord { what: $what, value: word.to_string() }),
                }
            }
        }
    };
}

word_enum!(
    /// What a job sandbox runs (the `kind` of the `job` message).
    JobKind, "job kind", {
        /// Import the package and report its definition.
        Describe => "describe",
        /// Connection test.
        Verify => "verify",
        /// An OAuth hook.
        Oauth => "oauth",
        /// A sync run.
        Sync => "sync",
        /// One webhook delivery handled.
        Webhook => "webhook",
    }
);

word_enum!(
    /// The kind of a run row.
    RunKind, "run kind", {
        /// Connection test.
        Verify => "verify",
        /// OAuth hook.
        Oauth => "oauth",
        /// Sync run.
        Sync => "sync",
        /// Definition read after a build.
        Describe => "describe",
        /// Package build.
        Build => "build",
        /// One webhook delivery handled.
        Webhook => "webhook",
    }
);

impl From<JobKind> for RunKind {
    fn from(kind: JobKind) -> Self {
        match kind {
            JobKind::Describe => RunKind::Describe,
            JobKind::Verify => RunKind::Verify,
            JobKind::Oauth => RunKind::Oauth,
            JobKind::Sync => RunKind::Sync,
            JobKind::Webhook => RunKind::Webhook,
        }
    }
}

word_enum!(
    /// Status of a run.
    RunStatus, "run status", {
        /// Created, not started.
        Queued => "queued",
        /// A sandbox is working on it.
        Running => "running",
        /// Finished normally (and, for syncs, committed).
        Succeeded => "succeeded",
        /// Failed; see the category.
        Failed => "failed",
    }
);

word_enum!(
    /// Status of a build.
    BuildStatus, "build status", {
        /// Created, not started.
        Queued => "queued",
        /// Installing or describing.
        Running => "running",
        /// Artifact and definition stored.
        Succeeded => "succeeded",
        /// Failed; see the message.
        Failed => "failed",
    }
);

word_enum!(
    /// Why a run failed. Never carries the package's error message.
    FailureCategory, "failure category", {
        /// The package threw or sent bad output.
        PackageError => "package_error",
        /// The job ran out of time.
        TimeLimit => "time_limit",
        /// The sandbox ran out of memory.
        MemoryLimit => "memory_limit",
        /// The run exceeded an output limit.
        OutputLimit => "output_limit",
        /// Something on the platform's side failed.
        Platform => "platform",
        /// The OAuth refresh token was rejected.
        ReauthorizationRequired => "reauthorization_required",
    }
);

word_enum!(
    /// Status of a connection.
    ConnectionStatus, "connection status", {
        /// Usable; scheduled syncs run.
        Active => "active",
        /// OAuth authorization missing or rejected; syncs stop until reconnected.
        ReauthorizationRequired => "reauthorization_required",
        /// Turned off by a user.
        Disabled => "disabled",
    }
);

word_enum!(
    /// How a sync's output is committed.
    SyncMode, "sync mode", {
        /// Insert every record.
        Append => "append",
        /// Upsert by primary key.
        Merge => "merge",
        /// Swap the whole dataset.
        Replace => "replace",
    }
);

word_enum!(
    /// Level of a log line.
    LogLevel, "log level", {
        /// Debug.
        Debug => "debug",
        /// Info.
        Info => "info",
        /// Warning.
        Warn => "warn",
        /// Error.
        Error => "error",
    }
);

word_enum!(
    /// The auth kind of a package and its connections.
    AuthKind, "auth kind", {
        /// An API key in a header or query parameter.
        ApiKey => "apiKey",
        /// A bearer token.
        Bearer => "bearer",
        /// HTTP basic auth.
        Basic => "basic",
        /// OAuth2 authorization code with PKCE and refresh.
        Oauth2 => "oauth2",
        /// No credentials.
        None => "none",
    }
);

/// A package name in a workspace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Package {
    /// npm-style name.
    pub name: String,
    /// Creation time, RFC 3339.
    pub created_at: String,
    /// Versions, oldest first.
    pub versions: Vec<String>,
}

/// One immutable uploaded version of a package.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PackageVersion {
    /// Package name.
    pub name: String,
    /// Version string from package.json.
    pub version: String,
    /// Hex sha256 of the uploaded tarball.
    pub sha256: String,
    /// Tarball size in bytes.
    pub size: u64,
    /// Entry module path inside the package (from `main`).
    pub entry: String,
    /// Upload time, RFC 3339.
    pub created_at: String,
    /// The latest successful build, if any.
    pub build_id: Option<String>,
    /// The definition read by that build's describe job.
    pub definition: Option<Definition>,
}

/// A build of a package version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Build {
    /// Build id.
    pub id: String,
    /// Package name.
    pub name: String,
    /// Package version.
    pub version: String,
    /// Status.
    pub status: BuildStatus,
    /// Build log text (npm output, bounded).
    pub log: String,
    /// Host directory of the artifact (set when the install succeeded).
    pub artifact_dir: Option<String>,
    /// Why the build failed, for people (never a package runtime error message).
    pub failure: Option<String>,
    /// Creation time, RFC 3339.
    pub created_at: String,
    /// End time, RFC 3339.
    pub finished_at: Option<String>,
    /// The node that ran it (cluster mode; none on a single node).
    pub node_id: Option<String>,
}

/// Where an API key goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ApiKeyPlacement {
    /// A request header.
    Header,
    /// A query parameter.
    Query,
}

/// The non-secret auth part of a definition (the `auth` of `describe`'s result).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum AuthDefinition {
    /// API key in a header (`{type: "apiKey", header: "X-Api-Key"}`) or a query parameter
    /// (`{type: "apiKey", query: "api_key"}`); exactly one of the two.
    #[serde(rename_all = "camelCase")]
    ApiKey {
        /// Header name.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        header: Option<String>,
        /// Query parameter name.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        query: Option<String>,
    },
    /// Bearer token in `Authorization`.
    Bearer,
    /// Basic auth in `Authorization`.
    Basic,
    /// OAuth2 authorization code.
    #[serde(rename_all = "camelCase")]
    Oauth2 {
        /// Authorization endpoint.
        authorize_url: String,
        /// Token endpoint.
        token_url: String,
        /// Scopes asked for.
        #[serde(default)]
        scopes: Vec<String>,
        /// Whether PKCE (S256) is used; on unless the package says false.
        #[serde(default = "default_true")]
        pkce: bool,
    },
    /// No credentials.
    None,
}

fn default_true() -> bool {
    true
}

impl AuthDefinition {
    /// Where an API key goes: `None` unless exactly one of header/query is set.
    pub fn api_key_placement(&self) -> Option<(ApiKeyPlacement, &str)> {
        match self {
            AuthDefinition::ApiKey {
                header: Some(h),
                query: None,
            } if !h.is_empty() => Some((ApiKeyPlacement::Header, h)),
            AuthDefinition::ApiKey {
                header: None,
                query: Some(q),
            } if !q.is_empty() => Some((ApiKeyPlacement::Query, q)),
            _ => None,
        }
    }

    /// The auth kind.
    pub fn kind(&self) -> AuthKind {
        match self {
            AuthDefinition::ApiKey { .. } => AuthKind::ApiKey,
            AuthDefinition::Bearer => AuthKind::Bearer,
            AuthDefinition::Basic => AuthKind::Basic,
            AuthDefinition::Oauth2 { .. } => AuthKind::Oauth2,
            AuthDefinition::None => AuthKind::None,
        }
    }
}

/// One sync of a definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SyncDefinition {
    /// Sync name.
    pub name: String,
    /// Commit mode.
    pub mode: SyncMode,
    /// Primary key field(s) (merge only): a field name or a list of field names.
    #[serde(default)]
    pub primary_key: Option<PrimaryKey>,
}

/// One webhook handler of a definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookDefinition {
    /// Webhook name (its records are kept under this name, like a sync's).
    pub name: String,
    /// Commit mode of each delivery's records.
    pub mode: SyncMode,
    /// Primary key field(s) (merge only).
    #[serde(default)]
    pub primary_key: Option<PrimaryKey>,
}

/// A primary key: one field or several.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PrimaryKey {
    /// One field.
    One(String),
    /// Several fields (the key is the JSON array of their values).
    Many(Vec<String>),
}

/// The static part of a package's definition (the `describe` result).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Definition {
    /// Auth definition.
    pub auth: AuthDefinition,
    /// JSON schema of the connection config.
    #[serde(default = "empty_object")]
    pub config: Value,
    /// Syncs.
    pub syncs: Vec<SyncDefinition>,
    /// Webhook handlers (none in definitions described before webhooks existed).
    #[serde(default)]
    pub webhooks: Vec<WebhookDefinition>,
    /// Whether the package has `verify`.
    #[serde(default)]
    pub has_verify: bool,
    /// OAuth hook names.
    #[serde(default)]
    pub oauth: Vec<String>,
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

impl Definition {
    /// The sync of that name.
    pub fn sync(&self, name: &str) -> Option<&SyncDefinition> {
        self.syncs.iter().find(|s| s.name == name)
    }

    /// The webhook of that name.
    pub fn webhook(&self, name: &str) -> Option<&WebhookDefinition> {
        self.webhooks.iter().find(|w| w.name == name)
    }

    /// Whether records are kept under `name`: a sync's or a webhook's.
    pub fn has_dataset(&self, name: &str) -> bool {
        self.sync(name).is_some() || self.webhook(name).is_some()
    }
}

word_enum!(
    /// Status of a webhook delivery.
    DeliveryStatus, "delivery status", {
        /// Stored, waiting for (or in) its job.
        Pending => "pending",
        /// Its records were committed with this status, in one transaction.
        Committed => "committed",
        /// The handler failed, or the platform gave up after its retries; nothing committed.
        Failed => "failed",
    }
);

word_enum!(
    /// How a webhook connection checks that a delivery comes from its sender.
    SignatureScheme, "signature scheme", {
        /// Standard Webhooks: `webhook-id`, `webhook-timestamp`, `webhook-signature: v1,<base64>`.
        Standard => "standard",
        /// HMAC-SHA256 of the raw body, hex, in a configurable header (GitHub's style).
        HmacSha256 => "hmac-sha256",
        /// No check: the delivery URL alone is the credential.
        None => "none",
    }
);

/// One webhook delivery (its body is not part of this record).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Delivery {
    /// sbx's id of the delivery.
    pub id: String,
    /// Connection id.
    pub connection_id: String,
    /// Webhook name.
    pub webhook: String,
    /// The sender's delivery id (duplicates of it are dropped); sbx's id when it sent none.
    pub sender_id: String,
    /// Status.
    pub status: DeliveryStatus,
    /// Jobs started for it so far.
    pub attempts: u32,
    /// When it was stored, RFC 3339.
    pub received_at: String,
    /// When it was committed or failed, RFC 3339.
    pub finished_at: Option<String>,
    /// Records committed with it.
    pub records_committed: u64,
    /// Failure category (never a message).
    pub failure_category: Option<FailureCategory>,
    /// Short machine word for the failure.
    pub failure_kind: Option<String>,
    /// The run of its last job, for its logs.
    pub run_id: Option<String>,
}

/// A connection (credentials are never part of this record).
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
    /// Validated config with defaults applied.
    pub config: Value,
    /// Origin all package requests go to (`https://host[:port]`).
    pub origin: String,
    /// Auth kind.
    pub auth_kind: AuthKind,
    /// Status.
    pub status: ConnectionStatus,
    /// Sync schedule interval, seconds.
    pub schedule_interval_seconds: Option<u64>,
    /// Creation time, RFC 3339.
    pub created_at: String,
    /// Last change, RFC 3339.
    pub updated_at: String,
}

/// One job run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Run {
    /// Run id.
    pub id: String,
    /// Connection (none for describe runs).
    pub connection_id: Option<String>,
    /// Package name.
    pub package: String,
    /// Package version.
    pub version: String,
    /// Kind.
    pub kind: RunKind,
    /// Sync name (sync runs) or hook name (OAuth runs).
    pub sync: Option<String>,
    /// Status.
    pub status: RunStatus,
    /// Attempt number (platform failures retry in a fresh sandbox).
    pub attempt: u32,
    /// Creation time, RFC 3339.
    pub created_at: String,
    /// Start time, RFC 3339.
    pub started_at: Option<String>,
    /// End time, RFC 3339.
    pub finished_at: Option<String>,
    /// Records committed (sync runs).
    pub records_committed: u64,
    /// Records the running attempt has sent so far, held in its spool until the commit
    /// (running sync and webhook runs, answered by the node running them; absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub records_received: Option<u64>,
    /// Failure category.
    pub failure_category: Option<FailureCategory>,
    /// Short machine word for the failure (`threw`, `bad_batch`, `max_batches`, ...), never a message.
    pub failure_kind: Option<String>,
    /// The node that ran it (cluster mode; none on a single node).
    pub node_id: Option<String>,
}

/// One recorded log line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogLine {
    /// Line id (cursor).
    pub id: i64,
    /// Run id.
    pub run_id: String,
    /// Time, RFC 3339.
    pub ts: String,
    /// Level.
    pub level: LogLevel,
    /// Message text.
    pub message: String,
}

/// One committed record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordRow {
    /// Sequence number (cursor).
    pub seq: i64,
    /// Primary key text (merge syncs).
    pub key: Option<String>,
    /// The record.
    pub data: Value,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn words_round_trip() {
        for c in [
            FailureCategory::PackageError,
            FailureCategory::TimeLimit,
            FailureCategory::MemoryLimit,
            FailureCategory::OutputLimit,
            FailureCategory::Platform,
            FailureCategory::ReauthorizationRequired,
        ] {
            assert_eq!(FailureCategory::parse(c.as_str()).ok(), Some(c));
        }
        assert!(RunStatus::parse("nope").is_err());
    }

    #[test]
    fn definition_parses_describe_result() {
        let d: Definition = serde_json::from_value(json!({
            "auth": {"type": "apiKey", "query": "key"},
            "config": {"type": "object"},
            "syncs": [{"name": "items", "mode": "merge", "primaryKey": "id"},
                      {"name": "all", "mode": "replace", "primaryKey": null}],
            "hasVerify": true,
            "oauth": []
        }))
        .expect("definition");
        assert_eq!(
            d.auth.api_key_placement(),
            Some((ApiKeyPlacement::Query, "key"))
        );
        assert_eq!(d.sync("items").map(|s| s.mode), Some(SyncMode::Merge));
        let o: AuthDefinition = serde_json::from_value(json!({
            "type": "oauth2", "authorizeUrl": "https://a/x", "tokenUrl": "https://a/t"
        }))
        .expect("oauth2");
        assert!(matches!(o, AuthDefinition::Oauth2 { pkce: true, .. }));
    }
}
