//! Volume and mount rows on PostgreSQL (the [`crate::Store`] methods delegate here).

use super::PostgresStore;
use crate::volumes::{MOUNT_COLUMNS, VOLUME_COLUMNS};
use crate::{StoreError, VolumeMountRecord, VolumeRecord};
use postgres::Row;
use uuid::Uuid;

fn volume(row: &Row) -> Result<VolumeRecord, StoreError> {
    let size: i64 = row.try_get(4)?;
    let ms: i64 = row.try_get(6)?;
    Ok(VolumeRecord {
        id: row.try_get(0)?,
        workspace: row.try_get(1)?,
        name: row.try_get(2)?,
        kind: row.try_get(3)?,
        size_mb: u64::try_from(size)
            .map_err(|_| StoreError::Corrupt(format!("volume size {size}").into()))?,
        node_id: row.try_get(5)?,
        created_at: chrono::DateTime::from_timestamp_millis(ms)
            .ok_or_else(|| StoreError::Corrupt(format!("volume created_at {ms}").into()))?,
    })
}

fn mount(row: &Row) -> Result<VolumeMountRecord, StoreError> {
    Ok(VolumeMountRecord {
        sandbox_id: row.try_get(0)?,
        volume_id: row.try_get(1)?,
        path: row.try_get(2)?,
        read_only: row.try_get(3)?,
    })
}

impl PostgresStore {
    pub(super) fn insert_volume_row(&self, v: &VolumeRecord) -> Result<bool, StoreError> {
        let v = v.clone();
        self.pool.run(move |c| {
            let size = i64::try_from(v.size_mb).unwrap_or(i64::MAX);
            let n = c.execute(
                &format!(
                    "INSERT INTO volumes ({VOLUME_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7) \
                     ON CONFLICT (workspace, name) DO NOTHING"
                ),
                &[
                    &v.id,
                    &v.workspace,
                    &v.name,
                    &v.kind,
                    &size,
                    &v.node_id,
                    &v.created_at.timestamp_millis(),
                ],
            )?;
            Ok(n == 1)
        })
    }

    pub(super) fn get_volume_row(&self, id: Uuid) -> Result<Option<VolumeRecord>, StoreError> {
        self.pool.run(move |c| {
            c.query_opt(
                &format!("SELECT {VOLUME_COLUMNS} FROM volumes WHERE id = $1"),
                &[&id],
            )?
            .map(|row| volume(&row))
            .transpose()
        })
    }

    pub(super) fn volume_named_row(
        &self,
        workspace: &str,
        name: &str,
    ) -> Result<Option<VolumeRecord>, StoreError> {
        let (workspace, name) = (workspace.to_string(), name.to_string());
        self.pool.run(move |c| {
            c.query_opt(
                &format!("SELECT {VOLUME_COLUMNS} FROM volumes WHERE workspace = $1 AND name = $2"),
                &[&workspace, &name],
            )?
            .map(|row| volume(&row))
            .transpose()
        })
    }

    pub(super) fn list_volume_rows(
        &self,
        workspace: Option<&str>,
    ) -> Result<Vec<VolumeRecord>, StoreError> {
        let workspace = workspace.map(str::to_string);
        self.pool.run(move |c| {
            c.query(
                &format!(
                    "SELECT {VOLUME_COLUMNS} FROM volumes \
                     WHERE $1::text IS NULL OR workspace = $1 ORDER BY workspace, name"
                ),
                &[&workspace],
            )?
            .iter()
            .map(volume)
            .collect()
        })
    }

    pub(super) fn delete_volume_row(&self, id: Uuid) -> Result<bool, StoreError> {
        self.pool.run(move |c| {
            let mut tx = c.transaction()?;
            tx.execute("DELETE FROM volume_mounts WHERE volume_id = $1", &[&id])?;
            let n = tx.execute("DELETE FROM volumes WHERE id = $1", &[&id])?;
            tx.commit()?;
            Ok(n == 1)
        })
    }

    pub(super) fn put_mount_rows(&self, mounts: &[VolumeMountRecord]) -> Result<(), StoreError> {
        let mounts = mounts.to_vec();
        self.pool.run(move |c| {
            let mut tx = c.transaction()?;
            for m in &mounts {
                tx.execute(
                    &format!(
                        "INSERT INTO volume_mounts ({MOUNT_COLUMNS}) VALUES ($1, $2, $3, $4) \
                         ON CONFLICT (sandbox_id, path) DO UPDATE SET \
                         volume_id = EXCLUDED.volume_id, read_only = EXCLUDED.read_only"
                    ),
                    &[&m.sandbox_id, &m.volume_id, &m.path, &m.read_only],
                )?;
            }
            tx.commit()?;
            Ok(())
        })
    }

    pub(super) fn mounts_where(
        &self,
        column: &'static str,
        id: Uuid,
    ) -> Result<Vec<VolumeMountRecord>, StoreError> {
        self.pool.run(move |c| {
            c.query(
                &format!(
                    "SELECT {MOUNT_COLUMNS} FROM volume_mounts WHERE {column} = $1 \
                     ORDER BY sandbox_id, path"
                ),
                &[&id],
            )?
            .iter()
            .map(mount)
            .collect()
        })
    }
}
