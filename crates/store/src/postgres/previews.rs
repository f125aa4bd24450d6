//! Preview-access rows on PostgreSQL (the [`crate::Store`] methods delegate here).

use super::PostgresStore;
use crate::previews::PREVIEW_COLUMNS;
use crate::{PreviewRecord, StoreError};
use postgres::Row;
use uuid::Uuid;

fn preview(row: &Row) -> Result<PreviewRecord, StoreError> {
    Ok(PreviewRecord {
        sandbox_id: row.try_get(0)?,
        workspace: row.try_get(1)?,
        token: row.try_get(2)?,
    })
}

impl PostgresStore {
    pub(super) fn put_preview_row(&self, r: &PreviewRecord) -> Result<(), StoreError> {
        let r = r.clone();
        self.pool.run(move |c| {
            c.execute(
                &format!(
                    "INSERT INTO sandbox_previews ({PREVIEW_COLUMNS}) VALUES ($1, $2, $3) \
                     ON CONFLICT (id) DO UPDATE SET workspace = EXCLUDED.workspace, token = EXCLUDED.token"
                ),
                &[&r.sandbox_id, &r.workspace, &r.token],
            )?;
            Ok(())
        })
    }

    pub(super) fn get_preview_row(&self, id: Uuid) -> Result<Option<PreviewRecord>, StoreError> {
        self.pool.run(move |c| {
            c.query_opt(
                &format!("SELECT {PREVIEW_COLUMNS} FROM sandbox_previews WHERE id = $1"),
                &[&id],
            )?
            .map(|row| preview(&row))
            .transpose()
        })
    }

    pub(super) fn delete_preview_row(&self, id: Uuid) -> Result<bool, StoreError> {
        self.pool.run(move |c| {
            let n = c.execute("DELETE FROM sandbox_previews WHERE id = $1", &[&id])?;
            Ok(n == 1)
        })
    }

    pub(super) fn delete_ended_preview_rows(&self) -> Result<usize, StoreError> {
        self.pool.run(|c| {
            let n = c.execute(
                "DELETE FROM sandbox_previews p WHERE NOT EXISTS \
                 (SELECT 1 FROM sandboxes s WHERE s.id = p.id AND s.active)",
                &[],
            )?;
            Ok(n as usize)
        })
    }

    pub(super) fn list_preview_rows(&self) -> Result<Vec<PreviewRecord>, StoreError> {
        self.pool.run(move |c| {
            c.query(
                &format!("SELECT {PREVIEW_COLUMNS} FROM sandbox_previews ORDER BY id"),
                &[],
            )?
            .iter()
            .map(preview)
            .collect()
        })
    }
}
