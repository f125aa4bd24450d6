//! Template rows in SQLite (the [`crate::Store`] methods delegate here).

use super::{corrupt, SqliteStore};
use crate::templates::{parts, snapshot_text, TEMPLATE_COLUMNS};
use crate::{StoreError, TemplateRecord};
use rusqlite::{params, OptionalExtension, Row};
use uuid::Uuid;

fn template_from_row(row: &Row<'_>) -> rusqlite::Result<TemplateRecord> {
    let (snapshot_id, created_at, updated_at) =
        parts(row.get(6)?, row.get(8)?, row.get(9)?).map_err(corrupt)?;
    Ok(TemplateRecord {
        workspace: row.get(0)?,
        name: row.get(1)?,
        spec: row.get(2)?,
        status: row.get(3)?,
        error: row.get(4)?,
        image_ref: row.get(5)?,
        snapshot_id,
        generation: row.get(7)?,
        created_at,
        updated_at,
    })
}

impl SqliteStore {
    pub(crate) fn create_template_row(&self, r: &TemplateRecord) -> Result<bool, StoreError> {
        let n = self.lock().execute(
            &format!(
                "INSERT INTO templates ({TEMPLATE_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) \
                 ON CONFLICT (workspace, name) DO NOTHING"
            ),
            params![
                r.workspace,
                r.name,
                r.spec,
                r.status,
                r.error,
                r.image_ref,
                snapshot_text(r),
                r.generation,
                r.created_at.timestamp_millis(),
                r.updated_at.timestamp_millis()
            ],
        )?;
        Ok(n == 1)
    }

    pub(crate) fn get_template_row(
        &self,
        workspace: &str,
        name: &str,
    ) -> Result<Option<TemplateRecord>, StoreError> {
        Ok(self
            .lock()
            .query_row(
                &format!(
                    "SELECT {TEMPLATE_COLUMNS} FROM templates WHERE workspace = ?1 AND name = ?2"
                ),
                params![workspace, name],
                template_from_row,
            )
            .optional()?)
    }

    pub(crate) fn list_template_rows(
        &self,
        workspace: Option<&str>,
    ) -> Result<Vec<TemplateRecord>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare(&format!(
            "SELECT {TEMPLATE_COLUMNS} FROM templates WHERE ?1 IS NULL OR workspace = ?1 \
             ORDER BY workspace, name"
        ))?;
        let rows = stmt.query_map(params![workspace], template_from_row)?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    pub(crate) fn update_template_row(&self, r: &TemplateRecord) -> Result<bool, StoreError> {
        let n = self.lock().execute(
            "UPDATE templates SET spec = ?3, status = ?4, error = ?5, image_ref = ?6, \
             snapshot_id = ?7, generation = generation + 1, updated_at_ms = ?8 \
             WHERE workspace = ?1 AND name = ?2 AND generation = ?9",
            params![
                r.workspace,
                r.name,
                r.spec,
                r.status,
                r.error,
                r.image_ref,
                snapshot_text(r),
                r.updated_at.timestamp_millis(),
                r.generation
            ],
        )?;
        Ok(n == 1)
    }

    pub(crate) fn delete_template_row(
        &self,
        workspace: &str,
        name: &str,
        generation: i64,
    ) -> Result<bool, StoreError> {
        let n = self.lock().execute(
            "DELETE FROM templates WHERE workspace = ?1 AND name = ?2 AND generation = ?3",
            params![workspace, name, generation],
        )?;
        Ok(n == 1)
    }

    pub(crate) fn set_sandbox_template_row(
        &self,
        sandbox_id: Uuid,
        template: &str,
    ) -> Result<(), StoreError> {
        self.lock().execute(
            "INSERT INTO sandbox_templates (sandbox_id, template) VALUES (?1, ?2) \
             ON CONFLICT (sandbox_id) DO UPDATE SET template = excluded.template",
            params![sandbox_id.to_string(), template],
        )?;
        Ok(())
    }

    pub(crate) fn sandbox_template_row(
        &self,
        sandbox_id: Uuid,
    ) -> Result<Option<String>, StoreError> {
        Ok(self
            .lock()
            .query_row(
                "SELECT template FROM sandbox_templates WHERE sandbox_id = ?1",
                params![sandbox_id.to_string()],
                |r| r.get(0),
            )
            .optional()?)
    }
}
