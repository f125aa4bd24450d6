//! `store-create`, `store-exec`, `store-destroy`: the same operations on two
//! sbxd that differ only in their store (the SQLite file in the data dir, or
//! PostgreSQL through `--database-url`), iterations alternating between them.
//!
//! The question is what PostgreSQL costs: the rows show each side's p50 and
//! p95 and the PostgreSQL − SQLite difference of the p50s with a bootstrap 95 %
//! interval, so that "nothing measurable" has a meaning (the interval reaches
//! zero or below).

use std::time::Duration;

use crate::api::Api;
use crate::stats::{fmt_ms, percentile, Failure, Side};
use crate::warm::EXEC_BLOCK;
use crate::{stats_failure, timed, timed_val, Bench};

/// The scenarios of this module, in table order.
pub const SCENARIOS: &[&str] = &[
    "store-create",
    crate::store_path::NAME,
    "store-exec",
    "store-destroy",
    CLUSTER_EXEC,
    crate::cluster::CLONE,
    crate::cluster::CREATE,
];

/// Exec through the sandbox's own node vs through another node of a cluster.
pub const CLUSTER_EXEC: &str = "cluster-exec";

/// Client-side polling interval for these rows: a destroy answers 202 and is
/// polled until TERMINATED, and the default 10 ms would hide a 2 ms difference.
pub const POLL: Duration = Duration::from_millis(1);

/// Resamples of the bootstrap interval.
const RESAMPLES: usize = 2000;

/// The goal of one store row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StoreTarget {
    /// No goal.
    None,
    /// PostgreSQL p50 − SQLite p50 ≤ this many ms, the whole interval below it.
    AddsAtMost(f64),
    /// No measurable difference: the 95 % interval of the difference reaches 0.
    NotMeasurable,
    /// Through another node p50 − through the owner p50 ≤ this many ms.
    HopAddsAtMost(f64),
}

/// One row: the same operation on both stores.
#[derive(Debug, Clone)]
pub struct StoreRow {
    /// Scenario name.
    pub name: &'static str,
    /// sbxd on its SQLite file.
    pub sqlite: Side,
    /// sbxd on PostgreSQL.
    pub postgres: Side,
    /// Goal.
    pub target: StoreTarget,
}

/// The two sbxd compared, as `scripts/bench` starts them.
pub struct StorePair {
    /// The sbxd on SQLite.
    pub sqlite: Api,
    /// The sbxd on PostgreSQL.
    pub postgres: Api,
}

impl StoreRow {
    /// A row with no samples yet.
    pub fn new(name: &'static str, target: StoreTarget) -> Self {
        StoreRow {
            name,
            sqlite: Side::default(),
            postgres: Side::default(),
            target,
        }
    }

    /// A row that could not run, for either side.
    pub fn not_available(name: &'static str, why: &str) -> Self {
        let side = Side {
            failure: Some(Failure::NotAvailable(why.to_string())),
            ..Side::default()
        };
        StoreRow {
            name,
            sqlite: side.clone(),
            postgres: side,
            target: StoreTarget::None,
        }
    }

    /// PostgreSQL p50 − SQLite p50 in ms, and its bootstrap 95 % interval.
    pub fn difference(&self) -> Option<(f64, f64, f64)> {
        let d = self.postgres.pct(50.0)? - self.sqlite.pct(50.0)?;
        let (lo, hi) = bootstrap_interval(&self.sqlite.ms, &self.postgres.ms)?;
        Some((d, lo, hi))
    }

    fn cell(side: &Side, p: f64) -> String {
        match (side.pct(p), &side.failure) {
            (Some(ms), None) => fmt_ms(ms),
            (Some(ms), Some(_)) => format!("{} (partial)", fmt_ms(ms)),
            (None, _) if p != 50.0 => "—".into(),
            (None, Some(Failure::NotAvailable(why) | Failure::Skipped(why))) => {
                format!("n/a ({why})")
            }
            (None, Some(Failure::Unsupported(code))) => format!("n/a (server: {code})"),
            (None, Some(Failure::Error(_))) => "error (see notes)".into(),
            (None, None) => "—".into(),
        }
    }

    fn target_text(&self) -> String {
        match self.target {
            StoreTarget::None => "—".into(),
            StoreTarget::AddsAtMost(ms) => format!("PostgreSQL adds ≤ {ms} ms"),
            StoreTarget::HopAddsAtMost(ms) => format!("forwarding adds ≤ {ms} ms"),
            StoreTarget::NotMeasurable => "nothing measurable".into(),
        }
    }

    fn met(&self) -> &'static str {
        let Some((_, lo, hi)) = self.difference() else {
            return "—";
        };
        match self.target {
            StoreTarget::None => "—",
            // Only an interval wholly on one side of the bound decides; a wider
            // one (a loaded machine) says so instead of guessing.
            StoreTarget::AddsAtMost(max) | StoreTarget::HopAddsAtMost(max) if hi <= max => "yes",
            StoreTarget::AddsAtMost(max) | StoreTarget::HopAddsAtMost(max) if lo > max => "**no**",
            StoreTarget::AddsAtMost(_) | StoreTarget::HopAddsAtMost(_) => {
                "not resolved (interval spans the target)"
            }
            StoreTarget::NotMeasurable if lo <= 0.0 => "yes",
            StoreTarget::NotMeasurable => "**no**",
        }
    }

    /// The markdown line of this row.
    pub fn markdown(&self) -> String {
        let diff = match self.difference() {
            Some((d, lo, hi)) => format!("{d:+.2} ms ({lo:+.2} … {hi:+.2})"),
            None => "—".into(),
        };
        format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            self.name,
            Self::cell(&self.sqlite, 50.0),
            Self::cell(&self.sqlite, 95.0),
            Self::cell(&self.postgres, 50.0),
            Self::cell(&self.postgres, 95.0),
            diff,
            self.target_text(),
            self.met(),
        )
    }
}

/// The header of the cluster table (two lines): `sqlite` is the owner side.
pub const CLUSTER_TABLE_HEADER: &str = "| scenario | via its node p50 | via its node p95 | via another node p50 | via another node p95 | another − its node p50 (95 % interval) | target | met? |\n|---|---|---|---|---|---|---|---|";

/// The header of the store table (two lines).
pub const STORE_TABLE_HEADER: &str = "| scenario | SQLite p50 | SQLite p95 | PostgreSQL p50 | PostgreSQL p95 | PostgreSQL − SQLite p50 (95 % interval) | target | met? |\n|---|---|---|---|---|---|---|---|";

/// A bootstrap 95 % interval of p50(b) − p50(a): both sides resampled with
/// replacement. A fixed-seed generator keeps the report reproducible from the
/// same samples.
pub fn bootstrap_interval(a: &[f64], b: &[f64]) -> Option<(f64, f64)> {
    if a.is_empty() || b.is_empty() {
        return None;
    }
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let mut diffs = Vec::with_capacity(RESAMPLES);
    let resample = |v: &[f64], rng: &mut XorShift| -> f64 {
        let s: Vec<f64> = (0..v.len()).map(|_| v[rng.below(v.len())]).collect();
        percentile(&s, 50.0).unwrap_or(f64::NAN)
    };
    for _ in 0..RESAMPLES {
        let pa = resample(a, &mut rng);
        let pb = resample(b, &mut rng);
        diffs.push(pb - pa);
    }
    Some((percentile(&diffs, 2.5)?, percentile(&diffs, 97.5)?))
}

/// xorshift64: enough randomness for resampling, no dependency.
struct XorShift(u64);

impl XorShift {
    fn below(&mut self, n: usize) -> usize {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        (x % n as u64) as usize
    }
}

impl Bench {
    /// The store rows, on the two sbxd of `--store-sqlite-url` / `--store-postgres-url`.
    pub(crate) async fn store(&mut self) {
        let mut rows = match &self.store_pair {
            Some(pair) => self.store_rows_on(pair).await,
            None => SCENARIOS
                .iter()
                .filter(|name| {
                    **name != crate::store_path::NAME && !name.starts_with("cluster-")
                })
                .map(|name| {
                    StoreRow::not_available(
                        name,
                        "needs --store-sqlite-url and --store-postgres-url; scripts/bench starts both",
                    )
                })
                .collect(),
        };
        if self.wants(crate::store_path::NAME) {
            rows.insert(1, self.store_path_row().await);
        }
        let rows: Vec<StoreRow> = rows
            .into_iter()
            .filter(|r| self.wants(r.name) && !r.name.starts_with("cluster-"))
            .collect();
        self.store_rows.extend(rows);
        if self.wants(CLUSTER_EXEC) {
            let row = self.cluster_exec().await;
            self.cluster_rows.push(row);
        }
        if self.wants(crate::cluster::CLONE) {
            self.cluster_clone_row = Some(self.cluster_clone().await);
        }
        if self.wants(crate::cluster::CREATE) {
            self.cluster_create_row = Some(self.cluster_create().await);
        }
    }

    /// `cluster-exec`: `true` execs on one sandbox, through the node that runs
    /// it and through the other node of `--cluster-urls`, in alternating blocks.
    async fn cluster_exec(&self) -> StoreRow {
        let mut row = StoreRow::new(CLUSTER_EXEC, StoreTarget::HopAddsAtMost(1.0));
        let [a, b] = match &self.cluster_pair {
            Some(pair) => pair,
            None => {
                return StoreRow::not_available(
                    CLUSTER_EXEC,
                    "needs --cluster-urls; scripts/bench starts two nodes",
                )
            }
        };
        let id = match a
            .create(self.create_body(self.sbx_name("cluster", 0)))
            .await
        {
            Ok(id) => id,
            Err(e) => {
                row.sqlite = Side::failed(&e);
                row.postgres = Side::failed(&e);
                return row;
            }
        };
        // Placement chose the node; the one listing a sandbox runs it.
        let on_b = match b.node_sandboxes().await {
            Ok(nodes) => nodes.iter().any(|(url, n)| *n > 0 && url == b.base()),
            Err(e) => {
                eprintln!("  ! reading the node list: {e:#}");
                false
            }
        };
        let (owner, other) = if on_b { (b, a) } else { (a, b) };
        let ids = [Ok(id.clone()), Ok(id.clone())];
        exec_blocks(
            "cluster-exec",
            [owner, other],
            &ids,
            self.store_execs,
            self.warm,
            &mut row,
        )
        .await;
        if let Err(e) = owner.destroy(&id).await {
            eprintln!("  ! destroying the cluster-exec sandbox: {e:#}");
        }
        row
    }

    /// The in-process `store-create-path` row, on `--store-path-database-url`.
    async fn store_path_row(&self) -> StoreRow {
        let Some(url) = &self.store_path_url else {
            return StoreRow::not_available(
                crate::store_path::NAME,
                "needs --store-path-database-url; scripts/bench gives it",
            );
        };
        let dir = match tempfile::tempdir_in("/var/tmp") {
            Ok(d) => d,
            Err(e) => return StoreRow::not_available(crate::store_path::NAME, &e.to_string()),
        };
        eprintln!(
            "[{}] {} iterations",
            crate::store_path::NAME,
            self.store_path_n
        );
        crate::store_path::measure(dir.path(), url, self.warm.max(5), self.store_path_n).await
    }

    /// Measures every store row on `pair`.
    async fn store_rows_on(&self, pair: &StorePair) -> Vec<StoreRow> {
        let mut create = StoreRow::new("store-create", StoreTarget::AddsAtMost(2.0));
        let mut destroy = StoreRow::new("store-destroy", StoreTarget::None);
        let mut exec = StoreRow::new("store-exec", StoreTarget::NotMeasurable);
        if self.wants("store-create") || self.wants("store-destroy") {
            let n = self.warm + self.store_n;
            for i in 0..n {
                eprintln!("[store create/destroy] {}/{n}", i + 1);
                // Which store goes first alternates, so that neither always
                // follows the other's teardown.
                let order = if i % 2 == 0 { [0, 1] } else { [1, 0] };
                for side in order {
                    let (api, c, d) = if side == 0 {
                        (&pair.sqlite, &mut create.sqlite, &mut destroy.sqlite)
                    } else {
                        (&pair.postgres, &mut create.postgres, &mut destroy.postgres)
                    };
                    if !(c.active() && d.active()) {
                        continue;
                    }
                    let body = self.create_body(self.sbx_name("store", i));
                    match timed_val(api.create(body)).await {
                        Ok((id, t)) => {
                            c.take(i, self.warm, Ok(t));
                            let r = timed(api.destroy(&id)).await;
                            d.take(i, self.warm, r);
                        }
                        Err(e) => {
                            *d = Side::skipped("create failed");
                            c.take(i, self.warm, Err(e));
                        }
                    }
                }
            }
        }
        if self.wants("store-exec") {
            self.store_exec(pair, &mut exec).await;
        }
        vec![create, exec, destroy]
    }

    /// `true` execs on one warm sandbox per store, in alternating blocks.
    async fn store_exec(&self, pair: &StorePair, row: &mut StoreRow) {
        let mut ids: [Result<String, Failure>; 2] = [
            Err(Failure::Skipped("not created".into())),
            Err(Failure::Skipped("not created".into())),
        ];
        for (slot, api) in ids.iter_mut().zip([&pair.sqlite, &pair.postgres]) {
            *slot = match api
                .create(self.create_body(self.sbx_name("store-warm", 0)))
                .await
            {
                Ok(id) => Ok(id),
                Err(e) => {
                    eprintln!("  ! warm sandbox for store-exec: {e:#}");
                    Err(stats_failure(&e))
                }
            };
        }
        exec_blocks(
            "store-exec",
            [&pair.sqlite, &pair.postgres],
            &ids,
            self.store_execs,
            self.warm,
            row,
        )
        .await;
        for (api, id) in [&pair.sqlite, &pair.postgres].into_iter().zip(&ids) {
            if let Ok(id) = id {
                if let Err(e) = api.destroy(id).await {
                    eprintln!("  ! destroying the store-exec sandbox: {e:#}");
                }
            }
        }
    }
}

/// `total` timed `true` execs per side, in alternating blocks: side 0 (the
/// row's `sqlite`) on `apis[0]` with `ids[0]`, side 1 likewise. Each block is
/// led by untimed execs (`warm` the first time, then one).
async fn exec_blocks(
    what: &str,
    apis: [&Api; 2],
    ids: &[Result<String, Failure>; 2],
    total: usize,
    warm: usize,
    row: &mut StoreRow,
) {
    let mut done = 0;
    let mut block_no = 0;
    while done < total {
        eprintln!("[{what}] {done}/{total}");
        let block = EXEC_BLOCK.min(total - done);
        let lead = if done == 0 { warm.max(1) } else { 1 };
        let order = if block_no % 2 == 0 { [0, 1] } else { [1, 0] };
        for side in order {
            let s = if side == 0 {
                &mut row.sqlite
            } else {
                &mut row.postgres
            };
            match &ids[side] {
                Ok(id) => {
                    for i in 0..lead + block {
                        if s.active() {
                            let r = timed(apis[side].exec_ok(id, &["true"])).await;
                            s.take(i, lead, r);
                        }
                    }
                }
                Err(f) => {
                    if s.active() {
                        s.failure = Some(f.clone());
                    }
                }
            }
        }
        done += block;
        block_no += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn difference_interval_and_targets() {
        let mut r = StoreRow::new("store-create", StoreTarget::AddsAtMost(2.0));
        r.sqlite.ms = (0..40).map(|i| 190.0 + f64::from(i % 5)).collect();
        r.postgres.ms = (0..40).map(|i| 191.0 + f64::from(i % 5)).collect();
        let (d, lo, hi) = r.difference().unwrap();
        assert!((d - 1.0).abs() < 1e-9, "{d}");
        assert!(lo <= d && d <= hi, "{lo} {d} {hi}");
        assert_eq!(r.met(), "yes");
        r.postgres.ms = r.sqlite.ms.iter().map(|v| v + 5.0).collect();
        assert_eq!(r.met(), "**no**");
        assert!(r.markdown().contains("+5.00 ms"), "{}", r.markdown());
        // Spread wider than the target: neither verdict.
        r.sqlite.ms = (0..40).map(|i| 150.0 + f64::from(i * 5)).collect();
        r.postgres.ms = r.sqlite.ms.iter().map(|v| v + 1.0).collect();
        assert!(r.met().starts_with("not resolved"), "{}", r.markdown());

        let mut e = StoreRow::new("store-exec", StoreTarget::NotMeasurable);
        e.sqlite.ms = (0..100).map(|i| 17.0 + f64::from(i % 7)).collect();
        e.postgres.ms = e.sqlite.ms.iter().rev().copied().collect();
        assert_eq!(e.met(), "yes", "the same samples: no difference");
        e.postgres.ms = e.sqlite.ms.iter().map(|v| v + 3.0).collect();
        let (_, lo, _) = e.difference().unwrap();
        assert!(lo > 0.0, "a 3 ms shift is measurable: {lo}");
        assert_eq!(e.met(), "**no**");
    }

    #[test]
    fn rows_without_servers_say_why() {
        let r = StoreRow::not_available("store-exec", "no servers");
        assert!(
            r.markdown().contains("n/a (no servers)"),
            "{}",
            r.markdown()
        );
        assert_eq!(r.met(), "—");
        assert_eq!(bootstrap_interval(&[], &[1.0]), None);
    }
}
