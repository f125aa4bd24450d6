//! E2B rows in SQLite (the [`crate::Store`] methods delegate here).

use super::{corrupt, from_ms, json, missed_update, ms, SqliteStore};
use crate::e2b::{metadata_matches, E2B_COLUMNS};
use crate::{E2bRecord, StoreError};
use chrono::{DateTime, Utc};
use rusqlite::{params, OptionalExtension, Row};
use std::collections::BTreeMap;
use uuid::Uuid;

fn e2b_from_row(row: &Row<'_>) -> rusqlite::Result<E2bRecord> {
    let id: String = row.get(0)?;
    let metadata: String = row.get(3)?;
    Ok(E2bRecord {
        sandbox_id: Uuid::parse_str(&id).map_err(corrupt)?,
        workspace: row.get(1)?,
        template_id: row.get(2)?,
        metadata: serde_json::from_str(&metadata).map_err(corrupt)?,
        end_at: from_ms(Some(row.get(4)?)).ok_or_else(|| corrupt("end_at"))?,
        auto_pause: row.get(5)?,
        envd_access_token: row.get(6)?,
        allow_internet_access: row.get(7)?,
        allow_public_traffic: row.get(8)?,
        traffic_access_token: row.get(9)?,
        generation: u64::try_from(row.get::<_, i64>(10)?).map_err(corrupt)?,
    })
}

impl SqliteStore {
    pub(crate) fn create_e2b_row(&self, r: &E2bRecord) -> Result<bool, StoreError> {
        let conn = self.lock();
        let n = conn.execute(
            &format!(
                "INSERT INTO e2b_sandboxes ({E2B_COLUMNS}) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,0) \
                 ON CONFLICT (id) DO NOTHING"
            ),
            params![
                r.sandbox_id.to_string(),
                r.workspace,
                r.template_id,
                json(&r.metadata),
                ms(r.end_at),
                r.auto_pause,
                r.envd_access_token,
                r.allow_internet_access,
                r.allow_public_traffic,
                r.traffic_access_token,
            ],
        )?;
        Ok(n == 1)
    }

    pub(crate) fn get_e2b_row(&self, id: Uuid) -> Result<Option<E2bRecord>, StoreError> {
        let conn = self.lock();
        Ok(conn
            .query_row(
                &format!("SELECT {E2B_COLUMNS} FROM e2b_sandboxes WHERE id = ?1"),
                params![id.to_string()],
                e2b_from_row,
            )
            .optional()?)
    }

    pub(crate) fn update_e2b_row(&self, r: &mut E2bRecord) -> Result<(), StoreError> {
        let conn = self.lock();
        let next: Option<i64> = conn
            .query_row(
                "UPDATE e2b_sandboxes SET metadata = ?3, end_at_ms = ?4, auto_pause = ?5, \
                 envd_access_token = ?6, allow_public_traffic = ?7, traffic_access_token = ?8, \
                 generation = generation + 1 \
                 WHERE id = ?1 AND generation = ?2 RETURNING generation",
                params![
                    r.sandbox_id.to_string(),
                    r.generation as i64,
                    json(&r.metadata),
                    ms(r.end_at),
                    r.auto_pause,
                    r.envd_access_token,
                    r.allow_public_traffic,
                    r.traffic_access_token,
                ],
                |row| row.get(0),
            )
            .optional()?;
        match next {
            Some(g) => {
                r.generation = u64::try_from(g).map_err(corrupt)?;
                Ok(())
            }
            None => Err(missed_update(
                &conn,
                "e2b_sandboxes",
                r.sandbox_id,
                r.generation,
            )?),
        }
    }

    pub(crate) fn list_e2b_rows(
        &self,
        workspace: Option<&str>,
        metadata: &BTreeMap<String, String>,
    ) -> Result<Vec<E2bRecord>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare(&format!(
            "SELECT {E2B_COLUMNS} FROM e2b_sandboxes WHERE (?1 IS NULL OR workspace = ?1) ORDER BY id"
        ))?;
        let rows = stmt.query_map(params![workspace], e2b_from_row)?;
        let mut out = Vec::new();
        for row in rows {
            let r = row?;
            if metadata_matches(&r, metadata) {
                out.push(r);
            }
        }
        Ok(out)
    }

    pub(crate) fn e2b_rows_due(
        &self,
        node_id: &str,
        now: DateTime<Utc>,
    ) -> Result<Vec<E2bRecord>, StoreError> {
        let conn = self.lock();
        let columns = E2B_COLUMNS
            .split(", ")
            .map(|c| format!("e.{c}"))
            .collect::<Vec<_>>()
            .join(", ");
        let mut stmt = conn.prepare(&format!(
            "SELECT {columns} FROM e2b_sandboxes e JOIN sandboxes s ON s.id = e.id \
             WHERE e.end_at_ms <= ?2 AND s.node_id = ?1 AND s.status = 'RUNNING' ORDER BY e.end_at_ms"
        ))?;
        let rows = stmt.query_map(params![node_id, ms(now)], e2b_from_row)?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    pub(crate) fn delete_e2b_row(&self, id: Uuid) -> Result<bool, StoreError> {
        let conn = self.lock();
        let n = conn.execute(
            "DELETE FROM e2b_sandboxes WHERE id = ?1",
            params![id.to_string()],
        )?;
        Ok(n == 1)
    }

    pub(crate) fn delete_ended_e2b_rows(&self) -> Result<usize, StoreError> {
        let conn = self.lock();
        Ok(conn.execute(
            "DELETE FROM e2b_sandboxes WHERE NOT EXISTS \
             (SELECT 1 FROM sandboxes s WHERE s.id = e2b_sandboxes.id AND s.active = 1)",
            [],
        )?)
    }
}
