//! Snapshot and secret rows in SQLite.

use crate::sqlite::{corrupt, from_ms, json, missed_update, ms, SqliteStore};
use crate::{SecretRecord, SnapshotCreateOutcome, SnapshotRecord, SnapshotStatus, StoreError};
use chrono::{DateTime, Utc};
use rusqlite::{params, OptionalExtension, Row};
use uuid::Uuid;

const COLUMNS: &str = "id, workspace, name, source_sandbox, status, vcpu, memory_mb, environment, secrets, image_ref, \
     source_image_id, compatibility_id, stored_bytes, created_at_ms, updated_at_ms, expires_at_ms, error, network, generation";

fn snapshot_from_row(row: &Row<'_>) -> rusqlite::Result<SnapshotRecord> {
    let id: String = row.get(0)?;
    let source: String = row.get(3)?;
    let status: String = row.get(4)?;
    let env: String = row.get(7)?;
    let secrets: String = row.get(8)?;
    Ok(SnapshotRecord {
        id: Uuid::parse_str(&id).map_err(corrupt)?,
        workspace: row.get(1)?,
        name: row.get(2)?,
        source_sandbox: Uuid::parse_str(&source).map_err(corrupt)?,
        status: SnapshotStatus::parse(&status)
            .ok_or_else(|| corrupt(format!("snapshot status {status}")))?,
        vcpu: row.get(5)?,
        memory_mb: row.get(6)?,
        environment: serde_json::from_str(&env).map_err(corrupt)?,
        secrets: serde_json::from_str(&secrets).map_err(corrupt)?,
        image_ref: row.get(9)?,
        source_image_id: row.get(10)?,
        compatibility_id: row.get(11)?,
        stored_bytes: row.get::<_, i64>(12)?.max(0) as u64,
        created_at: from_ms(Some(row.get(13)?)).ok_or_else(|| corrupt("created_at"))?,
        updated_at: from_ms(Some(row.get(14)?)).ok_or_else(|| corrupt("updated_at"))?,
        expires_at: from_ms(Some(row.get(15)?)).ok_or_else(|| corrupt("expires_at"))?,
        error: row.get(16)?,
        network: crate::sqlite::network_from_column(row.get(17)?)?,
        generation: row.get::<_, i64>(18)?.max(0) as u64,
    })
}

impl SqliteStore {
    /// Inserts a snapshot unless its name is held (CREATING/READY, unexpired); returns the holder.
    pub(crate) fn insert_snapshot(
        &self,
        r: &SnapshotRecord,
        now: DateTime<Utc>,
        max_live: u32,
    ) -> Result<SnapshotCreateOutcome, StoreError> {
        let mut conn = self.lock();
        let tx = crate::sqlite::write_transaction(&mut conn)?;
        if let Some(name) = &r.name {
            let holder = tx
                .query_row(
                    &format!(
                        "SELECT {COLUMNS} FROM snapshots WHERE workspace = ?1 AND name = ?2 \
                         AND status IN ('CREATING','READY') AND expires_at_ms > ?3 LIMIT 1"
                    ),
                    params![r.workspace, name, ms(now)],
                    snapshot_from_row,
                )
                .optional()?;
            if let Some(holder) = holder {
                return Ok(SnapshotCreateOutcome::NameHeld(Box::new(holder)));
            }
        }
        if max_live > 0 {
            let live: u32 = tx.query_row(
                "SELECT COUNT(*) FROM snapshots WHERE workspace = ?1 \
                 AND status IN ('CREATING','READY') AND expires_at_ms > ?2",
                params![r.workspace, ms(now)],
                |row| row.get(0),
            )?;
            if live >= max_live {
                return Ok(SnapshotCreateOutcome::LimitReached(live));
            }
        }
        tx.execute(
            &format!("INSERT INTO snapshots ({COLUMNS}) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18,?19)"),
            params![
                r.id.to_string(),
                r.workspace,
                r.name,
                r.source_sandbox.to_string(),
                r.status.as_str(),
                r.vcpu,
                r.memory_mb,
                json(&r.environment),
                json(&r.secrets),
                r.image_ref,
                r.source_image_id,
                r.compatibility_id,
                r.stored_bytes as i64,
                ms(r.created_at),
                ms(r.updated_at),
                ms(r.expires_at),
                r.error,
                json(&r.network),
                r.generation as i64,
            ],
        )?;
        tx.commit()?;
        Ok(SnapshotCreateOutcome::Created)
    }

    pub(crate) fn get_snapshot_row(&self, id: Uuid) -> Result<Option<SnapshotRecord>, StoreError> {
        let conn = self.lock();
        Ok(conn
            .query_row(
                &format!("SELECT {COLUMNS} FROM snapshots WHERE id = ?1"),
                params![id.to_string()],
                snapshot_from_row,
            )
            .optional()?)
    }

    pub(crate) fn update_snapshot_row(&self, r: &mut SnapshotRecord) -> Result<(), StoreError> {
        let conn = self.lock();
        let n = conn.execute(
            "UPDATE snapshots SET status = ?2, stored_bytes = ?3, updated_at_ms = ?4, error = ?5, \
             expires_at_ms = ?6, generation = generation + 1 WHERE id = ?1 AND generation = ?7",
            params![
                r.id.to_string(),
                r.status.as_str(),
                r.stored_bytes as i64,
                ms(r.updated_at),
                r.error,
                ms(r.expires_at),
                r.generation as i64,
            ],
        )?;
        if n == 0 {
            return Err(missed_update(&conn, "snapshots", r.id, r.generation)?);
        }
        r.generation += 1;
        Ok(())
    }

    pub(crate) fn list_snapshot_rows(
        &self,
        workspace: &str,
        name: Option<&str>,
        limit: u32,
        after: Option<&crate::SandboxCursor>,
    ) -> Result<Vec<SnapshotRecord>, StoreError> {
        let conn = self.lock();
        let (cursor_ms, cursor_id) = match after {
            Some(c) => (c.created_at_ms, c.id.to_string()),
            None => (i64::MAX, String::new()),
        };
        let mut stmt = conn.prepare(&format!(
            "SELECT {COLUMNS} FROM snapshots WHERE workspace = ?1 AND status NOT IN ('DELETED') \
             AND (?2 IS NULL OR name = ?2) \
             AND (created_at_ms < ?3 OR (created_at_ms = ?3 AND id < ?4) OR ?5 = 0) \
             ORDER BY created_at_ms DESC, id DESC LIMIT ?6"
        ))?;
        let rows = stmt.query_map(
            params![
                workspace,
                name,
                cursor_ms,
                cursor_id,
                after.is_some(),
                limit
            ],
            snapshot_from_row,
        )?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    pub(crate) fn snapshot_rows_in_status(
        &self,
        statuses: &[SnapshotStatus],
    ) -> Result<Vec<SnapshotRecord>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare(&format!(
            "SELECT {COLUMNS} FROM snapshots WHERE status = ?1"
        ))?;
        let mut out = Vec::new();
        for s in statuses {
            for row in stmt.query_map(params![s.as_str()], snapshot_from_row)? {
                out.push(row?);
            }
        }
        Ok(out)
    }

    pub(crate) fn put_secret_row(&self, r: &SecretRecord) -> Result<(), StoreError> {
        let conn = self.lock();
        conn.execute(
            "INSERT INTO secrets (workspace, name, nonce, ciphertext, created_at_ms, updated_at_ms) VALUES (?1,?2,?3,?4,?5,?6) \
             ON CONFLICT (workspace, name) DO UPDATE SET nonce = excluded.nonce, ciphertext = excluded.ciphertext, \
             updated_at_ms = excluded.updated_at_ms",
            params![r.workspace, r.name, r.nonce, r.ciphertext, ms(r.created_at), ms(r.updated_at)],
        )?;
        Ok(())
    }

    pub(crate) fn get_secret_row(
        &self,
        workspace: &str,
        name: &str,
    ) -> Result<Option<SecretRecord>, StoreError> {
        let conn = self.lock();
        Ok(conn
            .query_row(
                "SELECT workspace, name, nonce, ciphertext, created_at_ms, updated_at_ms FROM secrets WHERE workspace = ?1 AND name = ?2",
                params![workspace, name],
                secret_from_row,
            )
            .optional()?)
    }

    pub(crate) fn list_secret_rows(
        &self,
        workspace: &str,
    ) -> Result<Vec<SecretRecord>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare(
            "SELECT workspace, name, nonce, ciphertext, created_at_ms, updated_at_ms FROM secrets WHERE workspace = ?1 ORDER BY name",
        )?;
        let rows = stmt.query_map(params![workspace], secret_from_row)?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    pub(crate) fn list_all_secret_rows(&self) -> Result<Vec<SecretRecord>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare(
            "SELECT workspace, name, nonce, ciphertext, created_at_ms, updated_at_ms FROM secrets ORDER BY workspace, name",
        )?;
        let rows = stmt.query_map([], secret_from_row)?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    pub(crate) fn replace_secret_ciphertext_row(
        &self,
        current: &SecretRecord,
        nonce: &[u8],
        ciphertext: &[u8],
    ) -> Result<bool, StoreError> {
        let conn = self.lock();
        Ok(conn.execute(
            "UPDATE secrets SET nonce = ?1, ciphertext = ?2 \
             WHERE workspace = ?3 AND name = ?4 AND nonce = ?5 AND ciphertext = ?6",
            params![
                nonce,
                ciphertext,
                current.workspace,
                current.name,
                current.nonce,
                current.ciphertext
            ],
        )? > 0)
    }

    pub(crate) fn delete_secret_row(
        &self,
        workspace: &str,
        name: &str,
    ) -> Result<bool, StoreError> {
        let conn = self.lock();
        Ok(conn.execute(
            "DELETE FROM secrets WHERE workspace = ?1 AND name = ?2",
            params![workspace, name],
        )? > 0)
    }
}

fn secret_from_row(row: &Row<'_>) -> rusqlite::Result<SecretRecord> {
    Ok(SecretRecord {
        workspace: row.get(0)?,
        name: row.get(1)?,
        nonce: row.get(2)?,
        ciphertext: row.get(3)?,
        created_at: from_ms(Some(row.get(4)?)).ok_or_else(|| corrupt("created_at"))?,
        updated_at: from_ms(Some(row.get(5)?)).ok_or_else(|| corrupt("updated_at"))?,
    })
}
