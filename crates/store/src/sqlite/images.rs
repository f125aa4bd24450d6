//! Image rows in SQLite (the [`crate::Store`] methods delegate here).

use super::{corrupt, SqliteStore};
use crate::images::IMAGE_COLUMNS;
use crate::{ImageRecord, StoreError};
use rusqlite::{params, OptionalExtension, Row};

fn image_from_row(row: &Row<'_>) -> rusqlite::Result<ImageRecord> {
    let size: i64 = row.get(4)?;
    let ms: i64 = row.get(8)?;
    Ok(ImageRecord {
        workspace: row.get(0)?,
        name: row.get(1)?,
        tag: row.get(2)?,
        digest: row.get(3)?,
        size_bytes: u64::try_from(size).map_err(corrupt)?,
        origin: row.get(5)?,
        config: row.get(6)?,
        node_id: row.get(7)?,
        created_at: chrono::DateTime::from_timestamp_millis(ms)
            .ok_or_else(|| corrupt("image created_at"))?,
    })
}

impl SqliteStore {
    pub(crate) fn put_image_row(&self, r: &ImageRecord) -> Result<Option<ImageRecord>, StoreError> {
        let mut conn = self.lock();
        let tx = crate::sqlite::write_transaction(&mut conn)?;
        let previous = tx
            .query_row(
                &format!(
                    "SELECT {IMAGE_COLUMNS} FROM images WHERE workspace = ?1 AND name = ?2 AND tag = ?3"
                ),
                params![r.workspace, r.name, r.tag],
                image_from_row,
            )
            .optional()?;
        tx.execute(
            &format!(
                "INSERT INTO images ({IMAGE_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) \
                 ON CONFLICT (workspace, name, tag) DO UPDATE SET digest = excluded.digest, \
                 size_bytes = excluded.size_bytes, origin = excluded.origin, \
                 config = excluded.config, node_id = excluded.node_id, \
                 created_at_ms = excluded.created_at_ms"
            ),
            params![
                r.workspace,
                r.name,
                r.tag,
                r.digest,
                i64::try_from(r.size_bytes).unwrap_or(i64::MAX),
                r.origin,
                r.config,
                r.node_id,
                r.created_at.timestamp_millis()
            ],
        )?;
        tx.commit()?;
        Ok(previous)
    }

    pub(crate) fn get_image_row(
        &self,
        workspace: &str,
        name: &str,
        tag: &str,
    ) -> Result<Option<ImageRecord>, StoreError> {
        Ok(self
            .lock()
            .query_row(
                &format!(
                    "SELECT {IMAGE_COLUMNS} FROM images WHERE workspace = ?1 AND name = ?2 AND tag = ?3"
                ),
                params![workspace, name, tag],
                image_from_row,
            )
            .optional()?)
    }

    pub(crate) fn list_image_rows(
        &self,
        workspace: Option<&str>,
    ) -> Result<Vec<ImageRecord>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare(&format!(
            "SELECT {IMAGE_COLUMNS} FROM images WHERE ?1 IS NULL OR workspace = ?1 \
             ORDER BY workspace, name, tag"
        ))?;
        let rows = stmt.query_map(params![workspace], image_from_row)?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    pub(crate) fn image_rows_with_digest(
        &self,
        digest: &str,
    ) -> Result<Vec<ImageRecord>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare(&format!(
            "SELECT {IMAGE_COLUMNS} FROM images WHERE digest = ?1 ORDER BY workspace, name, tag"
        ))?;
        let rows = stmt.query_map(params![digest], image_from_row)?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    pub(crate) fn delete_image_row(
        &self,
        workspace: &str,
        name: &str,
        tag: &str,
    ) -> Result<bool, StoreError> {
        let n = self.lock().execute(
            "DELETE FROM images WHERE workspace = ?1 AND name = ?2 AND tag = ?3",
            params![workspace, name, tag],
        )?;
        Ok(n == 1)
    }
}
