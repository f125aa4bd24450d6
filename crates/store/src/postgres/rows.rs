//! Rows of PostgreSQL as records, and records as parameters.

use crate::{
    ApiKeyRecord, IdempotencyRecord, SandboxRecord, SecretRecord, SnapshotRecord, SnapshotStatus,
    StoreError,
};
use chrono::{DateTime, Utc};
use postgres::Row;
use sbx_api_types::SandboxStatus;

pub(super) const SANDBOX_COLUMNS: &str =
    "id, workspace, name, status, vcpu, memory_mb, environment, secrets, snapshot_id, \
     image_ref, created_at_ms, started_at_ms, ended_at_ms, error, active_ms, running_since_ms, network, generation, node_id";

pub(super) const SNAPSHOT_COLUMNS: &str =
    "id, workspace, name, source_sandbox, status, vcpu, memory_mb, environment, secrets, image_ref, \
     source_image_id, compatibility_id, stored_bytes, created_at_ms, updated_at_ms, expires_at_ms, error, network, generation";

pub(super) const SECRET_COLUMNS: &str =
    "workspace, name, nonce, ciphertext, created_at_ms, updated_at_ms";

pub(super) const KEY_COLUMNS: &str =
    "id, workspace, env, name, digest, created_at_ms, revoked_at_ms";

pub(super) const IDEM_COLUMNS: &str =
    "tenant, path, key, fingerprint, owner, created_at_ms, expires_at_ms, status, body, lease_until_ms";

pub(super) fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

fn corrupt(what: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(what.to_string().into())
}

fn time(v: i64, column: &str) -> Result<DateTime<Utc>, StoreError> {
    DateTime::<Utc>::from_timestamp_millis(v).ok_or_else(|| corrupt(format!("{column} {v}")))
}

fn opt_time(v: Option<i64>, column: &str) -> Result<Option<DateTime<Utc>>, StoreError> {
    v.map(|v| time(v, column)).transpose()
}

fn small(v: i64, column: &str) -> Result<u32, StoreError> {
    u32::try_from(v).map_err(|_| corrupt(format!("{column} {v}")))
}

fn json_column<T: serde::de::DeserializeOwned>(v: &str, column: &str) -> Result<T, StoreError> {
    serde_json::from_str(v).map_err(|e| corrupt(format!("{column}: {e}")))
}

pub(super) fn json(v: &impl serde::Serialize) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "null".into())
}

/// The `network` column: NULL means `none`, as in SQLite.
fn network(v: Option<String>) -> Result<sbx_api_types::NetworkPolicy, StoreError> {
    match v {
        None => Ok(sbx_api_types::NetworkPolicy::default()),
        Some(s) => json_column(&s, "network"),
    }
}

/// The `generation` column: never negative (it starts at 0 and only grows).
fn generation(v: i64) -> Result<u64, StoreError> {
    u64::try_from(v).map_err(|_| corrupt(format!("generation {v}")))
}

pub(super) fn sandbox(row: &Row) -> Result<SandboxRecord, StoreError> {
    let status: String = row.try_get(3)?;
    let environment: String = row.try_get(6)?;
    let secrets: String = row.try_get(7)?;
    Ok(SandboxRecord {
        id: row.try_get(0)?,
        workspace: row.try_get(1)?,
        name: row.try_get(2)?,
        status: SandboxStatus::parse(&status).ok_or_else(|| corrupt(format!("status {status}")))?,
        vcpu: small(row.try_get(4)?, "vcpu")?,
        memory_mb: small(row.try_get(5)?, "memory_mb")?,
        environment: json_column(&environment, "environment")?,
        secrets: json_column(&secrets, "secrets")?,
        snapshot_id: row.try_get(8)?,
        image_ref: row.try_get(9)?,
        created_at: time(row.try_get(10)?, "created_at")?,
        started_at: opt_time(row.try_get(11)?, "started_at")?,
        ended_at: opt_time(row.try_get(12)?, "ended_at")?,
        error: row.try_get(13)?,
        active_ms: row.try_get::<_, i64>(14)?.max(0) as u64,
        running_since: opt_time(row.try_get(15)?, "running_since")?,
        network: network(row.try_get(16)?)?,
        generation: generation(row.try_get(17)?)?,
        node_id: row.try_get(18)?,
    })
}

pub(super) fn snapshot(row: &Row) -> Result<SnapshotRecord, StoreError> {
    let status: String = row.try_get(4)?;
    let environment: String = row.try_get(7)?;
    let secrets: String = row.try_get(8)?;
    Ok(SnapshotRecord {
        id: row.try_get(0)?,
        workspace: row.try_get(1)?,
        name: row.try_get(2)?,
        source_sandbox: row.try_get(3)?,
        status: SnapshotStatus::parse(&status)
            .ok_or_else(|| corrupt(format!("snapshot status {status}")))?,
        vcpu: small(row.try_get(5)?, "vcpu")?,
        memory_mb: small(row.try_get(6)?, "memory_mb")?,
        environment: json_column(&environment, "environment")?,
        secrets: json_column(&secrets, "secrets")?,
        image_ref: row.try_get(9)?,
        source_image_id: row.try_get(10)?,
        compatibility_id: row.try_get(11)?,
        stored_bytes: row.try_get::<_, i64>(12)?.max(0) as u64,
        created_at: time(row.try_get(13)?, "created_at")?,
        updated_at: time(row.try_get(14)?, "updated_at")?,
        expires_at: time(row.try_get(15)?, "expires_at")?,
        error: row.try_get(16)?,
        network: network(row.try_get(17)?)?,
        generation: generation(row.try_get(18)?)?,
    })
}

pub(super) fn secret(row: &Row) -> Result<SecretRecord, StoreError> {
    Ok(SecretRecord {
        workspace: row.try_get(0)?,
        name: row.try_get(1)?,
        nonce: row.try_get(2)?,
        ciphertext: row.try_get(3)?,
        created_at: time(row.try_get(4)?, "created_at")?,
        updated_at: time(row.try_get(5)?, "updated_at")?,
    })
}

pub(super) fn api_key(row: &Row) -> Result<ApiKeyRecord, StoreError> {
    Ok(ApiKeyRecord {
        id: row.try_get(0)?,
        workspace: row.try_get(1)?,
        env: row.try_get(2)?,
        name: row.try_get(3)?,
        digest: row.try_get(4)?,
        created_at: time(row.try_get(5)?, "created_at")?,
        revoked_at: opt_time(row.try_get(6)?, "revoked_at")?,
    })
}

pub(super) fn idempotency(row: &Row) -> Result<IdempotencyRecord, StoreError> {
    let status: Option<i32> = row.try_get(7)?;
    let body: Option<Vec<u8>> = row.try_get(8)?;
    let response = match status {
        Some(s) => Some((
            u16::try_from(s).map_err(|_| corrupt(format!("status {s}")))?,
            body.unwrap_or_default(),
        )),
        None => None,
    };
    Ok(IdempotencyRecord {
        tenant: row.try_get(0)?,
        path: row.try_get(1)?,
        key: row.try_get(2)?,
        fingerprint: row.try_get(3)?,
        owner: row.try_get(4)?,
        created_at: time(row.try_get(5)?, "created_at")?,
        expires_at: time(row.try_get(6)?, "expires_at")?,
        lease_until: time(row.try_get(9)?, "lease_until")?,
        response,
    })
}
