//! Node rows on PostgreSQL (the [`crate::Store`] methods delegate here).

use super::rows::{json, ms};
use super::PostgresStore;
use crate::nodes::{NODE_COLUMNS, NODE_LOST};
use crate::{FailOver, NodeRecord, NodeRegistration, NodeState, NodeUsage, StoreError};

/// Ends every active sandbox of node $1 at $2: FAILED with reason $3, or
/// TERMINATED when a destroy was already under way; returns their ids.
const FAIL_SANDBOXES: &str = "UPDATE sandboxes SET \
     status = CASE WHEN status = 'TERMINATING' THEN 'TERMINATED' ELSE 'FAILED' END, \
     error = CASE WHEN status = 'TERMINATING' THEN error ELSE $3 END, \
     ended_at_ms = $2, active = false, \
     active_ms = active_ms + CASE WHEN running_since_ms IS NULL THEN 0 \
         ELSE GREATEST(0, $2 - running_since_ms) END, \
     running_since_ms = NULL, generation = generation + 1 \
     WHERE node_id = $1 AND active RETURNING id";
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
        failed_over_at: row
            .try_get::<_, Option<i64>>(11)?
            .map(|v| {
                DateTime::<Utc>::from_timestamp_millis(v)
                    .ok_or_else(|| corrupt(format!("failed_over_ms {v}")))
            })
            .transpose()?,
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
                    "INSERT INTO nodes ({NODE_COLUMNS}) VALUES ($1,$2,$3,$4,$5,$6,'active',1,$7,$8,$8,NULL) \
                     ON CONFLICT (id) DO UPDATE SET advertise_url = EXCLUDED.advertise_url, \
                     version = EXCLUDED.version, labels = EXCLUDED.labels, \
                     vcpu_milli = EXCLUDED.vcpu_milli, memory_mb = EXCLUDED.memory_mb, \
                     epoch = CASE WHEN nodes.lease_until_ms <= $8 THEN nodes.epoch + 1 ELSE nodes.epoch END, \
                     lease_until_ms = EXCLUDED.lease_until_ms, \
                     last_heartbeat_ms = EXCLUDED.last_heartbeat_ms, \
                     registered_at_ms = EXCLUDED.registered_at_ms, failed_over_ms = NULL \
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

    pub(super) fn fail_over_node_row(
        &self,
        id: &str,
        epoch: u64,
        now: DateTime<Utc>,
    ) -> Result<Option<FailOver>, StoreError> {
        let id = id.to_string();
        self.pool.run(move |c| {
            let now = ms(now);
            let mut tx = c.transaction()?;
            // The epoch bump and the sandboxes' end commit together: a node that
            // registers again is ordered before (nothing is failed: it is back) or
            // after (it finds its sandboxes ended and cleans up) by the row lock.
            let bumped = tx.query_opt(
                "UPDATE nodes SET epoch = epoch + 1, failed_over_ms = $3 \
                 WHERE id = $1 AND epoch = $2 AND lease_until_ms <= $3 AND failed_over_ms IS NULL \
                 RETURNING epoch",
                &[&id, &stored(epoch), &now],
            )?;
            let Some(bumped) = bumped else {
                return Ok(None);
            };
            let ids: Vec<uuid::Uuid> = tx
                .query(FAIL_SANDBOXES, &[&id, &now, &NODE_LOST])?
                .iter()
                .map(|row| row.try_get(0))
                .collect::<Result<_, _>>()?;
            tx.execute(
                "UPDATE snapshots SET status = 'FAILED', error = $3, updated_at_ms = $2, \
                 generation = generation + 1 \
                 WHERE status = 'CREATING' AND source_sandbox = ANY($1)",
                &[&ids, &now, &NODE_LOST],
            )?;
            tx.commit()?;
            Ok(Some(FailOver {
                epoch: number(&bumped, 0, "epoch")?,
                sandboxes: ids,
            }))
        })
    }

    pub(super) fn adopt_unowned_sandboxes_row(&self, node_id: &str) -> Result<usize, StoreError> {
        let node_id = node_id.to_string();
        self.pool.run(move |c| {
            let n = c.execute(
                "UPDATE sandboxes SET node_id = $1, generation = generation + 1 WHERE node_id = ''",
                &[&node_id],
            )?;
            Ok(n as usize)
        })
    }

    pub(super) fn node_usage_rows(&self) -> Result<Vec<NodeUsage>, StoreError> {
        self.pool.run(|c| {
            c.query(
                "SELECT node_id, COUNT(*), COALESCE(SUM(vcpu), 0)::bigint, \
                 COALESCE(SUM(memory_mb), 0)::bigint FROM sandboxes \
                 WHERE active GROUP BY node_id ORDER BY node_id COLLATE \"C\"",
                &[],
            )?
            .iter()
            .map(|row| {
                Ok(NodeUsage {
                    node_id: row.try_get(0)?,
                    sandboxes: number(row, 1, "count")?,
                    vcpu_milli: number(row, 2, "vcpu")?.saturating_mul(1000),
                    memory_mb: number(row, 3, "memory_mb")?,
                })
            })
            .collect()
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
