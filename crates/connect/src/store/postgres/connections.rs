//! Connections, their sealed credentials and pending OAuth sign-ins.

use super::{time, PostgresStore};
use crate::model::{AuthKind, Connection, ConnectionStatus};
use crate::store::{
    CredentialBlob, NewConnection, OauthPending, StoreError, VersionChange, VersionChangeOutcome,
};
use chrono::Utc;
use postgres::Row;

const COLUMNS: &str = "id, name, package, version, config, origin, auth_kind, status, schedule_secs, created_at, updated_at";

fn from_row(row: &Row) -> Result<Connection, StoreError> {
    let schedule: Option<i64> = row.try_get(8)?;
    let config: String = row.try_get(4)?;
    let auth: String = row.try_get(6)?;
    let status: String = row.try_get(7)?;
    Ok(Connection {
        id: row.try_get(0)?,
        name: row.try_get(1)?,
        package: row.try_get(2)?,
        version: row.try_get(3)?,
        config: serde_json::from_str(&config)?,
        origin: row.try_get(5)?,
        auth_kind: AuthKind::parse(&auth)?,
        status: ConnectionStatus::parse(&status)?,
        schedule_interval_seconds: schedule.map(|s| s.max(0) as u64),
        created_at: time(row, 9)?,
        updated_at: time(row, 10)?,
    })
}

fn get(
    c: &mut impl postgres::GenericClient,
    workspace: &str,
    id: &str,
) -> Result<Connection, StoreError> {
    let row = c
        .query_opt(
            &format!("SELECT {COLUMNS} FROM connect_connections WHERE workspace = $1 AND id = $2"),
            &[&workspace, &id],
        )?
        .ok_or(StoreError::NotFound("connection"))?;
    from_row(&row)
}

impl crate::store::Connections for PostgresStore {
    fn insert_connection(
        &self,
        workspace: &str,
        id: &str,
        c: &NewConnection,
        credentials: &[u8],
    ) -> Result<Connection, StoreError> {
        let (ws, id, c, credentials) = (
            workspace.to_string(),
            id.to_string(),
            c.clone(),
            credentials.to_vec(),
        );
        let config = serde_json::to_string(&c.config)?;
        self.run(move |client| {
            let schedule = c.schedule_interval_seconds.map(|s| s as i64);
            client.execute(
                &format!(
                    "INSERT INTO connect_connections ({COLUMNS}, workspace, credentials)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10, $11, $12)"
                ),
                &[
                    &id,
                    &c.name,
                    &c.package,
                    &c.version,
                    &config,
                    &c.origin,
                    &c.auth_kind.as_str(),
                    &c.status.as_str(),
                    &schedule,
                    &Utc::now(),
                    &ws,
                    &credentials,
                ],
            )?;
            get(client, &ws, &id)
        })
    }

    fn get_connection(&self, workspace: &str, id: &str) -> Result<Connection, StoreError> {
        let (ws, id) = (workspace.to_string(), id.to_string());
        self.run(move |c| get(c, &ws, &id))
    }

    fn get_connection_credentials(&self, workspace: &str, id: &str) -> Result<Vec<u8>, StoreError> {
        let (ws, id) = (workspace.to_string(), id.to_string());
        self.run(move |c| {
            let row = c
                .query_opt(
                    "SELECT credentials FROM connect_connections WHERE workspace = $1 AND id = $2",
                    &[&ws, &id],
                )?
                .ok_or(StoreError::NotFound("connection"))?;
            Ok(row.try_get(0)?)
        })
    }

    fn list_connections(&self, workspace: &str) -> Result<Vec<Connection>, StoreError> {
        let ws = workspace.to_string();
        self.run(move |c| {
            c.query(
                &format!(
                    "SELECT {COLUMNS} FROM connect_connections WHERE workspace = $1 ORDER BY created_at, id"
                ),
                &[&ws],
            )?
            .iter()
            .map(from_row)
            .collect()
        })
    }

    fn list_scheduled_connections(&self) -> Result<Vec<(String, Connection)>, StoreError> {
        self.run(move |c| {
            c.query(
                &format!(
                    "SELECT {COLUMNS}, workspace FROM connect_connections
                     WHERE status = 'active' AND schedule_secs IS NOT NULL ORDER BY id"
                ),
                &[],
            )?
            .iter()
            .map(|row| Ok((row.try_get(11)?, from_row(row)?)))
            .collect()
        })
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
        let (ws, id, name) = (workspace.to_string(), id.to_string(), name.to_string());
        let config = serde_json::to_string(config)?;
        let schedule = schedule_interval_seconds.map(|s| s as i64);
        self.run(move |c| {
            let n = c.execute(
                "UPDATE connect_connections SET name = $3, config = $4, status = $5, schedule_secs = $6, updated_at = $7
                 WHERE workspace = $1 AND id = $2",
                &[&ws, &id, &name, &config, &status.as_str(), &schedule, &Utc::now()],
            )?;
            if n == 0 {
                return Err(StoreError::NotFound("connection"));
            }
            get(c, &ws, &id)
        })
    }

    fn set_connection_version(
        &self,
        workspace: &str,
        id: &str,
        change: &VersionChange,
    ) -> Result<VersionChangeOutcome, StoreError> {
        let (ws, id, change) = (workspace.to_string(), id.to_string(), change.clone());
        let config = serde_json::to_string(&change.config)?;
        self.run(move |c| {
            let mut tx = c.transaction()?;
            // FOR UPDATE waits for a sync run being inserted (insert_run holds FOR SHARE on
            // this row) and keeps new ones out until the commit; each later statement of this
            // READ COMMITTED transaction sees every run inserted before the lock was granted.
            let now: String = tx
                .query_opt(
                    "SELECT version FROM connect_connections WHERE workspace = $1 AND id = $2 FOR UPDATE",
                    &[&ws, &id],
                )?
                .ok_or(StoreError::NotFound("connection"))?
                .try_get(0)?;
            if now != change.from {
                return Ok(VersionChangeOutcome::VersionMoved(now));
            }
            let unfinished: i64 = tx
                .query_one(
                    "SELECT COUNT(*) FROM connect_runs WHERE workspace = $1 AND connection_id = $2
                     AND kind = 'sync' AND status IN ('queued', 'running')",
                    &[&ws, &id],
                )?
                .try_get(0)?;
            if unfinished > 0 {
                return Ok(VersionChangeOutcome::SyncRunning);
            }
            let committed: Vec<String> = tx
                .query(
                    "SELECT sync FROM connect_sync_state WHERE workspace = $1 AND connection_id = $2",
                    &[&ws, &id],
                )?
                .iter()
                .map(|r| r.try_get(0))
                .collect::<Result<_, _>>()?;
            if !crate::store::same_syncs(&committed, &change.committed_syncs) {
                return Ok(VersionChangeOutcome::CommittedChanged);
            }
            tx.execute(
                "UPDATE connect_connections SET version = $3, config = $4, updated_at = $5
                 WHERE workspace = $1 AND id = $2",
                &[&ws, &id, &change.to, &config, &Utc::now()],
            )?;
            tx.commit()?;
            Ok(VersionChangeOutcome::Changed)
        })
    }

    fn committed_syncs(
        &self,
        workspace: &str,
        connection_id: &str,
    ) -> Result<Vec<String>, StoreError> {
        let (ws, id) = (workspace.to_string(), connection_id.to_string());
        self.run(move |c| {
            c.query(
                "SELECT sync FROM connect_sync_state WHERE workspace = $1 AND connection_id = $2 ORDER BY sync",
                &[&ws, &id],
            )?
            .iter()
            .map(|r| Ok(r.try_get(0)?))
            .collect()
        })
    }

    fn set_connection_status(
        &self,
        workspace: &str,
        id: &str,
        status: ConnectionStatus,
    ) -> Result<(), StoreError> {
        let (ws, id) = (workspace.to_string(), id.to_string());
        self.run(move |c| {
            let n = c.execute(
                "UPDATE connect_connections SET status = $3, updated_at = $4 WHERE workspace = $1 AND id = $2",
                &[&ws, &id, &status.as_str(), &Utc::now()],
            )?;
            if n == 0 {
                return Err(StoreError::NotFound("connection"));
            }
            Ok(())
        })
    }

    fn set_connection_credentials(
        &self,
        workspace: &str,
        id: &str,
        credentials: &[u8],
        status: Option<ConnectionStatus>,
    ) -> Result<(), StoreError> {
        let (ws, id, credentials) = (workspace.to_string(), id.to_string(), credentials.to_vec());
        self.run(move |c| {
            let n = c.execute(
                "UPDATE connect_connections SET credentials = $3, status = COALESCE($4, status), updated_at = $5
                 WHERE workspace = $1 AND id = $2",
                &[&ws, &id, &credentials, &status.map(|s| s.as_str()), &Utc::now()],
            )?;
            if n == 0 {
                return Err(StoreError::NotFound("connection"));
            }
            Ok(())
        })
    }

    fn credential_blobs(&self) -> Result<Vec<CredentialBlob>, StoreError> {
        self.run(move |c| {
            c.query(
                "SELECT workspace, id, credentials FROM connect_connections ORDER BY id",
                &[],
            )?
            .iter()
            .map(|r| {
                Ok(CredentialBlob {
                    workspace: r.try_get(0)?,
                    connection_id: r.try_get(1)?,
                    blob: r.try_get(2)?,
                })
            })
            .collect()
        })
    }

    fn replace_credentials(
        &self,
        workspace: &str,
        id: &str,
        old: &[u8],
        new: &[u8],
    ) -> Result<bool, StoreError> {
        let (ws, id, old, new) = (
            workspace.to_string(),
            id.to_string(),
            old.to_vec(),
            new.to_vec(),
        );
        self.run(move |c| {
            let n = c.execute(
                "UPDATE connect_connections SET credentials = $4
                 WHERE workspace = $1 AND id = $2 AND credentials = $3",
                &[&ws, &id, &old, &new],
            )?;
            Ok(n == 1)
        })
    }

    fn delete_connection(&self, workspace: &str, id: &str) -> Result<(), StoreError> {
        let (ws, id) = (workspace.to_string(), id.to_string());
        self.run(move |c| {
            let mut tx = c.transaction()?;
            let n = tx.execute(
                "DELETE FROM connect_connections WHERE workspace = $1 AND id = $2",
                &[&ws, &id],
            )?;
            if n == 0 {
                return Err(StoreError::NotFound("connection"));
            }
            tx.execute(
                "DELETE FROM connect_records WHERE dataset IN
                 (SELECT id FROM connect_sync_state WHERE workspace = $1 AND connection_id = $2)",
                &[&ws, &id],
            )?;
            // Logs and run history go with the connection: they may quote its data.
            for table in [
                "sync_state",
                "oauth_pending",
                "logs",
                "runs",
                "webhook_settings",
                "webhook_tokens",
                "webhook_deliveries",
            ] {
                tx.execute(
                    &format!(
                        "DELETE FROM connect_{table} WHERE workspace = $1 AND connection_id = $2"
                    ),
                    &[&ws, &id],
                )?;
            }
            tx.commit()?;
            Ok(())
        })
    }

    fn insert_oauth_pending(
        &self,
        workspace: &str,
        state: &str,
        p: &OauthPending,
    ) -> Result<(), StoreError> {
        let (ws, state, p) = (workspace.to_string(), state.to_string(), p.clone());
        self.run(move |c| {
            c.execute(
                "INSERT INTO connect_oauth_pending (state, workspace, connection_id, verifier, redirect_uri, created_at)
                 VALUES ($1, $2, $3, $4, $5, $6)",
                &[&state, &ws, &p.connection_id, &p.verifier, &p.redirect_uri, &Utc::now()],
            )?;
            Ok(())
        })
    }

    fn take_oauth_pending(&self, workspace: &str, state: &str) -> Result<OauthPending, StoreError> {
        let (ws, state) = (workspace.to_string(), state.to_string());
        self.run(move |c| {
            // One statement reads and deletes: of two racing takes, one gets the row.
            let row = c
                .query_opt(
                    "DELETE FROM connect_oauth_pending WHERE workspace = $1 AND state = $2
                     RETURNING connection_id, verifier, redirect_uri",
                    &[&ws, &state],
                )?
                .ok_or(StoreError::NotFound("oauth state"))?;
            Ok(OauthPending {
                connection_id: row.try_get(0)?,
                verifier: row.try_get(1)?,
                redirect_uri: row.try_get(2)?,
            })
        })
    }
}
