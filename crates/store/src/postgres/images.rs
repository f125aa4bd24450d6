//! Image rows on PostgreSQL (the [`crate::Store`] methods delegate here).

use super::PostgresStore;
use crate::images::IMAGE_COLUMNS;
use crate::{ImageRecord, StoreError};
use postgres::Row;

fn image(row: &Row) -> Result<ImageRecord, StoreError> {
    let size: i64 = row.try_get(4)?;
    let ms: i64 = row.try_get(8)?;
    Ok(ImageRecord {
        workspace: row.try_get(0)?,
        name: row.try_get(1)?,
        tag: row.try_get(2)?,
        digest: row.try_get(3)?,
        size_bytes: u64::try_from(size)
            .map_err(|_| StoreError::Corrupt(format!("image size {size}").into()))?,
        origin: row.try_get(5)?,
        config: row.try_get(6)?,
        node_id: row.try_get(7)?,
        created_at: chrono::DateTime::from_timestamp_millis(ms)
            .ok_or_else(|| StoreError::Corrupt(format!("image created_at {ms}").into()))?,
    })
}

impl PostgresStore {
    pub(super) fn put_image_row(&self, r: &ImageRecord) -> Result<Option<ImageRecord>, StoreError> {
        let r = r.clone();
        self.pool.run(move |c| {
            let mut tx = c.transaction()?;
            let previous = tx
                .query_opt(
                    &format!(
                        "SELECT {IMAGE_COLUMNS} FROM images \
                         WHERE workspace = $1 AND name = $2 AND tag = $3 FOR UPDATE"
                    ),
                    &[&r.workspace, &r.name, &r.tag],
                )?
                .map(|row| image(&row))
                .transpose()?;
            let size = i64::try_from(r.size_bytes).unwrap_or(i64::MAX);
            tx.execute(
                &format!(
                    "INSERT INTO images ({IMAGE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
                     ON CONFLICT (workspace, name, tag) DO UPDATE SET digest = EXCLUDED.digest, \
                     size_bytes = EXCLUDED.size_bytes, origin = EXCLUDED.origin, \
                     config = EXCLUDED.config, node_id = EXCLUDED.node_id, \
                     created_at_ms = EXCLUDED.created_at_ms"
                ),
                &[
                    &r.workspace,
                    &r.name,
                    &r.tag,
                    &r.digest,
                    &size,
                    &r.origin,
                    &r.config,
                    &r.node_id,
                    &r.created_at.timestamp_millis(),
                ],
            )?;
            tx.commit()?;
            Ok(previous)
        })
    }

    pub(super) fn get_image_row(
        &self,
        workspace: &str,
        name: &str,
        tag: &str,
    ) -> Result<Option<ImageRecord>, StoreError> {
        let (w, n, t) = (workspace.to_string(), name.to_string(), tag.to_string());
        self.pool.run(move |c| {
            c.query_opt(
                &format!(
                    "SELECT {IMAGE_COLUMNS} FROM images WHERE workspace = $1 AND name = $2 AND tag = $3"
                ),
                &[&w, &n, &t],
            )?
            .map(|row| image(&row))
            .transpose()
        })
    }

    pub(super) fn list_image_rows(
        &self,
        workspace: Option<&str>,
    ) -> Result<Vec<ImageRecord>, StoreError> {
        let workspace = workspace.map(str::to_string);
        self.pool.run(move |c| {
            c.query(
                &format!(
                    "SELECT {IMAGE_COLUMNS} FROM images \
                     WHERE $1::text IS NULL OR workspace = $1 ORDER BY workspace, name, tag"
                ),
                &[&workspace],
            )?
            .iter()
            .map(image)
            .collect()
        })
    }

    pub(super) fn image_rows_with_digest(
        &self,
        digest: &str,
    ) -> Result<Vec<ImageRecord>, StoreError> {
        let digest = digest.to_string();
        self.pool.run(move |c| {
            c.query(
                &format!(
                    "SELECT {IMAGE_COLUMNS} FROM images WHERE digest = $1 \
                     ORDER BY workspace, name, tag"
                ),
                &[&digest],
            )?
            .iter()
            .map(image)
            .collect()
        })
    }

    pub(super) fn delete_image_row(
        &self,
        workspace: &str,
        name: &str,
        tag: &str,
    ) -> Result<bool, StoreError> {
        let (w, n, t) = (workspace.to_string(), name.to_string(), tag.to_string());
        self.pool.run(move |c| {
            let n = c.execute(
                "DELETE FROM images WHERE workspace = $1 AND name = $2 AND tag = $3",
                &[&w, &n, &t],
            )?;
            Ok(n == 1)
        })
    }
}
