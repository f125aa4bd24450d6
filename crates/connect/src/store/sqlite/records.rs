//! Committed sync state: checkpoints and the records read API.

use super::SqliteStore;
use crate::commit::{CommitError, CommitStats, CommitTarget};
use crate::model::RecordRow;
use crate::spool::Spool;
use crate::store::StoreError;
use rusqlite::{params, OptionalExtension};

impl super::super::Records for SqliteStore {
    fn commit(&self, target: CommitTarget<'_>, spool: Spool) -> Result<CommitStats, CommitError> {
        // A separate connection: reads are not blocked behind a commit of many records.
        let mut conn = self.open_writer()?;
        super::commit::commit(&mut conn, target, spool)
    }

    fn get_checkpoint(
        &self,
        workspace: &str,
        connection_id: &str,
        sync: &str,
    ) -> Result<Option<serde_json::Value>, StoreError> {
        let conn = self.lock();
        let text: Option<Option<String>> = conn
            .query_row(
                "SELECT checkpoint FROM sync_state WHERE workspace = ?1 AND connection_id = ?2 AND sync = ?3",
                params![workspace, connection_id, sync],
                |r| r.get(0),
            )
            .optional()?;
        crate::store::opt_json(text.flatten())
    }

    fn read_records(
        &self,
        workspace: &str,
        connection_id: &str,
        sync: &str,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<RecordRow>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare(
            "SELECT r.seq, r.key, r.data FROM records r
             JOIN sync_state s ON s.id = r.dataset
             WHERE s.workspace = ?1 AND s.connection_id = ?2 AND s.sync = ?3 AND r.seq > ?4
             ORDER BY r.seq LIMIT ?5",
        )?;
        let rows = stmt.query_map(
            params![workspace, connection_id, sync, after.unwrap_or(0), limit],
            |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, Option<String>>(1)?,
                    r.get::<_, String>(2)?,
                ))
            },
        )?;
        rows.map(|r| {
            let (seq, key, data) = r?;
            Ok(RecordRow {
                seq,
                key,
                data: serde_json::from_str(&data)?,
            })
        })
        .collect()
    }

    fn find_record(
        &self,
        workspace: &str,
        connection_id: &str,
        sync: &str,
        key: &str,
    ) -> Result<Option<RecordRow>, StoreError> {
        let conn = self.lock();
        // The unique index records_by_key (dataset, key) answers this.
        let row = conn
            .query_row(
                "SELECT r.seq, r.key, r.data FROM records r
                 JOIN sync_state s ON s.id = r.dataset
                 WHERE s.workspace = ?1 AND s.connection_id = ?2 AND s.sync = ?3 AND r.key = ?4",
                params![workspace, connection_id, sync, key],
                |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, Option<String>>(1)?,
                        r.get::<_, String>(2)?,
                    ))
                },
            )
            .optional()?;
        row.map(|(seq, key, data)| {
            Ok(RecordRow {
                seq,
                key,
                data: serde_json::from_str(&data)?,
            })
        })
        .transpose()
    }

    fn count_records(
        &self,
        workspace: &str,
        connection_id: &str,
        sync: &str,
    ) -> Result<u64, StoreError> {
        let conn = self.lock();
        let n: i64 = conn.query_row(
            "SELECT COUNT(*) FROM records r JOIN sync_state s ON s.id = r.dataset
             WHERE s.workspace = ?1 AND s.connection_id = ?2 AND s.sync = ?3",
            params![workspace, connection_id, sync],
            |r| r.get(0),
        )?;
        Ok(n.max(0) as u64)
    }
}
