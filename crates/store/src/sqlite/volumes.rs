//! Volume and mount rows in SQLite (the [`crate::Store`] methods delegate here).

use super::{corrupt, SqliteStore};
use crate::volumes::{MOUNT_COLUMNS, VOLUME_COLUMNS};
use crate::{StoreError, VolumeMountRecord, VolumeRecord};
use rusqlite::{params, OptionalExtension, Row};
use uuid::Uuid;

fn volume_from_row(row: &Row<'_>) -> rusqlite::Result<VolumeRecord> {
    let id: String = row.get(0)?;
    let size: i64 = row.get(4)?;
    let ms: i64 = row.get(6)?;
    Ok(VolumeRecord {
        id: Uuid::parse_str(&id).map_err(corrupt)?,
        workspace: row.get(1)?,
        name: row.get(2)?,
        kind: row.get(3)?,
        size_mb: u64::try_from(size).map_err(corrupt)?,
        node_id: row.get(5)?,
        created_at: chrono::DateTime::from_timestamp_millis(ms)
            .ok_or_else(|| corrupt("volume created_at"))?,
    })
}

fn mount_from_row(row: &Row<'_>) -> rusqlite::Result<VolumeMountRecord> {
    let sandbox: String = row.get(0)?;
    let volume: String = row.get(1)?;
    Ok(VolumeMountRecord {
        sandbox_id: Uuid::parse_str(&sandbox).map_err(corrupt)?,
        volume_id: Uuid::parse_str(&volume).map_err(corrupt)?,
        path: row.get(2)?,
        read_only: row.get(3)?,
    })
}

impl SqliteStore {
    pub(crate) fn insert_volume_row(&self, v: &VolumeRecord) -> Result<bool, StoreError> {
        let n = self.lock().execute(
            &format!(
                "INSERT INTO volumes ({VOLUME_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) \
                 ON CONFLICT (workspace, name) DO NOTHING"
            ),
            params![
                v.id.to_string(),
                v.workspace,
                v.name,
                v.kind,
                i64::try_from(v.size_mb).unwrap_or(i64::MAX),
                v.node_id,
                v.created_at.timestamp_millis()
            ],
        )?;
        Ok(n == 1)
    }

    pub(crate) fn get_volume_row(&self, id: Uuid) -> Result<Option<VolumeRecord>, StoreError> {
        Ok(self
            .lock()
            .query_row(
                &format!("SELECT {VOLUME_COLUMNS} FROM volumes WHERE id = ?1"),
                params![id.to_string()],
                volume_from_row,
            )
            .optional()?)
    }

    pub(crate) fn volume_named_row(
        &self,
        workspace: &str,
        name: &str,
    ) -> Result<Option<VolumeRecord>, StoreError> {
        Ok(self
            .lock()
            .query_row(
                &format!("SELECT {VOLUME_COLUMNS} FROM volumes WHERE workspace = ?1 AND name = ?2"),
                params![workspace, name],
                volume_from_row,
            )
            .optional()?)
    }

    pub(crate) fn list_volume_rows(
        &self,
        workspace: Option<&str>,
    ) -> Result<Vec<VolumeRecord>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare(&format!(
            "SELECT {VOLUME_COLUMNS} FROM volumes WHERE ?1 IS NULL OR workspace = ?1 \
             ORDER BY workspace, name"
        ))?;
        let rows = stmt.query_map(params![workspace], volume_from_row)?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    pub(crate) fn delete_volume_row(&self, id: Uuid) -> Result<bool, StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        tx.execute(
            "DELETE FROM volume_mounts WHERE volume_id = ?1",
            params![id.to_string()],
        )?;
        let n = tx.execute("DELETE FROM volumes WHERE id = ?1", params![id.to_string()])?;
        tx.commit()?;
        Ok(n == 1)
    }

    pub(crate) fn put_mount_rows(&self, mounts: &[VolumeMountRecord]) -> Result<(), StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        for m in mounts {
            tx.execute(
                &format!(
                    "INSERT INTO volume_mounts ({MOUNT_COLUMNS}) VALUES (?1, ?2, ?3, ?4) \
                     ON CONFLICT (sandbox_id, path) DO UPDATE SET \
                     volume_id = excluded.volume_id, read_only = excluded.read_only"
                ),
                params![
                    m.sandbox_id.to_string(),
                    m.volume_id.to_string(),
                    m.path,
                    m.read_only
                ],
            )?;
        }
        tx.commit()?;
        Ok(())
    }

    pub(crate) fn mounts_where(
        &self,
        column: &str,
        id: Uuid,
    ) -> Result<Vec<VolumeMountRecord>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare(&format!(
            "SELECT {MOUNT_COLUMNS} FROM volume_mounts WHERE {column} = ?1 \
             ORDER BY sandbox_id, path"
        ))?;
        let rows = stmt.query_map(params![id.to_string()], mount_from_row)?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }
}
