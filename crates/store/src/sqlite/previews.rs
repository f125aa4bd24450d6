//! Preview-access rows in SQLite (the [`crate::Store`] methods delegate here).

use super::{corrupt, SqliteStore};
use crate::previews::PREVIEW_COLUMNS;
use crate::{PreviewRecord, StoreError};
use rusqlite::{params, OptionalExtension, Row};
use uuid::Uuid;

fn preview_from_row(row: &Row<'_>) -> rusqlite::Result<PreviewRecord> {
    let id: String = row.get(0)?;
    Ok(PreviewRecord {
        sandbox_id: Uuid::parse_str(&id).map_err(corrupt)?,
        workspace: row.get(1)?,
        token: row.get(2)?,
    })
}

impl SqliteStore {
    pub(crate) fn put_preview_row(&self, r: &PreviewRecord) -> Result<(), StoreError> {
        self.lock().execute(
            &format!(
                "INSERT INTO sandbox_previews ({PREVIEW_COLUMNS}) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (id) DO UPDATE SET workspace = excluded.workspace, token = excluded.token"
            ),
            params![r.sandbox_id.to_string(), r.workspace, r.token],
        )?;
        Ok(())
    }

    pub(crate) fn get_preview_row(&self, id: Uuid) -> Result<Option<PreviewRecord>, StoreError> {
        Ok(self
            .lock()
            .query_row(
                &format!("SELECT {PREVIEW_COLUMNS} FROM sandbox_previews WHERE id = ?1"),
                params![id.to_string()],
                preview_from_row,
            )
            .optional()?)
    }

    pub(crate) fn delete_preview_row(&self, id: Uuid) -> Result<bool, StoreError> {
        let n = self.lock().execute(
            "DELETE FROM sandbox_previews WHERE id = ?1",
            params![id.to_string()],
        )?;
        Ok(n == 1)
    }

    pub(crate) fn delete_ended_preview_rows(&self) -> Result<usize, StoreError> {
        Ok(self.lock().execute(
            "DELETE FROM sandbox_previews WHERE NOT EXISTS \
             (SELECT 1 FROM sandboxes s WHERE s.id = sandbox_previews.id AND s.active = 1)",
            [],
        )?)
    }

    pub(crate) fn list_preview_rows(&self) -> Result<Vec<PreviewRecord>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare(&format!(
            "SELECT {PREVIEW_COLUMNS} FROM sandbox_previews ORDER BY id"
        ))?;
        let rows = stmt.query_map([], preview_from_row)?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }
}
