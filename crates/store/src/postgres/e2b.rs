//! E2B rows on PostgreSQL (the [`crate::Store`] methods delegate here).

use super::rows::{json, ms};
use super::store::missed_update;
use super::PostgresStore;
use crate::e2b::{metadata_matches, E2B_COLUMNS};
use crate::{E2bRecord, StoreError};
use chrono::{DateTime, Utc};
use postgres::Row;
use std::collections::BTreeMap;
use uuid::Uuid;

fn corrupt(what: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(what.to_string().into())
}

fn e2b(row: &Row) -> Result<E2bRecord, StoreError> {
    let metadata: String = row.try_get(3)?;
    let end: i64 = row.try_get(4)?;
    let generation: i64 = row.try_get(10)?;
    Ok(E2bRecord {
        sandbox_id: row.try_get(0)?,
        workspace: row.try_get(1)?,
        template_id: row.try_get(2)?,
        metadata: serde_json::from_str(&metadata).map_err(|e| corrupt(format!("metadata: {e}")))?,
        end_at: DateTime::<Utc>::from_timestamp_millis(end)
            .ok_or_else(|| corrupt(format!("end_at_ms {end}")))?,
        auto_pause: row.try_get(5)?,
        envd_access_token: row.try_get(6)?,
        allow_internet_access: row.try_get(7)?,
        allow_public_traffic: row.try_get(8)?,
        traffic_access_token: row.try_get(9)?,
        generation: u64::try_from(generation)
            .map_err(|_| corrupt(format!("generation {generation}")))?,
    })
}

impl PostgresStore {
    pub(super) fn create_e2b_row(&self, r: &E2bRecord) -> Result<bool, StoreError> {
        let r = r.clone();
        self.pool.run(move |c| {
            let n = c.execute(
                &format!(
                    "INSERT INTO e2b_sandboxes ({E2B_COLUMNS}) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,0) \
                     ON CONFLICT (id) DO NOTHING"
                ),
                &[
                    &r.sandbox_id,
                    &r.workspace,
                    &r.template_id,
                    &json(&r.metadata),
                    &ms(r.end_at),
                    &r.auto_pause,
                    &r.envd_access_token,
                    &r.allow_internet_access,
                    &r.allow_public_traffic,
                    &r.traffic_access_token,
                ],
            )?;
            Ok(n == 1)
        })
    }

    pub(super) fn get_e2b_row(&self, id: Uuid) -> Result<Option<E2bRecord>, StoreError> {
        self.pool.run(move |c| {
            c.query_opt(
                &format!("SELECT {E2B_COLUMNS} FROM e2b_sandboxes WHERE id = $1"),
                &[&id],
            )?
            .map(|row| e2b(&row))
            .transpose()
        })
    }

    pub(super) fn update_e2b_row(&self, record: &mut E2bRecord) -> Result<(), StoreError> {
        let r = record.clone();
        let generation = self.pool.run(move |c| {
            let row = c.query_opt(
                "UPDATE e2b_sandboxes SET metadata = $3, end_at_ms = $4, auto_pause = $5, \
                 envd_access_token = $6, allow_public_traffic = $7, traffic_access_token = $8, \
                 generation = generation + 1 \
                 WHERE id = $1 AND generation = $2 RETURNING generation",
                &[
                    &r.sandbox_id,
                    &(r.generation as i64),
                    &json(&r.metadata),
                    &ms(r.end_at),
                    &r.auto_pause,
                    &r.envd_access_token,
                    &r.allow_public_traffic,
                    &r.traffic_access_token,
                ],
            )?;
            match row {
                Some(row) => {
                    let g: i64 = row.try_get(0)?;
                    u64::try_from(g).map_err(|_| corrupt(format!("generation {g}")))
                }
                None => Err(missed_update(
                    c,
                    "e2b_sandboxes",
                    r.sandbox_id,
                    r.generation,
                )?),
            }
        })?;
        record.generation = generation;
        Ok(())
    }

    pub(super) fn list_e2b_rows(
        &self,
        workspace: Option<&str>,
        metadata: &BTreeMap<String, String>,
    ) -> Result<Vec<E2bRecord>, StoreError> {
        let workspace = workspace.map(str::to_string);
        let metadata = metadata.clone();
        self.pool.run(move |c| {
            let rows = c.query(
                &format!(
                    "SELECT {E2B_COLUMNS} FROM e2b_sandboxes \
                     WHERE ($1::text IS NULL OR workspace = $1) ORDER BY id"
                ),
                &[&workspace],
            )?;
            let mut out = Vec::new();
            for row in rows {
                let r = e2b(&row)?;
                if metadata_matches(&r, &metadata) {
                    out.push(r);
                }
            }
            Ok(out)
        })
    }

    pub(super) fn e2b_rows_due(
        &self,
        node_id: &str,
        now: DateTime<Utc>,
    ) -> Result<Vec<E2bRecord>, StoreError> {
        let node_id = node_id.to_string();
        self.pool.run(move |c| {
            let columns = E2B_COLUMNS
                .split(", ")
                .map(|col| format!("e.{col}"))
                .collect::<Vec<_>>()
                .join(", ");
            c.query(
                &format!(
                    "SELECT {columns} FROM e2b_sandboxes e JOIN sandboxes s ON s.id = e.id \
                     WHERE e.end_at_ms <= $2 AND s.node_id = $1 AND s.status = 'RUNNING' \
                     ORDER BY e.end_at_ms"
                ),
                &[&node_id, &ms(now)],
            )?
            .iter()
            .map(e2b)
            .collect()
        })
    }

    pub(super) fn delete_e2b_row(&self, id: Uuid) -> Result<bool, StoreError> {
        self.pool
            .run(move |c| Ok(c.execute("DELETE FROM e2b_sandboxes WHERE id = $1", &[&id])? == 1))
    }

    pub(super) fn delete_ended_e2b_rows(&self) -> Result<usize, StoreError> {
        self.pool.run(|c| {
            let n = c.execute(
                "DELETE FROM e2b_sandboxes e WHERE NOT EXISTS \
                 (SELECT 1 FROM sandboxes s WHERE s.id = e.id AND s.active)",
                &[],
            )?;
            Ok(n as usize)
        })
    }
}
