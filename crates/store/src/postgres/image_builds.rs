//! The Dockerfile build cache on PostgreSQL (the [`crate::Store`] methods delegate here).

use super::PostgresStore;
use crate::{ImageBuildRecord, StoreError};

impl PostgresStore {
    pub(super) fn put_image_build_row(&self, r: &ImageBuildRecord) -> Result<(), StoreError> {
        let r = r.clone();
        self.pool.run(move |c| {
            c.execute(
                "INSERT INTO image_builds (workspace, cache_key, digest, size_bytes, created_at_ms) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (workspace, cache_key) DO UPDATE SET \
                 digest = excluded.digest, size_bytes = excluded.size_bytes, \
                 created_at_ms = excluded.created_at_ms",
                &[
                    &r.workspace,
                    &r.cache_key,
                    &r.digest,
                    &i64::try_from(r.size_bytes).unwrap_or(i64::MAX),
                    &r.created_at.timestamp_millis(),
                ],
            )?;
            Ok(())
        })
    }

    pub(super) fn get_image_build_row(
        &self,
        workspace: &str,
        cache_key: &str,
    ) -> Result<Option<ImageBuildRecord>, StoreError> {
        let (w, k) = (workspace.to_string(), cache_key.to_string());
        self.pool.run(move |c| {
            let Some(row) = c.query_opt(
                "SELECT workspace, cache_key, digest, size_bytes, created_at_ms FROM image_builds \
                 WHERE workspace = $1 AND cache_key = $2",
                &[&w, &k],
            )?
            else {
                return Ok(None);
            };
            let size: i64 = row.try_get(3)?;
            let ms: i64 = row.try_get(4)?;
            Ok(Some(ImageBuildRecord {
                workspace: row.try_get(0)?,
                cache_key: row.try_get(1)?,
                digest: row.try_get(2)?,
                size_bytes: u64::try_from(size)
                    .map_err(|_| StoreError::Corrupt(format!("image build size {size}").into()))?,
                created_at: chrono::DateTime::from_timestamp_millis(ms).ok_or_else(|| {
                    StoreError::Corrupt(format!("image build created_at {ms}").into())
                })?,
            }))
        })
    }
}
