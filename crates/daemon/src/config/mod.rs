//! sbxd configuration: command-line flags and environment, with the defaults of DESIGN.md.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

mod e2b;
mod node;
mod pool;
mod storage;

pub use e2b::{parse_e2b_domain, parse_e2b_templates};
pub use node::{
    check_node_id, parse_node_labels, ClusterToken, NodeConfig, MAX_NODE_LEASE, MIN_CLUSTER_TOKEN,
};
pub use pool::{parse_shapes, parse_warm_pool, WarmPool, WARM_POOL_MAX};
pub use storage::{s3_volume_config, snapshot_store_config};

/// Everything sbxd needs to start.
#[derive(Debug, Clone)]
pub struct Config {
    /// HTTP listen address.
    pub listen: SocketAddr,
    /// Root of sbxd's state (database, sandboxes, images).
    pub data_dir: PathBuf,
    /// Dev mode: loopback only, no key needed.
    pub dev: bool,
    /// Signing keys accepted (raw `signkey-...` values; hashed before comparison).
    pub signing_keys: Vec<String>,
    /// runsc binary.
    pub runsc_binary: PathBuf,
    /// Directory holding the `sbx-agent` binary, bind-mounted into sandboxes.
    pub agent_dir: PathBuf,
    /// Root filesystem of the default image.
    pub image_rootfs: PathBuf,
    /// Name shown as `imageRef`.
    pub image_ref: String,
    /// Limits and timers.
    pub limits: Limits,
    /// Extra global runsc flags (e.g. `--debug-log=`).
    pub runsc_extra_flags: Vec<String>,
    /// Egress policy of sandboxes created without one (`POST /v2/sandboxes`).
    pub default_network: sbx_api_types::NetworkMode,
    /// Private ranges treated as public (tests only: their own netns hosts).
    pub network_test_public: Vec<String>,
    /// The warm pool: sized by sbxd (the default) or fixed per shape.
    pub warm_pool: WarmPool,
    /// Shapes `(vcpu, memory_mb)` fresh sandboxes may have (`--shapes`; default: the whole grid).
    pub shapes: Vec<(u32, u32)>,
    /// What the node may hand out to sandboxes (admission control).
    pub capacity: CapacityConfig,
    /// HTTP server timeouts, connection caps and the browser guard.
    pub http: HttpConfig,
    /// This node's identity and lease in the `nodes` table.
    pub node: NodeConfig,
    /// Where snapshot files live besides the data dir (`--snapshot-store`).
    pub snapshot_store: sbx_node::snapshot_store::StoreConfig,
    /// E2B template ids besides `base` and the image each names, `default`
    /// or a tenant's image reference (`--e2b-template NAME=IMAGE`).
    pub e2b_templates: std::collections::BTreeMap<String, String>,
    /// The E2B sandbox domain (`--e2b-domain`): `{port}-{id}.{domain}` hosts
    /// route to sandboxes, and E2B create/connect answers name it.
    pub e2b_domain: Option<String>,
}

/// The secret a Prometheus server shows to scrape `GET /metrics` outside dev
/// mode (`--metrics-token-file`). Never printed.
#[derive(Clone, PartialEq)]
pub struct MetricsToken(String);

/// Fewest characters of a metrics token.
pub const MIN_METRICS_TOKEN: usize = 32;

impl MetricsToken {
    /// A token from the contents of its file (surrounding white space dropped).
    pub fn parse(raw: &str) -> Result<MetricsToken, ConfigError> {
        let t = raw.trim();
        if t.len() < MIN_METRICS_TOKEN || !t.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ConfigError::BadMetricsToken);
        }
        Ok(MetricsToken(t.to_string()))
    }

    /// Whether `shown` is this token, compared in constant time.
    pub fn matches(&self, shown: &[u8]) -> bool {
        use subtle::ConstantTimeEq;
        self.0.as_bytes().ct_eq(shown).into()
    }
}

impl std::fmt::Debug for MetricsToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MetricsToken(..)")
    }
}

/// HTTP server settings (`crate::server`) and the browser guard (`crate::api::browser_guard`).
#[derive(Debug, Clone, PartialEq)]
pub struct HttpConfig {
    /// A request head must arrive within this long: of a new connection's
    /// accept, and of the first byte of a request on a kept-alive one.
    pub header_timeout: Duration,
    /// A request body being read that delivers no byte for this long is aborted.
    pub body_timeout: Duration,
    /// A kept-alive connection with no request in progress is closed after this long.
    pub idle_timeout: Duration,
    /// Open HTTP connections; more are accepted and closed at once.
    pub max_connections: usize,
    /// Open HTTP connections per source address (IPv6: per /64).
    pub max_connections_per_ip: usize,
    /// Refuse foreign `Host` headers, cross-origin unsafe requests and
    /// non-JSON bodies on JSON routes (on by default in dev mode).
    pub browser_guard: bool,
    /// Host names accepted besides loopback names and the listen address.
    pub allowed_hosts: Vec<String>,
    /// The token `GET /metrics` needs outside dev mode (`--metrics-token-file`).
    pub metrics_token: Option<MetricsToken>,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            max_connections: 4096,
            max_connections_per_ip: 1024,
            browser_guard: false,
            allowed_hosts: Vec::new(),
            metrics_token: None,
        }
    }
}

/// Admission control settings: the node's capacity and how far to overcommit it.
#[derive(Debug, Clone, PartialEq)]
pub struct CapacityConfig {
    /// Memory for sandboxes, MiB; `None`: MemTotal minus `memory_reserve_mb`.
    pub memory_mb: Option<u64>,
    /// CPUs for sandboxes; `None`: the host's CPU count.
    pub vcpus: Option<u32>,
    /// Memory kept for the host when detected, MiB.
    pub memory_reserve_mb: u64,
    /// Factor on memory (1.0: a sandbox's memory limit is reserved in full).
    pub memory_overcommit: f64,
    /// Factor on CPUs (vCPUs are CPU-time quotas, so some overcommit is normal).
    pub cpu_overcommit: f64,
    /// Least free space in the data dir for a new sandbox, MiB.
    pub min_free_disk_mb: u64,
}

impl Default for CapacityConfig {
    fn default() -> Self {
        CapacityConfig {
            memory_mb: None,
            vcpus: None,
            memory_reserve_mb: 1024,
            memory_overcommit: 1.0,
            cpu_overcommit: 16.0,
            min_free_disk_mb: 1024,
        }
    }
}

/// Default of [`Limits::file_transfer_idle`]: long enough for a busy
/// sandbox's disk, far shorter than "forever".
pub const FILE_TRANSFER_IDLE: Duration = Duration::from_secs(30);

/// Tunable limits (DESIGN.md, "Limits").
#[derive(Debug, Clone)]
pub struct Limits {
    /// Active runtime per sandbox.
    pub active_runtime: Duration,
    /// How long create waits for RUNNING before answering 202 STARTING.
    pub create_sync_wait: Duration,
    /// Give up starting a sandbox after this long.
    pub start_timeout: Duration,
    /// Captured exec output across stdout and stderr.
    pub exec_output_bytes: u64,
    /// Largest file upload or download.
    pub file_bytes: u64,
    /// How long a file transfer may wait for the sandbox (its agent, or the
    /// `sbx-agent read-file`/`write-file` process) without any progress
    /// before it is stopped: a guest can freeze those processes, and the
    /// request would otherwise hold its connection and a host `runsc exec`
    /// forever. Time spent waiting for the API client does not count.
    pub file_transfer_idle: Duration,
    /// Largest JSON request body.
    pub json_body_bytes: usize,
    /// Processes per sandbox (pids cgroup limit).
    pub pids_per_sandbox: i64,
    /// RLIMIT_NPROC of guest commands (tasks per user in the sandbox); 0: no limit.
    pub guest_tasks: u64,
    /// Disk of a sandbox's writable root layer, MiB (a loop-mounted ext4 image); 0: no limit.
    pub sandbox_disk_mb: u64,
    /// Host disk a sandbox's console log may use, MiB; past it the oldest half is dropped. 0: no limit.
    pub console_log_max_mb: u64,
    /// How long a snapshot lives before the janitor deletes it.
    pub snapshot_ttl: Duration,
    /// Live (CREATING or unexpired READY) snapshots per workspace; 0: no limit.
    pub snapshots_per_workspace: u32,
    /// What each workspace's active sandboxes may hold together, across the
    /// cluster (every field 0: no limit).
    pub workspace_quota: sbx_store::WorkspaceQuota,
    /// Test-restore every checkpoint before its snapshot is READY.
    pub snapshot_verify: bool,
    /// Bytes of images each tenant may keep, MiB; 0: no limit.
    pub image_quota_mb: u64,
    /// How long an `Idempotency-Key` and its stored response are kept.
    pub idempotency_ttl: Duration,
    /// How often each running sandbox's usage is sampled; zero: never.
    pub usage_sample: Duration,
    /// How long a sandbox with nothing running and no request sits before
    /// its host processes are frozen (thawed by the next request); zero: never.
    pub freeze_idle_after: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            active_runtime: Duration::from_secs(3600),
            create_sync_wait: Duration::from_secs(20),
            start_timeout: Duration::from_secs(120),
            exec_output_bytes: 3 * 1024 * 1024,
            file_bytes: 100 * 1024 * 1024,
            file_transfer_idle: FILE_TRANSFER_IDLE,
            json_body_bytes: 1024 * 1024,
            pids_per_sandbox: 4096,
            guest_tasks: 1024,
            sandbox_disk_mb: 10 * 1024,
            console_log_max_mb: 16,
            snapshot_ttl: Duration::from_secs(7 * 24 * 3600),
            snapshots_per_workspace: 50,
            workspace_quota: sbx_store::WorkspaceQuota::default(),
            snapshot_verify: true,
            image_quota_mb: 20 * 1024,
            idempotency_ttl: Duration::from_secs(24 * 3600),
            usage_sample: Duration::from_secs(5),
            freeze_idle_after: Duration::from_secs(10),
        }
    }
}

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Dev mode may only listen on loopback.
    #[error("dev mode refuses to listen on non-loopback address {0}; use 127.0.0.1 or configure signing keys")]
    DevNotLoopback(SocketAddr),
    /// Without dev mode at least one key is needed: by flag, or stored.
    #[error("no signing keys: create one with `sbxd keys create --workspace NAME` (stored in the data dir's database), pass --signing-key (or SBX_SIGNING_KEYS), or use --dev on loopback")]
    NoKeys,
    /// A sandbox disk too small to format.
    #[error("--sandbox-disk-mb {0} is too small: use 0 (no limit) or at least {min}", min = crate::runtime::disk::MIN_DISK_MB)]
    DiskTooSmall(u64),
    /// A test-only network option outside dev mode.
    #[error("{0} is for testing against one's own hosts and is refused outside --dev")]
    TestOnlyOption(&'static str),
    /// An HTTP timeout or connection cap of zero would refuse every request.
    #[error("{0} must be at least 1")]
    HttpZero(&'static str),
    /// `--cluster` on the node's own SQLite.
    #[error("--cluster needs --database-url (SBX_DATABASE_URL): the nodes of a cluster share one PostgreSQL database")]
    ClusterNeedsDatabase,
    /// A node id that is not a host-name-like word.
    #[error("--node-id {0:?}: use 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit")]
    BadNodeId(String),
    /// An advertise URL that is not http(s)://host...
    #[error("--advertise-url {0:?}: expected http://host:port or https://host:port")]
    BadAdvertiseUrl(String),
    /// A malformed `--node-label`.
    #[error("--node-label {0:?}: expected key=value (key: letters, digits, '.', '_', '-', '/'; each key once)")]
    BadNodeLabel(String),
    /// A lease too short to heartbeat within, or so long that a lost node goes unnoticed.
    #[error("--node-lease-secs must be between 1 and 3600")]
    NodeLease,
    /// `--cluster` without a shared secret for node-to-node calls.
    #[error("--cluster needs --cluster-token-file (SBX_CLUSTER_TOKEN_FILE): the nodes of a cluster prove themselves to each other with a shared token")]
    ClusterNeedsToken,
    /// A cluster token too short or with white space or control characters inside.
    #[error("the cluster token must be at least 32 printable characters without spaces (for example: openssl rand -hex 32)")]
    BadClusterToken,
    /// A metrics token too short or with white space or control characters inside.
    #[error("the metrics token must be at least 32 printable characters without spaces (for example: openssl rand -hex 32)")]
    BadMetricsToken,
    /// `--snapshot-store` and the S3 settings do not make a usable store.
    #[error(transparent)]
    SnapshotStore(#[from] sbx_node::snapshot_store::SnapshotStoreError),
}

impl Config {
    /// Checks the rules that keep an operator from exposing an open daemon.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.dev && !self.listen.ip().is_loopback() {
            return Err(ConfigError::DevNotLoopback(self.listen));
        }
        // Marking private ranges public is how tests reach their own hosts;
        // on a production node it would open the local network to guests.
        if !self.dev && !self.network_test_public.is_empty() {
            return Err(ConfigError::TestOnlyOption("--network-test-public-cidr"));
        }
        let disk = self.limits.sandbox_disk_mb;
        if disk != 0 && disk < crate::runtime::disk::MIN_DISK_MB {
            return Err(ConfigError::DiskTooSmall(disk));
        }
        let http = &self.http;
        for (value, flag) in [
            (http.header_timeout.as_secs(), "--http-header-timeout-secs"),
            (http.body_timeout.as_secs(), "--http-body-timeout-secs"),
            (http.idle_timeout.as_secs(), "--http-idle-timeout-secs"),
            (http.max_connections as u64, "--http-max-connections"),
            (
                http.max_connections_per_ip as u64,
                "--http-max-connections-per-ip",
            ),
        ] {
            if value == 0 {
                return Err(ConfigError::HttpZero(flag));
            }
        }
        // Builds the client once (no traffic): a bad endpoint is refused at start.
        self.snapshot_store.check()?;
        Ok(())
    }

    /// Checks that a production sbxd accepts some key: one given by flag, or
    /// one of `stored_active_keys` made with `sbxd keys create` (checked once
    /// the store is open).
    pub fn check_keys(&self, stored_active_keys: usize) -> Result<(), ConfigError> {
        if !self.dev && self.signing_keys.is_empty() && stored_active_keys == 0 {
            return Err(ConfigError::NoKeys);
        }
        Ok(())
    }

    /// SQLite database path.
    pub fn database_path(&self) -> PathBuf {
        self.data_dir.join("sbx.sqlite")
    }

    /// Per-sandbox state directories.
    pub fn sandboxes_dir(&self) -> PathBuf {
        self.data_dir.join("sandboxes")
    }

    /// Formatted sandbox disk images waiting for a sandbox.
    pub fn spare_disks_dir(&self) -> PathBuf {
        self.data_dir.join("spare-disks")
    }

    /// Local volumes: an image and a mount point each.
    pub fn volumes_dir(&self) -> PathBuf {
        self.data_dir.join("volumes")
    }

    /// Custom images: one root filesystem directory per content digest
    /// (beside the default image that `scripts/build-image` puts in `images/`).
    pub fn images_dir(&self) -> PathBuf {
        self.data_dir.join("images").join("sha256")
    }

    /// The secret store's key file.
    pub fn secret_key_path(&self) -> PathBuf {
        self.data_dir.join("secret.key")
    }

    /// runsc `--root`.
    pub fn runsc_root(&self) -> PathBuf {
        self.data_dir.join("runsc")
    }

    /// A dev-mode configuration for tests on the fake runtime: state in
    /// `data_dir`, a fixed capacity (no host probing, no free-disk floor),
    /// short start timeout and sync wait.
    pub fn for_tests(data_dir: PathBuf) -> Config {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            data_dir,
            dev: true,
            signing_keys: Vec::new(),
            runsc_binary: "runsc".into(),
            agent_dir: "/nonexistent".into(),
            image_rootfs: "/nonexistent".into(),
            image_ref: "default".into(),
            e2b_templates: Default::default(),
            e2b_domain: None,
            limits: Limits {
                start_timeout: Duration::from_secs(3),
                create_sync_wait: Duration::from_secs(5),
                ..Limits::default()
            },
            runsc_extra_flags: Vec::new(),
            default_network: sbx_api_types::NetworkMode::Public,
            network_test_public: Vec::new(),
            warm_pool: Default::default(),
            shapes: sbx_api_types::validate::SHAPES.to_vec(),
            capacity: CapacityConfig {
                memory_mb: Some(1 << 20),
                vcpus: Some(1024),
                min_free_disk_mb: 0,
                ..CapacityConfig::default()
            },
            http: HttpConfig::default(),
            node: NodeConfig::default(),
            snapshot_store: Default::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e2b_domains_are_dns_names_and_not_e2bs_own() {
        assert_eq!(
            parse_e2b_domain("Sbx.Example.com").unwrap(),
            "sbx.example.com"
        );
        assert_eq!(
            parse_e2b_domain("sbx.localhost:8731").unwrap(),
            "sbx.localhost:8731"
        );
        for bad in [
            "", "e2b.app", "E2B.dev", "a..b", "-a.b", "a_b.c", "x:0", "x:99999", "a/b", "a@b",
        ] {
            assert!(parse_e2b_domain(bad).is_err(), "{bad:?}");
        }
    }

    fn base() -> Config {
        Config {
            listen: "127.0.0.1:8731".parse().unwrap(),
            data_dir: "/tmp/x".into(),
            dev: true,
            signing_keys: vec![],
            runsc_binary: "runsc".into(),
            agent_dir: "/tmp".into(),
            image_rootfs: "/tmp".into(),
            image_ref: "default".into(),
            e2b_templates: Default::default(),
            e2b_domain: None,
            limits: Limits::default(),
            runsc_extra_flags: vec![],
            default_network: sbx_api_types::NetworkMode::Public,
            network_test_public: vec![],
            warm_pool: Default::default(),
            shapes: sbx_api_types::validate::SHAPES.to_vec(),
            capacity: CapacityConfig::default(),
            http: HttpConfig::default(),
            node: NodeConfig::default(),
            snapshot_store: Default::default(),
        }
    }

    #[test]
    fn node_settings() {
        let mut node = NodeConfig::default();
        assert!(node.validate(None).is_ok());
        node.cluster = true;
        assert!(matches!(
            node.validate(Some("  ")),
            Err(ConfigError::ClusterNeedsDatabase)
        ));
        assert!(matches!(
            node.validate(Some("postgres://db/sbx")),
            Err(ConfigError::ClusterNeedsToken)
        ));
        node.cluster_token = Some(ClusterToken::parse(&"t".repeat(32)).unwrap());
        assert!(node.validate(Some("postgres://db/sbx")).is_ok());
        node.lease = Duration::from_secs(3601);
        assert!(matches!(
            node.validate(Some("postgres://db/sbx")),
            Err(ConfigError::NodeLease)
        ));
        node.lease = Duration::from_secs(15);
        node.advertise_url = "ftp://x".into();
        assert!(node.validate(Some("postgres://db/sbx")).is_err());
        node.advertise_url = "https://node-1:8731".into();
        node.id = "-x".into();
        assert!(node.validate(Some("postgres://db/sbx")).is_err());
        assert!(check_node_id("node-1.example").is_ok());
        assert!(check_node_id("").is_err());
        let labels =
            parse_node_labels(&["zone=eu-1".into(), " gpu = no".into(), "".into()]).unwrap();
        assert_eq!(labels.get("zone").map(String::as_str), Some("eu-1"));
        assert_eq!(labels.get("gpu").map(String::as_str), Some("no"));
        assert!(parse_node_labels(&["novalue".into()]).is_err());
        assert!(parse_node_labels(&["a=1".into(), "a=2".into()]).is_err());
    }

    #[test]
    fn metrics_tokens_are_long_printable_and_compared_whole() {
        let t = MetricsToken::parse(&format!("  {}\n", "a".repeat(32))).unwrap();
        assert!(t.matches("a".repeat(32).as_bytes()));
        assert!(!t.matches("a".repeat(31).as_bytes()));
        assert!(!t.matches(format!("{}b", "a".repeat(32)).as_bytes()));
        assert_eq!(format!("{t:?}"), "MetricsToken(..)");
        for bad in [
            "a".repeat(31),
            format!("{} {}", "a".repeat(20), "b".repeat(20)),
        ] {
            assert!(matches!(
                MetricsToken::parse(&bad),
                Err(ConfigError::BadMetricsToken)
            ));
        }
    }

    #[test]
    fn http_figures_are_not_zero() {
        assert!(base().validate().is_ok());
        let mut c = base();
        c.http.header_timeout = Duration::ZERO;
        assert!(matches!(c.validate(), Err(ConfigError::HttpZero(_))));
        let mut c = base();
        c.http.max_connections_per_ip = 0;
        assert!(matches!(
            c.validate(),
            Err(ConfigError::HttpZero("--http-max-connections-per-ip"))
        ));
    }

    #[test]
    fn warm_pool_values() {
        let grid = sbx_api_types::validate::SHAPES;
        let v = |s: &[&str]| {
            parse_warm_pool(&s.iter().map(|s| s.to_string()).collect::<Vec<_>>(), &grid)
        };
        let fixed = |s: &[&str]| match v(s) {
            Ok(WarmPool::Fixed(p)) => p.into_iter().collect::<Vec<_>>(),
            other => panic!("{s:?}: {other:?}"),
        };
        assert_eq!(v(&[]).unwrap(), WarmPool::Auto);
        assert_eq!(v(&[" auto "]).unwrap(), WarmPool::Auto);
        assert!(fixed(&["none"]).is_empty());
        assert!(fixed(&["off"]).is_empty());
        assert_eq!(
            fixed(&["1x1024=2", "2x2048=1", "4x4096=0"]),
            vec![((1, 1024), 2), ((2, 2048), 1)]
        );
        for bad in ["1x1024", "1x1000=1", "x=1", "1x1024=-1", "1x1024=65"] {
            assert!(v(&[bad]).is_err(), "{bad}");
        }
        assert!(v(&["1x1024=1", "1x1024=2"]).is_err());
        // auto and none are whole settings, not shapes.
        assert!(v(&["auto", "1x1024=1"]).is_err());
        assert!(v(&["none", "1x1024=1"]).is_err());
        // Every shape of the grid may have a pool, unless --shapes leaves it out.
        assert_eq!(fixed(&["2x8192=1", "4x16384=1"]).len(), 2);
        let narrowed = parse_warm_pool(&["2x4096=1".to_string()], &[(1, 1024), (2, 2048)]);
        let e = narrowed.unwrap_err();
        assert!(e.contains("use 1/1024 or 2/2048"), "{e}");
    }

    #[test]
    fn shapes_narrow_the_grid() {
        let v = |s: &[&str]| parse_shapes(&s.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(v(&[]).unwrap(), sbx_api_types::validate::SHAPES.to_vec());
        assert_eq!(v(&[" "]).unwrap().len(), 9);
        // Grid order, duplicates dropped.
        assert_eq!(
            v(&["4x4096", "1x1024", "2x2048", "1x1024"]).unwrap(),
            vec![(1, 1024), (2, 2048), (4, 4096)]
        );
        for bad in ["3x3072", "1x8192", "2", "2x", "8x8192"] {
            let e = v(&[bad]).unwrap_err();
            assert!(e.starts_with("--shapes"), "{e}");
        }
    }

    #[test]
    fn dev_mode_is_loopback_only() {
        assert!(base().validate().is_ok());
        let mut c = base();
        c.listen = "0.0.0.0:8731".parse().unwrap();
        assert!(matches!(c.validate(), Err(ConfigError::DevNotLoopback(_))));
        c.dev = false;
        assert!(c.validate().is_ok());
        assert!(matches!(c.check_keys(0), Err(ConfigError::NoKeys)));
        assert!(c.check_keys(1).is_ok(), "a key made by `sbxd keys create`");
        c.signing_keys = vec!["signkey-prod-00".into()];
        assert!(c.validate().is_ok());
        assert!(c.check_keys(0).is_ok());
        c.network_test_public = vec!["10.213.0.0/30".into()];
        assert!(matches!(
            c.validate(),
            Err(ConfigError::TestOnlyOption("--network-test-public-cidr"))
        ));
        c.dev = true;
        c.listen = "127.0.0.1:8731".parse().unwrap();
        assert!(c.validate().is_ok());
    }

    #[test]
    fn e2b_templates_name_the_default_image_or_an_image() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let got = parse_e2b_templates(&v(&[
            "q52rcyz0ua30keeiy22u=default",
            "python=default",
            "tools=py-tools:1",
        ]))
        .unwrap();
        assert_eq!(
            got.into_iter().collect::<Vec<_>>(),
            vec![
                ("python".to_string(), "default".to_string()),
                ("q52rcyz0ua30keeiy22u".into(), "default".into()),
                ("tools".into(), "py-tools:1".into()),
            ]
        );
        for bad in ["python", "=default", "python=", "a b=default", "x=a b"] {
            assert!(parse_e2b_templates(&v(&[bad])).is_err(), "{bad}");
        }
        assert!(parse_e2b_templates(&v(&["a=default", "a=x:1"])).is_err());
    }

    #[test]
    fn sandbox_disk_is_off_or_big_enough() {
        let mut c = base();
        c.limits.sandbox_disk_mb = 0;
        assert!(c.validate().is_ok());
        c.limits.sandbox_disk_mb = 8;
        assert!(matches!(c.validate(), Err(ConfigError::DiskTooSmall(8))));
        c.limits.sandbox_disk_mb = 64;
        assert!(c.validate().is_ok());
    }
}
