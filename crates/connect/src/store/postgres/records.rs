//! Committed sync state: the all-or-nothing commit, checkpoints and the records read API.

use super::PostgresStore;
use crate::commit::{CommitError, CommitStats, CommitTarget};
use crate::model::{RecordRow, SyncMode};
use crate::spool::{Spool, SpoolEntry};
use crate::store::StoreError;
use chrono::Utc;
use postgres::Client;
use std::collections::HashMap;

/// Records per INSERT (two array parameters): few round trips, one transaction.
const CHUNK: usize = 1000;

/// The owned half of a [`CommitTarget`], for the worker thread.
struct Target {
    workspace: String,
    connection_id: String,
    sync: String,
    mode: SyncMode,
    run_id: Option<String>,
    delivery: Option<String>,
}

/// Writes one chunk. A merge chunk first drops the rows of its keys (committed ones and
/// earlier ones of this spool), and keeps only the last record of a key repeated inside it:
/// as SQLite's INSERT OR REPLACE one by one, each key ends with its last record, at the seq
/// order of that record.
fn write_chunk(
    tx: &mut postgres::Transaction<'_>,
    dataset: i64,
    merge: bool,
    pending: &mut Vec<(Option<String>, String)>,
) -> Result<(), CommitError> {
    if merge {
        let mut last: HashMap<&str, usize> = HashMap::new();
        for (i, (k, _)) in pending.iter().enumerate() {
            if let Some(k) = k {
                last.insert(k.as_str(), i);
            }
        }
        let keep: Vec<bool> = pending
            .iter()
            .enumerate()
            .map(|(i, (k, _))| k.as_deref().and_then(|k| last.get(k)) == Some(&i))
            .collect();
        let keys: Vec<&str> = last.keys().copied().collect();
        tx.execute(
            "DELETE FROM connect_records WHERE dataset = $1 AND key = ANY($2)",
            &[&dataset, &keys],
        )?;
        let mut keep = keep.into_iter();
        pending.retain(|_| keep.next().unwrap_or(false));
    }
    let keys: Vec<Option<&str>> = pending.iter().map(|(k, _)| k.as_deref()).collect();
    let data: Vec<&str> = pending.iter().map(|(_, d)| d.as_str()).collect();
    // ORDER BY the position: seqs are handed out in spool order.
    tx.execute(
        "INSERT INTO connect_records (dataset, key, data)
         SELECT $1, k, d FROM UNNEST($2::text[], $3::text[]) WITH ORDINALITY AS t(k, d, n) ORDER BY n",
        &[&dataset, &keys, &data],
    )?;
    pending.clear();
    Ok(())
}

fn commit(client: &mut Client, target: Target, spool: Spool) -> Result<CommitStats, CommitError> {
    let mut tx = client.transaction()?;
    if let Some(run) = &target.run_id {
        // FOR UPDATE: a node declaring this one lost fails the run under the same row
        // lock, so either this commit sees the run failed, or the failure waits for it.
        let status: Option<String> = tx
            .query_opt(
                "SELECT status FROM connect_runs WHERE workspace = $1 AND id = $2 FOR UPDATE",
                &[&target.workspace, run],
            )?
            .map(|r| r.try_get(0))
            .transpose()?;
        if status.as_deref() != Some("running") {
            return Err(CommitError::Fenced(run.clone()));
        }
    }
    let now = Utc::now();
    let dataset: i64 = tx
        .query_one(
            "INSERT INTO connect_sync_state (workspace, connection_id, sync, updated_at)
             VALUES ($1, $2, $3, $4)
             ON CONFLICT (workspace, connection_id, sync) DO UPDATE SET updated_at = EXCLUDED.updated_at
             RETURNING id",
            &[&target.workspace, &target.connection_id, &target.sync, &now],
        )?
        .try_get(0)?;
    if target.mode == SyncMode::Replace {
        tx.execute(
            "DELETE FROM connect_records WHERE dataset = $1",
            &[&dataset],
        )?;
    }
    let merge = target.mode == SyncMode::Merge;
    let mut records = 0u64;
    let mut checkpoint: Option<String> = None;
    let mut pending: Vec<(Option<String>, String)> = Vec::with_capacity(CHUNK);
    let mut reader = spool.reader()?;
    while let Some(entry) = reader.next_entry()? {
        match entry {
            SpoolEntry::Checkpoint(c) => checkpoint = Some(c),
            SpoolEntry::Record { key, data } => {
                // Only merge keeps keys: append and replace may repeat a key value.
                let key = if merge {
                    Some(key.ok_or(CommitError::MissingKey)?)
                } else {
                    None
                };
                pending.push((key, data));
                records += 1;
                if pending.len() == CHUNK {
                    write_chunk(&mut tx, dataset, merge, &mut pending)?;
                }
            }
        }
    }
    if !pending.is_empty() {
        write_chunk(&mut tx, dataset, merge, &mut pending)?;
    }
    let checkpoint_updated = checkpoint.is_some();
    tx.execute(
        "UPDATE connect_sync_state SET checkpoint = COALESCE($2, checkpoint), updated_at = $3 WHERE id = $1",
        &[&dataset, &checkpoint, &now],
    )?;
    if let Some(delivery) = &target.delivery {
        let n = tx.execute(
            "UPDATE connect_webhook_deliveries SET status = 'committed', records_committed = $3,
                 finished_at = $4, body = ''::bytea
             WHERE workspace = $1 AND id = $2 AND status = 'pending'",
            &[&target.workspace, delivery, &(records as i64), &now],
        )?;
        if n != 1 {
            return Err(CommitError::Settled(delivery.clone()));
        }
    }
    tx.commit()?;
    drop(spool);
    Ok(CommitStats {
        records,
        checkpoint_updated,
    })
}

impl crate::store::Records for PostgresStore {
    fn commit(&self, target: CommitTarget<'_>, spool: Spool) -> Result<CommitStats, CommitError> {
        let target = Target {
            workspace: target.workspace.to_string(),
            connection_id: target.connection_id.to_string(),
            sync: target.sync.to_string(),
            mode: target.mode,
            run_id: target.run_id.map(str::to_string),
            delivery: target.delivery.map(str::to_string),
        };
        // The whole commit is one job: the transaction lives and dies on one connection.
        self.pool
            .run(move |c| match commit(c, target, spool) {
                // The pool reconnects after an unavailable answer: let it see one.
                Err(CommitError::Store(StoreError::Unavailable(s))) => {
                    Err(sbx_store::StoreError::Unavailable(s))
                }
                other => Ok(other),
            })
            .map_err(|e| CommitError::Store(e.into()))?
    }

    fn get_checkpoint(
        &self,
        workspace: &str,
        connection_id: &str,
        sync: &str,
    ) -> Result<Option<serde_json::Value>, StoreError> {
        let (ws, id, sync) = (
            workspace.to_string(),
            connection_id.to_string(),
            sync.to_string(),
        );
        self.run(move |c| {
            let text: Option<String> = match c.query_opt(
                "SELECT checkpoint FROM connect_sync_state WHERE workspace = $1 AND connection_id = $2 AND sync = $3",
                &[&ws, &id, &sync],
            )? {
                Some(row) => row.try_get(0)?,
                None => None,
            };
            crate::store::opt_json(text)
        })
    }

    fn read_records(
        &self,
        workspace: &str,
        connection_id: &str,
        sync: &str,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<RecordRow>, StoreError> {
        let (ws, id, sync) = (
            workspace.to_string(),
            connection_id.to_string(),
            sync.to_string(),
        );
        self.run(move |c| {
            c.query(
                "SELECT r.seq, r.key, r.data FROM connect_records r
                 JOIN connect_sync_state s ON s.id = r.dataset
                 WHERE s.workspace = $1 AND s.connection_id = $2 AND s.sync = $3 AND r.seq > $4
                 ORDER BY r.seq LIMIT $5",
                &[&ws, &id, &sync, &after.unwrap_or(0), &i64::from(limit)],
            )?
            .iter()
            .map(|r| {
                let data: String = r.try_get(2)?;
                Ok(RecordRow {
                    seq: r.try_get(0)?,
                    key: r.try_get(1)?,
                    data: serde_json::from_str(&data)?,
                })
            })
            .collect()
        })
    }

    fn find_record(
        &self,
        workspace: &str,
        connection_id: &str,
        sync: &str,
        key: &str,
    ) -> Result<Option<RecordRow>, StoreError> {
        let (ws, id, sync, key) = (
            workspace.to_string(),
            connection_id.to_string(),
            sync.to_string(),
            key.to_string(),
        );
        self.run(move |c| {
            // The unique index connect_records_by_key (dataset, key) answers this.
            c.query_opt(
                "SELECT r.seq, r.key, r.data FROM connect_records r
                 JOIN connect_sync_state s ON s.id = r.dataset
                 WHERE s.workspace = $1 AND s.connection_id = $2 AND s.sync = $3 AND r.key = $4",
                &[&ws, &id, &sync, &key],
            )?
            .map(|r| {
                let data: String = r.try_get(2)?;
                Ok(RecordRow {
                    seq: r.try_get(0)?,
                    key: r.try_get(1)?,
                    data: serde_json::from_str(&data)?,
                })
            })
            .transpose()
        })
    }

    fn count_records(
        &self,
        workspace: &str,
        connection_id: &str,
        sync: &str,
    ) -> Result<u64, StoreError> {
        let (ws, id, sync) = (
            workspace.to_string(),
            connection_id.to_string(),
            sync.to_string(),
        );
        self.run(move |c| {
            let row = c.query_one(
                "SELECT COUNT(*) FROM connect_records r JOIN connect_sync_state s ON s.id = r.dataset
                 WHERE s.workspace = $1 AND s.connection_id = $2 AND s.sync = $3",
                &[&ws, &id, &sync],
            )?;
            super::unsigned(&row, 0)
        })
    }
}
