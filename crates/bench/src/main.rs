//! `sbx-bench`: latency and throughput of a running sbxd, next to the same
//! operation done with raw runsc in the same run, as one markdown table.
//!
//! ```text
//! sbx-bench --image-rootfs /var/lib/sbx/images/default-*/rootfs --agent-dir /var/lib/sbx/agent \
//!     [--url http://127.0.0.1:8731] [--iterations 20] [--scenarios create,exec,...]
//! ```
//!
//! sbx and raw iterations alternate, so both sides see the same background
//! load. Everything the bench creates is removed at the end (and on Ctrl-C):
//! sbx sandboxes and snapshots named `bench-<tag>-*`, raw containers
//! `bench-raw-<tag>-*` under the run's own runsc `--root`.

mod api;
mod cli;
mod cluster;
mod connect;
mod cpu;
mod images;
mod lifecycle;
mod load;
mod network;
mod raw;
mod reaper;
mod report;
mod stats;
mod store;
mod store_path;
mod sys;
mod templates;
mod warm;
mod webhooks;

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use serde_json::json;

use api::Api;
use cli::{Args, WARM_SCENARIOS};
use raw::{Raw, Shape};
use stats::{Failure, Row, Side};

/// Awaits `f` and returns how long it took.
async fn timed<T>(f: impl Future<Output = Result<T>>) -> Result<Duration> {
    let t = Instant::now();
    f.await?;
    Ok(t.elapsed())
}

/// Like [`timed`] but also returns the value.
async fn timed_val<T>(f: impl Future<Output = Result<T>>) -> Result<(T, Duration)> {
    let t = Instant::now();
    let v = f.await?;
    Ok((v, t.elapsed()))
}

/// A side that inherits why a prerequisite failed.
fn inherit(f: &Failure, what: &str) -> Side {
    Side {
        failure: Some(match f {
            Failure::Unsupported(c) => Failure::Unsupported(c.clone()),
            _ => Failure::Skipped(format!("{what} failed")),
        }),
        ..Side::default()
    }
}

fn stats_failure(e: &anyhow::Error) -> Failure {
    Side::failed(e)
        .failure
        .unwrap_or(Failure::Error(String::new()))
}

struct Bench {
    api: Api,
    raw: Raw,
    tag: String,
    n: usize,
    big: usize,
    warm: usize,
    selected: Vec<&'static str>,
    rows: BTreeMap<&'static str, Row>,
    notes: Vec<String>,
    sbxd_pid: Option<u32>,
    raw_compression: String,
    load: load::LoadOpts,
    /// The sbxd of the density scenario when it is not `api`'s.
    density_api: Option<Api>,
    density_url: String,
    density_pid: Option<u32>,
    cpu_execs: usize,
    cpu_creates: usize,
    /// The two sbxd of the store rows, when given.
    store_pair: Option<store::StorePair>,
    store_n: usize,
    store_execs: usize,
    store_rows: Vec<store::StoreRow>,
    /// Two nodes of one cluster (`--cluster-urls`), for `cluster-exec`.
    cluster_pair: Option<[Api; 2]>,
    cluster_rows: Vec<store::StoreRow>,
    /// Every node of `--cluster-urls`, for `cluster-clone` and `cluster-create`.
    cluster_nodes: Vec<Api>,
    cluster_clone_n: usize,
    cluster_create_count: usize,
    cluster_create_clients: usize,
    cluster_clone_row: Option<cluster::CloneRow>,
    cluster_create_row: Option<cluster::CreateRow>,
    /// The PostgreSQL database of the in-process store row.
    store_path_url: Option<String>,
    store_path_n: usize,
}

impl Bench {
    fn wants(&self, s: &str) -> bool {
        self.selected.contains(&s)
    }

    fn sbx_name(&self, what: &str, i: usize) -> String {
        format!("bench-{}-{what}-{i:03}", self.tag)
    }

    fn create_body(&self, name: String) -> serde_json::Value {
        json!({ "name": name, "vcpu": 1, "memoryMb": 1024 })
    }

    fn put(&mut self, name: &'static str, row: Row) {
        self.rows.insert(name, row);
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let selected = cli::select(&args.scenarios)?;
    let image_rootfs = std::fs::canonicalize(&args.image_rootfs)
        .with_context(|| format!("image rootfs {}", args.image_rootfs.display()))?;
    let agent_dir = std::fs::canonicalize(&args.agent_dir)
        .with_context(|| format!("agent dir {}", args.agent_dir.display()))?;
    if !agent_dir.join("sbx-agent").is_file() {
        bail!("{} has no sbx-agent", agent_dir.display());
    }
    let api = Api::new(
        &args.url,
        Duration::from_millis(args.poll_ms.max(1)),
        args.upload_chunk_kib * 1024,
    )?;
    // The store rows run on sbxd of their own: a run of only those needs no --url.
    if selected.iter().any(|s| !store::SCENARIOS.contains(s)) {
        api.health()
            .await
            .with_context(|| format!("sbxd is not answering at {}", args.url))?;
    }
    let store_pair = match (&args.store_sqlite_url, &args.store_postgres_url) {
        (Some(sqlite), Some(postgres)) => {
            let sqlite = Api::new(sqlite, store::POLL, 0)?;
            let postgres_api = Api::new(postgres, store::POLL, 0)?;
            for (a, which) in [(&sqlite, "SQLite"), (&postgres_api, "PostgreSQL")] {
                a.health()
                    .await
                    .with_context(|| format!("the sbxd on {which} is not answering"))?;
            }
            Some(store::StorePair {
                sqlite,
                postgres: postgres_api,
            })
        }
        (None, None) => None,
        _ => bail!("--store-sqlite-url and --store-postgres-url go together"),
    };
    let cluster_pair = match args.cluster_urls.as_slice() {
        [] => None,
        [a, b] | [a, b, _] => {
            let a = Api::new(a, store::POLL, 0)?;
            let b = Api::new(b, store::POLL, 0)?;
            for n in [&a, &b] {
                n.health().await.with_context(|| {
                    format!("the cluster node at {} is not answering", n.base())
                })?;
            }
            Some([a, b])
        }
        _ => bail!("--cluster-urls takes two or three URLs (nodes of one cluster)"),
    };
    let cluster_nodes = args
        .cluster_urls
        .iter()
        .map(|u| Api::new(u, store::POLL, 0))
        .collect::<Result<Vec<Api>>>()?;
    let pid_of = |url: &str| {
        reqwest::Url::parse(url)
            .ok()
            .and_then(|u| u.port_or_known_default())
            .and_then(sys::pid_listening_on)
    };
    let sbxd_pid = args.sbxd_pid.or_else(|| pid_of(&args.url));
    let density_api = match &args.density_url {
        Some(u) if u.trim_end_matches('/') != args.url.trim_end_matches('/') => {
            let a = Api::new(u, Duration::from_millis(args.poll_ms.max(1)), 0)?;
            a.health()
                .await
                .with_context(|| format!("the density sbxd is not answering at {u}"))?;
            Some(a)
        }
        _ => None,
    };
    let density_url = args.density_url.clone().unwrap_or_else(|| args.url.clone());
    let density_pid = args.density_sbxd_pid.or_else(|| pid_of(&density_url));
    if sbxd_pid.is_none() {
        eprintln!("note: sbxd pid not found (pass --sbxd-pid); no RSS samples");
    }

    std::fs::create_dir_all(&args.data_dir)?;
    let work = tempfile::Builder::new()
        .prefix("sbx-bench-")
        .tempdir_in(&args.data_dir)
        .context("creating the raw state directory")?;
    let tag = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    let shape = Shape {
        vcpu: 1,
        memory_mb: 1024,
    };
    let raw = Raw::new(
        &args.runsc,
        work.path(),
        &image_rootfs,
        &agent_dir,
        &tag,
        shape,
    )?;
    let subreaper = !args.no_subreaper && reaper::start();
    let machine = sys::machine_line(&args.runsc);
    let started = chrono::Utc::now().format("%Y-%m-%d %H:%M UTC").to_string();
    eprintln!(
        "sbx-bench {tag}: {machine}; raw state in {}",
        work.path().display()
    );

    let mut bench = Bench {
        api,
        raw,
        tag: tag.clone(),
        n: args.iterations.max(1),
        big: args.big_iterations.max(1),
        warm: args.warmup,
        selected,
        rows: BTreeMap::new(),
        notes: Vec::new(),
        sbxd_pid,
        raw_compression: args.raw_compression.clone(),
        load: load::LoadOpts {
            sandboxes: args.load_sandboxes,
            concurrency: args.load_concurrency,
            rounds: args.load_rounds,
            density: args.density_count,
            parallel: args.fill_parallel,
            settle: Duration::from_secs(args.density_settle_secs),
            quiet: Duration::from_secs(args.density_quiet_secs),
            op_timeout: Duration::from_secs(args.op_timeout_secs.max(1)),
        },
        density_api,
        density_url,
        density_pid,
        cpu_execs: args.cpu_execs,
        cpu_creates: args.cpu_creates,
        store_pair,
        store_n: args.store_iterations.max(1),
        store_execs: args.store_execs.max(1),
        store_rows: Vec::new(),
        cluster_pair,
        cluster_rows: Vec::new(),
        cluster_nodes,
        cluster_clone_n: args.cluster_clone_iterations.max(1),
        cluster_create_count: args.cluster_create_count.max(1),
        cluster_create_clients: args.cluster_create_clients.max(1),
        cluster_clone_row: None,
        cluster_create_row: None,
        store_path_url: args.store_path_database_url.clone(),
        store_path_n: args.store_path_iterations.max(1),
    };
    bench.notes.push(match args.upload_chunk_kib {
        0 => "sbx uploads are sent as one body with a Content-Length.".to_string(),
        k => format!(
            "sbx uploads are streamed from memory with chunked transfer encoding, {k} KiB per \
             chunk (`--upload-chunk-kib`; sbxd's upload rate depends on it)."
        ),
    });
    bench.notes.push(if subreaper {
        "The bench is a child subreaper that reaps runsc sandbox/gofer zombies every 20 ms, as \
         sbxd does, so raw `delete` does not wait for the host's init."
            .into()
    } else {
        "The bench is NOT a child subreaper: raw `delete --force` waits for the host's init to \
         reap the sandbox processes (sbxd reaps its own)."
            .into()
    });

    let interrupted = {
        let b = &mut bench;
        let run = async move {
            // First: it needs an sbxd whose pool has not been drained by other rows.
            if b.wants("create-first5") {
                b.first_creates().await;
            }
            if b.wants("create") || b.wants("destroy") {
                b.lifecycle().await;
            }
            if WARM_SCENARIOS.iter().any(|s| b.wants(s)) {
                b.warm_scenarios().await;
            }
            if b.wants("template-create") {
                b.template_create().await;
            }
            if network::SCENARIOS.iter().any(|s| b.wants(s)) {
                b.network().await;
            }
            if b.wants("sbxd-cpu") {
                b.sbxd_cpu().await;
            }
            if b.wants("exec-load") {
                b.exec_load().await;
            }
            if b.wants("density-mem")
                || b.wants("density-exec")
                || b.wants("density-cpu")
                || b.wants("density-metrics")
            {
                b.density().await;
            }
            if b.wants("connect-job") {
                b.connect().await;
            }
            if b.wants("webhook-deliveries") {
                b.webhooks().await;
            }
            if images::SCENARIOS.iter().any(|s| b.wants(s)) {
                b.images().await;
            }
            if store::SCENARIOS.iter().any(|s| b.wants(s)) {
                b.store().await;
            }
        };
        tokio::select! {
            _ = run => false,
            _ = tokio::signal::ctrl_c() => {
                eprintln!("interrupted: cleaning up");
                true
            }
        }
    };

    eprintln!("[cleanup]");
    let mut leftovers = bench.api.cleanup(&format!("bench-{tag}-")).await;
    if let Some(d) = &bench.density_api {
        leftovers.extend(d.cleanup(&format!("bench-{tag}-")).await);
    }
    if let Some(pair) = &bench.store_pair {
        for a in [&pair.sqlite, &pair.postgres] {
            leftovers.extend(a.cleanup(&format!("bench-{tag}-")).await);
        }
    }
    if let Some(pair) = &bench.cluster_pair {
        for a in pair {
            leftovers.extend(a.cleanup(&format!("bench-{tag}-")).await);
        }
    }
    for a in &bench.cluster_nodes {
        leftovers.extend(a.cleanup(&format!("bench-{tag}-")).await);
    }
    leftovers.extend(bench.raw.cleanup().await);
    for l in &leftovers {
        eprintln!("  ! cleanup: {l}");
    }
    if args.keep_data_dir {
        let kept = work.keep();
        eprintln!("raw state kept in {}", kept.display());
    } else {
        drop(work);
    }

    print!(
        "{}",
        report::report(&bench, &machine, &args.url, &started, interrupted)
    );
    if !leftovers.is_empty() {
        bail!("cleanup left {} item(s) behind", leftovers.len());
    }
    if interrupted {
        std::process::exit(130);
    }
    Ok(())
}
