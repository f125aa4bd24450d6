//! Connections, their sealed credentials and pending OAuth sign-ins.

use super::{now_ms, time, SqliteStore};
use crate::model::{AuthKind, Connection, ConnectionStatus};
use crate::store::{
    CredentialBlob, NewConnection, OauthPending, StoreError, VersionChange, VersionChangeOutcome,
};
use rusqlite::{params, OptionalExtension, Row};

const COLUMNS: &str = "id, name, package, version, config, origin, auth_kind, status, schedule_secs, created_at, updated_at";

type RawConnection = (Connection, String, String, String);

fn from_row(row: &Row<'_>) -> rusqlite::Result<RawConnection> {
    let schedule: Option<i64> = row.get(8)?;
    Ok((
        Connection {
            id: row.get(0)?,
            name: row.get(1)?,
            package: row.get(2)?,
            version: row.get(3)?,
            config: serde_json::Value::Null,
            origin: row.get(5)?,
            auth_kind: AuthKind::None,
            status: ConnectionStatus::Disabled,
            schedule_interval_seconds: schedule.map(|s| s.max(0) as u64),
            created_at: time(row, 9)?,
            updated_at: time(row, 10)?,
        },
        row.get(4)?,
        row.get(6)?,
        row.get(7)?,
    ))
}

fn finish((mut c, config, auth, status): RawConnection) -> Result<Connection, StoreError> {
    c.config = serde_json::from_str(&config)?;
    c.auth_kind = AuthKind::parse(&auth)?;
    c.status = ConnectionStatus::parse(&status)?;
    Ok(c)
}

impl super::super::Connections for SqliteStore {
    fn insert_connection(
        &self,
        workspace: &str,
        id: &str,
        c: &NewConnection,
        credentials: &[u8],
    ) -> Result<Connection, StoreError> {
        let now = now_ms();
        let conn = self.lock();
        conn.execute(
            &format!("INSERT INTO connections ({COLUMNS}, workspace, credentials) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10, ?11, ?12)"),
            params![
                id,
                c.name,
                c.package,
                c.version,
                serde_json::to_string(&c.config)?,
                c.origin,
                c.auth_kind.as_str(),
                c.status.as_str(),
                c.schedule_interval_seconds.map(|s| s as i64),
                now,
                workspace,
                credentials
            ],
        )?;
        drop(conn);
        self.get_connection(workspace, id)
    }

    fn get_connection(&self, workspace: &str, id: &str) -> Result<Connection, StoreError> {
        let conn = self.lock();
        let row = conn
            .query_row(
                &format!("SELECT {COLUMNS} FROM connections WHERE workspace = ?1 AND id = ?2"),
                params![workspace, id],
                from_row,
            )
            .optional()?
            .ok_or(StoreError::NotFound("connection"))?;
        finish(row)
    }

    fn get_connection_credentials(&self, workspace: &str, id: &str) -> Result<Vec<u8>, StoreError> {
        let conn = self.lock();
        conn.query_row(
            "SELECT credentials FROM connections WHERE workspace = ?1 AND id = ?2",
            params![workspace, id],
            |r| r.get(0),
        )
        .optional()?
        .ok_or(StoreError::NotFound("connection"))
    }

    fn list_connections(&self, workspace: &str) -> Result<Vec<Connection>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare(&format!(
            "SELECT {COLUMNS} FROM connections WHERE workspace = ?1 ORDER BY created_at, id"
        ))?;
        let rows = stmt.query_map([workspace], from_row)?;
        rows.map(|r| finish(r?)).collect()
    }

    fn list_scheduled_connections(&self) -> Result<Vec<(String, Connection)>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare(&format!(
            "SELECT {COLUMNS}, workspace FROM connections WHERE status = 'active' AND schedule_secs IS NOT NULL ORDER BY id"
        ))?;
        let rows = stmt.query_map([], |row| Ok((from_row(row)?, row.get::<_, String>(11)?)))?;
        rows.map(|r| {
            let (raw, ws) = r?;
            Ok((ws, finish(raw)?))
        })
        .collect()
    }

    fn update_connection(
        &self,
        workspace: &str,
        id: &str,
        name: &str,
        config: &serde_json::Value,
        status: ConnectionStatus,
        schedule_interval_seconds: Option<u64>,
    ) -> Result<Connection, StoreError> {
        let conn = self.lock();
        let n = conn.execute(
            "UPDATE connections SET name = ?3, config = ?4, status = ?5, schedule_secs = ?6, updated_at = ?7
             WHERE workspace = ?1 AND id = ?2",
            params![
                workspace,
                id,
                name,
                serde_json::to_string(config)?,
                status.as_str(),
                schedule_interval_seconds.map(|s| s as i64),
                now_ms()
            ],
        )?;
        drop(conn);
        if n == 0 {
            return Err(StoreError::NotFound("connection"));
        }
        self.get_connection(workspace, id)
    }

    fn set_connection_version(
        &self,
        workspace: &str,
        id: &str,
        change: &VersionChange,
    ) -> Result<VersionChangeOutcome, StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        let now: String = tx
            .query_row(
                "SELECT version FROM connections WHERE workspace = ?1 AND id = ?2",
                params![workspace, id],
                |row| row.get(0),
            )
            .optional()?
            .ok_or(StoreError::NotFound("connection"))?;
        if now != change.from {
            return Ok(VersionChangeOutcome::VersionMoved(now));
        }
        let unfinished: i64 = tx.query_row(
            "SELECT COUNT(*) FROM runs WHERE workspace = ?1 AND connection_id = ?2
             AND kind = 'sync' AND status IN ('queued', 'running')",
            params![workspace, id],
            |row| row.get(0),
        )?;
        if unfinished > 0 {
            return Ok(VersionChangeOutcome::SyncRunning);
        }
        let committed: Vec<String> = {
            let mut stmt = tx.prepare(
                "SELECT sync FROM sync_state WHERE workspace = ?1 AND connection_id = ?2",
            )?;
            let rows = stmt.query_map(params![workspace, id], |r| r.get(0))?;
            rows.collect::<Result<_, _>>()?
        };
        if !crate::store::same_syncs(&committed, &change.committed_syncs) {
            return Ok(VersionChangeOutcome::CommittedChanged);
        }
        tx.execute(
            "UPDATE connections SET version = ?3, config = ?4, updated_at = ?5
             WHERE workspace = ?1 AND id = ?2",
            params![
                workspace,
                id,
                change.to,
                serde_json::to_string(&change.config)?,
                now_ms()
            ],
        )?;
        tx.commit()?;
        Ok(VersionChangeOutcome::Changed)
    }

    fn committed_syncs(
        &self,
        workspace: &str,
        connection_id: &str,
    ) -> Result<Vec<String>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare(
            "SELECT sync FROM sync_state WHERE workspace = ?1 AND connection_id = ?2 ORDER BY sync",
        )?;
        let rows = stmt.query_map(params![workspace, connection_id], |r| r.get(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn set_connection_status(
        &self,
        workspace: &str,
        id: &str,
        status: ConnectionStatus,
    ) -> Result<(), StoreError> {
        let conn = self.lock();
        let n = conn.execute(
            "UPDATE connections SET status = ?3, updated_at = ?4 WHERE workspace = ?1 AND id = ?2",
            params![workspace, id, status.as_str(), now_ms()],
        )?;
        if n == 0 {
            return Err(StoreError::NotFound("connection"));
        }
        Ok(())
    }

    fn set_connection_credentials(
        &self,
        workspace: &str,
        id: &str,
        credentials: &[u8],
        status: Option<ConnectionStatus>,
    ) -> Result<(), StoreError> {
        let conn = self.lock();
        let n = conn.execute(
            "UPDATE connections SET credentials = ?3, status = COALESCE(?4, status), updated_at = ?5
             WHERE workspace = ?1 AND id = ?2",
            params![workspace, id, credentials, status.map(|s| s.as_str()), now_ms()],
        )?;
        if n == 0 {
            return Err(StoreError::NotFound("connection"));
        }
        Ok(())
    }

    fn credential_blobs(&self) -> Result<Vec<CredentialBlob>, StoreError> {
        let conn = self.lock();
        let mut stmt =
            conn.prepare("SELECT workspace, id, credentials FROM connections ORDER BY id")?;
        let rows = stmt.query_map([], |r| {
            Ok(CredentialBlob {
                workspace: r.get(0)?,
                connection_id: r.get(1)?,
                blob: r.get(2)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn replace_credentials(
        &self,
        workspace: &str,
        id: &str,
        old: &[u8],
        new: &[u8],
    ) -> Result<bool, StoreError> {
        let conn = self.lock();
        let n = conn.execute(
            "UPDATE connections SET credentials = ?4
             WHERE workspace = ?1 AND id = ?2 AND credentials = ?3",
            params![workspace, id, old, new],
        )?;
        Ok(n == 1)
    }

    fn delete_connection(&self, workspace: &str, id: &str) -> Result<(), StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        let n = tx.execute(
            "DELETE FROM connections WHERE workspace = ?1 AND id = ?2",
            params![workspace, id],
        )?;
        if n == 0 {
            return Err(StoreError::NotFound("connection"));
        }
        tx.execute(
            "DELETE FROM records WHERE dataset IN (SELECT id FROM sync_state WHERE workspace = ?1 AND connection_id = ?2)",
            params![workspace, id],
        )?;
        tx.execute(
            "DELETE FROM sync_state WHERE workspace = ?1 AND connection_id = ?2",
            params![workspace, id],
        )?;
        tx.execute(
            "DELETE FROM oauth_pending WHERE workspace = ?1 AND connection_id = ?2",
            params![workspace, id],
        )?;
        for table in ["webhook_settings", "webhook_tokens", "webhook_deliveries"] {
            tx.execute(
                &format!("DELETE FROM {table} WHERE workspace = ?1 AND connection_id = ?2"),
                params![workspace, id],
            )?;
        }
        // Logs and run history go with the connection: they may quote its data.
        tx.execute(
            "DELETE FROM logs WHERE workspace = ?1 AND connection_id = ?2",
            params![workspace, id],
        )?;
        tx.execute(
            "DELETE FROM runs WHERE workspace = ?1 AND connection_id = ?2",
            params![workspace, id],
        )?;
        tx.commit()?;
        Ok(())
    }

    fn insert_oauth_pending(
        &self,
        workspace: &str,
        state: &str,
        p: &OauthPending,
    ) -> Result<(), StoreError> {
        let conn = self.lock();
        conn.execute(
            "INSERT INTO oauth_pending (state, workspace, connection_id, verifier, redirect_uri, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![state, workspace, p.connection_id, p.verifier, p.redirect_uri, now_ms()],
        )?;
        Ok(())
    }

    fn take_oauth_pending(&self, workspace: &str, state: &str) -> Result<OauthPending, StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        let p = tx
            .query_row(
                "SELECT connection_id, verifier, redirect_uri FROM oauth_pending WHERE workspace = ?1 AND state = ?2",
                params![workspace, state],
                |r| {
                    Ok(OauthPending {
                        connection_id: r.get(0)?,
                        verifier: r.get(1)?,
                        redirect_uri: r.get(2)?,
                    })
                },
            )
            .optional()?
            .ok_or(StoreError::NotFound("oauth state"))?;
        tx.execute(
            "DELETE FROM oauth_pending WHERE workspace = ?1 AND state = ?2",
            params![workspace, state],
        )?;
        tx.commit()?;
        Ok(p)
    }
}
