//! `cluster-clone` and `cluster-create`, on the nodes of `--cluster-urls`
//! (`scripts/bench` starts three on one PostgreSQL, snapshots in s3s-fs).
//!
//! * `cluster-clone`: a snapshot taken on node A (uploaded to object storage),
//!   cloned onto node B (A drained, so placement has only B) twice: first
//!   with B's cache empty (the files are fetched from S3 and checked), then
//!   with B's cache holding them. Each iteration takes a new snapshot, so
//!   every cold sample is really cold; cold and warm alternate.
//! * `cluster-create`: creates per second from `--cluster-create-clients`
//!   concurrent clients making `--cluster-create-count` sandboxes, against one
//!   node (the others drained) and against all three (clients spread over
//!   the nodes, placement spreading the sandboxes). A report, not a target:
//!   the nodes share one machine's cores.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{anyhow, Result};
use reqwest::Method;
use serde_json::json;

use crate::api::Api;
use crate::stats::{fmt_ms, percentile, Side};
use crate::store::bootstrap_interval;
use crate::Bench;

/// Clone with a cold vs a warm snapshot cache.
pub const CLONE: &str = "cluster-clone";
/// Create throughput of one node vs three.
pub const CREATE: &str = "cluster-create";

/// What `cluster-clone` measured.
#[derive(Debug, Default)]
pub struct CloneRow {
    /// Clones with the clone node's cache empty.
    pub cold: Side,
    /// Clones with the clone node's cache holding the snapshot.
    pub warm: Side,
}

/// One side of `cluster-create`.
#[derive(Debug, Clone)]
pub struct Throughput {
    /// Creates per second over the whole run.
    pub per_sec: f64,
    /// p50 of one create, ms.
    pub p50_ms: f64,
    /// (node advertise URL, sandboxes it ran) right after the creates.
    pub spread: Vec<(String, u64)>,
}

/// What `cluster-create` measured.
#[derive(Debug)]
pub struct CreateRow {
    /// Against one node.
    pub one: Result<Throughput, String>,
    /// Against three nodes.
    pub three: Result<Throughput, String>,
    /// Creates per side.
    pub count: usize,
    /// Concurrent clients.
    pub clients: usize,
}

/// The node id of each of `nodes` (by advertise URL), as the first lists them.
async fn node_ids(nodes: &[Api]) -> Result<Vec<String>> {
    let listed = nodes[0].call(Method::GET, "/v1/nodes", None).await?.body;
    let all = listed["data"]
        .as_array()
        .ok_or_else(|| anyhow!("GET /v1/nodes: no list: {listed}"))?;
    nodes
        .iter()
        .map(|n| {
            all.iter()
                .find(|x| x["advertiseUrl"].as_str() == Some(n.base()))
                .and_then(|x| x["id"].as_str())
                .map(str::to_string)
                .ok_or_else(|| anyhow!("no node advertises {}", n.base()))
        })
        .collect()
}

/// Drains (`drain` true) or undrains node `id` through `via`.
async fn set_drained(via: &Api, id: &str, drain: bool) -> Result<()> {
    let verb = if drain { "drain" } else { "undrain" };
    via.call(Method::POST, &format!("/v1/nodes/{id}/{verb}"), None)
        .await?;
    Ok(())
}

impl CloneRow {
    /// The table header (two lines).
    pub const HEADER: &'static str = "| scenario | cold cache p50 | cold cache p95 | warm cache p50 | warm cache p95 | cold − warm p50 (95 % interval) |\n|---|---|---|---|---|---|";

    /// The markdown line.
    pub fn markdown(&self) -> String {
        let cell = |s: &Side, p: f64| match (s.pct(p), &s.failure) {
            (Some(ms), None) => fmt_ms(ms),
            (Some(ms), Some(_)) => format!("{} (partial)", fmt_ms(ms)),
            (None, Some(f)) if p == 50.0 => format!("n/a ({f:?})"),
            (None, _) => "—".into(),
        };
        let diff = match (
            self.cold.pct(50.0),
            self.warm.pct(50.0),
            bootstrap_interval(&self.warm.ms, &self.cold.ms),
        ) {
            (Some(c), Some(w), Some((lo, hi))) => {
                format!("{:+.0} ms ({lo:+.0} … {hi:+.0})", c - w)
            }
            _ => "—".into(),
        };
        format!(
            "| {CLONE} | {} | {} | {} | {} | {diff} |",
            cell(&self.cold, 50.0),
            cell(&self.cold, 95.0),
            cell(&self.warm, 50.0),
            cell(&self.warm, 95.0),
        )
    }
}

impl CreateRow {
    /// The table header (two lines).
    pub const HEADER: &'static str = "| scenario | 1 node: creates/s | 1 node: create p50 | 3 nodes: creates/s | 3 nodes: create p50 | 3 ÷ 1 | sandboxes per node (3 nodes) |\n|---|---|---|---|---|---|---|";

    /// The markdown line.
    pub fn markdown(&self) -> String {
        let side = |t: &Result<Throughput, String>| match t {
            Ok(t) => (format!("{:.2}", t.per_sec), fmt_ms(t.p50_ms)),
            Err(e) => (format!("error ({e})"), "—".into()),
        };
        let (one_rate, one_p50) = side(&self.one);
        let (three_rate, three_p50) = side(&self.three);
        let (ratio, spread) = match (&self.one, &self.three) {
            (Ok(o), Ok(t)) => (
                format!("{:.2}×", t.per_sec / o.per_sec),
                t.spread
                    .iter()
                    .map(|(_, n)| n.to_string())
                    .collect::<Vec<_>>()
                    .join(" / "),
            ),
            _ => ("—".into(), "—".into()),
        };
        format!(
            "| {CREATE} | {one_rate} | {one_p50} | {three_rate} | {three_p50} | {ratio} | {spread} |"
        )
    }
}

impl Bench {
    /// `cluster-clone` on the first two nodes of `--cluster-urls`.
    pub(crate) async fn cluster_clone(&self) -> CloneRow {
        let mut row = CloneRow::default();
        if self.cluster_nodes.len() < 2 {
            let why =
                "needs --cluster-urls with snapshots in object storage; scripts/bench starts them";
            row.cold = Side::skipped(why);
            row.warm = Side::skipped(why);
            return row;
        }
        if let Err(e) = self.cluster_clone_on(&mut row).await {
            eprintln!("  ! {CLONE}: {e:#}");
            if row.cold.active() {
                row.cold.fail(&e);
            }
            if row.warm.active() {
                row.warm.fail(&e);
            }
        }
        row
    }

    async fn cluster_clone_on(&self, row: &mut CloneRow) -> Result<()> {
        let (a, b) = (&self.cluster_nodes[0], &self.cluster_nodes[1]);
        let ids = node_ids(&self.cluster_nodes).await?;
        // The source on A: every other node drained while it is created.
        for id in &ids[1..] {
            set_drained(a, id, true).await?;
        }
        let source = a
            .create(self.create_body(self.sbx_name("cclone-src", 0)))
            .await;
        for id in &ids[1..] {
            set_drained(a, id, false).await?;
        }
        let source = source?;
        // Some memory and disk in the checkpoint, as a working sandbox has.
        a.exec_ok(
            &source,
            &["sh", "-c", "head -c 33554432 /dev/urandom > /tmp/blob"],
        )
        .await?;
        // Only B takes placements: every clone lands there.
        for (i, id) in ids.iter().enumerate() {
            if i != 1 {
                set_drained(a, id, true).await?;
            }
        }
        let result = self.clone_iterations(a, b, &source, row).await;
        for (i, id) in ids.iter().enumerate() {
            if i != 1 {
                if let Err(e) = set_drained(a, id, false).await {
                    eprintln!("  ! undraining {id}: {e:#}");
                }
            }
        }
        if let Err(e) = a.destroy(&source).await {
            eprintln!("  ! destroying the {CLONE} source: {e:#}");
        }
        result
    }

    async fn clone_iterations(
        &self,
        a: &Api,
        b: &Api,
        source: &str,
        row: &mut CloneRow,
    ) -> Result<()> {
        let total = self.warm + self.cluster_clone_n;
        for i in 0..total {
            eprintln!("[{CLONE}] {i}/{total}");
            let sid = a.snapshot(source, &self.sbx_name("cclone-snap", i)).await?;
            // Cold first (B has never seen this snapshot), then warm.
            for (n, side) in [&mut row.cold, &mut row.warm].into_iter().enumerate() {
                let body = json!({
                    "name": self.sbx_name(if n == 0 { "cclone-cold" } else { "cclone-warm" }, i),
                    "snapshotId": sid,
                });
                let t = Instant::now();
                let made = b.create(body).await;
                let took = t.elapsed();
                match made {
                    Ok(id) => {
                        side.take(i, self.warm, Ok(took));
                        b.destroy(&id).await?;
                    }
                    Err(e) => {
                        side.take(i, self.warm, Err(e));
                    }
                }
            }
            a.delete_snapshot(&sid).await?;
            if !(row.cold.active() && row.warm.active()) {
                break;
            }
        }
        Ok(())
    }

    /// `cluster-create` on the nodes of `--cluster-urls` (three).
    pub(crate) async fn cluster_create(&self) -> CreateRow {
        let count = self.cluster_create_count;
        let clients = self.cluster_create_clients.max(1);
        let mut row = CreateRow {
            one: Err("not run".into()),
            three: Err("not run".into()),
            count,
            clients,
        };
        if self.cluster_nodes.len() < 3 {
            let why =
                "needs --cluster-urls with three nodes; scripts/bench starts them".to_string();
            row.one = Err(why.clone());
            row.three = Err(why);
            return row;
        }
        let nodes = &self.cluster_nodes;
        let ids = match node_ids(nodes).await {
            Ok(ids) => ids,
            Err(e) => {
                row.one = Err(format!("{e:#}"));
                row.three = Err(format!("{e:#}"));
                return row;
            }
        };
        // One node: the others drained, every client talks to it.
        let mut drained = Ok(());
        for id in &ids[1..] {
            drained = drained.and(set_drained(&nodes[0], id, true).await);
        }
        row.one = match drained {
            Ok(()) => self.creates(&nodes[..1], "ccreate1").await,
            Err(e) => Err(format!("{e:#}")),
        };
        for id in &ids[1..] {
            if let Err(e) = set_drained(&nodes[0], id, false).await {
                eprintln!("  ! undraining {id}: {e:#}");
            }
        }
        // Three nodes: the clients spread over them, as behind a load balancer.
        row.three = self.creates(nodes, "ccreate3").await;
        row
    }

    /// `cluster_create_count` creates from `cluster_create_clients` clients,
    /// client `i` talking to `nodes[i % len]`; then destroys them (untimed).
    async fn creates(&self, nodes: &[Api], what: &str) -> Result<Throughput, String> {
        let count = self.cluster_create_count;
        let clients = self.cluster_create_clients.max(1);
        eprintln!(
            "[{CREATE}] {count} creates, {clients} clients, {} node(s)",
            nodes.len()
        );
        let next = Arc::new(AtomicUsize::new(0));
        let started = Instant::now();
        let runs = (0..clients).map(|c| {
            let api = &nodes[c % nodes.len()];
            let next = Arc::clone(&next);
            async move {
                let mut made = Vec::new();
                let mut ms = Vec::new();
                let mut err = None;
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= count {
                        break;
                    }
                    let t = Instant::now();
                    match api.create(self.create_body(self.sbx_name(what, i))).await {
                        Ok(id) => {
                            ms.push(t.elapsed().as_secs_f64() * 1000.0);
                            made.push(id);
                        }
                        Err(e) => {
                            err = Some(format!("{e:#}"));
                            break;
                        }
                    }
                }
                (api, made, ms, err)
            }
        });
        let results = futures::future::join_all(runs).await;
        let wall = started.elapsed();
        let spread = nodes[0].node_sandboxes().await.unwrap_or_default();
        let mut all_ms = Vec::new();
        let mut error = None;
        let mut made_all = Vec::new();
        for (api, made, ms, err) in results {
            all_ms.extend(ms);
            error = error.or(err);
            made_all.extend(made.into_iter().map(|id| (api, id)));
        }
        // Destroy, a few at a time (untimed).
        for chunk in made_all.chunks(self.load.parallel.max(1)) {
            let gone = chunk.iter().map(|(api, id)| async move {
                if let Err(e) = api.destroy(id).await {
                    eprintln!("  ! destroying {id}: {e:#}");
                }
            });
            futures::future::join_all(gone).await;
        }
        if let Some(e) = error {
            return Err(e);
        }
        let spread = spread
            .into_iter()
            .filter(|(url, _)| nodes.iter().any(|n| n.base() == url))
            .collect();
        Ok(Throughput {
            per_sec: count as f64 / wall.as_secs_f64(),
            p50_ms: percentile(&all_ms, 50.0).unwrap_or(f64::NAN),
            spread,
        })
    }
}
