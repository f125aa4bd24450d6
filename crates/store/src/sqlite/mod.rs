//! Embedded SQLite implementation (WAL, embedded migrations).

use crate::{
    ApiKeyRecord, CreateOutcome, IdempotencyBegin, IdempotencyRecord, NodeRecord, NodeRegistration,
    SandboxCursor, SandboxRecord, SecretRecord, SnapshotCreateOutcome, SnapshotRecord,
    SnapshotStatus, Store, StoreError, WorkspaceQuota, WorkspaceUsage,
};
use chrono::{DateTime, Utc};
use rusqlite::{params, Connection, OptionalExtension, Row};
use sbx_api_types::SandboxStatus;
use std::path::Path;
use std::sync::Mutex;
use uuid::Uuid;

mod e2b;
mod image_builds;
mod images;
mod nodes;
mod previews;
mod templates;
mod volumes;

/// Schema versions, applied in order at open. Version N is `MIGRATIONS[N-1]`;
/// the `schema_version` table (and `PRAGMA user_version`, which sbxd releases
/// before that table read) records how many ran. Forward-only: a shipped file
/// never changes, a change is a new file.
pub(crate) const MIGRATIONS: &[&str] = &[
    include_str!("../../migrations/sqlite/0001_sandboxes.sql"),
    include_str!("../../migrations/sqlite/0002_snapshots_secrets.sql"),
    include_str!("../../migrations/sqlite/0003_network.sql"),
    include_str!("../../migrations/sqlite/0004_tenants.sql"),
    include_str!("../../migrations/sqlite/0005_generation.sql"),
    include_str!("../../migrations/sqlite/0006_idempotency_lease.sql"),
    include_str!("../../migrations/sqlite/0007_nodes.sql"),
    include_str!("../../migrations/sqlite/0008_sandbox_node.sql"),
    include_str!("../../migrations/sqlite/0009_e2b_sandboxes.sql"),
    include_str!("../../migrations/sqlite/0010_sandbox_previews.sql"),
    include_str!("../../migrations/sqlite/0011_volumes.sql"),
    include_str!("../../migrations/sqlite/0012_images.sql"),
    include_str!("../../migrations/sqlite/0013_image_builds.sql"),
    include_str!("../../migrations/sqlite/0014_templates.sql"),
];

/// SQLite-backed [`Store`].
pub struct SqliteStore {
    conn: Mutex<Connection>,
}

impl SqliteStore {
    /// Opens (creating if needed) the database file and applies migrations.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let conn = Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        Self::migrate(conn)
    }

    /// An in-memory database (tests).
    pub fn in_memory() -> Result<Self, StoreError> {
        Self::migrate(Connection::open_in_memory()?)
    }

    fn migrate(mut conn: Connection) -> Result<Self, StoreError> {
        let tx = conn.transaction()?;
        // Bookkeeping, not a numbered migration: created by whichever sbxd first opens the file.
        tx.execute_batch(
            "CREATE TABLE IF NOT EXISTS schema_version (
                 version       INTEGER PRIMARY KEY,
                 applied_at_ms INTEGER NOT NULL
             )",
        )?;
        let recorded: Option<i64> =
            tx.query_row("SELECT MAX(version) FROM schema_version", [], |r| r.get(0))?;
        // Databases from before the table counted in `user_version` only.
        let legacy: i64 = tx.pragma_query_value(None, "user_version", |r| r.get(0))?;
        let found = recorded.unwrap_or(0).max(legacy).max(0) as usize;
        let supported = MIGRATIONS.len();
        if found > supported {
            return Err(StoreError::SchemaTooNew {
                found: found as u32,
                supported: supported as u32,
            });
        }
        let now = ms(Utc::now());
        for version in (recorded.unwrap_or(0).max(0) as usize + 1)..=found {
            // Versions applied by an sbxd that only knew `user_version`.
            tx.execute(
                "INSERT INTO schema_version (version, applied_at_ms) VALUES (?1, ?2)",
                params![version as i64, now],
            )?;
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(found) {
            tx.execute_batch(sql)?;
            tx.execute(
                "INSERT INTO schema_version (version, applied_at_ms) VALUES (?1, ?2)",
                params![(i + 1) as i64, now],
            )?;
            // Kept in step so that an older sbxd, which reads only this, refuses too.
            tx.pragma_update(None, "user_version", i + 1)?;
        }
        tx.commit()?;
        Ok(SqliteStore {
            conn: Mutex::new(conn),
        })
    }

    /// The schema version the database is at (tests).
    pub fn schema_version(&self) -> Result<u32, StoreError> {
        let conn = self.lock();
        let v: i64 = conn.query_row("SELECT MAX(version) FROM schema_version", [], |r| r.get(0))?;
        Ok(v.max(0) as u32)
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave a half-written row (SQLite
        // transactions roll back), so a poisoned lock is safe to reuse.
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Copies the SQLite database at `source` into a new file `target`, online:
/// `VACUUM INTO` reads one consistent snapshot (a read transaction; in WAL
/// mode writers go on meanwhile), whatever processes write the file. The
/// copy is checked with `PRAGMA quick_check`. `source` must exist (it is
/// never created) and `target` must not.
pub fn backup_sqlite(source: &Path, target: &Path) -> Result<(), StoreError> {
    use rusqlite::OpenFlags;
    let conn = Connection::open_with_flags(
        source,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(std::time::Duration::from_secs(30))?;
    let target_str = target.to_str().ok_or_else(|| {
        StoreError::Database(format!("backup path {} is not UTF-8", target.display()).into())
    })?;
    conn.execute("VACUUM INTO ?1", params![target_str])?;
    let copy = Connection::open_with_flags(target, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let check: String = copy.query_row("PRAGMA quick_check", [], |r| r.get(0))?;
    if check != "ok" {
        return Err(StoreError::Corrupt(
            format!(
                "the backup copy of {} fails its check: {check}",
                source.display()
            )
            .into(),
        ));
    }
    Ok(())
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        use rusqlite::ErrorCode as C;
        match e.sqlite_error_code() {
            // SQLite answers SQLITE_FULL when a write needs a page the disk cannot
            // give (ENOSPC); callers tell that apart because it heals by itself.
            Some(C::DiskFull) => StoreError::Full(Box::new(e)),
            // Another connection holds the lock past the busy timeout: try again.
            Some(C::DatabaseBusy | C::DatabaseLocked) => StoreError::Unavailable(Box::new(e)),
            Some(C::DatabaseCorrupt | C::NotADatabase) => StoreError::Corrupt(Box::new(e)),
            Some(C::ConstraintViolation) => StoreError::Conflict(Box::new(e)),
            _ => match e {
                rusqlite::Error::FromSqlConversionFailure(..)
                | rusqlite::Error::InvalidColumnType(..)
                | rusqlite::Error::IntegralValueOutOfRange(..) => StoreError::Corrupt(Box::new(e)),
                other => StoreError::Database(Box::new(other)),
            },
        }
    }
}

const SANDBOX_COLUMNS: &str =
    "id, workspace, name, status, vcpu, memory_mb, environment, secrets, snapshot_id, \
     image_ref, created_at_ms, started_at_ms, ended_at_ms, error, active_ms, running_since_ms, network, generation, node_id";

/// A transaction that reads and then writes. IMMEDIATE takes the write lock
/// at its start, waiting out the busy timeout: a deferred one that read first
/// fails at once (SQLITE_BUSY) when another connection to the file wrote
/// meanwhile, as a second sbxd or a second store handle on one file does.
pub(crate) fn write_transaction(
    conn: &mut Connection,
) -> rusqlite::Result<rusqlite::Transaction<'_>> {
    conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
}

/// Why a compare-and-set update of `table` changed no row: the row moved past
/// `generation` (a conflict) or there is no such row.
pub(crate) fn missed_update(
    conn: &Connection,
    table: &str,
    id: Uuid,
    generation: u64,
) -> Result<StoreError, StoreError> {
    let current: Option<i64> = conn
        .query_row(
            &format!("SELECT generation FROM {table} WHERE id = ?1"),
            params![id.to_string()],
            |row| row.get(0),
        )
        .optional()?;
    Ok(match current {
        Some(now) => StoreError::Conflict(
            format!("{table} row {id} is at generation {now}, not {generation}").into(),
        ),
        None => StoreError::NotFound,
    })
}

pub(crate) fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

pub(crate) fn from_ms(v: Option<i64>) -> Option<DateTime<Utc>> {
    v.and_then(DateTime::<Utc>::from_timestamp_millis)
}

pub(crate) fn corrupt(what: impl std::fmt::Display) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(
        0,
        rusqlite::types::Type::Text,
        what.to_string().into(),
    )
}

fn sandbox_from_row(row: &Row<'_>) -> rusqlite::Result<SandboxRecord> {
    let id: String = row.get(0)?;
    let status: String = row.get(3)?;
    let environment: String = row.get(6)?;
    let secrets: String = row.get(7)?;
    let snapshot_id: Option<String> = row.get(8)?;
    Ok(SandboxRecord {
        id: Uuid::parse_str(&id).map_err(corrupt)?,
        workspace: row.get(1)?,
        name: row.get(2)?,
        status: SandboxStatus::parse(&status).ok_or_else(|| corrupt(format!("status {status}")))?,
        vcpu: row.get(4)?,
        memory_mb: row.get(5)?,
        environment: serde_json::from_str(&environment).map_err(corrupt)?,
        secrets: serde_json::from_str(&secrets).map_err(corrupt)?,
        snapshot_id: snapshot_id
            .map(|s| Uuid::parse_str(&s))
            .transpose()
            .map_err(corrupt)?,
        image_ref: row.get(9)?,
        created_at: from_ms(Some(row.get(10)?)).ok_or_else(|| corrupt("created_at"))?,
        started_at: from_ms(row.get(11)?),
        ended_at: from_ms(row.get(12)?),
        error: row.get(13)?,
        active_ms: row.get::<_, i64>(14)?.max(0) as u64,
        running_since: from_ms(row.get(15)?),
        network: network_from_column(row.get(16)?)?,
        generation: row.get::<_, i64>(17)?.max(0) as u64,
        node_id: row.get(18)?,
    })
}

/// The `network` column: NULL (rows older than policies) means `none`.
pub(crate) fn network_from_column(
    v: Option<String>,
) -> rusqlite::Result<sbx_api_types::NetworkPolicy> {
    match v {
        None => Ok(sbx_api_types::NetworkPolicy::default()),
        Some(s) => serde_json::from_str(&s).map_err(corrupt),
    }
}

pub(crate) fn json(v: &impl serde::Serialize) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "null".into())
}

impl Store for SqliteStore {
    fn create_sandbox_within(
        &self,
        r: &SandboxRecord,
        quota: &WorkspaceQuota,
    ) -> Result<CreateOutcome, StoreError> {
        let mut conn = self.lock();
        let tx = write_transaction(&mut conn)?;
        let existing = tx
            .query_row(
                &format!("SELECT {SANDBOX_COLUMNS} FROM sandboxes WHERE workspace = ?1 AND name = ?2 AND active = 1"),
                params![r.workspace, r.name],
                sandbox_from_row,
            )
            .optional()?;
        if let Some(existing) = existing {
            return Ok(CreateOutcome::NameHeld(Box::new(existing)));
        }
        if !quota.is_unlimited() {
            // One writer at a time (the write transaction): the count and the
            // insert cannot interleave with another create.
            let used = tx.query_row(
                "SELECT COUNT(*), COALESCE(SUM(vcpu), 0), COALESCE(SUM(memory_mb), 0) \
                 FROM sandboxes WHERE workspace = ?1 AND active = 1",
                params![r.workspace],
                |row| {
                    Ok(WorkspaceUsage {
                        sandboxes: row.get::<_, i64>(0)?.max(0) as u64,
                        vcpus: row.get::<_, i64>(1)?.max(0) as u64,
                        memory_mb: row.get::<_, i64>(2)?.max(0) as u64,
                    })
                },
            )?;
            if !quota.admits(&used, r) {
                return Ok(CreateOutcome::QuotaReached(used));
            }
        }
        tx.execute(
            &format!("INSERT INTO sandboxes ({SANDBOX_COLUMNS}, active) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18,?19,?20)"),
            params![
                r.id.to_string(),
                r.workspace,
                r.name,
                r.status.as_str(),
                r.vcpu,
                r.memory_mb,
                json(&r.environment),
                json(&r.secrets),
                r.snapshot_id.map(|s| s.to_string()),
                r.image_ref,
                ms(r.created_at),
                r.started_at.map(ms),
                r.ended_at.map(ms),
                r.error,
                r.active_ms as i64,
                r.running_since.map(ms),
                json(&r.network),
                r.generation as i64,
                r.node_id,
                r.status.is_active(),
            ],
        )?;
        tx.commit()?;
        Ok(CreateOutcome::Created)
    }

    fn active_sandbox_named(
        &self,
        workspace: &str,
        name: &str,
    ) -> Result<Option<SandboxRecord>, StoreError> {
        let conn = self.lock();
        Ok(conn
            .query_row(
                &format!("SELECT {SANDBOX_COLUMNS} FROM sandboxes WHERE workspace = ?1 AND name = ?2 AND active = 1"),
                params![workspace, name],
                sandbox_from_row,
            )
            .optional()?)
    }

    fn get_sandbox(&self, id: Uuid) -> Result<Option<SandboxRecord>, StoreError> {
        let conn = self.lock();
        Ok(conn
            .query_row(
                &format!("SELECT {SANDBOX_COLUMNS} FROM sandboxes WHERE id = ?1"),
                params![id.to_string()],
                sandbox_from_row,
            )
            .optional()?)
    }

    fn update_sandbox(&self, r: &mut SandboxRecord) -> Result<(), StoreError> {
        let conn = self.lock();
        let n = conn.execute(
            "UPDATE sandboxes SET status = ?2, started_at_ms = ?3, ended_at_ms = ?4, error = ?5, \
             active_ms = ?6, running_since_ms = ?7, active = ?8, environment = ?9, secrets = ?10, \
             network = ?12, generation = generation + 1 WHERE id = ?1 AND generation = ?11",
            params![
                r.id.to_string(),
                r.status.as_str(),
                r.started_at.map(ms),
                r.ended_at.map(ms),
                r.error,
                r.active_ms as i64,
                r.running_since.map(ms),
                r.status.is_active(),
                json(&r.environment),
                json(&r.secrets),
                r.generation as i64,
                json(&r.network),
            ],
        )?;
        if n == 0 {
            return Err(missed_update(&conn, "sandboxes", r.id, r.generation)?);
        }
        r.generation += 1;
        Ok(())
    }

    fn list_sandboxes(
        &self,
        workspace: &str,
        limit: u32,
        after: Option<&SandboxCursor>,
    ) -> Result<Vec<SandboxRecord>, StoreError> {
        let conn = self.lock();
        let (cursor_ms, cursor_id) = match after {
            Some(c) => (c.created_at_ms, c.id.to_string()),
            None => (i64::MAX, String::new()),
        };
        let mut stmt = conn.prepare(&format!(
            "SELECT {SANDBOX_COLUMNS} FROM sandboxes WHERE workspace = ?1 \
             AND (created_at_ms < ?2 OR (created_at_ms = ?2 AND id < ?3) OR ?4 = 0) \
             ORDER BY created_at_ms DESC, id DESC LIMIT ?5"
        ))?;
        let rows = stmt.query_map(
            params![workspace, cursor_ms, cursor_id, after.is_some(), limit],
            sandbox_from_row,
        )?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    fn sandboxes_in_status(
        &self,
        node_id: Option<&str>,
        statuses: &[SandboxStatus],
    ) -> Result<Vec<SandboxRecord>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare(&format!(
            "SELECT {SANDBOX_COLUMNS} FROM sandboxes WHERE (?1 IS NULL OR node_id = ?1) AND status = ?2"
        ))?;
        let mut out = Vec::new();
        for s in statuses {
            let rows = stmt.query_map(params![node_id, s.as_str()], sandbox_from_row)?;
            for row in rows {
                out.push(row?);
            }
        }
        Ok(out)
    }

    fn create_snapshot(
        &self,
        r: &SnapshotRecord,
        now: DateTime<Utc>,
        max_live: u32,
    ) -> Result<SnapshotCreateOutcome, StoreError> {
        self.insert_snapshot(r, now, max_live)
    }

    fn get_snapshot(&self, id: Uuid) -> Result<Option<SnapshotRecord>, StoreError> {
        self.get_snapshot_row(id)
    }

    fn update_snapshot(&self, r: &mut SnapshotRecord) -> Result<(), StoreError> {
        self.update_snapshot_row(r)
    }

    fn list_snapshots(
        &self,
        workspace: &str,
        name: Option<&str>,
        limit: u32,
        after: Option<&SandboxCursor>,
    ) -> Result<Vec<SnapshotRecord>, StoreError> {
        self.list_snapshot_rows(workspace, name, limit, after)
    }

    fn snapshots_in_status(
        &self,
        statuses: &[SnapshotStatus],
    ) -> Result<Vec<SnapshotRecord>, StoreError> {
        self.snapshot_rows_in_status(statuses)
    }

    fn put_secret(&self, r: &SecretRecord) -> Result<(), StoreError> {
        self.put_secret_row(r)
    }

    fn get_secret(&self, workspace: &str, name: &str) -> Result<Option<SecretRecord>, StoreError> {
        self.get_secret_row(workspace, name)
    }

    fn list_secrets(&self, workspace: &str) -> Result<Vec<SecretRecord>, StoreError> {
        self.list_secret_rows(workspace)
    }

    fn delete_secret(&self, workspace: &str, name: &str) -> Result<bool, StoreError> {
        self.delete_secret_row(workspace, name)
    }

    fn list_all_secrets(&self) -> Result<Vec<SecretRecord>, StoreError> {
        self.list_all_secret_rows()
    }

    fn replace_secret_ciphertext(
        &self,
        current: &SecretRecord,
        nonce: &[u8],
        ciphertext: &[u8],
    ) -> Result<bool, StoreError> {
        self.replace_secret_ciphertext_row(current, nonce, ciphertext)
    }

    fn create_api_key(&self, r: &ApiKeyRecord) -> Result<(), StoreError> {
        self.insert_api_key(r)
    }

    fn find_api_key(&self, digest: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        self.api_key_by_digest(digest)
    }

    fn list_api_keys(&self) -> Result<Vec<ApiKeyRecord>, StoreError> {
        self.api_key_rows()
    }

    fn revoke_api_key(&self, id: Uuid, now: DateTime<Utc>) -> Result<bool, StoreError> {
        self.revoke_api_key_row(id, now)
    }

    fn idempotency_begin(
        &self,
        r: &IdempotencyRecord,
        now: DateTime<Utc>,
    ) -> Result<IdempotencyBegin, StoreError> {
        self.idempotency_claim(r, now)
    }

    fn idempotency_get(
        &self,
        tenant: &str,
        path: &str,
        key: &str,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.idempotency_row(tenant, path, key)
    }

    fn idempotency_finish(
        &self,
        tenant: &str,
        path: &str,
        key: &str,
        status: u16,
        body: &[u8],
    ) -> Result<(), StoreError> {
        self.idempotency_store_response(tenant, path, key, status, body)
    }

    fn idempotency_forget(&self, tenant: &str, path: &str, key: &str) -> Result<(), StoreError> {
        self.idempotency_delete(tenant, path, key)
    }

    fn idempotency_expire(&self, now: DateTime<Utc>) -> Result<usize, StoreError> {
        self.idempotency_delete_expired(now)
    }

    fn is_shared(&self) -> bool {
        false
    }

    fn idempotency_renew(&self, owner: Uuid, until: DateTime<Utc>) -> Result<usize, StoreError> {
        self.idempotency_extend_leases(owner, until)
    }

    fn idempotency_abandon_others(&self, owner: Uuid) -> Result<usize, StoreError> {
        self.idempotency_end_leases_except(owner)
    }

    fn register_node(
        &self,
        node: &NodeRegistration,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> Result<NodeRecord, StoreError> {
        self.register_node_row(node, now, lease_until)
    }

    fn heartbeat_node(
        &self,
        id: &str,
        epoch: u64,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> Result<NodeRecord, StoreError> {
        self.heartbeat_node_row(id, epoch, now, lease_until)
    }

    fn list_nodes(&self) -> Result<Vec<NodeRecord>, StoreError> {
        self.node_rows()
    }

    fn set_node_draining(&self, id: &str, draining: bool) -> Result<NodeRecord, StoreError> {
        self.set_node_draining_row(id, draining)
    }

    fn fail_over_node(
        &self,
        id: &str,
        epoch: u64,
        now: DateTime<Utc>,
    ) -> Result<Option<crate::FailOver>, StoreError> {
        self.fail_over_node_row(id, epoch, now)
    }

    fn adopt_unowned_sandboxes(&self, node_id: &str) -> Result<usize, StoreError> {
        self.adopt_unowned_sandboxes_row(node_id)
    }

    fn node_usage(&self) -> Result<Vec<crate::NodeUsage>, StoreError> {
        self.node_usage_rows()
    }

    fn create_e2b_record(&self, record: &crate::E2bRecord) -> Result<bool, StoreError> {
        self.create_e2b_row(record)
    }

    fn get_e2b_record(&self, id: Uuid) -> Result<Option<crate::E2bRecord>, StoreError> {
        self.get_e2b_row(id)
    }

    fn update_e2b_record(&self, record: &mut crate::E2bRecord) -> Result<(), StoreError> {
        self.update_e2b_row(record)
    }

    fn list_e2b_records(
        &self,
        workspace: Option<&str>,
        metadata: &std::collections::BTreeMap<String, String>,
    ) -> Result<Vec<crate::E2bRecord>, StoreError> {
        self.list_e2b_rows(workspace, metadata)
    }

    fn e2b_records_due(
        &self,
        node_id: &str,
        now: DateTime<Utc>,
    ) -> Result<Vec<crate::E2bRecord>, StoreError> {
        self.e2b_rows_due(node_id, now)
    }

    fn delete_e2b_record(&self, id: Uuid) -> Result<bool, StoreError> {
        self.delete_e2b_row(id)
    }

    fn delete_ended_e2b_records(&self) -> Result<usize, StoreError> {
        self.delete_ended_e2b_rows()
    }

    fn put_preview(&self, record: &crate::PreviewRecord) -> Result<(), StoreError> {
        self.put_preview_row(record)
    }

    fn get_preview(&self, id: Uuid) -> Result<Option<crate::PreviewRecord>, StoreError> {
        self.get_preview_row(id)
    }

    fn delete_preview(&self, id: Uuid) -> Result<bool, StoreError> {
        self.delete_preview_row(id)
    }

    fn delete_ended_previews(&self) -> Result<usize, StoreError> {
        self.delete_ended_preview_rows()
    }

    fn list_previews(&self) -> Result<Vec<crate::PreviewRecord>, StoreError> {
        self.list_preview_rows()
    }

    fn insert_volume(&self, record: &crate::VolumeRecord) -> Result<bool, StoreError> {
        self.insert_volume_row(record)
    }

    fn get_volume(&self, id: Uuid) -> Result<Option<crate::VolumeRecord>, StoreError> {
        self.get_volume_row(id)
    }

    fn volume_named(
        &self,
        workspace: &str,
        name: &str,
    ) -> Result<Option<crate::VolumeRecord>, StoreError> {
        self.volume_named_row(workspace, name)
    }

    fn list_volumes(
        &self,
        workspace: Option<&str>,
    ) -> Result<Vec<crate::VolumeRecord>, StoreError> {
        self.list_volume_rows(workspace)
    }

    fn delete_volume(&self, id: Uuid) -> Result<bool, StoreError> {
        self.delete_volume_row(id)
    }

    fn put_volume_mounts(&self, mounts: &[crate::VolumeMountRecord]) -> Result<(), StoreError> {
        self.put_mount_rows(mounts)
    }

    fn sandbox_mounts(
        &self,
        sandbox_id: Uuid,
    ) -> Result<Vec<crate::VolumeMountRecord>, StoreError> {
        self.mounts_where("sandbox_id", sandbox_id)
    }

    fn volume_mounts(&self, volume_id: Uuid) -> Result<Vec<crate::VolumeMountRecord>, StoreError> {
        self.mounts_where("volume_id", volume_id)
    }

    fn put_image_build(&self, record: &crate::ImageBuildRecord) -> Result<(), StoreError> {
        self.put_image_build_row(record)
    }

    fn get_image_build(
        &self,
        workspace: &str,
        cache_key: &str,
    ) -> Result<Option<crate::ImageBuildRecord>, StoreError> {
        self.get_image_build_row(workspace, cache_key)
    }

    fn put_image(
        &self,
        record: &crate::ImageRecord,
    ) -> Result<Option<crate::ImageRecord>, StoreError> {
        self.put_image_row(record)
    }

    fn get_image(
        &self,
        workspace: &str,
        name: &str,
        tag: &str,
    ) -> Result<Option<crate::ImageRecord>, StoreError> {
        self.get_image_row(workspace, name, tag)
    }

    fn list_images(&self, workspace: Option<&str>) -> Result<Vec<crate::ImageRecord>, StoreError> {
        self.list_image_rows(workspace)
    }

    fn images_with_digest(&self, digest: &str) -> Result<Vec<crate::ImageRecord>, StoreError> {
        self.image_rows_with_digest(digest)
    }

    fn delete_image(&self, workspace: &str, name: &str, tag: &str) -> Result<bool, StoreError> {
        self.delete_image_row(workspace, name, tag)
    }

    fn create_template(&self, record: &crate::TemplateRecord) -> Result<bool, StoreError> {
        self.create_template_row(record)
    }

    fn get_template(
        &self,
        workspace: &str,
        name: &str,
    ) -> Result<Option<crate::TemplateRecord>, StoreError> {
        self.get_template_row(workspace, name)
    }

    fn list_templates(
        &self,
        workspace: Option<&str>,
    ) -> Result<Vec<crate::TemplateRecord>, StoreError> {
        self.list_template_rows(workspace)
    }

    fn update_template(&self, record: &crate::TemplateRecord) -> Result<bool, StoreError> {
        self.update_template_row(record)
    }

    fn delete_template(
        &self,
        workspace: &str,
        name: &str,
        generation: i64,
    ) -> Result<bool, StoreError> {
        self.delete_template_row(workspace, name, generation)
    }

    fn set_sandbox_template(&self, sandbox_id: Uuid, template: &str) -> Result<(), StoreError> {
        self.set_sandbox_template_row(sandbox_id, template)
    }

    fn sandbox_template(&self, sandbox_id: Uuid) -> Result<Option<String>, StoreError> {
        self.sandbox_template_row(sandbox_id)
    }
}

#[cfg(test)]
mod tests;
