//! The Dockerfile build cache in SQLite (the [`crate::Store`] methods delegate here).

use super::{corrupt, SqliteStore};
use crate::{ImageBuildRecord, StoreError};
use rusqlite::{params, OptionalExtension};

impl SqliteStore {
    pub(crate) fn put_image_build_row(&self, r: &ImageBuildRecord) -> Result<(), StoreError> {
        self.lock().execute(
            "INSERT INTO image_builds (workspace, cache_key, digest, size_bytes, created_at_ms) \
             VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (workspace, cache_key) DO UPDATE SET \
             digest = excluded.digest, size_bytes = excluded.size_bytes, \
             created_at_ms = excluded.created_at_ms",
            params![
                r.workspace,
                r.cache_key,
                r.digest,
                i64::try_from(r.size_bytes).unwrap_or(i64::MAX),
                r.created_at.timestamp_millis()
            ],
        )?;
        Ok(())
    }

    pub(crate) fn get_image_build_row(
        &self,
        workspace: &str,
        cache_key: &str,
    ) -> Result<Option<ImageBuildRecord>, StoreError> {
        Ok(self
            .lock()
            .query_row(
                "SELECT workspace, cache_key, digest, size_bytes, created_at_ms FROM image_builds \
                 WHERE workspace = ?1 AND cache_key = ?2",
                params![workspace, cache_key],
                |row| {
                    let size: i64 = row.get(3)?;
                    let ms: i64 = row.get(4)?;
                    Ok(ImageBuildRecord {
                        workspace: row.get(0)?,
                        cache_key: row.get(1)?,
                        digest: row.get(2)?,
                        size_bytes: u64::try_from(size).map_err(corrupt)?,
                        created_at: chrono::DateTime::from_timestamp_millis(ms)
                            .ok_or_else(|| corrupt("image build created_at"))?,
                    })
                },
            )
            .optional()?)
    }
}
