//! Opening the Connect runtime from the daemon's flags.

use crate::args::ConnectArgs;
use anyhow::Context;
use sbx_daemon::runtime::gvisor::GvisorRuntime;
use sbx_daemon::service::Service;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Opens the Connect runtime: its tables in the PostgreSQL of `database_url` (else its own
/// SQLite file), files under the data dir, credentials sealed with the secret store's keys,
/// jobs in this daemon's sandboxes.
pub(crate) fn open_connect(
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

/// The registry builds use when neither the flag nor the host's npm names one.
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
