//! The command line of `sbx connect ...` (clap definitions).

use crate::util::parse_duration;
use clap::{Args, Subcommand, ValueEnum};
use std::time::Duration;

/// `sbx connect ...`.
#[derive(Debug, Subcommand)]
pub enum ConnectCommand {
    /// Scaffold a new package directory: package.json (ES module), a lockfile, an entry
    /// using the SDK, a sync in src/ and its test (`npm test`).
    Init {
        /// npm package name (lower case, optionally @scope/name).
        name: String,
        /// Directory to create (default: ./NAME without the scope); must be new or empty.
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
    /// Try a package directory against the server: upload it as a dev version, build it,
    /// run verify and one sync in a fresh connection `dev NAME`, print logs and records.
    Dev(Box<DevCommand>),
    /// Upload and inspect packages.
    #[command(subcommand)]
    Package(PackageCommand),
    /// Build package versions.
    #[command(subcommand)]
    Build(BuildCommand),
    /// Manage connections.
    #[command(subcommand)]
    Connection(Box<ConnectionCommand>),
    /// Run a sync now ("Run now"); prints the run id, or the finished run with --wait.
    Run {
        /// Sync name.
        sync: String,
        /// Connection id.
        #[arg(long)]
        connection: String,
        /// Wait for the run to end; exit 1 if it failed.
        #[arg(long)]
        wait: bool,
        /// How long to wait.
        #[arg(long, default_value = "30m", value_parser = parse_duration)]
        timeout: Duration,
    },
    /// List the runs of a connection, newest first.
    Runs {
        /// Connection id.
        #[arg(long)]
        connection: String,
        /// How many runs.
        #[arg(long, default_value_t = 20)]
        limit: u32,
    },
    /// List the webhook deliveries of a connection, newest first.
    Deliveries {
        /// Connection id.
        connection: String,
        /// Only deliveries of this status (pending, committed, failed).
        #[arg(long)]
        status: Option<String>,
        /// How many deliveries.
        #[arg(long, default_value_t = 20)]
        limit: u32,
    },
    /// Make a connection's webhook delivery URLs and a new signing secret (shown once).
    Webhooks {
        /// Connection id.
        connection: String,
        /// Signature scheme: standard (Standard Webhooks), hmac-sha256 or none.
        #[arg(long, default_value = "standard")]
        scheme: String,
        /// hmac-sha256: the signature header (default X-Hub-Signature-256).
        #[arg(long)]
        header: Option<String>,
        /// hmac-sha256 and none: the header with the sender's delivery id.
        #[arg(long)]
        id_header: Option<String>,
        /// Replace the URLs that exist too (the old ones stop working).
        #[arg(long)]
        rotate_urls: bool,
    },
    /// Print the recorded log lines of a run.
    Logs {
        /// Run id.
        run: String,
    },
    /// Print the committed records of a sync as JSON lines.
    Records {
        /// Sync name.
        sync: String,
        /// Connection id.
        #[arg(long)]
        connection: String,
        /// Stop after this many records (default: all).
        #[arg(long)]
        limit: Option<u64>,
    },
    /// Print the committed checkpoint of a sync.
    Checkpoint {
        /// Sync name.
        sync: String,
        /// Connection id.
        #[arg(long)]
        connection: String,
    },
}

/// `sbx connect package ...`.
#[derive(Debug, Subcommand)]
pub enum PackageCommand {
    /// Upload a package directory (packed without node_modules) or a .tgz; prints name@version.
    Upload {
        /// Package directory or gzip tarball.
        path: String,
    },
    /// List packages and their versions.
    List,
    /// Show a package version (with its definition once built) as JSON.
    Get {
        /// Package name.
        name: String,
        /// Version.
        #[arg(value_name = "VERSION")]
        package_version: String,
    },
    /// Delete a package version that no connection uses (with its builds).
    Delete {
        /// Package name.
        name: String,
        /// Version.
        #[arg(value_name = "VERSION")]
        package_version: String,
    },
}

/// `sbx connect build ...`.
#[derive(Debug, Subcommand)]
pub enum BuildCommand {
    /// Start a build of a package version; prints the build id (with --wait, also the log).
    Start {
        /// Package name.
        name: String,
        /// Version.
        #[arg(value_name = "VERSION")]
        package_version: String,
        /// Wait for the build to end; exit 1 if it failed.
        #[arg(long)]
        wait: bool,
        /// How long to wait.
        #[arg(long, default_value = "15m", value_parser = parse_duration)]
        timeout: Duration,
    },
    /// Print a build's status (stderr) and log (stdout).
    Get {
        /// Build id.
        id: String,
    },
    /// List the builds of a version.
    List {
        /// Package name.
        name: String,
        /// Version.
        #[arg(value_name = "VERSION")]
        package_version: String,
    },
}

/// The auth type of a connection's credentials.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AuthType {
    /// API key (`--api-key`).
    ApiKey,
    /// Bearer token (`--token`).
    Bearer,
    /// HTTP basic (`--username`, `--password`).
    Basic,
    /// OAuth2 client (`--client-id`, `--client-secret`); sign in with `connection oauth-start`.
    Oauth2,
    /// No credentials.
    None,
}

/// Credential flags. Secrets may come from stdin (`--secret-stdin`) instead of a flag, so
/// that they stay out of shell history; they are never printed.
#[derive(Debug, Clone, Args)]
pub struct CredentialArgs {
    /// Credential type.
    #[arg(long, value_enum)]
    pub auth: Option<AuthType>,
    /// API key (apiKey).
    #[arg(long)]
    pub api_key: Option<String>,
    /// Bearer token (bearer).
    #[arg(long)]
    pub token: Option<String>,
    /// User name (basic).
    #[arg(long)]
    pub username: Option<String>,
    /// Password (basic).
    #[arg(long)]
    pub password: Option<String>,
    /// OAuth client id (oauth2).
    #[arg(long)]
    pub client_id: Option<String>,
    /// OAuth client secret (oauth2; omit for a public client).
    #[arg(long)]
    pub client_secret: Option<String>,
    /// Read the secret part (key, token, password or client secret) from stdin.
    #[arg(long)]
    pub secret_stdin: bool,
}

/// `sbx connect connection ...`.
#[derive(Debug, Subcommand)]
pub enum ConnectionCommand {
    /// Create a connection of a built package version; prints its id.
    Create {
        /// Display name.
        #[arg(long)]
        name: String,
        /// Package name.
        #[arg(long)]
        package: String,
        /// Package version.
        #[arg(long = "package-version", value_name = "VERSION")]
        package_version: String,
        /// Origin the package's requests go to (https://api.example.com).
        #[arg(long)]
        origin: String,
        /// Config as JSON, or @FILE.
        #[arg(long, default_value = "{}")]
        config: String,
        /// Sync schedule interval (e.g. 1h, 15m; at least 60s).
        #[arg(long, value_parser = parse_duration)]
        schedule: Option<Duration>,
        #[command(flatten)]
        credentials: CredentialArgs,
    },
    /// List connections.
    List,
    /// Show a connection as JSON (credentials are never shown).
    Get {
        /// Connection id.
        id: String,
    },
    /// Change a connection.
    Update {
        /// Connection id.
        id: String,
        /// New display name.
        #[arg(long)]
        name: Option<String>,
        /// New config as JSON, or @FILE.
        #[arg(long)]
        config: Option<String>,
        /// New sync schedule interval.
        #[arg(long, value_parser = parse_duration, conflicts_with = "no_schedule")]
        schedule: Option<Duration>,
        /// Clear the schedule (Run now only).
        #[arg(long)]
        no_schedule: bool,
        /// Disable the connection.
        #[arg(long, conflicts_with = "enable")]
        disable: bool,
        /// Enable a disabled connection.
        #[arg(long)]
        enable: bool,
        /// Move the connection to another built version of its package; committed records
        /// and checkpoints are kept (refused when a committed sync changes mode or key).
        #[arg(long, value_name = "VERSION")]
        package_version: Option<String>,
        #[command(flatten)]
        credentials: CredentialArgs,
    },
    /// Delete a connection with its records, checkpoints and credentials.
    Delete {
        /// Connection id.
        id: String,
    },
    /// Test a connection (the package's verify); prints the run, exit 1 if it failed.
    Test {
        /// Connection id.
        id: String,
    },
    /// Start an OAuth sign-in: prints the URL to open and the state.
    OauthStart {
        /// Connection id.
        id: String,
        /// The callback URL registered with the provider.
        #[arg(long)]
        redirect_uri: String,
    },
    /// Finish an OAuth sign-in with the provider's state and code.
    OauthCallback {
        /// State from the redirect.
        #[arg(long)]
        state: String,
        /// Authorization code from the redirect.
        #[arg(long)]
        code: String,
    },
}

/// `sbx connect dev DIR --origin URL --auth ...`.
#[derive(Debug, Args)]
pub struct DevCommand {
    /// Package directory.
    pub dir: std::path::PathBuf,
    /// Origin the package's requests go to (https://api.example.com).
    #[arg(long)]
    pub origin: String,
    /// Config as JSON, or @FILE.
    #[arg(long, default_value = "{}")]
    pub config: String,
    /// The sync to run (default: the package's first).
    #[arg(long)]
    pub sync: Option<String>,
    /// Print at most this many committed records.
    #[arg(long, default_value_t = 10)]
    pub records: u64,
    /// How long the build and each run may take.
    #[arg(long, default_value = "15m", value_parser = parse_duration)]
    pub timeout: Duration,
    #[command(flatten)]
    pub credentials: CredentialArgs,
}
