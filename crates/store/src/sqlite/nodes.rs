//! Node rows in SQLite (the [`crate::Store`] methods delegate here).

use super::{corrupt, from_ms, json, ms, write_transaction, SqliteStore};
use crate::nodes::{NODE_COLUMNS, NODE_LOST};
use crate::{FailOver, NodeRecord, NodeRegistration, NodeState, NodeUsage, StoreError};

/// Ends every active sandbox of node ?1 at ?2: FAILED with reason ?3, or
/// TERMINATED when a destroy was already under way; returns their ids.
const FAIL_SANDBOXES_SQLITE: &str = "UPDATE sandboxes SET \
     status = CASE WHEN status = 'TERMINATING' THEN 'TERMINATED' ELSE 'FAILED' END, \
     error = CASE WHEN status = 'TERMINATING' THEN error ELSE ?3 END, \
     ended_at_ms = ?2, active = 0, \
     active_ms = active_ms + CASE WHEN running_since_ms IS NULL THEN 0 \
         ELSE MAX(0, ?2 - running_since_ms) END, \
     running_since_ms = NULL, generation = generation + 1 \
     WHERE node_id = ?1 AND active = 1 RETURNING id";

/// Fails the snapshots still being taken of sandbox ?1 (their node is gone).
const FAIL_SNAPSHOTS_SQLITE: &str = "UPDATE snapshots SET status = 'FAILED', error = ?3, \
     updated_at_ms = ?2, generation = generation + 1 \
     WHERE status = 'CREATING' AND source_sandbox = ?1";
use chrono::{DateTime, Utc};
use rusqlite::{params, OptionalExtension, Row};

fn node_from_row(row: &Row<'_>) -> rusqlite::Result<NodeRecord> {
    let labels: String = row.get(3)?;
    let state: String = row.get(6)?;
    let number = |i: usize| -> rusqlite::Result<u64> {
        let v: i64 = row.get(i)?;
        u64::try_from(v).map_err(corrupt)
    };
    let time = |i: usize, what: &str| -> rusqlite::Result<DateTime<Utc>> {
        from_ms(Some(row.get(i)?)).ok_or_else(|| corrupt(what))
    };
    Ok(NodeRecord {
        id: row.get(0)?,
        advertise_url: row.get(1)?,
        version: row.get(2)?,
        labels: serde_json::from_str(&labels).map_err(corrupt)?,
        vcpu_milli: number(4)?,
        memory_mb: number(5)?,
        state: NodeState::parse(&state).ok_or_else(|| corrupt(format!("node state {state}")))?,
        epoch: number(7)?,
        lease_until: time(8, "lease_until")?,
        last_heartbeat: time(9, "last_heartbeat")?,
        registered_at: time(10, "registered_at")?,
        failed_over_at: from_ms(row.get(11)?),
    })
}

/// A count as SQLite stores it (capacities never come near `i64::MAX`).
fn stored(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl SqliteStore {
    pub(crate) fn register_node_row(
        &self,
        n: &NodeRegistration,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> Result<NodeRecord, StoreError> {
        let conn = self.lock();
        // One statement: the epoch is decided against the row as it is when written.
        Ok(conn.query_row(
            &format!(
                "INSERT INTO nodes ({NODE_COLUMNS}) VALUES (?1,?2,?3,?4,?5,?6,'active',1,?7,?8,?8,NULL) \
                 ON CONFLICT (id) DO UPDATE SET advertise_url = excluded.advertise_url, \
                 version = excluded.version, labels = excluded.labels, \
                 vcpu_milli = excluded.vcpu_milli, memory_mb = excluded.memory_mb, \
                 epoch = CASE WHEN nodes.lease_until_ms <= ?8 THEN nodes.epoch + 1 ELSE nodes.epoch END, \
                 lease_until_ms = excluded.lease_until_ms, \
                 last_heartbeat_ms = excluded.last_heartbeat_ms, \
                 registered_at_ms = excluded.registered_at_ms, failed_over_ms = NULL \
                 RETURNING {NODE_COLUMNS}"
            ),
            params![
                n.id,
                n.advertise_url,
                n.version,
                json(&n.labels),
                stored(n.vcpu_milli),
                stored(n.memory_mb),
                ms(lease_until),
                ms(now),
            ],
            node_from_row,
        )?)
    }

    pub(crate) fn heartbeat_node_row(
        &self,
        id: &str,
        epoch: u64,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> Result<NodeRecord, StoreError> {
        let conn = self.lock();
        let renewed = conn
            .query_row(
                &format!(
                    "UPDATE nodes SET lease_until_ms = ?3, last_heartbeat_ms = ?4 \
                     WHERE id = ?1 AND epoch = ?2 RETURNING {NODE_COLUMNS}"
                ),
                params![id, stored(epoch), ms(lease_until), ms(now)],
                node_from_row,
            )
            .optional()?;
        if let Some(node) = renewed {
            return Ok(node);
        }
        let current: Option<i64> = conn
            .query_row(
                "SELECT epoch FROM nodes WHERE id = ?1",
                params![id],
                |row| row.get(0),
            )
            .optional()?;
        match current {
            Some(current) => Err(StoreError::Fenced {
                node: id.to_string(),
                held: epoch,
                current: u64::try_from(current).unwrap_or(0),
            }),
            None => Err(StoreError::NotFound),
        }
    }

    pub(crate) fn fail_over_node_row(
        &self,
        id: &str,
        epoch: u64,
        now: DateTime<Utc>,
    ) -> Result<Option<FailOver>, StoreError> {
        let mut conn = self.lock();
        let tx = write_transaction(&mut conn)?;
        let now = ms(now);
        let bumped: Option<i64> = tx
            .query_row(
                "UPDATE nodes SET epoch = epoch + 1, failed_over_ms = ?3 \
                 WHERE id = ?1 AND epoch = ?2 AND lease_until_ms <= ?3 AND failed_over_ms IS NULL \
                 RETURNING epoch",
                params![id, stored(epoch), now],
                |row| row.get(0),
            )
            .optional()?;
        let Some(bumped) = bumped else {
            return Ok(None);
        };
        let ids = {
            let mut stmt = tx.prepare(FAIL_SANDBOXES_SQLITE)?;
            let rows =
                stmt.query_map(params![id, now, NODE_LOST], |row| row.get::<_, String>(0))?;
            rows.map(|r| {
                r.map_err(StoreError::from).and_then(|s| {
                    uuid::Uuid::parse_str(&s).map_err(|e| StoreError::Corrupt(Box::new(e)))
                })
            })
            .collect::<Result<Vec<_>, _>>()?
        };
        for sandbox in &ids {
            tx.execute(
                FAIL_SNAPSHOTS_SQLITE,
                params![sandbox.to_string(), now, NODE_LOST],
            )?;
        }
        tx.commit()?;
        Ok(Some(FailOver {
            epoch: u64::try_from(bumped).unwrap_or(0),
            sandboxes: ids,
        }))
    }

    pub(crate) fn adopt_unowned_sandboxes_row(&self, node_id: &str) -> Result<usize, StoreError> {
        let conn = self.lock();
        Ok(conn.execute(
            "UPDATE sandboxes SET node_id = ?1, generation = generation + 1 WHERE node_id = ''",
            params![node_id],
        )?)
    }

    pub(crate) fn node_usage_rows(&self) -> Result<Vec<NodeUsage>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare(
            "SELECT node_id, COUNT(*), SUM(vcpu), SUM(memory_mb) FROM sandboxes \
             WHERE active = 1 GROUP BY node_id ORDER BY node_id",
        )?;
        let rows = stmt.query_map([], |row| {
            let n = |i: usize| -> rusqlite::Result<u64> {
                Ok(u64::try_from(row.get::<_, i64>(i)?).unwrap_or(0))
            };
            Ok(NodeUsage {
                node_id: row.get(0)?,
                sandboxes: n(1)?,
                vcpu_milli: n(2)?.saturating_mul(1000),
                memory_mb: n(3)?,
            })
        })?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    pub(crate) fn node_rows(&self) -> Result<Vec<NodeRecord>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare(&format!("SELECT {NODE_COLUMNS} FROM nodes ORDER BY id"))?;
        let rows = stmt.query_map([], node_from_row)?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    pub(crate) fn set_node_draining_row(
        &self,
        id: &str,
        draining: bool,
    ) -> Result<NodeRecord, StoreError> {
        let state = if draining {
            NodeState::Draining
        } else {
            NodeState::Active
        };
        let conn = self.lock();
        conn.query_row(
            &format!("UPDATE nodes SET state = ?2 WHERE id = ?1 RETURNING {NODE_COLUMNS}"),
            params![id, state.as_str()],
            node_from_row,
        )
        .optional()?
        .ok_or(StoreError::NotFound)
    }
}
