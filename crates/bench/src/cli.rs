//! The command line: its flags, the scenario names, and `--scenarios` expanded to them.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Parser;

/// Scenarios in table order.
pub const SCENARIOS: &[&str] = &[
    "create",
    "create-first5",
    "exec",
    "destroy",
    "process-start",
    "upload-1MiB",
    "upload-100MiB",
    "download-1MiB",
    "download-100MiB",
    "pause",
    "resume",
    "snapshot-idle",
    "snapshot-50MB",
    "clone",
    "template-create",
    "create-public",
    "create-none",
    "net-connect",
    "net-throughput",
    "exec-load",
    "density-mem",
    "density-exec",
    "density-cpu",
    "density-metrics",
    "sbxd-cpu",
    "connect-job",
    "webhook-deliveries",
    "image-build-cold",
    "image-build-cached",
    "create-from-image",
    "store-create",
    "store-create-path",
    "store-exec",
    "store-destroy",
    "cluster-exec",
    "cluster-clone",
    "cluster-create",
];

/// Scenarios that run on the long-lived ("warm") sandbox pair.
pub const WARM_SCENARIOS: &[&str] = &[
    "exec",
    "process-start",
    "upload-1MiB",
    "upload-100MiB",
    "download-1MiB",
    "download-100MiB",
    "pause",
    "resume",
    "snapshot-idle",
    "snapshot-50MB",
    "clone",
];

#[derive(Parser, Debug)]
#[command(
    name = "sbx-bench",
    about = "Benchmarks a running sbxd against raw runsc and prints a markdown table"
)]
/// The command line; each flag's doc is its `--help` line.
pub struct Args {
    /// Base URL of the running sbxd (dev mode: no key needed).
    #[arg(long, env = "SBX_URL", default_value = "http://127.0.0.1:8731")]
    pub url: String,
    /// Timed iterations per scenario (per side).
    #[arg(long, default_value_t = 20)]
    pub iterations: usize,
    /// Timed iterations of the 100 MiB transfers.
    #[arg(long, default_value_t = 3)]
    pub big_iterations: usize,
    /// Untimed iterations before the timed ones (not for 100 MiB transfers).
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
    /// Comma-separated scenarios (default: all). `snapshot` means both
    /// snapshot rows.
    #[arg(long, value_delimiter = ',')]
    pub scenarios: Vec<String>,
    /// Parent directory of this run's raw runsc state (a fresh
    /// `sbx-bench-*` directory is made inside and removed at the end).
    #[arg(long, default_value = "/var/tmp")]
    pub data_dir: PathBuf,
    /// Keep the raw state directory (bundles, console logs) for inspection.
    #[arg(long)]
    pub keep_data_dir: bool,
    /// Root filesystem of the image sbxd uses.
    #[arg(long)]
    pub image_rootfs: PathBuf,
    /// Directory holding `sbx-agent` (bind-mounted at /.sbx).
    #[arg(long)]
    pub agent_dir: PathBuf,
    /// runsc binary.
    #[arg(long, default_value = sbx_runsc::DEFAULT_BINARY)]
    pub runsc: PathBuf,
    /// pid of sbxd for the RSS samples (default: the process listening on
    /// the URL's port).
    #[arg(long)]
    pub sbxd_pid: Option<u32>,
    /// Interval of client-side status polling, in ms.
    #[arg(long, default_value_t = 10)]
    pub poll_ms: u64,
    /// Do not act as child subreaper for the raw sandboxes (sbxd is one; without
    /// it raw `delete` waits for the host's init to reap, ~1.5 s on some hosts).
    #[arg(long)]
    pub no_subreaper: bool,
    /// `--compression=` of the raw `runsc checkpoint` (sbxd uses `none`;
    /// empty = runsc's default, flate-best-speed).
    #[arg(long, default_value = "none")]
    pub raw_compression: String,
    /// Uploads are streamed (chunked transfer encoding) in pieces of this
    /// many KiB; 0 sends one body with a Content-Length.
    #[arg(long, default_value_t = 256)]
    pub upload_chunk_kib: usize,
    /// exec-load: sandboxes per side.
    #[arg(long, default_value_t = 10)]
    pub load_sandboxes: usize,
    /// exec-load: concurrent `true` execs per sandbox in each round.
    #[arg(long, default_value_t = 10)]
    pub load_concurrency: usize,
    /// exec-load: timed rounds (each gives sandboxes × concurrency samples).
    #[arg(long, default_value_t = 10)]
    pub load_rounds: usize,
    /// density: idle 1 vCPU / 1024 MiB sandboxes held at once per side.
    #[arg(long, default_value_t = 100)]
    pub density_count: usize,
    /// Creates / destroys in flight at once while filling and emptying
    /// (exec-load, density).
    #[arg(long, default_value_t = 4)]
    pub fill_parallel: usize,
    /// density: seconds the sandboxes sit idle before their memory is read
    /// (the window of the density-cpu row).
    #[arg(long, default_value_t = 10)]
    pub density_settle_secs: u64,
    /// density: seconds after the last create before that window opens, on
    /// both sides: sbxd freezes a sandbox idle for 10 s (`--freeze-idle-after-secs`),
    /// so the window then shows idle sandboxes as they stay.
    #[arg(long, default_value_t = 15)]
    pub density_quiet_secs: u64,
    /// density: run the sbx side on this sbxd instead of --url (one started
    /// with `--memory-overcommit`, so 100 × 1 GiB pass admission).
    #[arg(long)]
    pub density_url: Option<String>,
    /// pid of the --density-url sbxd (default: the process listening on its port).
    #[arg(long)]
    pub density_sbxd_pid: Option<u32>,
    /// sbxd-cpu: execs in the exec window.
    #[arg(long, default_value_t = 200)]
    pub cpu_execs: usize,
    /// sbxd-cpu: creates in the create window (and destroys in the destroy one).
    #[arg(long, default_value_t = 10)]
    pub cpu_creates: usize,
    /// store rows: the sbxd on SQLite (`scripts/bench` starts it beside the
    /// PostgreSQL one, with the same flags).
    #[arg(long)]
    pub store_sqlite_url: Option<String>,
    /// store rows: the sbxd on PostgreSQL (`--database-url`).
    #[arg(long)]
    pub store_postgres_url: Option<String>,
    /// store-create / store-destroy: timed iterations per store.
    #[arg(long, default_value_t = 60)]
    pub store_iterations: usize,
    /// store-create-path: an empty PostgreSQL database for the in-process
    /// store rows (the SQLite side is a fresh file).
    #[arg(long)]
    pub store_path_database_url: Option<String>,
    /// store-create-path: timed iterations per store.
    #[arg(long, default_value_t = 1000)]
    pub store_path_iterations: usize,
    /// cluster rows: two or three nodes of one cluster (`scripts/bench` starts
    /// three, snapshots in object storage), comma-separated. cluster-exec and
    /// cluster-clone use the first two, cluster-create all three.
    #[arg(long, value_delimiter = ',')]
    pub cluster_urls: Vec<String>,
    /// cluster-clone: timed clones per side (cold and warm cache).
    #[arg(long, default_value_t = 5)]
    pub cluster_clone_iterations: usize,
    /// cluster-create: creates per side (one node, three nodes).
    #[arg(long, default_value_t = 12)]
    pub cluster_create_count: usize,
    /// cluster-create: concurrent clients.
    #[arg(long, default_value_t = 4)]
    pub cluster_create_clients: usize,
    /// store-exec and cluster-exec: timed execs per side.
    #[arg(long, default_value_t = 200)]
    pub store_execs: usize,
    /// Upper bound on one exec / create / destroy in exec-load and density, seconds.
    #[arg(long, default_value_t = 120)]
    pub op_timeout_secs: u64,
}

/// Expands and checks `--scenarios`.
pub fn select(names: &[String]) -> Result<Vec<&'static str>> {
    if names.is_empty() || names.iter().any(|n| n.eq_ignore_ascii_case("all")) {
        return Ok(SCENARIOS.to_vec());
    }
    let mut out = Vec::new();
    for n in names {
        let n = n.trim();
        if n.is_empty() {
            continue;
        }
        if n.eq_ignore_ascii_case("snapshot") {
            out.extend(["snapshot-idle", "snapshot-50MB"]);
            continue;
        }
        if n.eq_ignore_ascii_case("store") {
            out.extend(crate::store::SCENARIOS);
            continue;
        }
        if n.eq_ignore_ascii_case("density") {
            out.extend([
                "density-mem",
                "density-exec",
                "density-cpu",
                "density-metrics",
            ]);
            continue;
        }
        match SCENARIOS.iter().find(|s| s.eq_ignore_ascii_case(n)) {
            Some(s) => out.push(*s),
            None => bail!(
                "unknown scenario {n:?}; known: {} (or snapshot, density, store, all)",
                SCENARIOS.join(", ")
            ),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network;

    #[test]
    fn scenario_selection() {
        assert_eq!(select(&[]).unwrap(), SCENARIOS);
        assert_eq!(
            select(&["Exec".into(), "snapshot".into()]).unwrap(),
            ["exec", "snapshot-idle", "snapshot-50MB"]
        );
        assert!(select(&["nope".into()]).is_err());
        assert_eq!(
            select(&["store".into()]).unwrap(),
            [
                "store-create",
                "store-create-path",
                "store-exec",
                "store-destroy",
                "cluster-exec",
                "cluster-clone",
                "cluster-create"
            ]
        );
        assert_eq!(
            select(&["exec-load".into(), "density".into(), "sbxd-cpu".into()]).unwrap(),
            [
                "exec-load",
                "density-mem",
                "density-exec",
                "density-cpu",
                "density-metrics",
                "sbxd-cpu"
            ]
        );
        for s in WARM_SCENARIOS.iter().chain(network::SCENARIOS) {
            assert!(SCENARIOS.contains(s));
        }
    }
}
