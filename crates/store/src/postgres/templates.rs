//! Template rows on PostgreSQL (the [`crate::Store`] methods delegate here).

use super::PostgresStore;
use crate::templates::{parts, snapshot_text, TEMPLATE_COLUMNS};
use crate::{StoreError, TemplateRecord};
use postgres::Row;
use uuid::Uuid;

fn template(row: &Row) -> Result<TemplateRecord, StoreError> {
    let (snapshot_id, created_at, updated_at) =
        parts(row.try_get(6)?, row.try_get(8)?, row.try_get(9)?)
            .map_err(|e| StoreError::Corrupt(e.into()))?;
    Ok(TemplateRecord {
        workspace: row.try_get(0)?,
        name: row.try_get(1)?,
        spec: row.try_get(2)?,
        status: row.try_get(3)?,
        error: row.try_get(4)?,
        image_ref: row.try_get(5)?,
        snapshot_id,
        generation: row.try_get(7)?,
        created_at,
        updated_at,
    })
}

impl PostgresStore {
    pub(super) fn create_template_row(&self, r: &TemplateRecord) -> Result<bool, StoreError> {
        let r = r.clone();
        self.pool.run(move |c| {
            let n = c.execute(
                &format!(
                    "INSERT INTO templates ({TEMPLATE_COLUMNS}) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
                     ON CONFLICT (workspace, name) DO NOTHING"
                ),
                &[
                    &r.workspace,
                    &r.name,
                    &r.spec,
                    &r.status,
                    &r.error,
                    &r.image_ref,
                    &snapshot_text(&r),
                    &r.generation,
                    &r.created_at.timestamp_millis(),
                    &r.updated_at.timestamp_millis(),
                ],
            )?;
            Ok(n == 1)
        })
    }

    pub(super) fn get_template_row(
        &self,
        workspace: &str,
        name: &str,
    ) -> Result<Option<TemplateRecord>, StoreError> {
        let (w, n) = (workspace.to_string(), name.to_string());
        self.pool.run(move |c| {
            c.query_opt(
                &format!(
                    "SELECT {TEMPLATE_COLUMNS} FROM templates WHERE workspace = $1 AND name = $2"
                ),
                &[&w, &n],
            )?
            .map(|row| template(&row))
            .transpose()
        })
    }

    pub(super) fn list_template_rows(
        &self,
        workspace: Option<&str>,
    ) -> Result<Vec<TemplateRecord>, StoreError> {
        let w = workspace.map(str::to_string);
        self.pool.run(move |c| {
            c.query(
                &format!(
                    "SELECT {TEMPLATE_COLUMNS} FROM templates \
                     WHERE $1::text IS NULL OR workspace = $1 ORDER BY workspace, name"
                ),
                &[&w],
            )?
            .iter()
            .map(template)
            .collect()
        })
    }

    pub(super) fn update_template_row(&self, r: &TemplateRecord) -> Result<bool, StoreError> {
        let r = r.clone();
        self.pool.run(move |c| {
            let n = c.execute(
                "UPDATE templates SET spec = $3, status = $4, error = $5, image_ref = $6, \
                 snapshot_id = $7, generation = generation + 1, updated_at_ms = $8 \
                 WHERE workspace = $1 AND name = $2 AND generation = $9",
                &[
                    &r.workspace,
                    &r.name,
                    &r.spec,
                    &r.status,
                    &r.error,
                    &r.image_ref,
                    &snapshot_text(&r),
                    &r.updated_at.timestamp_millis(),
                    &r.generation,
                ],
            )?;
            Ok(n == 1)
        })
    }

    pub(super) fn delete_template_row(
        &self,
        workspace: &str,
        name: &str,
        generation: i64,
    ) -> Result<bool, StoreError> {
        let (w, n) = (workspace.to_string(), name.to_string());
        self.pool.run(move |c| {
            let gone = c.execute(
                "DELETE FROM templates WHERE workspace = $1 AND name = $2 AND generation = $3",
                &[&w, &n, &generation],
            )?;
            Ok(gone == 1)
        })
    }

    pub(super) fn set_sandbox_template_row(
        &self,
        sandbox_id: Uuid,
        template: &str,
    ) -> Result<(), StoreError> {
        let (id, t) = (sandbox_id.to_string(), template.to_string());
        self.pool.run(move |c| {
            c.execute(
                "INSERT INTO sandbox_templates (sandbox_id, template) VALUES ($1, $2) \
                 ON CONFLICT (sandbox_id) DO UPDATE SET template = EXCLUDED.template",
                &[&id, &t],
            )?;
            Ok(())
        })
    }

    pub(super) fn sandbox_template_row(
        &self,
        sandbox_id: Uuid,
    ) -> Result<Option<String>, StoreError> {
        let id = sandbox_id.to_string();
        self.pool.run(move |c| {
            Ok(c.query_opt(
                "SELECT template FROM sandbox_templates WHERE sandbox_id = $1",
                &[&id],
            )?
            .map(|row| row.try_get(0))
            .transpose()?)
        })
    }
}
