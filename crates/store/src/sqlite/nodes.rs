//! Node rows in SQLite (the [`crate::Store`] methods delegate here).

use super::{corrupt, from_ms, json, ms, SqliteStore};
use crate::nodes::NODE_COLUMNS;
use crate::{NodeRecord, NodeRegistration, NodeState, StoreError};
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
                "INSERT INTO nodes ({NODE_COLUMNS}) VALUES (?1,?2,?3,?4,?5,?6,'active',1,?7,?8,?8) \
                 ON CONFLICT (id) DO UPDATE SET advertise_url = excluded.advertise_url, \
                 version = excluded.version, labels = excluded.labels, \
                 vcpu_milli = excluded.vcpu_milli, memory_mb = excluded.memory_mb, \
                 epoch = CASE WHEN nodes.lease_until_ms <= ?8 THEN nodes.epoch + 1 ELSE nodes.epoch END, \
                 lease_until_ms = excluded.lease_until_ms, \
                 last_heartbeat_ms = excluded.last_heartbeat_ms, \
                 registered_at_ms = excluded.registered_at_ms \
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
