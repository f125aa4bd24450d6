//! The daemon itself: flags into a configuration, the stores, the runtime,
//! the service and its background tasks, then the HTTP server until a signal.

use crate::args::Args;
use crate::connect::open_connect;
use crate::stores::open_store;
use anyhow::Context;
use sbx_daemon::config::{Config, Limits};
use sbx_daemon::runtime::gvisor::{GvisorConfig, GvisorRuntime};
use sbx_daemon::runtime::RuntimeError;
use sbx_daemon::service::{SecretBox, Service};
use std::sync::Arc;
use std::time::Duration;

/// The daemon: serves until SIGINT or SIGTERM.
pub(crate) async fn daemon_main(args: Args) -> anyhow::Result<()> {
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
            workspace_quota: sbx_store::WorkspaceQuota {
                sandboxes: args.workspace_max_sandboxes,
                vcpus: args.workspace_max_vcpus,
                memory_mb: args.workspace_max_memory_mb,
            },
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

/// How often console logs are trimmed: a sandbox floods its console at ~215 MB/s
/// (measured), so this bounds the overshoot past `--console-log-max-mb` to ~110 MB.
const CONSOLE_TRIM_EVERY: Duration = Duration::from_millis(500);
