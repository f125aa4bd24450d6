//! `sbxd`: the sbx daemon.

use anyhow::Context;
use clap::Parser;
use sbx_daemon::config::{Config, Limits};
use sbx_daemon::runtime::gvisor::{GvisorConfig, GvisorRuntime};
use sbx_daemon::runtime::RuntimeError;
use sbx_daemon::service::{SecretBox, Service};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// sbx daemon: runs untrusted code in gVisor sandboxes behind the Sandboxes v2 API.
#[derive(Parser, Debug)]
#[command(name = "sbxd", version)]
struct Args {
    /// Listen address.
    #[arg(long, env = "SBX_LISTEN", default_value = "127.0.0.1:8731")]
    listen: SocketAddr,
    /// Data directory (database, sandboxes, runsc state).
    #[arg(long, env = "SBX_DATA_DIR", default_value = "/var/lib/sbx")]
    data_dir: PathBuf,
    /// PostgreSQL for the sandbox store (`postgres://user:password@host/db`, or
    /// `host=/run/postgresql dbname=sbx`); without it, SQLite in the data dir.
    /// Connect's store stays in the data dir's SQLite for now.
    #[arg(long, env = "SBX_DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// Dev mode: no key needed; loopback only.
    #[arg(long, env = "SBX_DEV")]
    dev: bool,
    /// Cluster mode: this node shares --database-url and --cluster-token-file (both
    /// required) with other nodes; requests about a sandbox of another node are
    /// forwarded to it. Without it the node still registers, as a cluster of one.
    #[arg(long, env = "SBX_CLUSTER")]
    cluster: bool,
    /// This node's stable id (default: the host name).
    #[arg(long, env = "SBX_NODE_ID")]
    node_id: Option<String>,
    /// The URL other nodes and clients reach this node at (default: http://<listen address>).
    #[arg(long, env = "SBX_ADVERTISE_URL")]
    advertise_url: Option<String>,
    /// A node label, key=value (repeatable; comma-separated in SBX_NODE_LABELS).
    #[arg(long = "node-label", env = "SBX_NODE_LABELS", value_delimiter = ',')]
    node_labels: Vec<String>,
    /// A file holding the cluster's shared token (at least 32 characters), which
    /// nodes show each other on forwarded requests.
    #[arg(long, env = "SBX_CLUSTER_TOKEN_FILE")]
    cluster_token_file: Option<PathBuf>,
    /// How long the node's lease lasts without a heartbeat, seconds, 1-3600 (heartbeats every third).
    #[arg(long, env = "SBX_NODE_LEASE_SECS", default_value_t = 15)]
    node_lease_secs: u64,
    /// Accepted signing keys (comma-separated in SBX_SIGNING_KEYS).
    #[arg(long = "signing-key", env = "SBX_SIGNING_KEYS", value_delimiter = ',')]
    signing_keys: Vec<String>,
    /// runsc binary.
    #[arg(long, env = "SBX_RUNSC", default_value = "runsc")]
    runsc: PathBuf,
    /// Directory containing the static `sbx-agent` binary.
    #[arg(long, env = "SBX_AGENT_DIR")]
    agent_dir: PathBuf,
    /// Root filesystem of the default image.
    #[arg(long, env = "SBX_IMAGE_ROOTFS")]
    image_rootfs: PathBuf,
    /// An E2B template id that names an image, `NAME=IMAGE` (repeatable; IMAGE
    /// is `default` or an image reference such as `py-tools:1`, resolved in the
    /// creating tenant's images). `base` always names the default image.
    #[arg(
        long = "e2b-template",
        env = "SBX_E2B_TEMPLATES",
        value_delimiter = ','
    )]
    e2b_templates: Vec<String>,
    /// The E2B sandbox domain: `{port}-{sandboxId}.DOMAIN` hosts are routed to
    /// sandboxes (envd on port 49983), and E2B answers tell the SDKs to use it
    /// (wildcard DNS and TLS in front: see docs/e2b.md).
    #[arg(long = "e2b-domain", env = "SBX_E2B_DOMAIN")]
    e2b_domain: Option<String>,
    /// PEM certificate chain: sbxd terminates TLS itself (with `--tls-key`).
    /// For `--e2b-domain` it must cover `*.DOMAIN` (a wildcard certificate).
    #[arg(long, env = "SBX_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM private key of `--tls-cert`.
    #[arg(long, env = "SBX_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Active runtime limit per sandbox, seconds.
    #[arg(long, env = "SBX_ACTIVE_RUNTIME_SECS", default_value_t = 3600)]
    active_runtime_secs: u64,
    /// Snapshot lifetime before the janitor deletes it, seconds (default 7 days).
    #[arg(long, env = "SBX_SNAPSHOT_TTL_SECS", default_value_t = 7 * 24 * 3600)]
    snapshot_ttl_secs: u64,
    /// Live (CREATING or unexpired READY) snapshots a workspace may keep; more get
    /// 403 sandbox_snapshot_limit_exceeded. 0: no limit.
    #[arg(long, env = "SBX_SNAPSHOT_LIMIT", default_value_t = 50)]
    snapshot_limit: u32,
    /// Image storage a workspace may keep, MiB (each distinct content once);
    /// more is 403 image_quota_exceeded. 0: no limit.
    #[arg(long, env = "SBX_IMAGE_QUOTA_MB", default_value_t = 20 * 1024)]
    image_quota_mb: u64,
    /// Test-restore every checkpoint before its snapshot is READY (a
    /// checkpoint that does not restore is taken again); `false` saves about
    /// one restore per snapshot.
    #[arg(long, env = "SBX_SNAPSHOT_VERIFY", default_value_t = true, action = clap::ArgAction::Set)]
    snapshot_verify: bool,
    /// Extra global runsc flag (repeatable), e.g. --runsc-flag=--debug-log=/tmp/runsc/.
    #[arg(long = "runsc-flag", allow_hyphen_values = true)]
    runsc_flags: Vec<String>,
    /// Egress policy of sandboxes created without one: none, public or https-only.
    #[arg(long, env = "SBX_DEFAULT_NETWORK", default_value = "public")]
    default_network: String,
    /// TEST ONLY: treat this private CIDR as public (repeatable), for test hosts in network namespaces.
    #[arg(long = "network-test-public-cidr")]
    network_test_public_cidr: Vec<String>,
    /// Warm pool: `auto` (the default: sbxd keeps one sandbox of the smallest
    /// shape booted ahead, more for shapes being created, within a quarter of
    /// the node's memory), `none`, or SHAPE=N per shape (repeatable, e.g.
    /// --warm-pool 1x1024=2; comma-separated in SBX_WARM_POOL).
    #[arg(long = "warm-pool", env = "SBX_WARM_POOL", value_delimiter = ',')]
    warm_pool: Vec<String>,
    /// Shapes fresh sandboxes may have, VCPUxMIB (repeatable, e.g. --shapes
    /// 1x1024,2x2048,4x4096): 1, 2 or 4 vCPU with 1, 2 or 4 GiB per vCPU. Default: all nine.
    #[arg(long, env = "SBX_SHAPES", value_delimiter = ',')]
    shapes: Vec<String>,
    /// How long an Idempotency-Key and its stored response are kept, seconds (default 24 h).
    #[arg(long, env = "SBX_IDEMPOTENCY_TTL_SECS", default_value_t = 24 * 3600)]
    idempotency_ttl_secs: u64,
    /// Memory for sandboxes, MiB (default: MemTotal minus --memory-reserve-mb).
    #[arg(long, env = "SBX_CAPACITY_MEMORY_MB")]
    capacity_memory_mb: Option<u64>,
    /// CPUs for sandboxes (default: the host's CPU count).
    #[arg(long, env = "SBX_CAPACITY_VCPUS")]
    capacity_vcpus: Option<u32>,
    /// Memory kept for the host when the capacity is detected, MiB.
    #[arg(long, env = "SBX_MEMORY_RESERVE_MB", default_value_t = 1024)]
    memory_reserve_mb: u64,
    /// Memory overcommit factor (1.0: every sandbox's memory limit is reserved in full).
    #[arg(long, env = "SBX_MEMORY_OVERCOMMIT", default_value_t = 1.0)]
    memory_overcommit: f64,
    /// CPU overcommit factor (vCPUs are CPU-time quotas).
    #[arg(long, env = "SBX_CPU_OVERCOMMIT", default_value_t = 16.0)]
    cpu_overcommit: f64,
    /// Least free disk in the data dir for a new sandbox, MiB.
    #[arg(long, env = "SBX_MIN_FREE_DISK_MB", default_value_t = 1024)]
    min_free_disk_mb: u64,
    /// Disk of each sandbox's writable root, MiB: a sparse ext4 image
    /// loop-mounted under the sandbox's dir (needs loop devices); 0: no limit.
    #[arg(long, env = "SBX_SANDBOX_DISK_MB", default_value_t = 10 * 1024)]
    sandbox_disk_mb: u64,
    /// Host disk each sandbox's console log (its logs stream) may use, MiB; past it
    /// the oldest half is dropped (checked twice a second). 0: no limit.
    #[arg(long, env = "SBX_CONSOLE_LOG_MAX_MB", default_value_t = 16)]
    console_log_max_mb: u64,
    /// How often each running sandbox's CPU, memory, processes and disk are
    /// sampled, seconds (GET /v1/sandboxes/{id}/metrics, sbx top); 0: never.
    #[arg(long, env = "SBX_USAGE_SAMPLE_SECS", default_value_t = 5)]
    usage_sample_secs: u64,
    /// Freeze a sandbox (cgroup freezer: no host CPU at all, memory kept)
    /// once nothing runs in it but its agent and no request came for this
    /// many seconds; the next request thaws it (about a millisecond). An
    /// idle gVisor sandbox otherwise burns ~2 % of a core. 0: never.
    #[arg(long, env = "SBX_FREEZE_IDLE_AFTER_SECS", default_value_t = 10)]
    freeze_idle_after_secs: u64,
    /// RLIMIT_NPROC of the commands run in a sandbox (tasks per user across
    /// the sandbox): a fork bomb gets EAGAIN here instead of filling the
    /// sandbox's memory. 0: no limit.
    #[arg(long, env = "SBX_GUEST_TASK_LIMIT", default_value_t = 1024)]
    guest_task_limit: u64,
    /// How sbxd reaches each sandbox's agent: `stdio` (PID 1's stdin and
    /// stdout, a socket pair sbxd keeps; no process in between) or `relay`
    /// (a `runsc exec sbx-agent relay` process per sandbox, as sandboxes
    /// from before a restart are always reached).
    #[arg(long, env = "SBX_AGENT_CHANNEL", default_value = "stdio", value_parser = ["stdio", "relay"])]
    agent_channel: String,
    /// A file upload or download that gets no data from the sandbox for this
    /// many seconds is stopped (503) and its host `runsc exec` killed.
    #[arg(long, env = "SBX_FILE_TRANSFER_IDLE_SECS", default_value_t = 30)]
    file_transfer_idle_secs: u64,
    /// Where snapshots are kept besides the data dir: `local` (only there) or
    /// `s3://bucket/prefix` (uploaded before READY, fetched by any node that clones).
    #[arg(long, env = "SBX_SNAPSHOT_STORE", default_value = "local")]
    snapshot_store: String,
    /// Endpoint of an S3-compatible server, e.g. http://127.0.0.1:9000 (default: AWS).
    #[arg(long, env = "SBX_S3_ENDPOINT")]
    s3_endpoint: Option<String>,
    /// S3 region.
    #[arg(long, env = "SBX_S3_REGION", default_value = "us-east-1")]
    s3_region: String,
    #[command(flatten)]
    http: HttpArgs,
    #[command(flatten)]
    connect: ConnectArgs,
    #[command(flatten)]
    secret_keys: sbx_daemon::secret_keys::SecretKeyArgs,
    #[command(flatten)]
    telemetry: sbx_daemon::telemetry::TelemetryArgs,
}

/// Settings of the HTTP server and the browser guard.
#[derive(clap::Args, Debug)]
struct HttpArgs {
    /// A request head must arrive within this many seconds (of the accept, or
    /// of its first byte on a kept-alive connection).
    #[arg(long, env = "SBX_HTTP_HEADER_TIMEOUT_SECS", default_value_t = 10)]
    http_header_timeout_secs: u64,
    /// A request body that sends no byte for this many seconds while it is
    /// read is aborted.
    #[arg(long, env = "SBX_HTTP_BODY_TIMEOUT_SECS", default_value_t = 30)]
    http_body_timeout_secs: u64,
    /// A kept-alive connection with no request in progress is closed after
    /// this many seconds (responses that stream or wait are not idle).
    #[arg(long, env = "SBX_HTTP_IDLE_TIMEOUT_SECS", default_value_t = 60)]
    http_idle_timeout_secs: u64,
    /// Open HTTP connections; more are accepted and closed at once.
    #[arg(long, env = "SBX_HTTP_MAX_CONNECTIONS", default_value_t = 4096)]
    http_max_connections: usize,
    /// Open HTTP connections per source address (IPv6: per /64). Behind a
    /// reverse proxy every connection comes from the proxy: raise it to
    /// --http-max-connections there.
    #[arg(long, env = "SBX_HTTP_MAX_CONNECTIONS_PER_IP", default_value_t = 1024)]
    http_max_connections_per_ip: usize,
    /// Refuse foreign Host headers, cross-origin unsafe requests and non-JSON
    /// bodies on JSON routes (default: on with --dev, off otherwise).
    #[arg(long, env = "SBX_HTTP_BROWSER_GUARD", action = clap::ArgAction::Set)]
    http_browser_guard: Option<bool>,
    /// A Host name the browser guard accepts besides loopback names and the
    /// listen address (repeatable; comma-separated in SBX_HTTP_ALLOWED_HOSTS).
    #[arg(
        long = "http-allowed-host",
        env = "SBX_HTTP_ALLOWED_HOSTS",
        value_delimiter = ','
    )]
    http_allowed_hosts: Vec<String>,
    /// A file holding the token (at least 32 characters) that `GET /metrics`
    /// needs outside dev mode, sent as `Authorization: Bearer TOKEN`. Without
    /// it, only a dev-mode sbxd can be scraped.
    #[arg(long, env = "SBX_METRICS_TOKEN_FILE")]
    metrics_token_file: Option<PathBuf>,
}

/// Settings of the Connect runtime.
#[derive(clap::Args, Debug)]
struct ConnectArgs {
    /// Installed Connect SDK (runner.mjs, index.mjs, lib/), mounted read-only at
    /// /opt/sbx-connect in job sandboxes (default: DATA_DIR/connect-sdk).
    #[arg(long, env = "SBX_CONNECT_SDK_DIR")]
    connect_sdk_dir: Option<PathBuf>,
    /// The npm registry builds may reach (default: `npm config get registry`, else
    /// https://registry.npmjs.org/). Its host is allowed whatever address it resolves to.
    #[arg(long, env = "SBX_NPM_REGISTRY")]
    npm_registry: Option<String>,
    /// PEM roots npm trusts in build sandboxes, on top of Node's own (a registry behind a
    /// TLS-inspecting proxy). Default: `npm config get cafile` when set.
    #[arg(long, env = "SBX_NPM_CA_FILE")]
    npm_ca_file: Option<PathBuf>,
    /// Time budget of a sync run, seconds.
    #[arg(long, env = "SBX_CONNECT_SYNC_TIME_SECS", default_value_t = 15 * 60)]
    connect_sync_time_secs: u64,
    /// Time budget of a build (npm ci), seconds.
    #[arg(long, env = "SBX_CONNECT_BUILD_TIME_SECS", default_value_t = 10 * 60)]
    connect_build_time_secs: u64,
    /// Memory budget of every Connect job and build sandbox, MiB.
    #[arg(long, env = "SBX_CONNECT_MEMORY_MIB", default_value_t = 1024)]
    connect_memory_mib: u64,
    /// Largest webhook delivery body, bytes (413 above).
    #[arg(long, env = "SBX_CONNECT_WEBHOOK_MAX_BODY_BYTES", default_value_t = 1024 * 1024)]
    connect_webhook_max_body_bytes: usize,
    /// Webhook deliveries per second a connection's token bucket refills (429 when empty).
    #[arg(long, env = "SBX_CONNECT_WEBHOOK_RATE", default_value_t = 10.0)]
    connect_webhook_rate: f64,
    /// Webhook deliveries a connection may send at once (the token bucket's size).
    #[arg(long, env = "SBX_CONNECT_WEBHOOK_BURST", default_value_t = 50)]
    connect_webhook_burst: u32,
    /// Pending webhook deliveries a connection's inbox holds (429 when full).
    #[arg(long, env = "SBX_CONNECT_WEBHOOK_MAX_PENDING", default_value_t = 1000)]
    connect_webhook_max_pending: u64,
    /// Extra trusted root certificates (PEM file) for the Connect broker (repeatable).
    #[arg(long = "connect-extra-ca")]
    connect_extra_ca: Vec<PathBuf>,
    /// TEST ONLY: the port the Connect broker may use instead of 443.
    #[arg(long = "connect-test-port")]
    connect_test_port: Option<u16>,
    /// TEST ONLY (--dev): the shortest schedule interval, seconds, instead of 60.
    #[arg(long = "connect-test-min-schedule-secs")]
    connect_test_min_schedule_secs: Option<u64>,
}

/// `sbxd keys ...`: manages the signing keys in the data dir's store (sbxd may be running).
#[derive(Parser, Debug)]
#[command(name = "sbxd keys")]
struct KeysArgs {
    /// Data directory (holds the database).
    #[arg(
        long,
        env = "SBX_DATA_DIR",
        default_value = "/var/lib/sbx",
        global = true
    )]
    data_dir: PathBuf,
    /// PostgreSQL holding the keys, as given to sbxd (then the data dir's SQLite is not used).
    #[arg(long, env = "SBX_DATABASE_URL", hide_env_values = true, global = true)]
    database_url: Option<String>,
    #[command(subcommand)]
    command: KeysCommand,
}

#[derive(clap::Subcommand, Debug)]
enum KeysCommand {
    /// Creates a key and prints it once; only its hash is stored.
    Create {
        /// Workspace the key belongs to (a-z, 0-9, '_', '-').
        #[arg(long)]
        workspace: String,
        /// Environment the key is bound to; without it, x-inngest-env selects one (default production).
        #[arg(long)]
        env: Option<String>,
        /// A label shown by `keys list`.
        #[arg(long)]
        name: Option<String>,
    },
    /// Lists keys (ids, tenants, labels; never secrets).
    List,
    /// Revokes a key by id; requests with it get 401 at once.
    Revoke {
        /// Key id, from `keys list`.
        id: uuid::Uuid,
    },
}

/// `sbxd migrate-store`: copies a stopped single node's SQLite store into PostgreSQL.
#[derive(Parser, Debug)]
#[command(name = "sbxd migrate-store")]
struct MigrateStoreArgs {
    /// Data directory of the node (holds sbx.sqlite); sbxd must not be running on it.
    #[arg(long)]
    from: PathBuf,
    /// PostgreSQL to copy into (as later given to sbxd with --database-url).
    #[arg(long, env = "SBX_DATABASE_URL", hide_env_values = true)]
    to: String,
}

fn migrate_store_main(args: MigrateStoreArgs) -> anyhow::Result<()> {
    let report = sbx_daemon::migrate_store::migrate(&args.from, &args.to)?;
    let s = report.store;
    println!("signing keys: {}", s.api_keys);
    println!("sandboxes: {}", s.sandboxes);
    println!("snapshots: {}", s.snapshots);
    println!("secrets: {}", s.secrets);
    println!("E2B records: {}", s.e2b_records);
    println!("preview access rows: {}", s.previews);
    println!("volumes: {}", s.volumes);
    println!("volume mounts: {}", s.volume_mounts);
    println!("image names: {}", s.images);
    println!("{}", report.connect);
    eprintln!(
        "done: start sbxd with --data-dir {} --database-url {}",
        args.from.display(),
        sbx_store::redact_url(&args.to)
    );
    Ok(())
}

/// The Connect store of a node, for an admin command; `None` when the node never ran
/// Connect (no database file, and no PostgreSQL to look in).
fn open_connect_store(
    data_dir: &std::path::Path,
    database_url: Option<&str>,
) -> anyhow::Result<Option<Arc<dyn sbx_connect::store::Store>>> {
    let location = sbx_connect::store::Location::of_node(&data_dir.join("connect"), database_url);
    if let sbx_connect::store::Location::Sqlite(path) = &location {
        if !path.exists() {
            return Ok(None);
        }
    }
    Ok(Some(
        sbx_connect::store::open(&location).context("opening the Connect store")?,
    ))
}

/// The sandbox store: PostgreSQL at `database_url` if given, else SQLite at `sqlite_path`.
///
/// A failure names the database (a URL without its password) and why, so that a
/// wrong URL, a server that is down or a schema from a newer sbxd stops sbxd at start.
fn open_store(
    sqlite_path: &std::path::Path,
    database_url: Option<&str>,
) -> anyhow::Result<Arc<dyn sbx_store::Store>> {
    match database_url.map(str::trim).filter(|u| !u.is_empty()) {
        Some(url) => {
            let store = sbx_store::PostgresStore::open(url).with_context(|| {
                format!(
                    "opening the PostgreSQL store at {}",
                    sbx_store::redact_url(url)
                )
            })?;
            tracing::info!(database = %sbx_store::redact_url(url), "store on PostgreSQL");
            Ok(Arc::new(store))
        }
        None => Ok(Arc::new(
            sbx_store::SqliteStore::open(sqlite_path).with_context(|| {
                format!("opening the SQLite store at {}", sqlite_path.display())
            })?,
        )),
    }
}

fn keys_main(args: KeysArgs) -> anyhow::Result<()> {
    let store = open_store(
        &args.data_dir.join("sbx.sqlite"),
        args.database_url.as_deref(),
    )?;
    let store = &*store;
    match args.command {
        KeysCommand::Create {
            workspace,
            env,
            name,
        } => {
            let (record, key) = sbx_daemon::tenants::create_key(
                store,
                &workspace,
                env.as_deref(),
                name.as_deref(),
            )?;
            eprintln!(
                "key {} for workspace {} ({}); it is shown only now:",
                record.id,
                record.workspace,
                record
                    .env
                    .as_deref()
                    .map_or("any environment".to_string(), |e| format!(
                        "environment {e}"
                    ))
            );
            println!("{key}");
        }
        KeysCommand::List => {
            println!("ID\tWORKSPACE\tENV\tNAME\tCREATED\tREVOKED");
            for k in store.list_api_keys()? {
                println!(
                    "{}\t{}\t{}\t{}\t{}\t{}",
                    k.id,
                    k.workspace,
                    k.env.as_deref().unwrap_or("*"),
                    k.name.as_deref().unwrap_or("-"),
                    sbx_api_types::format_time(k.created_at),
                    k.revoked_at
                        .map_or("-".to_string(), sbx_api_types::format_time),
                );
            }
        }
        KeysCommand::Revoke { id } => {
            sbx_daemon::tenants::revoke_key(store, id)?;
            eprintln!("key {id} revoked");
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let command = std::env::args().nth(1);
    if !command
        .as_deref()
        .is_some_and(|c| ADMIN_COMMANDS.contains(&c))
    {
        let args = Args::parse();
        let telemetry = sbx_daemon::telemetry::init(
            args.telemetry.log_format,
            args.telemetry.otlp_endpoint.as_deref(),
        )?;
        let result = daemon_main(args).await;
        // The spans of the last requests (and of a failed start) go out before exit.
        telemetry.shutdown().await;
        return result;
    }
    sbx_daemon::telemetry::init(sbx_daemon::telemetry::LogFormat::Text, None)?;
    if std::env::args().nth(1).as_deref() == Some("backup") {
        let args = sbx_daemon::backup::BackupArgs::parse_from(std::env::args().skip(1));
        println!("{}", sbx_daemon::backup::backup(&args)?);
        return Ok(());
    }
    if std::env::args().nth(1).as_deref() == Some("restore") {
        let args = sbx_daemon::backup::RestoreArgs::parse_from(std::env::args().skip(1));
        println!("{}", sbx_daemon::backup::restore(&args)?);
        return Ok(());
    }
    if std::env::args().nth(1).as_deref() == Some("quotafs") {
        let args = QuotafsArgs::parse_from(std::env::args().skip(1));
        // Blocks until the mount is unmounted; nothing else runs in this process.
        sbx_daemon::runtime::quotafs::serve(&args.source, &args.mount, args.limit_bytes)?;
        return Ok(());
    }
    if std::env::args().nth(1).as_deref() == Some("keys") {
        let args = KeysArgs::parse_from(std::env::args().skip(1));
        return keys_main(args);
    }
    if std::env::args().nth(1).as_deref() == Some("migrate-store") {
        return migrate_store_main(MigrateStoreArgs::parse_from(std::env::args().skip(1)));
    }
    if std::env::args().nth(1).as_deref() == Some("rotate-secret-key") {
        let args =
            sbx_daemon::secret_keys::rotate::RotateArgs::parse_from(std::env::args().skip(1));
        let store = open_store(
            &args.data_dir.join("sbx.sqlite"),
            args.database_url.as_deref(),
        )?;
        let connect = open_connect_store(&args.data_dir, args.database_url.as_deref())?;
        return Ok(sbx_daemon::secret_keys::rotate::rotate_main(
            &args,
            &*store,
            connect.as_ref(),
        )?);
    }
    anyhow::bail!("unknown command {command:?}")
}

/// The first arguments that run an admin command instead of the daemon.
const ADMIN_COMMANDS: &[&str] = &[
    "keys",
    "migrate-store",
    "rotate-secret-key",
    "backup",
    "restore",
    "quotafs",
];

/// `sbxd quotafs`: the size limit of one mounted S3 volume, a FUSE
/// passthrough of rclone's mount (started by sbxd itself, see docs/volumes.md).
#[derive(Parser, Debug)]
#[command(name = "sbxd quotafs")]
struct QuotafsArgs {
    /// The directory passed through (rclone's mount of the volume).
    #[arg(long)]
    source: PathBuf,
    /// Where the passthrough is mounted (what sandboxes bind).
    #[arg(long)]
    mount: PathBuf,
    /// The most bytes the volume's regular files may take.
    #[arg(long)]
    limit_bytes: u64,
}

/// The daemon: serves until SIGINT or SIGTERM.
async fn daemon_main(args: Args) -> anyhow::Result<()> {
    // Checked first: a node that cannot take part in its cluster must not start at all.
    let node = node_config(&args)?;
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => {
            Some(sbx_daemon::tls::acceptor(cert, key).context("loading --tls-cert/--tls-key")?)
        }
        _ => None,
    };
    // Checked before anything is opened or started: a production daemon must not come up
    // trusting an extra CA or letting the broker leave port 443, not even for a moment.
    if !args.dev
        && (args.connect.connect_test_port.is_some()
            || args.connect.connect_test_min_schedule_secs.is_some()
            || !args.connect.connect_extra_ca.is_empty())
    {
        anyhow::bail!(
            "--connect-test-port, --connect-test-min-schedule-secs and --connect-extra-ca \
             are for testing against one's own API and are refused outside --dev"
        );
    }
    let shapes = sbx_daemon::config::parse_shapes(&args.shapes).map_err(anyhow::Error::msg)?;
    let config = Config {
        listen: args.listen,
        data_dir: args.data_dir.clone(),
        dev: args.dev,
        signing_keys: args
            .signing_keys
            .into_iter()
            .filter(|k| !k.is_empty())
            .collect(),
        runsc_binary: args.runsc,
        agent_dir: std::fs::canonicalize(&args.agent_dir).context("agent dir")?,
        image_rootfs: std::fs::canonicalize(&args.image_rootfs).context("image rootfs")?,
        image_ref: "default".into(),
        e2b_templates: sbx_daemon::config::parse_e2b_templates(&args.e2b_templates)
            .map_err(anyhow::Error::msg)?,
        e2b_domain: args
            .e2b_domain
            .as_deref()
            .filter(|d| !d.is_empty())
            .map(sbx_daemon::config::parse_e2b_domain)
            .transpose()
            .map_err(anyhow::Error::msg)?,
        limits: Limits {
            active_runtime: Duration::from_secs(args.active_runtime_secs),
            snapshot_ttl: Duration::from_secs(args.snapshot_ttl_secs),
            snapshots_per_workspace: args.snapshot_limit,
            snapshot_verify: args.snapshot_verify,
            image_quota_mb: args.image_quota_mb,
            idempotency_ttl: Duration::from_secs(args.idempotency_ttl_secs),
            sandbox_disk_mb: args.sandbox_disk_mb,
            console_log_max_mb: args.console_log_max_mb,
            usage_sample: Duration::from_secs(args.usage_sample_secs),
            freeze_idle_after: Duration::from_secs(args.freeze_idle_after_secs),
            guest_tasks: args.guest_task_limit,
            // 0 would stop every transfer at its first wait.
            file_transfer_idle: Duration::from_secs(args.file_transfer_idle_secs.max(1)),
            ..Limits::default()
        },
        runsc_extra_flags: args.runsc_flags,
        default_network: match sbx_api_types::NetworkMode::parse(&args.default_network) {
            Some(m) if m != sbx_api_types::NetworkMode::Allowlist => m,
            _ => anyhow::bail!("--default-network must be none, public or https-only"),
        },
        network_test_public: args.network_test_public_cidr,
        warm_pool: sbx_daemon::config::parse_warm_pool(&args.warm_pool, &shapes)
            .map_err(anyhow::Error::msg)?,
        shapes,
        capacity: sbx_daemon::config::CapacityConfig {
            memory_mb: args.capacity_memory_mb,
            vcpus: args.capacity_vcpus,
            memory_reserve_mb: args.memory_reserve_mb,
            memory_overcommit: args.memory_overcommit,
            cpu_overcommit: args.cpu_overcommit,
            min_free_disk_mb: args.min_free_disk_mb,
        },
        http: sbx_daemon::config::HttpConfig {
            header_timeout: Duration::from_secs(args.http.http_header_timeout_secs),
            body_timeout: Duration::from_secs(args.http.http_body_timeout_secs),
            idle_timeout: Duration::from_secs(args.http.http_idle_timeout_secs),
            max_connections: args.http.http_max_connections,
            max_connections_per_ip: args.http.http_max_connections_per_ip,
            browser_guard: args.http.http_browser_guard.unwrap_or(args.dev),
            allowed_hosts: args
                .http
                .http_allowed_hosts
                .iter()
                .map(|h| h.trim().to_ascii_lowercase())
                .filter(|h| !h.is_empty())
                .collect(),
            metrics_token: match &args.http.metrics_token_file {
                Some(path) => Some(sbx_daemon::config::MetricsToken::parse(
                    &std::fs::read_to_string(path).with_context(|| {
                        format!("reading the metrics token file {}", path.display())
                    })?,
                )?),
                None => None,
            },
        },
        node,
        snapshot_store: sbx_daemon::config::snapshot_store_config(
            &args.snapshot_store,
            args.s3_endpoint.clone(),
            args.s3_region.clone(),
        )?,
    };
    sbx_daemon::network::Network::new(config.default_network, &config.network_test_public)
        .map_err(anyhow::Error::msg)?;
    config.validate()?;
    sbx_daemon::service::metrics::record_build_info(&config.runsc_binary);
    std::fs::create_dir_all(&config.data_dir).context("creating data dir")?;
    // Held until sbxd exits: one sbxd per data dir, and no migrate-store under it.
    let _data_dir_lock = sbx_daemon::data_dir::DataDirLock::acquire(&config.data_dir)?;
    let store = open_store(&config.database_path(), args.database_url.as_deref())?;
    let stored_keys = store.list_api_keys().context("reading the signing keys")?;
    config.check_keys(
        stored_keys
            .iter()
            .filter(|k| k.revoked_at.is_none())
            .count(),
    )?;
    let runtime: Arc<GvisorRuntime> = Arc::new(
        GvisorRuntime::new(GvisorConfig {
            runsc_binary: config.runsc_binary.clone(),
            runsc_root: config.runsc_root(),
            sandboxes_dir: config.sandboxes_dir(),
            image_rootfs: config.image_rootfs.clone(),
            agent_dir: config.agent_dir.clone(),
            pids_limit: config.limits.pids_per_sandbox,
            guest_task_limit: config.limits.guest_tasks,
            stdio_channel: args.agent_channel == "stdio",
            extra_flags: config.runsc_extra_flags.clone(),
            sandbox_disk_mb: config.limits.sandbox_disk_mb,
            spare_disks_dir: config.spare_disks_dir(),
            volumes_dir: config.volumes_dir(),
            s3_volumes: sbx_daemon::config::s3_volume_config(&config.snapshot_store),
        })
        .map_err(|e| match e {
            RuntimeError::Disk(e) => anyhow::anyhow!(
                "sandbox disk limit (--sandbox-disk-mb {}): {e}. It needs mkfs.ext4 \
                 (e2fsprogs), /dev/loop-control, loop devices and ext4 (Linux 5.8 or later); \
                 --sandbox-disk-mb 0 runs without a disk limit",
                config.limits.sandbox_disk_mb
            ),
            other => anyhow::Error::new(other).context("setting up the runtime"),
        })?,
    );
    let keys = args.secret_keys.load(&config.data_dir)?;
    let secrets = SecretBox::new(keys.clone());
    sbx_daemon::secret_keys::check_stored_secrets(&*store, &secrets)?;
    sbx_daemon::reaper::start();
    let service = Service::new(config.clone(), store, runtime.clone(), secrets);
    let connect = open_connect(
        &config,
        &args.connect,
        args.database_url.as_deref(),
        &service,
        runtime.clone(),
        keys,
    )?;
    connect.start_delivery_worker();
    let capacity = service.capacity();
    tracing::info!(
        vcpus = capacity.vcpu_milli as f64 / 1000.0,
        memory_mb = capacity.memory_mb,
        min_free_disk_mb = capacity.min_free_disk / (1024 * 1024),
        "node capacity for sandboxes"
    );
    // Registered before reconciling: a fail-over of this node decided on the epoch
    // it had before this start either lands first (reconciliation then finds the
    // sandboxes FAILED and removes their leftovers) or not at all.
    let registered = service
        .register_node()
        .await
        .context("registering this node in the store")?;
    tracing::info!(
        node = %registered.id,
        epoch = registered.epoch,
        cluster = config.node.cluster,
        advertise_url = %registered.advertise_url,
        "node registered"
    );
    tokio::spawn(service.clone().node_duties());
    // After the heartbeat started: reconciling may take a while (it removes
    // leftovers, up to 10 s before the port opens) and the lease must not run
    // out meanwhile.
    service
        .reconcile()
        .await
        .context("reconciling with the host")?;
    service.refill_pool();
    tokio::spawn(service.clone().pool_maintenance());
    let renewer = service.clone();
    tokio::spawn(async move {
        // Its own task: a slow sweep must not let this process's claims pass for abandoned.
        let mut tick = tokio::time::interval(sbx_daemon::service::LEASE_RENEWAL);
        loop {
            tick.tick().await;
            renewer.renew_idempotency_leases().await;
        }
    });
    let (sweeper, sweeper_connect) = (service.clone(), connect.clone());
    let cluster = config.node.cluster;
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        for n in 0u64.. {
            tick.tick().await;
            sweeper.enforce_runtime_limits().await;
            if n % 2 == 0 {
                sweeper.snapshot_janitor().await;
            }
            if n % 60 == 0 {
                sweeper.idempotency_janitor().await;
                // Root filesystems whose last name, sandbox and snapshot went.
                sweeper.sweep_images().await;
            }
            if n % 5 == 0 || n % 3600 == 0 {
                // Runs and builds of a lost node fail before the scheduler looks, so that
                // the syncs it was running are due again on this tick (idempotent: every
                // node does it).
                let lost = if n % 5 == 0 && cluster {
                    sweeper.failed_over_nodes().await
                } else {
                    Vec::new()
                };
                // Which node starts each due sync: the best of two live, undrained nodes by
                // free memory, drawn alike on every node (a drained node starts none; a
                // single node starts all).
                let placement = sweeper.job_placement().await;
                // Both read and write the Connect store: off the async workers.
                let connect = sweeper_connect.clone();
                let done = tokio::task::spawn_blocking(move || {
                    for node in &lost {
                        if let Err(e) = connect.fail_work_of_lost_node(node) {
                            tracing::warn!(error = %e, node, "connect: failing a lost node's runs");
                        }
                    }
                    if n % 5 == 0 {
                        let now = chrono::Utc::now();
                        // The sync and its interval number: a new draw every interval.
                        let here = |d: &sbx_connect::service::DueSync| {
                            let interval = d.interval_secs.max(1) as i64;
                            placement.runs_here(&format!(
                                "{}/{}/{}/{}",
                                d.workspace,
                                d.connection_id,
                                d.sync,
                                now.timestamp() / interval
                            ))
                        };
                        if let Err(e) = connect.scheduler_tick_placed(now, here) {
                            tracing::warn!(error = %e, "connect scheduler");
                        }
                    }
                    if n % 3600 == 0 {
                        if let Err(e) = connect.run_janitor(chrono::Utc::now()) {
                            tracing::warn!(error = %e, "connect log janitor");
                        }
                    }
                })
                .await;
                if let Err(e) = done {
                    tracing::error!(error = %e, "connect scheduler task");
                }
            }
        }
    });
    let sample_every = config.limits.usage_sample;
    if !sample_every.is_zero() {
        let sampler = service.clone();
        tokio::spawn(async move {
            // One task for every sandbox of the node: no per-sandbox timers or threads.
            let mut tick = tokio::time::interval(sample_every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                sampler.sample_usage().await;
            }
        });
    }
    let freeze_after = config.limits.freeze_idle_after;
    let mut freezing = None;
    if !freeze_after.is_zero() {
        let freezer = service.clone();
        freezing = Some(tokio::spawn(async move {
            // Looking twice per period bounds how long past the period a sandbox stays awake.
            let mut tick =
                tokio::time::interval((freeze_after / 2).max(Duration::from_millis(500)));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                freezer.freeze_idle().await;
            }
        }));
    }
    let trimmer = service.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(CONSOLE_TRIM_EVERY);
        loop {
            tick.tick().await;
            trimmer.trim_console_logs().await;
        }
    });
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    // E2B fields are store rows; the files an earlier sbxd kept in DATA_DIR/e2b/
    // are imported once here. Its timeout sweep starts here too (E2B sandboxes
    // end at their timeout; each node sweeps its own).
    let e2b = sbx_daemon::service::e2b::E2b::start(service.clone())
        .context("importing the E2B record files of an earlier sbxd into the store")?;
    tracing::info!(listen = %config.listen, dev = config.dev, tls = tls.is_some(), browser_guard = config.http.browser_guard, "sbxd ready");
    sbx_daemon::server::serve_maybe_tls(
        listener,
        tls,
        sbx_daemon::api::router(service, Some(connect), e2b),
        &config.http,
        shutdown_signal(),
    )
    .await;
    // Sandboxes outlive sbxd; none of them stays frozen without an sbxd to
    // thaw it (runsc commands an operator runs meanwhile would wait on it).
    if let Some(task) = freezing {
        task.abort();
        // Cancelled at its next await; a freeze already handed to a blocking
        // thread may still land, and the next sbxd thaws that one at start.
        let _ = task.await;
    }
    let thawed = runtime.thaw_all().await;
    tracing::info!(thawed, "stopped; sleeping sandboxes thawed");
    Ok(())
}

/// Completes at SIGINT or SIGTERM (what systemd and Kubernetes send): the
/// server then stops accepting and lets open connections finish. Sandboxes
/// keep running; the next sbxd reattaches them.
async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).ok();
    let terminated = async {
        match term.as_mut() {
            Some(t) => {
                t.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: shutting down"),
        _ = terminated => tracing::info!("SIGTERM: shutting down"),
    }
}

/// Opens the Connect runtime: its tables in the PostgreSQL of `database_url` (else its own
/// SQLite file), files under the data dir, credentials sealed with the secret store's keys,
/// jobs in this daemon's sandboxes.
fn open_connect(
    config: &sbx_daemon::config::Config,
    args: &ConnectArgs,
    database_url: Option<&str>,
    service: &Arc<Service>,
    runtime: Arc<GvisorRuntime>,
    credential_keys: sbx_secrets::KeyRing,
) -> anyhow::Result<Arc<sbx_connect::service::ConnectService>> {
    // The broker reaches public addresses only (plus the ranges tests mark public),
    // never loopback, the host's own addresses or its directly connected networks.
    let test_public: Vec<sbx_daemon::network::policy::Cidr> = config
        .network_test_public
        .iter()
        .filter_map(|c| sbx_daemon::network::policy::Cidr::parse(c))
        .collect();
    let public = Arc::new(move |ip: std::net::IpAddr| {
        let facts = sbx_daemon::network::policy::Facts::current(&test_public);
        sbx_daemon::network::policy::check_addr(&facts, ip).is_ok()
    });
    let mut broker = sbx_connect::egress::BrokerConfig::new(public);
    if let Some(port) = args.connect_test_port {
        tracing::warn!(
            port,
            "TEST ONLY: the Connect broker uses this port instead of 443"
        );
        broker.allowed_port = port;
    }
    for ca in &args.connect_extra_ca {
        let pem = std::fs::read(ca).with_context(|| format!("reading {}", ca.display()))?;
        broker
            .add_roots_pem(&pem)
            .with_context(|| format!("root certificates in {}", ca.display()))?;
    }
    let limits = sbx_connect::limits::Limits {
        sync_time: Duration::from_secs(args.connect_sync_time_secs),
        build_time: Duration::from_secs(args.connect_build_time_secs),
        memory_mib: args.connect_memory_mib,
        min_schedule_secs: args
            .connect_test_min_schedule_secs
            .unwrap_or(sbx_connect::service::MIN_SCHEDULE_SECONDS),
        webhooks: sbx_connect::limits::WebhookLimits {
            max_body_bytes: args.connect_webhook_max_body_bytes,
            rate_per_second: args.connect_webhook_rate,
            burst: args.connect_webhook_burst,
            max_pending: args.connect_webhook_max_pending,
            ..sbx_connect::limits::WebhookLimits::default()
        },
        ..sbx_connect::limits::Limits::default()
    };
    let sdk_dir = args
        .connect_sdk_dir
        .clone()
        .unwrap_or_else(|| config.data_dir.join("connect-sdk"));
    if !sdk_dir.join("runner.mjs").is_file() {
        tracing::warn!(dir = %sdk_dir.display(), "no Connect SDK installed there (runner.mjs missing): Connect jobs will fail; run scripts/build or pass --connect-sdk-dir");
    }
    let npm_registry = args
        .npm_registry
        .clone()
        .unwrap_or_else(|| npm_config("registry").unwrap_or_else(|| PUBLIC_NPM_REGISTRY.into()));
    let npm_ca_file = args
        .npm_ca_file
        .clone()
        .or_else(|| npm_config("cafile").map(PathBuf::from))
        .filter(|p| p.is_file());
    tracing::info!(registry = %npm_registry, ca = ?npm_ca_file, sdk = %sdk_dir.display(), "Connect runtime");
    let jobs = sbx_daemon::connect_jobs::ConnectJobs::new(
        service,
        runtime,
        sbx_daemon::connect_jobs::JobsConfig {
            sdk_dir,
            npm_registry,
            npm_ca_file,
        },
        &config.network_test_public,
    )
    .map_err(anyhow::Error::msg)?;
    let connect = sbx_connect::service::ConnectService::open(
        sbx_connect::service::ServiceConfig {
            data_dir: config.data_dir.join("connect"),
            limits,
            broker,
            credential_keys,
            database_url: database_url
                .map(str::trim)
                .filter(|u| !u.is_empty())
                .map(str::to_string),
            node_id: config.node.cluster.then(|| config.node.id.clone()),
        },
        Arc::new(jobs),
    )
    .context("opening the Connect runtime")?;
    Ok(connect)
}

/// This node's identity from its flags, checked against the database in use.
fn node_config(args: &Args) -> anyhow::Result<sbx_daemon::config::NodeConfig> {
    let id = match args.node_id.as_deref().map(str::trim) {
        Some(id) => id.to_string(),
        None => std::fs::read_to_string("/proc/sys/kernel/hostname")
            .context("reading the host name for the node id (or pass --node-id)")?
            .trim()
            .to_string(),
    };
    let advertise_url = match args.advertise_url.as_deref().map(str::trim) {
        Some(url) => url.trim_end_matches('/').to_string(),
        None => format!("http://{}", args.listen),
    };
    let cluster_token = match &args.cluster_token_file {
        Some(path) => {
            let raw = std::fs::read_to_string(path)
                .with_context(|| format!("reading the cluster token file {}", path.display()))?;
            Some(sbx_daemon::config::ClusterToken::parse(&raw)?)
        }
        None => None,
    };
    let node = sbx_daemon::config::NodeConfig {
        cluster_token,
        cluster: args.cluster,
        id,
        advertise_url,
        labels: sbx_daemon::config::parse_node_labels(&args.node_labels)?,
        lease: Duration::from_secs(args.node_lease_secs),
    };
    node.validate(args.database_url.as_deref())?;
    Ok(node)
}

/// The registry builds use when neither the flag nor the host's npm names one.
/// How often console logs are trimmed: a sandbox floods its console at ~215 MB/s
/// (measured), so this bounds the overshoot past `--console-log-max-mb` to ~110 MB.
const CONSOLE_TRIM_EVERY: Duration = Duration::from_millis(500);

const PUBLIC_NPM_REGISTRY: &str = "https://registry.npmjs.org/";

/// `npm config get KEY` of the host, when npm is there and the value is set.
fn npm_config(key: &str) -> Option<String> {
    let out = std::process::Command::new("npm")
        .args(["config", "get", key])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !text.is_empty() && text != "null" && text != "undefined")
        .then_some(text)
}
