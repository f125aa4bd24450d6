//! Runs and their log lines.

use super::{opt_time, time, unsigned, PostgresStore};
use crate::model::{FailureCategory, LogLevel, LogLine, Run, RunKind, RunStatus};
use crate::store::{ended_meanwhile, NewRun, StoreError, NODE_LOST_KIND};

/// What [`StoreError::Exists`] names when a sync already has a queued or running run.
const ACTIVE_SYNC_RUN: &str = "a queued or running run of this sync";
use chrono::{DateTime, Utc};
use postgres::{GenericClient, Row};

const COLUMNS: &str = "id, connection_id, package, version, kind, sync, status, attempt, created_at, started_at, finished_at, records_committed, failure_category, failure_kind, node_id";

fn from_row(row: &Row) -> Result<Run, StoreError> {
    let kind: String = row.try_get(4)?;
    let status: String = row.try_get(6)?;
    let category: Option<String> = row.try_get(12)?;
    Ok(Run {
        id: row.try_get(0)?,
        connection_id: row.try_get(1)?,
        package: row.try_get(2)?,
        version: row.try_get(3)?,
        kind: RunKind::parse(&kind)?,
        sync: row.try_get(5)?,
        status: RunStatus::parse(&status)?,
        attempt: unsigned(row, 7)?.min(u32::MAX as u64) as u32,
        created_at: time(row, 8)?,
        started_at: opt_time(row, 9)?,
        finished_at: opt_time(row, 10)?,
        records_committed: unsigned(row, 11)?,
        records_received: None,
        failure_category: category
            .as_deref()
            .map(FailureCategory::parse)
            .transpose()?,
        failure_kind: row.try_get(13)?,
        node_id: row.try_get(14)?,
    })
}

fn get(c: &mut impl GenericClient, workspace: &str, id: &str) -> Result<Run, StoreError> {
    let row = c
        .query_opt(
            &format!("SELECT {COLUMNS} FROM connect_runs WHERE workspace = $1 AND id = $2"),
            &[&workspace, &id],
        )?
        .ok_or(StoreError::NotFound("run"))?;
    from_row(&row)
}

/// Fails the queued and running runs of `node` (with `or_unowned`, also those of no
/// recorded node; `None`: all of no recorded node); returns their ids.
fn fail_runs(
    c: &mut impl GenericClient,
    node: Option<&str>,
    or_unowned: bool,
    kind: &str,
) -> Result<Vec<String>, StoreError> {
    let or_unowned = or_unowned || node.is_none();
    c.query(
        "UPDATE connect_runs SET status = 'failed', finished_at = $3, failure_category = 'platform', failure_kind = $4
         WHERE status IN ('queued', 'running') AND (node_id = $1 OR ($2 AND node_id IS NULL)) RETURNING id",
        &[&node, &or_unowned, &Utc::now(), &kind],
    )?
    .iter()
    .map(|r| Ok(r.try_get(0)?))
    .collect()
}

impl PostgresStore {
    /// Inserts a run created at `created_at`, unless (with `not_since`) a run of its sync was created after that
    /// time; `Exists` when the sync has a queued or running run (the unique index decides
    /// between two nodes inserting at once).
    fn insert_run_if(
        &self,
        workspace: &str,
        r: &NewRun,
        created_at: DateTime<Utc>,
        not_since: Option<DateTime<Utc>>,
    ) -> Result<Option<Run>, StoreError> {
        let id = uuid::Uuid::new_v4().to_string();
        let (ws, r, node) = (workspace.to_string(), r.clone(), self.node.clone());
        self.run(move |c| {
            let mut tx = c.transaction()?;
            if let (RunKind::Sync, Some(connection_id)) = (r.kind, &r.connection_id) {
                // FOR SHARE: a version change (FOR UPDATE on the row) waits for this run to be
                // inserted and then sees it, or this insert waits for the change and sees the
                // new version. Either way no sync runs under a version no longer in force.
                let now: String = tx
                    .query_opt(
                        "SELECT version FROM connect_connections WHERE workspace = $1 AND id = $2 FOR SHARE",
                        &[&ws, connection_id],
                    )?
                    .ok_or(StoreError::NotFound("connection"))?
                    .try_get(0)?;
                if now != r.version {
                    return Err(crate::store::moved_since_read(&now));
                }
            }
            if let Some(since) = not_since {
                // Two schedulers reading this at once may both find nothing: the unique
                // index below then lets only one insert through.
                let recent: i64 = tx
                    .query_one(
                        "SELECT COUNT(*) FROM connect_runs WHERE workspace = $1 AND connection_id = $2
                         AND kind = 'sync' AND sync = $3 AND created_at > $4
                         AND NOT (status = 'failed' AND failure_kind IS NOT DISTINCT FROM $5)",
                        &[&ws, &r.connection_id, &r.sync, &since, &NODE_LOST_KIND],
                    )?
                    .try_get(0)?;
                if recent > 0 {
                    return Ok(None);
                }
            }
            let inserted = tx.execute(
                "INSERT INTO connect_runs (id, workspace, connection_id, package, version, kind, sync, status, created_at, node_id)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, 'queued', $8, $9)",
                &[&id, &ws, &r.connection_id, &r.package, &r.version, &r.kind.as_str(), &r.sync, &created_at, &node],
            );
            match inserted.map_err(StoreError::from) {
                Ok(_) => {}
                // The one unique index a new run can hit: one queued or running run per sync.
                Err(StoreError::Conflict(_)) => return Err(StoreError::Exists(ACTIVE_SYNC_RUN)),
                Err(e) => return Err(e),
            }
            let run = get(&mut tx, &ws, &id)?;
            tx.commit()?;
            Ok(Some(run))
        })
    }
}

impl crate::store::Runs for PostgresStore {
    fn insert_run(&self, workspace: &str, r: &NewRun) -> Result<Run, StoreError> {
        self.insert_run_if(workspace, r, Utc::now(), None)?
            .ok_or(StoreError::Exists(ACTIVE_SYNC_RUN))
    }

    fn insert_scheduled_run(
        &self,
        workspace: &str,
        r: &NewRun,
        interval_secs: u64,
        now: DateTime<Utc>,
    ) -> Result<Option<Run>, StoreError> {
        let secs = interval_secs.min(i64::MAX as u64 / 1000) as i64;
        let since = now - chrono::Duration::seconds(secs);
        // Created at the tick's time: the next tick compares with the same clock.
        match self.insert_run_if(workspace, r, now, Some(since)) {
            Err(StoreError::Exists(_)) => Ok(None),
            other => other,
        }
    }

    fn get_run(&self, workspace: &str, id: &str) -> Result<Run, StoreError> {
        let (ws, id) = (workspace.to_string(), id.to_string());
        self.run(move |c| get(c, &ws, &id))
    }

    fn get_run_result(
        &self,
        workspace: &str,
        id: &str,
    ) -> Result<Option<serde_json::Value>, StoreError> {
        let (ws, id) = (workspace.to_string(), id.to_string());
        self.run(move |c| {
            let row = c
                .query_opt(
                    "SELECT result FROM connect_runs WHERE workspace = $1 AND id = $2",
                    &[&ws, &id],
                )?
                .ok_or(StoreError::NotFound("run"))?;
            crate::store::opt_json(row.try_get(0)?)
        })
    }

    fn list_runs(
        &self,
        workspace: &str,
        connection_id: &str,
        before: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Run>, StoreError> {
        let (ws, id) = (workspace.to_string(), connection_id.to_string());
        let before = before.map(str::to_string);
        self.run(move |c| {
            c.query(
                &format!(
                    "SELECT {COLUMNS} FROM connect_runs WHERE workspace = $1 AND connection_id = $2
                     AND ($3::text IS NULL OR seq < (SELECT seq FROM connect_runs WHERE workspace = $1 AND id = $3))
                     ORDER BY seq DESC LIMIT $4"
                ),
                &[&ws, &id, &before, &i64::from(limit)],
            )?
            .iter()
            .map(from_row)
            .collect()
        })
    }

    fn start_run(&self, workspace: &str, id: &str, attempt: u32) -> Result<(), StoreError> {
        let (ws, id) = (workspace.to_string(), id.to_string());
        self.run(move |c| {
            let n = c.execute(
                "UPDATE connect_runs SET status = 'running', attempt = $3, started_at = COALESCE(started_at, $4)
                 WHERE workspace = $1 AND id = $2 AND status IN ('queued', 'running')",
                &[&ws, &id, &i64::from(attempt), &Utc::now()],
            )?;
            ended_meanwhile(n, &id)
        })
    }

    fn succeed_run(
        &self,
        workspace: &str,
        id: &str,
        records_committed: u64,
        result: Option<&serde_json::Value>,
    ) -> Result<(), StoreError> {
        let result = result.map(serde_json::to_string).transpose()?;
        let (ws, id) = (workspace.to_string(), id.to_string());
        self.run(move |c| {
            c.execute(
                "UPDATE connect_runs SET status = 'succeeded', finished_at = $3, records_committed = $4, result = $5
                 WHERE workspace = $1 AND id = $2 AND status IN ('queued', 'running')",
                &[&ws, &id, &Utc::now(), &(records_committed as i64), &result],
            )?;
            Ok(())
        })
    }

    fn fail_run(
        &self,
        workspace: &str,
        id: &str,
        category: FailureCategory,
        kind: &str,
    ) -> Result<(), StoreError> {
        let (ws, id, kind) = (workspace.to_string(), id.to_string(), kind.to_string());
        self.run(move |c| {
            c.execute(
                "UPDATE connect_runs SET status = 'failed', finished_at = $3, failure_category = $4, failure_kind = $5
                 WHERE workspace = $1 AND id = $2 AND status IN ('queued', 'running')",
                &[&ws, &id, &Utc::now(), &category.as_str(), &kind],
            )?;
            Ok(())
        })
    }

    fn fail_unfinished_runs(&self) -> Result<Vec<String>, StoreError> {
        let node = self.node.clone();
        self.run(move |c| fail_runs(c, node.as_deref(), true, "daemon_restart"))
    }

    fn fail_work_of_lost_node(&self, node: &str) -> Result<(Vec<String>, usize), StoreError> {
        let node = node.to_string();
        self.run(move |c| {
            let mut tx = c.transaction()?;
            let ids = fail_runs(&mut tx, Some(&node), false, NODE_LOST_KIND)?;
            let builds = tx.execute(
                "UPDATE connect_builds SET status = 'failed', failure = 'the node running the build was lost', finished_at = $1
                 WHERE status IN ('queued', 'running') AND node_id = $2",
                &[&Utc::now(), &node],
            )?;
            tx.commit()?;
            Ok((ids, builds as usize))
        })
    }

    fn last_sync_run_at(
        &self,
        workspace: &str,
        connection_id: &str,
        sync: &str,
    ) -> Result<Option<DateTime<Utc>>, StoreError> {
        let (ws, id, sync) = (
            workspace.to_string(),
            connection_id.to_string(),
            sync.to_string(),
        );
        self.run(move |c| {
            Ok(c.query_one(
                "SELECT MAX(created_at) FROM connect_runs
                 WHERE workspace = $1 AND connection_id = $2 AND kind = 'sync' AND sync = $3
                 AND NOT (status = 'failed' AND failure_kind IS NOT DISTINCT FROM $4)",
                &[&ws, &id, &sync, &NODE_LOST_KIND],
            )?
            .try_get(0)?)
        })
    }

    fn insert_log(
        &self,
        workspace: &str,
        run_id: &str,
        connection_id: Option<&str>,
        level: LogLevel,
        message: &str,
    ) -> Result<(), StoreError> {
        let (ws, run_id, message) = (
            workspace.to_string(),
            run_id.to_string(),
            message.to_string(),
        );
        let connection_id = connection_id.map(str::to_string);
        self.run(move |c| {
            c.execute(
                "INSERT INTO connect_logs (workspace, run_id, connection_id, ts, level, message)
                 VALUES ($1, $2, $3, $4, $5, $6)",
                &[
                    &ws,
                    &run_id,
                    &connection_id,
                    &Utc::now(),
                    &level.as_str(),
                    &message,
                ],
            )?;
            Ok(())
        })
    }

    fn list_logs(
        &self,
        workspace: &str,
        connection_id: Option<&str>,
        run_id: Option<&str>,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<LogLine>, StoreError> {
        let ws = workspace.to_string();
        let connection_id = connection_id.map(str::to_string);
        let run_id = run_id.map(str::to_string);
        self.run(move |c| {
            c.query(
                "SELECT id, run_id, ts, level, message FROM connect_logs
                 WHERE workspace = $1 AND ($2::text IS NULL OR connection_id = $2)
                 AND ($3::text IS NULL OR run_id = $3) AND id > $4
                 ORDER BY id LIMIT $5",
                &[
                    &ws,
                    &connection_id,
                    &run_id,
                    &after.unwrap_or(0),
                    &i64::from(limit),
                ],
            )?
            .iter()
            .map(|r| {
                let level: String = r.try_get(3)?;
                Ok(LogLine {
                    id: r.try_get(0)?,
                    run_id: r.try_get(1)?,
                    ts: time(r, 2)?,
                    level: LogLevel::parse(&level)?,
                    message: r.try_get(4)?,
                })
            })
            .collect()
        })
    }

    fn delete_logs_before(&self, cutoff: DateTime<Utc>) -> Result<usize, StoreError> {
        self.run(move |c| {
            let n = c.execute("DELETE FROM connect_logs WHERE ts < $1", &[&cutoff])?;
            Ok(n as usize)
        })
    }
}
