//! Node rows on PostgreSQL (the [`crate::Store`] methods delegate here).

use super::rows::{json, ms};
use super::PostgresStore;
use crate::nodes::NODE_COLUMNS;
use crate::{NodeRecord, NodeRegistration, NodeState, StoreError};
use chrono::{DateTime, Utc};
use postgres::Row;

fn corrupt(what: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(what.to_string().into())
}

fn number(row: &Row, i: usize, column: &str) -> Result<u64, StoreError> {
    let v: i64 = row.try_get(i)?;
    u64::try_from(v).map_err(|_| corrupt(format!("{column} {v}")))
}

fn time(row: &Row, i: usize, column: &str) -> Result<DateTime<Utc>, StoreError> {
    let v: i64 = row.try_get(i)?;
    DateTime::<Utc>::from_timestamp_millis(v).ok_or_else(|| corrupt(format!("{column} {v}")))
}

fn node(row: &Row) -> Result<NodeRecord, StoreError> {
    let labels: String = row.try_get(3)?;
    let state: String = row.try_get(6)?;
    Ok(NodeRecord {
        id: row.try_get(0)?,
        advertise_url: row.try_get(1)?,
        version: row.try_get(2)?,
        labels: serde_json::from_str(&labels).map_err(|e| corrupt(format!("labels: {e}")))?,
        vcpu_milli: number(row, 4, "vcpu_milli")?,
        memory_mb: number(row, 5, "memory_mb")?,
        state: NodeState::parse(&state).ok_or_else(|| corrupt(format!("node state {state}")))?,
        epoch: number(row, 7, "epoch")?,
        lease_until: time(row, 8, "lease_until_ms")?,
        last_heartbeat: time(row, 9, "last_heartbeat_ms")?,
        registered_at: time(row, 10, "registered_at_ms")?,
    })
}

/// A count as stored (capacities never come near `i64::MAX`).
fn stored(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl PostgresStore {
    pub(super) fn register_node_row(
        &self,
        n: &NodeRegistration,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> Result<NodeRecord, StoreError> {
        let n = n.clone();
        self.pool.run(move |c| {
            // One statement: the row lock of the upsert orders two registrations of one
            // id, and the epoch is decided against the row as it is when written.
            let row = c.query_one(
                &format!(
                    "INSERT INTO nodes ({NODE_COLUMNS}) VALUES ($1,$2,$3,$4,$5,$6,'active',1,$7,$8,$8) \
                     ON CONFLICT (id) DO UPDATE SET advertise_url = EXCLUDED.advertise_url, \
                     version = EXCLUDED.version, labels = EXCLUDED.labels, \
                     vcpu_milli = EXCLUDED.vcpu_milli, memory_mb = EXCLUDED.memory_mb, \
                     epoch = CASE WHEN nodes.lease_until_ms <= $8 THEN nodes.epoch + 1 ELSE nodes.epoch END, \
                     lease_until_ms = EXCLUDED.lease_until_ms, \
                     last_heartbeat_ms = EXCLUDED.last_heartbeat_ms, \
                     registered_at_ms = EXCLUDED.registered_at_ms \
                     RETURNING {NODE_COLUMNS}"
                ),
                &[
                    &n.id,
                    &n.advertise_url,
                    &n.version,
                    &json(&n.labels),
                    &stored(n.vcpu_milli),
                    &stored(n.memory_mb),
                    &ms(lease_until),
                    &ms(now),
                ],
            )?;
            node(&row)
        })
    }

    pub(super) fn heartbeat_node_row(
        &self,
        id: &str,
        epoch: u64,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> Result<NodeRecord, StoreError> {
        let id = id.to_string();
        self.pool.run(move |c| {
            let renewed = c.query_opt(
                &format!(
                    "UPDATE nodes SET lease_until_ms = $3, last_heartbeat_ms = $4 \
                     WHERE id = $1 AND epoch = $2 RETURNING {NODE_COLUMNS}"
                ),
                &[&id, &stored(epoch), &ms(lease_until), &ms(now)],
            )?;
            if let Some(row) = renewed {
                return node(&row);
            }
            match c.query_opt("SELECT epoch FROM nodes WHERE id = $1", &[&id])? {
                Some(row) => Err(StoreError::Fenced {
                    held: epoch,
                    current: number(&row, 0, "epoch")?,
                    node: id,
                }),
                None => Err(StoreError::NotFound),
            }
        })
    }

    pub(super) fn node_rows(&self) -> Result<Vec<NodeRecord>, StoreError> {
        self.pool.run(|c| {
            // COLLATE "C": byte order, as SQLite sorts.
            c.query(
                &format!("SELECT {NODE_COLUMNS} FROM nodes ORDER BY id COLLATE \"C\""),
                &[],
            )?
            .iter()
            .map(node)
            .collect()
        })
    }

    pub(super) fn set_node_draining_row(
        &self,
        id: &str,
        draining: bool,
    ) -> Result<NodeRecord, StoreError> {
        let id = id.to_string();
        let state = if draining {
            NodeState::Draining
        } else {
            NodeState::Active
        };
        self.pool.run(move |c| {
            c.query_opt(
                &format!("UPDATE nodes SET state = $2 WHERE id = $1 RETURNING {NODE_COLUMNS}"),
                &[&id, &state.as_str()],
            )?
            .map(|row| node(&row))
            .unwrap_or(Err(StoreError::NotFound))
        })
    }
}
