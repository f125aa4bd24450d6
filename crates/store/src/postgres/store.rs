//! [`Store`] on PostgreSQL: every method one statement or one transaction.
//!
//! Check-then-insert sequences that SQLite makes atomic with its single writer
//! are made atomic here by the database itself: `ON CONFLICT` on the unique
//! indexes, or a transaction-scoped advisory lock where a count decides.

use super::rows::{self, json, ms, IDEM_COLUMNS, KEY_COLUMNS, SANDBOX_COLUMNS, SNAPSHOT_COLUMNS};
use super::PostgresStore;
use crate::{
    ApiKeyRecord, CreateOutcome, IdempotencyBegin, IdempotencyRecord, NodeRecord, NodeRegistration,
    SandboxCursor, SandboxRecord, SecretRecord, SnapshotCreateOutcome, SnapshotRecord,
    SnapshotStatus, Store, StoreError, WorkspaceQuota, WorkspaceUsage,
};
use chrono::{DateTime, Utc};
use sbx_api_types::SandboxStatus;
use uuid::Uuid;

/// How often an insert that lost a race to a row that then vanished is retried.
const RACE_RETRIES: usize = 8;

fn lost_race(what: &str) -> StoreError {
    StoreError::Conflict(format!("{what}: the conflicting row kept changing; retry").into())
}

/// Why a compare-and-set update of `table` changed no row: the row moved past
/// `generation` (a conflict) or there is no such row.
pub(super) fn missed_update(
    c: &mut postgres::Client,
    table: &str,
    id: Uuid,
    generation: u64,
) -> Result<StoreError, StoreError> {
    let current = c.query_opt(
        &format!("SELECT generation FROM {table} WHERE id = $1"),
        &[&id],
    )?;
    Ok(match current {
        Some(row) => {
            let now: i64 = row.try_get(0)?;
            StoreError::Conflict(
                format!("{table} row {id} is at generation {now}, not {generation}").into(),
            )
        }
        None => StoreError::NotFound,
    })
}

/// The cursor as query parameters: (has cursor, created_at_ms, id).
fn cursor(after: Option<&SandboxCursor>) -> (bool, i64, Uuid) {
    match after {
        Some(c) => (true, c.created_at_ms, c.id),
        None => (false, 0, Uuid::nil()),
    }
}

impl Store for PostgresStore {
    fn create_sandbox_within(
        &self,
        record: &SandboxRecord,
        quota: &WorkspaceQuota,
    ) -> Result<CreateOutcome, StoreError> {
        let r = record.clone();
        let quota = *quota;
        self.pool.run(move |c| {
            let insert = c.statement(&format!(
                "INSERT INTO sandboxes ({SANDBOX_COLUMNS}, active) \
                 VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19,$20) \
                 ON CONFLICT (workspace, name) WHERE active DO NOTHING"
            ))?;
            let holder = c.statement(&format!(
                "SELECT {SANDBOX_COLUMNS} FROM sandboxes WHERE workspace = $1 AND name = $2 AND active"
            ))?;
            let mut tx = c.transaction()?;
            // The new STARTING row need not reach the disk before create goes
            // on: nobody has been answered about it yet. Create answers only
            // after the compare-and-set to RUNNING, whose synchronous commit
            // flushes the write-ahead log up to and including this insert. A
            // database crash in between loses a row no client saw; the boot's
            // compare-and-set then finds no row and tears the container down
            // (and reconciliation removes orphans at start). This saves a disk
            // flush on every create.
            tx.batch_execute("SET LOCAL synchronous_commit = off")?;
            if !quota.is_unlimited() {
                // The count and the insert must see every concurrent create of
                // the workspace, on any node: serialise them on a lock named
                // after it (only when there is a quota to keep).
                tx.execute(
                    "SELECT pg_advisory_xact_lock(hashtext('sbx.sandboxes/' || $1))",
                    &[&r.workspace],
                )?;
                if let Some(row) = tx.query_opt(&holder, &[&r.workspace, &r.name])? {
                    return Ok(CreateOutcome::NameHeld(Box::new(rows::sandbox(&row)?)));
                }
                let row = tx.query_one(
                    "SELECT COUNT(*), COALESCE(SUM(vcpu), 0)::BIGINT, COALESCE(SUM(memory_mb), 0)::BIGINT \
                     FROM sandboxes WHERE workspace = $1 AND active",
                    &[&r.workspace],
                )?;
                let count = |i: usize| -> Result<u64, StoreError> {
                    Ok(row.try_get::<_, i64>(i)?.max(0) as u64)
                };
                let used = WorkspaceUsage {
                    sandboxes: count(0)?,
                    vcpus: count(1)?,
                    memory_mb: count(2)?,
                };
                if !quota.admits(&used, &r) {
                    return Ok(CreateOutcome::QuotaReached(used));
                }
            }
            for _ in 0..RACE_RETRIES {
                let n = tx.execute(
                    &insert,
                    &[
                        &r.id,
                        &r.workspace,
                        &r.name,
                        &r.status.as_str(),
                        &i64::from(r.vcpu),
                        &i64::from(r.memory_mb),
                        &json(&r.environment),
                        &json(&r.secrets),
                        &r.snapshot_id,
                        &r.image_ref,
                        &ms(r.created_at),
                        &r.started_at.map(ms),
                        &r.ended_at.map(ms),
                        &r.error,
                        &(r.active_ms as i64),
                        &r.running_since.map(ms),
                        &json(&r.network),
                        &(r.generation as i64),
                        &r.node_id,
                        &r.status.is_active(),
                    ],
                )?;
                if n == 1 {
                    tx.commit()?;
                    return Ok(CreateOutcome::Created);
                }
                // The holder may have ended between the insert and this read: then try again.
                if let Some(row) = tx.query_opt(&holder, &[&r.workspace, &r.name])? {
                    return Ok(CreateOutcome::NameHeld(Box::new(rows::sandbox(&row)?)));
                }
            }
            Err(lost_race("create sandbox"))
        })
    }

    fn active_sandbox_named(
        &self,
        workspace: &str,
        name: &str,
    ) -> Result<Option<SandboxRecord>, StoreError> {
        let (workspace, name) = (workspace.to_string(), name.to_string());
        self.pool.run(move |c| {
            c.query_opt(
                &format!("SELECT {SANDBOX_COLUMNS} FROM sandboxes WHERE workspace = $1 AND name = $2 AND active"),
                &[&workspace, &name],
            )?
            .map(|row| rows::sandbox(&row))
            .transpose()
        })
    }

    fn get_sandbox(&self, id: Uuid) -> Result<Option<SandboxRecord>, StoreError> {
        self.pool.run(move |c| {
            c.query_opt(
                &format!("SELECT {SANDBOX_COLUMNS} FROM sandboxes WHERE id = $1"),
                &[&id],
            )?
            .map(|row| rows::sandbox(&row))
            .transpose()
        })
    }

    fn update_sandbox(&self, record: &mut SandboxRecord) -> Result<(), StoreError> {
        let r = record.clone();
        record.generation = self.pool.run(move |c| {
            let n = c.execute(
                "UPDATE sandboxes SET status = $2, started_at_ms = $3, ended_at_ms = $4, error = $5, \
                 active_ms = $6, running_since_ms = $7, active = $8, environment = $9, secrets = $10, \
                 network = $12, generation = generation + 1 WHERE id = $1 AND generation = $11",
                &[
                    &r.id,
                    &r.status.as_str(),
                    &r.started_at.map(ms),
                    &r.ended_at.map(ms),
                    &r.error,
                    &(r.active_ms as i64),
                    &r.running_since.map(ms),
                    &r.status.is_active(),
                    &json(&r.environment),
                    &json(&r.secrets),
                    &(r.generation as i64),
                    &json(&r.network),
                ],
            )?;
            if n == 0 {
                return Err(missed_update(c, "sandboxes", r.id, r.generation)?);
            }
            Ok(r.generation + 1)
        })?;
        Ok(())
    }

    fn list_sandboxes(
        &self,
        workspace: &str,
        limit: u32,
        after: Option<&SandboxCursor>,
    ) -> Result<Vec<SandboxRecord>, StoreError> {
        let workspace = workspace.to_string();
        let (has, at, id) = cursor(after);
        self.pool.run(move |c| {
            c.query(
                &format!(
                    "SELECT {SANDBOX_COLUMNS} FROM sandboxes WHERE workspace = $1 \
                     AND (NOT $2 OR created_at_ms < $3 OR (created_at_ms = $3 AND id < $4)) \
                     ORDER BY created_at_ms DESC, id DESC LIMIT $5"
                ),
                &[&workspace, &has, &at, &id, &i64::from(limit)],
            )?
            .iter()
            .map(rows::sandbox)
            .collect()
        })
    }

    fn sandboxes_in_status(
        &self,
        node_id: Option<&str>,
        statuses: &[SandboxStatus],
    ) -> Result<Vec<SandboxRecord>, StoreError> {
        let statuses: Vec<&'static str> = statuses.iter().map(|s| s.as_str()).collect();
        let node_id = node_id.map(str::to_string);
        self.pool.run(move |c| {
            c.query(
                &format!(
                    "SELECT {SANDBOX_COLUMNS} FROM sandboxes WHERE ($1::text IS NULL OR node_id = $1) AND status = ANY($2) \
                     ORDER BY created_at_ms, id"
                ),
                &[&node_id, &statuses],
            )?
            .iter()
            .map(rows::sandbox)
            .collect()
        })
    }

    fn create_snapshot(
        &self,
        record: &SnapshotRecord,
        now: DateTime<Utc>,
        max_live: u32,
    ) -> Result<SnapshotCreateOutcome, StoreError> {
        let r = record.clone();
        self.pool.run(move |c| {
            let mut tx = c.transaction()?;
            // The name check and the live count must see every concurrent create of the
            // workspace: serialise them on a lock named after the workspace.
            tx.execute(
                "SELECT pg_advisory_xact_lock(hashtext('sbx.snapshots/' || $1))",
                &[&r.workspace],
            )?;
            let now = ms(now);
            if let Some(name) = &r.name {
                let holder = tx.query_opt(
                    &format!(
                        "SELECT {SNAPSHOT_COLUMNS} FROM snapshots WHERE workspace = $1 AND name = $2 \
                         AND status IN ('CREATING','READY') AND expires_at_ms > $3 LIMIT 1"
                    ),
                    &[&r.workspace, name, &now],
                )?;
                if let Some(row) = holder {
                    return Ok(SnapshotCreateOutcome::NameHeld(Box::new(rows::snapshot(
                        &row,
                    )?)));
                }
            }
            if max_live > 0 {
                let live: i64 = tx
                    .query_one(
                        "SELECT COUNT(*) FROM snapshots WHERE workspace = $1 \
                         AND status IN ('CREATING','READY') AND expires_at_ms > $2",
                        &[&r.workspace, &now],
                    )?
                    .try_get(0)?;
                if live >= i64::from(max_live) {
                    return Ok(SnapshotCreateOutcome::LimitReached(
                        u32::try_from(live).unwrap_or(u32::MAX),
                    ));
                }
            }
            tx.execute(
                &format!(
                    "INSERT INTO snapshots ({SNAPSHOT_COLUMNS}) \
                     VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19)"
                ),
                &[
                    &r.id,
                    &r.workspace,
                    &r.name,
                    &r.source_sandbox,
                    &r.status.as_str(),
                    &i64::from(r.vcpu),
                    &i64::from(r.memory_mb),
                    &json(&r.environment),
                    &json(&r.secrets),
                    &r.image_ref,
                    &r.source_image_id,
                    &r.compatibility_id,
                    &(r.stored_bytes as i64),
                    &ms(r.created_at),
                    &ms(r.updated_at),
                    &ms(r.expires_at),
                    &r.error,
                    &json(&r.network),
                    &(r.generation as i64),
                ],
            )?;
            tx.commit()?;
            Ok(SnapshotCreateOutcome::Created)
        })
    }

    fn get_snapshot(&self, id: Uuid) -> Result<Option<SnapshotRecord>, StoreError> {
        self.pool.run(move |c| {
            c.query_opt(
                &format!("SELECT {SNAPSHOT_COLUMNS} FROM snapshots WHERE id = $1"),
                &[&id],
            )?
            .map(|row| rows::snapshot(&row))
            .transpose()
        })
    }

    fn update_snapshot(&self, record: &mut SnapshotRecord) -> Result<(), StoreError> {
        let r = record.clone();
        record.generation = self.pool.run(move |c| {
            let n = c.execute(
                "UPDATE snapshots SET status = $2, stored_bytes = $3, updated_at_ms = $4, error = $5, \
                 expires_at_ms = $6, generation = generation + 1 WHERE id = $1 AND generation = $7",
                &[
                    &r.id,
                    &r.status.as_str(),
                    &(r.stored_bytes as i64),
                    &ms(r.updated_at),
                    &r.error,
                    &ms(r.expires_at),
                    &(r.generation as i64),
                ],
            )?;
            if n == 0 {
                return Err(missed_update(c, "snapshots", r.id, r.generation)?);
            }
            Ok(r.generation + 1)
        })?;
        Ok(())
    }

    fn list_snapshots(
        &self,
        workspace: &str,
        name: Option<&str>,
        limit: u32,
        after: Option<&SandboxCursor>,
    ) -> Result<Vec<SnapshotRecord>, StoreError> {
        let workspace = workspace.to_string();
        let name = name.map(str::to_string);
        let (has, at, id) = cursor(after);
        self.pool.run(move |c| {
            c.query(
                &format!(
                    "SELECT {SNAPSHOT_COLUMNS} FROM snapshots WHERE workspace = $1 \
                     AND status <> 'DELETED' AND ($2::text IS NULL OR name = $2) \
                     AND (NOT $3 OR created_at_ms < $4 OR (created_at_ms = $4 AND id < $5)) \
                     ORDER BY created_at_ms DESC, id DESC LIMIT $6"
                ),
                &[&workspace, &name, &has, &at, &id, &i64::from(limit)],
            )?
            .iter()
            .map(rows::snapshot)
            .collect()
        })
    }

    fn snapshots_in_status(
        &self,
        statuses: &[SnapshotStatus],
    ) -> Result<Vec<SnapshotRecord>, StoreError> {
        let statuses: Vec<&'static str> = statuses.iter().map(|s| s.as_str()).collect();
        self.pool.run(move |c| {
            c.query(
                &format!(
                    "SELECT {SNAPSHOT_COLUMNS} FROM snapshots WHERE status = ANY($1) \
                     ORDER BY created_at_ms, id"
                ),
                &[&statuses],
            )?
            .iter()
            .map(rows::snapshot)
            .collect()
        })
    }

    fn put_secret(&self, record: &SecretRecord) -> Result<(), StoreError> {
        self.put_secret_row(record)
    }

    fn get_secret(&self, workspace: &str, name: &str) -> Result<Option<SecretRecord>, StoreError> {
        self.get_secret_row(workspace, name)
    }

    fn list_secrets(&self, workspace: &str) -> Result<Vec<SecretRecord>, StoreError> {
        self.list_secrets_row(workspace)
    }

    fn delete_secret(&self, workspace: &str, name: &str) -> Result<bool, StoreError> {
        self.delete_secret_row(workspace, name)
    }

    fn list_all_secrets(&self) -> Result<Vec<SecretRecord>, StoreError> {
        self.list_all_secrets_row()
    }

    fn replace_secret_ciphertext(
        &self,
        current: &SecretRecord,
        nonce: &[u8],
        ciphertext: &[u8],
    ) -> Result<bool, StoreError> {
        self.replace_secret_ciphertext_row(current, nonce, ciphertext)
    }

    fn create_api_key(&self, record: &ApiKeyRecord) -> Result<(), StoreError> {
        let r = record.clone();
        self.pool.run(move |c| {
            c.execute(
                &format!("INSERT INTO api_keys ({KEY_COLUMNS}) VALUES ($1,$2,$3,$4,$5,$6,$7)"),
                &[
                    &r.id,
                    &r.workspace,
                    &r.env,
                    &r.name,
                    &r.digest,
                    &ms(r.created_at),
                    &r.revoked_at.map(ms),
                ],
            )?;
            Ok(())
        })
    }

    fn find_api_key(&self, digest: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        let digest = digest.to_string();
        self.pool.run(move |c| {
            c.query_opt(
                &format!("SELECT {KEY_COLUMNS} FROM api_keys WHERE digest = $1"),
                &[&digest],
            )?
            .map(|row| rows::api_key(&row))
            .transpose()
        })
    }

    fn list_api_keys(&self) -> Result<Vec<ApiKeyRecord>, StoreError> {
        self.pool.run(move |c| {
            c.query(
                &format!("SELECT {KEY_COLUMNS} FROM api_keys ORDER BY created_at_ms, id"),
                &[],
            )?
            .iter()
            .map(rows::api_key)
            .collect()
        })
    }

    fn revoke_api_key(&self, id: Uuid, now: DateTime<Utc>) -> Result<bool, StoreError> {
        self.pool.run(move |c| {
            Ok(c.execute(
                "UPDATE api_keys SET revoked_at_ms = $2 WHERE id = $1 AND revoked_at_ms IS NULL",
                &[&id, &ms(now)],
            )? > 0)
        })
    }

    fn idempotency_begin(
        &self,
        record: &IdempotencyRecord,
        now: DateTime<Utc>,
    ) -> Result<IdempotencyBegin, StoreError> {
        let r = record.clone();
        self.pool.run(move |c| {
            // Insert, or take over an expired claim, in one statement: the conflicting
            // row is locked while its expiry is checked, so two claimants never both win.
            let claim = format!(
                "INSERT INTO idempotency ({IDEM_COLUMNS}) VALUES ($1,$2,$3,$4,$5,$6,$7,NULL,NULL,$9) \
                 ON CONFLICT (tenant, path, key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, \
                 owner = EXCLUDED.owner, created_at_ms = EXCLUDED.created_at_ms, \
                 expires_at_ms = EXCLUDED.expires_at_ms, status = NULL, body = NULL, \
                 lease_until_ms = EXCLUDED.lease_until_ms \
                 WHERE idempotency.expires_at_ms <= $8"
            );
            let existing = format!(
                "SELECT {IDEM_COLUMNS} FROM idempotency WHERE tenant = $1 AND path = $2 AND key = $3"
            );
            for _ in 0..RACE_RETRIES {
                let n = c.execute(
                    &claim,
                    &[
                        &r.tenant,
                        &r.path,
                        &r.key,
                        &r.fingerprint,
                        &r.owner,
                        &ms(r.created_at),
                        &ms(r.expires_at),
                        &ms(now),
                        &ms(r.lease_until),
                    ],
                )?;
                if n == 1 {
                    return Ok(IdempotencyBegin::Started);
                }
                // Forgotten between the two statements: claim again.
                if let Some(row) = c.query_opt(&existing, &[&r.tenant, &r.path, &r.key])? {
                    return Ok(IdempotencyBegin::Existing(rows::idempotency(&row)?));
                }
            }
            Err(lost_race("idempotency claim"))
        })
    }

    fn idempotency_get(
        &self,
        tenant: &str,
        path: &str,
        key: &str,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        let (tenant, path, key) = (tenant.to_string(), path.to_string(), key.to_string());
        self.pool.run(move |c| {
            c.query_opt(
                &format!(
                    "SELECT {IDEM_COLUMNS} FROM idempotency WHERE tenant = $1 AND path = $2 AND key = $3"
                ),
                &[&tenant, &path, &key],
            )?
            .map(|row| rows::idempotency(&row))
            .transpose()
        })
    }

    fn idempotency_finish(
        &self,
        tenant: &str,
        path: &str,
        key: &str,
        status: u16,
        body: &[u8],
    ) -> Result<(), StoreError> {
        let (tenant, path, key) = (tenant.to_string(), path.to_string(), key.to_string());
        let body = body.to_vec();
        self.pool.run(move |c| {
            let n = c.execute(
                "UPDATE idempotency SET status = $4, body = $5 WHERE tenant = $1 AND path = $2 AND key = $3",
                &[&tenant, &path, &key, &i32::from(status), &body],
            )?;
            if n == 0 {
                return Err(StoreError::NotFound);
            }
            Ok(())
        })
    }

    fn idempotency_forget(&self, tenant: &str, path: &str, key: &str) -> Result<(), StoreError> {
        let (tenant, path, key) = (tenant.to_string(), path.to_string(), key.to_string());
        self.pool.run(move |c| {
            c.execute(
                "DELETE FROM idempotency WHERE tenant = $1 AND path = $2 AND key = $3",
                &[&tenant, &path, &key],
            )?;
            Ok(())
        })
    }

    fn is_shared(&self) -> bool {
        true
    }

    fn idempotency_renew(&self, owner: Uuid, until: DateTime<Utc>) -> Result<usize, StoreError> {
        self.pool.run(move |c| {
            Ok(c.execute(
                "UPDATE idempotency SET lease_until_ms = $2 WHERE owner = $1 AND status IS NULL",
                &[&owner, &ms(until)],
            )? as usize)
        })
    }

    fn idempotency_abandon_others(&self, owner: Uuid) -> Result<usize, StoreError> {
        self.pool.run(move |c| {
            Ok(c.execute(
                "UPDATE idempotency SET lease_until_ms = 0 \
                 WHERE owner <> $1 AND status IS NULL AND lease_until_ms <> 0",
                &[&owner],
            )? as usize)
        })
    }

    fn idempotency_expire(&self, now: DateTime<Utc>) -> Result<usize, StoreError> {
        self.pool.run(move |c| {
            Ok(c.execute(
                "DELETE FROM idempotency WHERE expires_at_ms <= $1",
                &[&ms(now)],
            )? as usize)
        })
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
