//! Runs and their log lines.

use super::{ms, now_ms, opt_time, time, SqliteStore};
use crate::model::{FailureCategory, LogLevel, LogLine, Run, RunKind, RunStatus};
use crate::store::{ended_meanwhile, NewRun, StoreError, NODE_LOST_KIND};

/// What [`StoreError::Exists`] names when a sync already has a queued or running run.
const ACTIVE_SYNC_RUN: &str = "a queued or running run of this sync";
use chrono::{DateTime, Utc};
use rusqlite::{params, OptionalExtension, Row};

const COLUMNS: &str = "id, connection_id, package, version, kind, sync, status, attempt, created_at, started_at, finished_at, records_committed, failure_category, failure_kind, node_id";

type RawRun = (Run, String, String, Option<String>);

fn from_row(row: &Row<'_>) -> rusqlite::Result<RawRun> {
    Ok((
        Run {
            id: row.get(0)?,
            connection_id: row.get(1)?,
            package: row.get(2)?,
            version: row.get(3)?,
            kind: RunKind::Sync,
            sync: row.get(5)?,
            status: RunStatus::Queued,
            attempt: row.get::<_, i64>(7)?.max(0) as u32,
            created_at: time(row, 8)?,
            started_at: opt_time(row, 9)?,
            finished_at: opt_time(row, 10)?,
            records_committed: row.get::<_, i64>(11)?.max(0) as u64,
            records_received: None,
            failure_category: None,
            failure_kind: row.get(13)?,
            node_id: row.get(14)?,
        },
        row.get(4)?,
        row.get(6)?,
        row.get(12)?,
    ))
}

fn finish((mut r, kind, status, category): RawRun) -> Result<Run, StoreError> {
    r.kind = RunKind::parse(&kind)?;
    r.status = RunStatus::parse(&status)?;
    r.failure_category = category
        .as_deref()
        .map(FailureCategory::parse)
        .transpose()?;
    Ok(r)
}

/// Fails the queued and running runs of `node` (with `or_unowned`, also those of no
/// recorded node; `None`: all of no recorded node); returns their ids.
fn fail_runs(
    tx: &rusqlite::Transaction<'_>,
    node: Option<&str>,
    or_unowned: bool,
    kind: &str,
) -> Result<Vec<String>, StoreError> {
    const SCOPE: &str =
        "status IN ('queued', 'running') AND (node_id = ?1 OR (?2 AND node_id IS NULL))";
    let or_unowned = or_unowned || node.is_none();
    let ids = tx
        .prepare(&format!("SELECT id FROM runs WHERE {SCOPE}"))?
        .query_map(params![node, or_unowned], |r| r.get::<_, String>(0))?
        .collect::<Result<Vec<_>, _>>()?;
    tx.execute(
        &format!(
            "UPDATE runs SET status = 'failed', finished_at = ?3, failure_category = 'platform', failure_kind = ?4
             WHERE {SCOPE}"
        ),
        params![node, or_unowned, now_ms(), kind],
    )?;
    Ok(ids)
}

impl SqliteStore {
    /// Inserts a run created at `created_at` (ms), unless (with `not_since`) a run of its
    /// sync was created after that time (ms); `Exists` when the sync has a queued or running run.
    fn insert_run_if(
        &self,
        workspace: &str,
        r: &NewRun,
        created_at: i64,
        not_since: Option<i64>,
    ) -> Result<Option<Run>, StoreError> {
        let id = uuid::Uuid::new_v4().to_string();
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        if let (RunKind::Sync, Some(connection_id)) = (r.kind, &r.connection_id) {
            // One lock holds every statement here and in set_connection_version: the version
            // read is the one in force when the run row appears.
            let now: String = tx
                .query_row(
                    "SELECT version FROM connections WHERE workspace = ?1 AND id = ?2",
                    params![workspace, connection_id],
                    |row| row.get(0),
                )
                .optional()?
                .ok_or(StoreError::NotFound("connection"))?;
            if now != r.version {
                return Err(crate::store::moved_since_read(&now));
            }
        }
        if let Some(since) = not_since {
            let recent: i64 = tx.query_row(
                "SELECT COUNT(*) FROM runs WHERE workspace = ?1 AND connection_id = ?2 AND kind = 'sync'
                 AND sync = ?3 AND created_at > ?4 AND NOT (status = 'failed' AND failure_kind IS ?5)",
                params![workspace, r.connection_id, r.sync, since, NODE_LOST_KIND],
                |row| row.get(0),
            )?;
            if recent > 0 {
                return Ok(None);
            }
        }
        let inserted = tx.execute(
            "INSERT INTO runs (id, workspace, connection_id, package, version, kind, sync, status, created_at, node_id)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'queued', ?8, ?9)",
            params![id, workspace, r.connection_id, r.package, r.version, r.kind.as_str(), r.sync, created_at, self.node],
        );
        match inserted.map_err(StoreError::from) {
            Ok(_) => {}
            // The one unique index a new run can hit: one queued or running run per sync.
            Err(StoreError::Conflict(_)) => return Err(StoreError::Exists(ACTIVE_SYNC_RUN)),
            Err(e) => return Err(e),
        }
        tx.commit()?;
        drop(conn);
        crate::store::Runs::get_run(self, workspace, &id).map(Some)
    }
}

impl crate::store::Runs for SqliteStore {
    fn insert_run(&self, workspace: &str, r: &NewRun) -> Result<Run, StoreError> {
        self.insert_run_if(workspace, r, now_ms(), None)?
            .ok_or(StoreError::Exists(ACTIVE_SYNC_RUN))
    }

    fn insert_scheduled_run(
        &self,
        workspace: &str,
        r: &NewRun,
        interval_secs: u64,
        now: DateTime<Utc>,
    ) -> Result<Option<Run>, StoreError> {
        let since = ms(now) - (interval_secs.min(i64::MAX as u64 / 1000) as i64) * 1000;
        // Created at the tick's time: the next tick compares with the same clock.
        match self.insert_run_if(workspace, r, ms(now), Some(since)) {
            Err(StoreError::Exists(_)) => Ok(None),
            other => other,
        }
    }

    fn get_run(&self, workspace: &str, id: &str) -> Result<Run, StoreError> {
        let conn = self.lock();
        let row = conn
            .query_row(
                &format!("SELECT {COLUMNS} FROM runs WHERE workspace = ?1 AND id = ?2"),
                params![workspace, id],
                from_row,
            )
            .optional()?
            .ok_or(StoreError::NotFound("run"))?;
        finish(row)
    }

    fn get_run_result(
        &self,
        workspace: &str,
        id: &str,
    ) -> Result<Option<serde_json::Value>, StoreError> {
        let conn = self.lock();
        let text: Option<String> = conn
            .query_row(
                "SELECT result FROM runs WHERE workspace = ?1 AND id = ?2",
                params![workspace, id],
                |r| r.get(0),
            )
            .optional()?
            .ok_or(StoreError::NotFound("run"))?;
        crate::store::opt_json(text)
    }

    fn list_runs(
        &self,
        workspace: &str,
        connection_id: &str,
        before: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Run>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare(&format!(
            "SELECT {COLUMNS} FROM runs WHERE workspace = ?1 AND connection_id = ?2
             AND (?3 IS NULL OR seq < (SELECT seq FROM runs WHERE workspace = ?1 AND id = ?3))
             ORDER BY seq DESC LIMIT ?4"
        ))?;
        let rows = stmt.query_map(params![workspace, connection_id, before, limit], from_row)?;
        rows.map(|r| finish(r?)).collect()
    }

    fn start_run(&self, workspace: &str, id: &str, attempt: u32) -> Result<(), StoreError> {
        let conn = self.lock();
        let n = conn.execute(
            "UPDATE runs SET status = 'running', attempt = ?3, started_at = COALESCE(started_at, ?4)
             WHERE workspace = ?1 AND id = ?2 AND status IN ('queued', 'running')",
            params![workspace, id, attempt, now_ms()],
        )?;
        ended_meanwhile(n as u64, id)
    }

    fn succeed_run(
        &self,
        workspace: &str,
        id: &str,
        records_committed: u64,
        result: Option<&serde_json::Value>,
    ) -> Result<(), StoreError> {
        let result = result.map(serde_json::to_string).transpose()?;
        let conn = self.lock();
        conn.execute(
            "UPDATE runs SET status = 'succeeded', finished_at = ?3, records_committed = ?4, result = ?5
             WHERE workspace = ?1 AND id = ?2 AND status IN ('queued', 'running')",
            params![workspace, id, now_ms(), records_committed as i64, result],
        )?;
        Ok(())
    }

    fn fail_run(
        &self,
        workspace: &str,
        id: &str,
        category: FailureCategory,
        kind: &str,
    ) -> Result<(), StoreError> {
        let conn = self.lock();
        conn.execute(
            "UPDATE runs SET status = 'failed', finished_at = ?3, failure_category = ?4, failure_kind = ?5
             WHERE workspace = ?1 AND id = ?2 AND status IN ('queued', 'running')",
            params![workspace, id, now_ms(), category.as_str(), kind],
        )?;
        Ok(())
    }

    fn fail_unfinished_runs(&self) -> Result<Vec<String>, StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        let ids = fail_runs(&tx, self.node.as_deref(), true, "daemon_restart")?;
        tx.commit()?;
        Ok(ids)
    }

    fn fail_work_of_lost_node(&self, node: &str) -> Result<(Vec<String>, usize), StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        let ids = fail_runs(&tx, Some(node), false, NODE_LOST_KIND)?;
        let builds = tx.execute(
            "UPDATE builds SET status = 'failed', failure = 'the node running the build was lost', finished_at = ?1
             WHERE status IN ('queued', 'running') AND node_id = ?2",
            params![now_ms(), node],
        )?;
        tx.commit()?;
        Ok((ids, builds))
    }

    fn last_sync_run_at(
        &self,
        workspace: &str,
        connection_id: &str,
        sync: &str,
    ) -> Result<Option<DateTime<Utc>>, StoreError> {
        let conn = self.lock();
        let latest: Option<i64> = conn.query_row(
            "SELECT MAX(created_at) FROM runs WHERE workspace = ?1 AND connection_id = ?2 AND kind = 'sync' AND sync = ?3
             AND NOT (status = 'failed' AND failure_kind IS ?4)",
            params![workspace, connection_id, sync, NODE_LOST_KIND],
            |r| r.get(0),
        )?;
        latest
            .map(|v| {
                DateTime::<Utc>::from_timestamp_millis(v)
                    .ok_or_else(|| StoreError::corrupt(format!("time {v} ms is out of range")))
            })
            .transpose()
    }

    fn insert_log(
        &self,
        workspace: &str,
        run_id: &str,
        connection_id: Option<&str>,
        level: LogLevel,
        message: &str,
    ) -> Result<(), StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare_cached(
            "INSERT INTO logs (workspace, run_id, connection_id, ts, level, message) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?;
        stmt.execute(params![
            workspace,
            run_id,
            connection_id,
            now_ms(),
            level.as_str(),
            message
        ])?;
        Ok(())
    }

    fn list_logs(
        &self,
        workspace: &str,
        connection_id: Option<&str>,
        run_id: Option<&str>,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<LogLine>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare(
            "SELECT id, run_id, ts, level, message FROM logs
             WHERE workspace = ?1 AND (?2 IS NULL OR connection_id = ?2) AND (?3 IS NULL OR run_id = ?3) AND id > ?4
             ORDER BY id LIMIT ?5",
        )?;
        let rows = stmt.query_map(
            params![workspace, connection_id, run_id, after.unwrap_or(0), limit],
            |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    time(r, 2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, String>(4)?,
                ))
            },
        )?;
        rows.map(|r| {
            let (id, run_id, ts, level, message) = r?;
            Ok(LogLine {
                id,
                run_id,
                ts,
                level: LogLevel::parse(&level)?,
                message,
            })
        })
        .collect()
    }

    fn delete_logs_before(&self, cutoff: DateTime<Utc>) -> Result<usize, StoreError> {
        let conn = self.lock();
        Ok(conn.execute("DELETE FROM logs WHERE ts < ?1", [ms(cutoff)])?)
    }
}
