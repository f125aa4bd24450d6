//! The all-or-nothing commit on SQLite: one IMMEDIATE transaction on a writer connection.

use crate::commit::{CommitError, CommitStats, CommitTarget};
use crate::model::SyncMode;
use crate::spool::{Spool, SpoolEntry};
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

/// Rows per multi-row INSERT: fewer statement executions, same single transaction.
const CHUNK: usize = 64;

fn insert_sql(rows: usize, or_replace: bool) -> String {
    let verb = if or_replace {
        "INSERT OR REPLACE"
    } else {
        "INSERT"
    };
    let values = vec!["(?, ?, ?)"; rows].join(", ");
    format!("{verb} INTO records (dataset, key, data) VALUES {values}")
}

/// Commits a spool (see [`crate::store::Records::commit`]). Merge is INSERT OR REPLACE: the
/// old row of the key goes and the new one gets a new seq.
pub(super) fn commit(
    conn: &mut Connection,
    target: CommitTarget<'_>,
    spool: Spool,
) -> Result<CommitStats, CommitError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    if let Some(run) = target.run_id {
        let status: Option<String> = tx
            .query_row(
                "SELECT status FROM runs WHERE workspace = ?1 AND id = ?2",
                params![target.workspace, run],
                |r| r.get(0),
            )
            .optional()?;
        if status.as_deref() != Some("running") {
            return Err(CommitError::Fenced(run.to_string()));
        }
    }
    let now = super::now_ms();
    tx.execute(
        "INSERT INTO sync_state (workspace, connection_id, sync, updated_at) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (workspace, connection_id, sync) DO NOTHING",
        params![target.workspace, target.connection_id, target.sync, now],
    )?;
    let dataset: i64 = tx.query_row(
        "SELECT id FROM sync_state WHERE workspace = ?1 AND connection_id = ?2 AND sync = ?3",
        params![target.workspace, target.connection_id, target.sync],
        |r| r.get(0),
    )?;
    if target.mode == SyncMode::Replace {
        tx.execute("DELETE FROM records WHERE dataset = ?1", [dataset])?;
    }
    let merge = target.mode == SyncMode::Merge;
    let mut records = 0u64;
    let mut checkpoint: Option<String> = None;
    {
        let mut one = tx.prepare(&insert_sql(1, merge))?;
        let mut many = tx.prepare(&insert_sql(CHUNK, merge))?;
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
                    if pending.len() == CHUNK {
                        let mut values: Vec<&dyn rusqlite::ToSql> = Vec::with_capacity(CHUNK * 3);
                        for (k, d) in &pending {
                            values.push(&dataset);
                            values.push(k);
                            values.push(d);
                        }
                        many.execute(values.as_slice())?;
                        records += CHUNK as u64;
                        pending.clear();
                    }
                }
            }
        }
        for (k, d) in &pending {
            one.execute(params![dataset, k, d])?;
            records += 1;
        }
    }
    let checkpoint_updated = checkpoint.is_some();
    tx.execute(
        "UPDATE sync_state SET checkpoint = COALESCE(?2, checkpoint), updated_at = ?3 WHERE id = ?1",
        params![dataset, checkpoint, now],
    )?;
    if let Some(delivery) = target.delivery {
        if !super::webhooks::settle_committed(&tx, target.workspace, delivery, records)? {
            return Err(CommitError::Settled(delivery.to_string()));
        }
    }
    tx.commit()?;
    drop(spool);
    Ok(CommitStats {
        records,
        checkpoint_updated,
    })
}
