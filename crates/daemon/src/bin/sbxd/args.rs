//! The daemon's flags (each also an `SBX_*` environment variable).

use clap::Parser;
use std::net::SocketAddr;
use std::path::PathBuf;

/// sbx daemon: runs untrusted code in gVisor sandboxes behind the Sandboxes v2 API.
#[derive(Parser, Debug)]
#[command(name = "sbxd", version)]
pub(crate) struct Args {
    /// Listen address.
    #[arg(long, env = "SBX_LISTEN", default_value = "127.0.0.1:8731")]
    pub(crate) listen: SocketAddr,
    /// Data directory (database, sandboxes, runsc state).
    #[arg(long, env = "SBX_DATA_DIR", default_value = "/var/lib/sbx")]
    pub(crate) data_dir: PathBuf,
    /// PostgreSQL for the sandbox store (`postgres://user:password@host/db`, or
    /// `host=/run/postgresql dbname=sbx`); without it, SQLite in the data dir.
    /// Connect's store stays in the data dir's SQLite for now.
    #[arg(long, env = "SBX_DATABASE_URL", hide_env_values = true)]
    pub(crate) database_url: Option<String>,
    /// Dev mode: no key needed; loopback only.
    #[arg(long, env = "SBX_DEV")]
    pub(crate) dev: bool,
    /// Cluster mode: this node shares --database-url and --cluster-token-file (both
    /// required) with other nodes; requests about a sandbox of another node are
    /// forwarded to it. Without it the node still registers, as a cluster of one.
    #[arg(long, env = "SBX_CLUSTER")]
    pub(crate) cluster: bool,
    /// This node's stable id (default: the host name).
    #[arg(long, env = "SBX_NODE_ID")]
    pub(crate) node_id: Option<String>,
    /// The URL other nodes and clients reach this node at (default: http://<listen address>).
    #[arg(long, env = "SBX_ADVERTISE_URL")]
    pub(crate) advertise_url: Option<String>,
    /// A node label, key=value (repeatable; comma-separated in SBX_NODE_LABELS).
    #[arg(long = "node-label", env = "SBX_NODE_LABELS", value_delimiter = ',')]
    pub(crate) node_labels: Vec<String>,
    /// A file holding the cluster's shared token (at least 32 characters), which
    /// nodes show each other on forwarded requests.
    #[arg(long, env = "SBX_CLUSTER_TOKEN_FILE")]
    pub(crate) cluster_token_file: Option<PathBuf>,
    /// How long the node's lease lasts without a heartbeat, seconds, 1-3600 (heartbeats every third).
    #[arg(long, env = "SBX_NODE_LEASE_SECS", default_value_t = 15)]
    pub(crate) node_lease_secs: u64,
    /// Accepted signing keys (comma-separated in SBX_SIGNING_KEYS).
    #[arg(long = "signing-key", env = "SBX_SIGNING_KEYS", value_delimiter = ',')]
    pub(crate) signing_keys: Vec<String>,
    /// runsc binary.
    #[arg(long, env = "SBX_RUNSC", default_value = "runsc")]
    pub(crate) runsc: PathBuf,
    /// Directory containing the static `sbx-agent` binary.
    #[arg(long, env = "SBX_AGENT_DIR")]
    pub(crate) agent_dir: PathBuf,
    /// Root filesystem of the default image.
    #[arg(long, env = "SBX_IMAGE_ROOTFS")]
    pub(crate) image_rootfs: PathBuf,
    /// An E2B template id that names an image, `NAME=IMAGE` (repeatable; IMAGE
    /// is `default` or an image reference such as `py-tools:1`, resolved in the
    /// creating tenant's images). `base` always names the default image.
    #[arg(
        long = "e2b-template",
        env = "SBX_E2B_TEMPLATES",
        value_delimiter = ','
    )]
    pub(crate) e2b_templates: Vec<String>,
    /// The E2B sandbox domain: `{port}-{sandboxId}.DOMAIN` hosts are routed to
    /// sandboxes (envd on port 49983), and E2B answers tell the SDKs to use it
    /// (wildcard DNS and TLS in front: see docs/e2b.md).
    #[arg(long = "e2b-domain", env = "SBX_E2B_DOMAIN")]
    pub(crate) e2b_domain: Option<String>,
    /// PEM certificate chain: sbxd terminates TLS itself (with `--tls-key`).
    /// For `--e2b-domain` it must cover `*.DOMAIN` (a wildcard certificate).
    #[arg(long, env = "SBX_TLS_CERT", requires = "tls_key")]
    pub(crate) tls_cert: Option<PathBuf>,
    /// PEM private key of `--tls-cert`.
    #[arg(long, env = "SBX_TLS_KEY", requires = "tls_cert")]
    pub(crate) tls_key: Option<PathBuf>,
    /// Active runtime limit per sandbox, seconds.
    #[arg(long, env = "SBX_ACTIVE_RUNTIME_SECS", default_value_t = 3600)]
    pub(crate) active_runtime_secs: u64,
    /// Snapshot lifetime before the janitor deletes it, seconds (default 7 days).
    #[arg(long, env = "SBX_SNAPSHOT_TTL_SECS", default_value_t = 7 * 24 * 3600)]
    pub(crate) snapshot_ttl_secs: u64,
    /// Live (CREATING or unexpired READY) snapshots a workspace may keep; more get
    /// 403 sandbox_snapshot_limit_exceeded. 0: no limit.
    #[arg(long, env = "SBX_SNAPSHOT_LIMIT", default_value_t = 50)]
    pub(crate) snapshot_limit: u32,
    /// Active sandboxes a workspace may hold at once, on all nodes together;
    /// a create past it is 429 rate_limited. 0: no limit.
    #[arg(long, env = "SBX_WORKSPACE_MAX_SANDBOXES", default_value_t = 0)]
    pub(crate) workspace_max_sandboxes: u64,
    /// vCPUs a workspace's active sandboxes may hold together (as
    /// --workspace-max-sandboxes). 0: no limit.
    #[arg(long, env = "SBX_WORKSPACE_MAX_VCPUS", default_value_t = 0)]
    pub(crate) workspace_max_vcpus: u64,
    /// Memory a workspace's active sandboxes may hold together, MiB (as
    /// --workspace-max-sandboxes). 0: no limit.
    #[arg(long, env = "SBX_WORKSPACE_MAX_MEMORY_MB", default_value_t = 0)]
    pub(crate) workspace_max_memory_mb: u64,
    /// Image storage a workspace may keep, MiB (each distinct content once);
    /// more is 403 image_quota_exceeded. 0: no limit.
    #[arg(long, env = "SBX_IMAGE_QUOTA_MB", default_value_t = 20 * 1024)]
    pub(crate) image_quota_mb: u64,
    /// Test-restore every checkpoint before its snapshot is READY (a
    /// checkpoint that does not restore is taken again); `false` saves about
    /// one restore per snapshot.
    #[arg(long, env = "SBX_SNAPSHOT_VERIFY", default_value_t = true, action = clap::ArgAction::Set)]
    pub(crate) snapshot_verify: bool,
    /// Extra global runsc flag (repeatable), e.g. --runsc-flag=--debug-log=/tmp/runsc/.
    #[arg(long = "runsc-flag", allow_hyphen_values = true)]
    pub(crate) runsc_flags: Vec<String>,
    /// Egress policy of sandboxes created without one: none, public or https-only.
    #[arg(long, env = "SBX_DEFAULT_NETWORK", default_value = "public")]
    pub(crate) default_network: String,
    /// TEST ONLY: treat this private CIDR as public (repeatable), for test hosts in network namespaces.
    #[arg(long = "network-test-public-cidr")]
    pub(crate) network_test_public_cidr: Vec<String>,
    /// Warm pool: `auto` (the default: sbxd keeps one sandbox of the smallest
    /// shape booted ahead, more for shapes being created, within a quarter of
    /// the node's memory), `none`, or SHAPE=N per shape (repeatable, e.g.
    /// --warm-pool 1x1024=2; comma-separated in SBX_WARM_POOL).
    #[arg(long = "warm-pool", env = "SBX_WARM_POOL", value_delimiter = ',')]
    pub(crate) warm_pool: Vec<String>,
    /// Shapes fresh sandboxes may have, VCPUxMIB (repeatable, e.g. --shapes
    /// 1x1024,2x2048,4x4096): 1, 2 or 4 vCPU with 1, 2 or 4 GiB per vCPU. Default: all nine.
    #[arg(long, env = "SBX_SHAPES", value_delimiter = ',')]
    pub(crate) shapes: Vec<String>,
    /// How long an Idempotency-Key and its stored response are kept, seconds (default 24 h).
    #[arg(long, env = "SBX_IDEMPOTENCY_TTL_SECS", default_value_t = 24 * 3600)]
    pub(crate) idempotency_ttl_secs: u64,
    /// Memory for sandboxes, MiB (default: MemTotal minus --memory-reserve-mb).
    #[arg(long, env = "SBX_CAPACITY_MEMORY_MB")]
    pub(crate) capacity_memory_mb: Option<u64>,
    /// CPUs for sandboxes (default: the host's CPU count).
    #[arg(long, env = "SBX_CAPACITY_VCPUS")]
    pub(crate) capacity_vcpus: Option<u32>,
    /// Memory kept for the host when the capacity is detected, MiB.
    #[arg(long, env = "SBX_MEMORY_RESERVE_MB", default_value_t = 1024)]
    pub(crate) memory_reserve_mb: u64,
    /// Memory overcommit factor (1.0: every sandbox's memory limit is reserved in full).
    #[arg(long, env = "SBX_MEMORY_OVERCOMMIT", default_value_t = 1.0)]
    pub(crate) memory_overcommit: f64,
    /// CPU overcommit factor (vCPUs are CPU-time quotas).
    #[arg(long, env = "SBX_CPU_OVERCOMMIT", default_value_t = 16.0)]
    pub(crate) cpu_overcommit: f64,
    /// Least free disk in the data dir for a new sandbox, MiB.
    #[arg(long, env = "SBX_MIN_FREE_DISK_MB", default_value_t = 1024)]
    pub(crate) min_free_disk_mb: u64,
    /// Disk of each sandbox's writable root, MiB: a sparse ext4 image
    /// loop-mounted under the sandbox's dir (needs loop devices); 0: no limit.
    #[arg(long, env = "SBX_SANDBOX_DISK_MB", default_value_t = 10 * 1024)]
    pub(crate) sandbox_disk_mb: u64,
    /// Host disk each sandbox's console log (its logs stream) may use, MiB; past it
    /// the oldest half is dropped (checked twice a second). 0: no limit.
    #[arg(long, env = "SBX_CONSOLE_LOG_MAX_MB", default_value_t = 16)]
    pub(crate) console_log_max_mb: u64,
    /// How often each running sandbox's CPU, memory, processes and disk are
    /// sampled, seconds (GET /v1/sandboxes/{id}/metrics, sbx top); 0: never.
    #[arg(long, env = "SBX_USAGE_SAMPLE_SECS", default_value_t = 5)]
    pub(crate) usage_sample_secs: u64,
    /// Freeze a sandbox (cgroup freezer: no host CPU at all, memory kept)
    /// once nothing runs in it but its agent and no request came for this
    /// many seconds; the next request thaws it (about a millisecond). An
    /// idle gVisor sandbox otherwise burns ~2 % of a core. 0: never.
    #[arg(long, env = "SBX_FREEZE_IDLE_AFTER_SECS", default_value_t = 10)]
    pub(crate) freeze_idle_after_secs: u64,
    /// RLIMIT_NPROC of the commands run in a sandbox (tasks per user across
    /// the sandbox): a fork bomb gets EAGAIN here instead of filling the
    /// sandbox's memory. 0: no limit.
    #[arg(long, env = "SBX_GUEST_TASK_LIMIT", default_value_t = 1024)]
    pub(crate) guest_task_limit: u64,
    /// How sbxd reaches each sandbox's agent: `stdio` (PID 1's stdin and
    /// stdout, a socket pair sbxd keeps; no process in between) or `relay`
    /// (a `runsc exec sbx-agent relay` process per sandbox, as sandboxes
    /// from before a restart are always reached).
    #[arg(long, env = "SBX_AGENT_CHANNEL", default_value = "stdio", value_parser = ["stdio", "relay"])]
    pub(crate) agent_channel: String,
    /// A file upload or download that gets no data from the sandbox for this
    /// many seconds is stopped (503) and its host `runsc exec` killed.
    #[arg(long, env = "SBX_FILE_TRANSFER_IDLE_SECS", default_value_t = 30)]
    pub(crate) file_transfer_idle_secs: u64,
    /// Where snapshots are kept besides the data dir: `local` (only there) or
    /// `s3://bucket/prefix` (uploaded before READY, fetched by any node that clones).
    #[arg(long, env = "SBX_SNAPSHOT_STORE", default_value = "local")]
    pub(crate) snapshot_store: String,
    /// Endpoint of an S3-compatible server, e.g. http://127.0.0.1:9000 (default: AWS).
    #[arg(long, env = "SBX_S3_ENDPOINT")]
    pub(crate) s3_endpoint: Option<String>,
    /// S3 region.
    #[arg(long, env = "SBX_S3_REGION", default_value = "us-east-1")]
    pub(crate) s3_region: String,
    #[command(flatten)]
    pub(crate) http: HttpArgs,
    #[command(flatten)]
    pub(crate) connect: ConnectArgs,
    #[command(flatten)]
    pub(crate) secret_keys: sbx_daemon::secret_keys::SecretKeyArgs,
    #[command(flatten)]
    pub(crate) telemetry: sbx_daemon::telemetry::TelemetryArgs,
}

/// Settings of the HTTP server and the browser guard.
#[derive(clap::Args, Debug)]
pub(crate) struct HttpArgs {
    /// A request head must arrive within this many seconds (of the accept, or
    /// of its first byte on a kept-alive connection).
    #[arg(long, env = "SBX_HTTP_HEADER_TIMEOUT_SECS", default_value_t = 10)]
    pub(crate) http_header_timeout_secs: u64,
    /// A request body that sends no byte for this many seconds while it is
    /// read is aborted.
    #[arg(long, env = "SBX_HTTP_BODY_TIMEOUT_SECS", default_value_t = 30)]
    pub(crate) http_body_timeout_secs: u64,
    /// A kept-alive connection with no request in progress is closed after
    /// this many seconds (responses that stream or wait are not idle).
    #[arg(long, env = "SBX_HTTP_IDLE_TIMEOUT_SECS", default_value_t = 60)]
    pub(crate) http_idle_timeout_secs: u64,
    /// Open HTTP connections; more are accepted and closed at once.
    #[arg(long, env = "SBX_HTTP_MAX_CONNECTIONS", default_value_t = 4096)]
    pub(crate) http_max_connections: usize,
    /// Open HTTP connections per source address (IPv6: per /64). Behind a
    /// reverse proxy every connection comes from the proxy: raise it to
    /// --http-max-connections there.
    #[arg(long, env = "SBX_HTTP_MAX_CONNECTIONS_PER_IP", default_value_t = 1024)]
    pub(crate) http_max_connections_per_ip: usize,
    /// Refuse foreign Host headers, cross-origin unsafe requests and non-JSON
    /// bodies on JSON routes (default: on with --dev, off otherwise).
    #[arg(long, env = "SBX_HTTP_BROWSER_GUARD", action = clap::ArgAction::Set)]
    pub(crate) http_browser_guard: Option<bool>,
    /// A Host name the browser guard accepts besides loopback names and the
    /// listen address (repeatable; comma-separated in SBX_HTTP_ALLOWED_HOSTS).
    #[arg(
        long = "http-allowed-host",
        env = "SBX_HTTP_ALLOWED_HOSTS",
        value_delimiter = ','
    )]
    pub(crate) http_allowed_hosts: Vec<String>,
    /// A file holding the token (at least 32 characters) that `GET /metrics`
    /// needs outside dev mode, sent as `Authorization: Bearer TOKEN`. Without
    /// it, only a dev-mode sbxd can be scraped.
    #[arg(long, env = "SBX_METRICS_TOKEN_FILE")]
    pub(crate) metrics_token_file: Option<PathBuf>,
}

/// Settings of the Connect runtime.
#[derive(clap::Args, Debug)]
pub(crate) struct ConnectArgs {
    /// Installed Connect SDK (runner.mjs, index.mjs, lib/), mounted read-only at
    /// /opt/sbx-connect in job sandboxes (default: DATA_DIR/connect-sdk).
    #[arg(long, env = "SBX_CONNECT_SDK_DIR")]
    pub(crate) connect_sdk_dir: Option<PathBuf>,
    /// The npm registry builds may reach (default: `npm config get registry`, else
    /// https://registry.npmjs.org/). Its host is allowed whatever address it resolves to.
    #[arg(long, env = "SBX_NPM_REGISTRY")]
    pub(crate) npm_registry: Option<String>,
    /// PEM roots npm trusts in build sandboxes, on top of Node's own (a registry behind a
    /// TLS-inspecting proxy). Default: `npm config get cafile` when set.
    #[arg(long, env = "SBX_NPM_CA_FILE")]
    pub(crate) npm_ca_file: Option<PathBuf>,
    /// Time budget of a sync run, seconds.
    #[arg(long, env = "SBX_CONNECT_SYNC_TIME_SECS", default_value_t = 15 * 60)]
    pub(crate) connect_sync_time_secs: u64,
    /// Time budget of a build (npm ci), seconds.
    #[arg(long, env = "SBX_CONNECT_BUILD_TIME_SECS", default_value_t = 10 * 60)]
    pub(crate) connect_build_time_secs: u64,
    /// Memory budget of every Connect job and build sandbox, MiB.
    #[arg(long, env = "SBX_CONNECT_MEMORY_MIB", default_value_t = 1024)]
    pub(crate) connect_memory_mib: u64,
    /// Largest webhook delivery body, bytes (413 above).
    #[arg(long, env = "SBX_CONNECT_WEBHOOK_MAX_BODY_BYTES", default_value_t = 1024 * 1024)]
    pub(crate) connect_webhook_max_body_bytes: usize,
    /// Webhook deliveries per second a connection's token bucket refills (429 when empty).
    #[arg(long, env = "SBX_CONNECT_WEBHOOK_RATE", default_value_t = 10.0)]
    pub(crate) connect_webhook_rate: f64,
    /// Webhook deliveries a connection may send at once (the token bucket's size).
    #[arg(long, env = "SBX_CONNECT_WEBHOOK_BURST", default_value_t = 50)]
    pub(crate) connect_webhook_burst: u32,
    /// Pending webhook deliveries a connection's inbox holds (429 when full).
    #[arg(long, env = "SBX_CONNECT_WEBHOOK_MAX_PENDING", default_value_t = 1000)]
    pub(crate) connect_webhook_max_pending: u64,
    /// Extra trusted root certificates (PEM file) for the Connect broker (repeatable).
    #[arg(long = "connect-extra-ca")]
    pub(crate) connect_extra_ca: Vec<PathBuf>,
    /// TEST ONLY: the port the Connect broker may use instead of 443.
    #[arg(long = "connect-test-port")]
    pub(crate) connect_test_port: Option<u16>,
    /// TEST ONLY (--dev): the shortest schedule interval, seconds, instead of 60.
    #[arg(long = "connect-test-min-schedule-secs")]
    pub(crate) connect_test_min_schedule_secs: Option<u64>,
}
