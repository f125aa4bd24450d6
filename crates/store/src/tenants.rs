//! Signing keys and `Idempotency-Key` claims in SQLite.

use crate::sqlite::{corrupt, from_ms, ms, SqliteStore};
use crate::{ApiKeyRecord, IdempotencyBegin, IdempotencyRecord, StoreError};
use chrono::{DateTime, Utc};
use rusqlite::{params, OptionalExtension, Row};
use uuid::Uuid;

const KEY_COLUMNS: &str = "id, workspace, env, name, digest, created_at_ms, revoked_at_ms";
const IDEM_COLUMNS: &str =
    "tenant, path, key, fingerprint, owner, created_at_ms, expires_at_ms, status, body, lease_until_ms";

fn key_from_row(row: &Row<'_>) -> rusqlite::Result<ApiKeyRecord> {
    let id: String = row.get(0)?;
    Ok(ApiKeyRecord {
        id: Uuid::parse_str(&id).map_err(corrupt)?,
        workspace: row.get(1)?,
        env: row.get(2)?,
        name: row.get(3)?,
        digest: row.get(4)?,
        created_at: from_ms(Some(row.get(5)?)).ok_or_else(|| corrupt("created_at"))?,
        revoked_at: from_ms(row.get(6)?),
    })
}

fn idem_from_row(row: &Row<'_>) -> rusqlite::Result<IdempotencyRecord> {
    let owner: String = row.get(4)?;
    let status: Option<i64> = row.get(7)?;
    let body: Option<Vec<u8>> = row.get(8)?;
    let response = match status {
        Some(s) => Some((u16::try_from(s).map_err(corrupt)?, body.unwrap_or_default())),
        None => None,
    };
    Ok(IdempotencyRecord {
        tenant: row.get(0)?,
        path: row.get(1)?,
        key: row.get(2)?,
        fingerprint: row.get(3)?,
        owner: Uuid::parse_str(&owner).map_err(corrupt)?,
        created_at: from_ms(Some(row.get(5)?)).ok_or_else(|| corrupt("created_at"))?,
        expires_at: from_ms(Some(row.get(6)?)).ok_or_else(|| corrupt("expires_at"))?,
        lease_until: from_ms(Some(row.get(9)?)).ok_or_else(|| corrupt("lease_until"))?,
        response,
    })
}

impl SqliteStore {
    pub(crate) fn insert_api_key(&self, r: &ApiKeyRecord) -> Result<(), StoreError> {
        let conn = self.lock();
        conn.execute(
            &format!("INSERT INTO api_keys ({KEY_COLUMNS}) VALUES (?1,?2,?3,?4,?5,?6,?7)"),
            params![
                r.id.to_string(),
                r.workspace,
                r.env,
                r.name,
                r.digest,
                ms(r.created_at),
                r.revoked_at.map(ms),
            ],
        )?;
        Ok(())
    }

    pub(crate) fn api_key_by_digest(
        &self,
        digest: &str,
    ) -> Result<Option<ApiKeyRecord>, StoreError> {
        let conn = self.lock();
        Ok(conn
            .query_row(
                &format!("SELECT {KEY_COLUMNS} FROM api_keys WHERE digest = ?1"),
                params![digest],
                key_from_row,
            )
            .optional()?)
    }

    pub(crate) fn api_key_rows(&self) -> Result<Vec<ApiKeyRecord>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare(&format!(
            "SELECT {KEY_COLUMNS} FROM api_keys ORDER BY created_at_ms, id"
        ))?;
        let rows = stmt.query_map([], key_from_row)?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    pub(crate) fn revoke_api_key_row(
        &self,
        id: Uuid,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let conn = self.lock();
        let n = conn.execute(
            "UPDATE api_keys SET revoked_at_ms = ?2 WHERE id = ?1 AND revoked_at_ms IS NULL",
            params![id.to_string(), ms(now)],
        )?;
        Ok(n > 0)
    }

    pub(crate) fn idempotency_claim(
        &self,
        r: &IdempotencyRecord,
        now: DateTime<Utc>,
    ) -> Result<IdempotencyBegin, StoreError> {
        let mut conn = self.lock();
        let tx = crate::sqlite::write_transaction(&mut conn)?;
        let existing = tx
            .query_row(
                &format!(
                    "SELECT {IDEM_COLUMNS} FROM idempotency WHERE tenant = ?1 AND path = ?2 AND key = ?3"
                ),
                params![r.tenant, r.path, r.key],
                idem_from_row,
            )
            .optional()?;
        if let Some(existing) = existing {
            if existing.expires_at > now {
                return Ok(IdempotencyBegin::Existing(existing));
            }
            tx.execute(
                "DELETE FROM idempotency WHERE tenant = ?1 AND path = ?2 AND key = ?3",
                params![r.tenant, r.path, r.key],
            )?;
        }
        tx.execute(
            &format!(
                "INSERT INTO idempotency ({IDEM_COLUMNS}) VALUES (?1,?2,?3,?4,?5,?6,?7,NULL,NULL,?8)"
            ),
            params![
                r.tenant,
                r.path,
                r.key,
                r.fingerprint,
                r.owner.to_string(),
                ms(r.created_at),
                ms(r.expires_at),
                ms(r.lease_until),
            ],
        )?;
        tx.commit()?;
        Ok(IdempotencyBegin::Started)
    }

    pub(crate) fn idempotency_extend_leases(
        &self,
        owner: Uuid,
        until: DateTime<Utc>,
    ) -> Result<usize, StoreError> {
        let conn = self.lock();
        Ok(conn.execute(
            "UPDATE idempotency SET lease_until_ms = ?2 WHERE owner = ?1 AND status IS NULL",
            params![owner.to_string(), ms(until)],
        )?)
    }

    pub(crate) fn idempotency_end_leases_except(&self, owner: Uuid) -> Result<usize, StoreError> {
        let conn = self.lock();
        Ok(conn.execute(
            "UPDATE idempotency SET lease_until_ms = 0 \
             WHERE owner != ?1 AND status IS NULL AND lease_until_ms != 0",
            params![owner.to_string()],
        )?)
    }

    pub(crate) fn idempotency_row(
        &self,
        tenant: &str,
        path: &str,
        key: &str,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        let conn = self.lock();
        Ok(conn
            .query_row(
                &format!(
                    "SELECT {IDEM_COLUMNS} FROM idempotency WHERE tenant = ?1 AND path = ?2 AND key = ?3"
                ),
                params![tenant, path, key],
                idem_from_row,
            )
            .optional()?)
    }

    pub(crate) fn idempotency_store_response(
        &self,
        tenant: &str,
        path: &str,
        key: &str,
        status: u16,
        body: &[u8],
    ) -> Result<(), StoreError> {
        let conn = self.lock();
        let n = conn.execute(
            "UPDATE idempotency SET status = ?4, body = ?5 WHERE tenant = ?1 AND path = ?2 AND key = ?3",
            params![tenant, path, key, status, body],
        )?;
        if n == 0 {
            return Err(StoreError::NotFound);
        }
        Ok(())
    }

    pub(crate) fn idempotency_delete(
        &self,
        tenant: &str,
        path: &str,
        key: &str,
    ) -> Result<(), StoreError> {
        let conn = self.lock();
        conn.execute(
            "DELETE FROM idempotency WHERE tenant = ?1 AND path = ?2 AND key = ?3",
            params![tenant, path, key],
        )?;
        Ok(())
    }

    pub(crate) fn idempotency_delete_expired(
        &self,
        now: DateTime<Utc>,
    ) -> Result<usize, StoreError> {
        let conn = self.lock();
        Ok(conn.execute(
            "DELETE FROM idempotency WHERE expires_at_ms <= ?1",
            params![ms(now)],
        )?)
    }
}

#[cfg(test)]
mod tests {
    use crate::{SqliteStore, Store};

    #[test]
    fn migration_moves_old_rows_to_the_default_production_tenant() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        {
            let conn = rusqlite::Connection::open(&path).unwrap();
            for sql in &crate::sqlite::MIGRATIONS[..3] {
                conn.execute_batch(sql).unwrap();
            }
            conn.pragma_update(None, "user_version", 3).unwrap();
            conn.execute(
                "INSERT INTO secrets VALUES ('default','S',x'00',x'00',1,1)",
                [],
            )
            .unwrap();
        }
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.list_secrets("default/production").unwrap().len(), 1);
        assert!(store.list_secrets("default").unwrap().is_empty());
    }
}
