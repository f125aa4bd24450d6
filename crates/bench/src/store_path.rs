//! `store-create-path`: the store calls one create makes, timed in-process on
//! SQLite and on PostgreSQL, through `AsyncStore` as sbxd makes them.
//!
//! The end-to-end `store-create` row times a whole boot (hundreds of ms, tens
//! of ms of spread) and cannot resolve whether PostgreSQL adds 2 ms. This row
//! times only what a store can add: admission's read of the sandboxes that
//! hold capacity, the name-checked insert, and the compare-and-set to
//! RUNNING that hands create its answer (`service/create.rs`,
//! `service/lifecycle.rs` `boot`). The sandbox is then ended, untimed, so
//! the admission read stays the size it is on an idle node.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::Utc;
use sbx_api_types::{NetworkPolicy, SandboxStatus};
use sbx_store::{AsyncStore, PostgresStore, SandboxRecord, SqliteStore, Store};
use uuid::Uuid;

use crate::store::{StoreRow, StoreTarget};

/// The scenario name.
pub const NAME: &str = "store-create-path";

/// What admission sums before a create (the service's `HOLDING`).
const HOLDING: [SandboxStatus; 7] = SandboxStatus::ACTIVE;

/// Measures the row: `iterations` timed creates per store after `warm`
/// untimed ones, the stores taking turns. `sqlite_dir` holds a fresh SQLite
/// file; `postgres_url` is an empty database of its own.
pub async fn measure(
    sqlite_dir: &Path,
    postgres_url: &str,
    warm: usize,
    iterations: usize,
) -> StoreRow {
    let mut row = StoreRow::new(NAME, StoreTarget::AddsAtMost(2.0));
    let stores = match open(sqlite_dir, postgres_url).await {
        Ok(s) => s,
        Err(e) => {
            row.sqlite.take(0, 0, Err(anyhow::anyhow!("{e:#}")));
            row.postgres.take(0, 0, Err(e));
            return row;
        }
    };
    let n = warm + iterations;
    for i in 0..n {
        let order = if i % 2 == 0 { [0, 1] } else { [1, 0] };
        for side in order {
            let (store, s) = if side == 0 {
                (&stores[0], &mut row.sqlite)
            } else {
                (&stores[1], &mut row.postgres)
            };
            if s.active() {
                s.take(i, warm, one_create(store, i).await);
            }
        }
    }
    row
}

/// Both stores, opened (and migrated) as sbxd opens them.
async fn open(sqlite_dir: &Path, postgres_url: &str) -> anyhow::Result<[AsyncStore; 2]> {
    let path = sqlite_dir.join("sbx.db");
    let url = postgres_url.to_string();
    let (sqlite, postgres) = tokio::task::spawn_blocking(move || {
        let sqlite: Arc<dyn Store> =
            Arc::new(SqliteStore::open(&path).context("opening the SQLite store")?);
        let postgres: Arc<dyn Store> =
            Arc::new(PostgresStore::open(&url).context("opening the PostgreSQL store")?);
        anyhow::Ok((sqlite, postgres))
    })
    .await??;
    Ok([AsyncStore::new(sqlite), AsyncStore::new(postgres)])
}

/// One create's store calls, timed; then the sandbox is ended (untimed).
async fn one_create(store: &AsyncStore, i: usize) -> anyhow::Result<Duration> {
    let mut record = record(i);
    let started = Instant::now();
    store.sandboxes_in_status(Some("bench"), &HOLDING).await?;
    store.create_sandbox(&record).await?;
    let now = Utc::now();
    record.status = SandboxStatus::Running;
    record.started_at = Some(now);
    record.running_since = Some(now);
    store.update_sandbox(&mut record).await?;
    let took = started.elapsed();
    record.status = SandboxStatus::Terminated;
    record.running_since = None;
    record.ended_at = Some(Utc::now());
    store.update_sandbox(&mut record).await?;
    Ok(took)
}

/// A fresh sandbox row, as create inserts it.
fn record(i: usize) -> SandboxRecord {
    SandboxRecord {
        id: Uuid::new_v4(),
        workspace: "bench/store-path".into(),
        name: format!("path-{i}"),
        status: SandboxStatus::Starting,
        vcpu: 1,
        memory_mb: 1024,
        environment: Default::default(),
        secrets: Vec::new(),
        snapshot_id: None,
        image_ref: "default".into(),
        created_at: Utc::now(),
        started_at: None,
        ended_at: None,
        error: None,
        active_ms: 0,
        running_since: None,
        network: NetworkPolicy::default(),
        generation: 0,
        node_id: "bench".into(),
    }
}
