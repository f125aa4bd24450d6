//! Runs: connection test, sync runs (Run now and the scheduler), and the read APIs for runs,
//! logs and committed records.

use super::execute::{JobPlan, JobResult};
use super::{ConnectService, ServiceError, SyncSlot};
use crate::api::{LogsPage, Page, PageQuery, RecordsPage, RecordsQuery, RunsPage};
use crate::job::{JobSpec, SyncTarget};
use crate::model::{
    Connection, ConnectionStatus, Definition, JobKind, Run, RunKind, RunStatus, SyncMode,
};
use crate::store::{NewRun, StoreError};
use chrono::{DateTime, Utc};
use std::sync::Arc;

/// A sync whose schedule says it should run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueSync {
    /// Workspace.
    pub workspace: String,
    /// Connection id.
    pub connection_id: String,
    /// Sync name.
    pub sync: String,
    /// Its schedule interval, seconds.
    pub interval_secs: u64,
}

/// A claimed sync run, ready to execute.
struct ClaimedSync {
    run: Run,
    slot: SyncSlot,
}

/// A numeric page cursor (a log line id or a record sequence number).
fn numeric_cursor(q: &PageQuery) -> Result<Option<i64>, ServiceError> {
    q.cursor
        .as_deref()
        .map(|c| {
            c.parse::<i64>()
                .map_err(|_| ServiceError::Invalid("cursor is not valid".into()))
        })
        .transpose()
}

/// A page of `items`; a full page gets the cursor of its last item.
fn page<T>(items: Vec<T>, limit: u32, cursor_of: impl Fn(&T) -> String) -> Page<T> {
    let next_cursor = (items.len() as u32 == limit)
        .then(|| items.last().map(&cursor_of))
        .flatten();
    Page { items, next_cursor }
}

impl ConnectService {
    /// Runs the connection test (`verify`) once, not retried.
    pub async fn test_connection(&self, workspace: &str, id: &str) -> Result<Run, ServiceError> {
        let c = self.store.get_connection(workspace, id)?;
        let (pv, def, artifact_dir) = self.built_version(workspace, &c.package, &c.version)?;
        if !def.has_verify {
            return Err(ServiceError::Invalid(
                "the package has no verify step".into(),
            ));
        }
        if c.status == ConnectionStatus::ReauthorizationRequired {
            return Err(ServiceError::Conflict(
                "the connection needs Connect with OAuth first".into(),
            ));
        }
        let run = self.store.insert_run(
            workspace,
            &NewRun {
                connection_id: Some(c.id.clone()),
                package: pv.name.clone(),
                version: pv.version.clone(),
                kind: RunKind::Verify,
                sync: None,
            },
        )?;
        let spec = JobSpec {
            kind: JobKind::Verify,
            entry: format!("/pkg/{}", pv.entry),
            config: c.config.clone(),
            sync: None,
            checkpoint: None,
            oauth_step: None,
            delivery: None,
            time_budget: self.limits.verify_time,
            limits: self.limits.output,
            retry: self.limits.fetch_retry,
        };
        let plan = JobPlan {
            workspace,
            run: &run,
            connection: Some(&c),
            definition: Some(&def),
            artifact_dir,
            spec,
            retries: 0,
            delivery: None,
        };
        self.execute(plan).await?;
        Ok(self.store.get_run(workspace, &run.id)?)
    }

    /// Creates the run row of a sync and claims its slot (one run at a time per sync, on
    /// this node in memory and across nodes in the store). With `schedule` (interval, now),
    /// the run is created only if it is still due: `None` when another node's scheduler
    /// created it first.
    fn claim_sync(
        &self,
        workspace: &str,
        c: &Connection,
        sync: &str,
        schedule: Option<(u64, DateTime<Utc>)>,
    ) -> Result<Option<ClaimedSync>, ServiceError> {
        match c.status {
            ConnectionStatus::Active => {}
            ConnectionStatus::ReauthorizationRequired => {
                return Err(ServiceError::Conflict(
                    "the connection needs Connect with OAuth first".into(),
                ))
            }
            ConnectionStatus::Disabled => {
                return Err(ServiceError::Conflict("the connection is disabled".into()))
            }
        }
        let (pv, def, _) = self.built_version(workspace, &c.package, &c.version)?;
        if def.sync(sync).is_none() {
            return Err(ServiceError::NotFound("sync"));
        }
        let key = (workspace.to_string(), c.id.clone(), sync.to_string());
        let slot = SyncSlot::claim(&self.active_syncs, key).ok_or_else(|| {
            ServiceError::Conflict(format!(
                "sync {sync:?} of this connection is already running"
            ))
        })?;
        let new = NewRun {
            connection_id: Some(c.id.clone()),
            package: pv.name,
            version: pv.version,
            kind: RunKind::Sync,
            sync: Some(sync.to_string()),
        };
        let run = match schedule {
            Some((interval, now)) => {
                match self
                    .store
                    .insert_scheduled_run(workspace, &new, interval, now)?
                {
                    Some(run) => run,
                    None => return Ok(None),
                }
            }
            None => match self.store.insert_run(workspace, &new) {
                Ok(run) => run,
                Err(StoreError::Exists(_)) => {
                    return Err(ServiceError::Conflict(format!(
                        "sync {sync:?} of this connection is already running"
                    )))
                }
                Err(e) => return Err(e.into()),
            },
        };
        Ok(Some(ClaimedSync { run, slot }))
    }

    async fn execute_sync(
        &self,
        workspace: &str,
        claimed: ClaimedSync,
    ) -> Result<Run, ServiceError> {
        let ClaimedSync { run, slot } = claimed;
        let sync = run.sync.clone().unwrap_or_default();
        let connection_id = run.connection_id.clone().unwrap_or_default();
        let c = self.store.get_connection(workspace, &connection_id)?;
        let (pv, def, artifact_dir) = self.built_version(workspace, &c.package, &c.version)?;
        let Some(sync_def) = def.sync(&sync) else {
            return Err(ServiceError::NotFound("sync"));
        };
        let spec = JobSpec {
            kind: JobKind::Sync,
            entry: format!("/pkg/{}", pv.entry),
            config: c.config.clone(),
            sync: Some(SyncTarget {
                name: sync.clone(),
                mode: sync_def.mode,
                primary_key: sync_def.primary_key.clone(),
            }),
            // Every attempt starts from the last committed checkpoint.
            checkpoint: self.store.get_checkpoint(workspace, &c.id, &sync)?,
            oauth_step: None,
            delivery: None,
            time_budget: self.limits.sync_time,
            limits: self.limits.output,
            retry: self.limits.fetch_retry,
        };
        let plan = JobPlan {
            workspace,
            run: &run,
            connection: Some(&c),
            definition: Some(&def),
            artifact_dir,
            spec,
            retries: self.limits.platform_retries,
            delivery: None,
        };
        let result = self.execute(plan).await;
        drop(slot);
        if let Ok(JobResult::Failed { category, kind }) = &result {
            tracing::info!(run = %run.id, category = category.as_str(), %kind, "sync run failed");
        }
        result?;
        Ok(self.store.get_run(workspace, &run.id)?)
    }

    /// Runs a sync now and waits for it to end.
    pub async fn run_sync(
        &self,
        workspace: &str,
        connection_id: &str,
        sync: &str,
    ) -> Result<Run, ServiceError> {
        let c = self.store.get_connection(workspace, connection_id)?;
        let claimed = self.claim_sync(workspace, &c, sync, None)?;
        let claimed = claimed.ok_or_else(|| ServiceError::Conflict("sync not started".into()))?;
        self.execute_sync(workspace, claimed).await
    }

    /// Starts a sync in the background ("Run now"); returns the queued run.
    pub fn start_sync(
        self: &Arc<Self>,
        workspace: &str,
        connection_id: &str,
        sync: &str,
    ) -> Result<Run, ServiceError> {
        let c = self.store.get_connection(workspace, connection_id)?;
        let claimed = self.claim_sync(workspace, &c, sync, None)?;
        let claimed = claimed.ok_or_else(|| ServiceError::Conflict("sync not started".into()))?;
        Ok(self.spawn_sync(workspace, claimed))
    }

    /// Starts a due sync in the background unless another node's scheduler started it
    /// first (the store decides); returns the queued run if this node started it.
    fn start_scheduled_sync(
        self: &Arc<Self>,
        d: &DueSync,
        now: DateTime<Utc>,
    ) -> Result<Option<Run>, ServiceError> {
        let c = self.store.get_connection(&d.workspace, &d.connection_id)?;
        let claimed = self.claim_sync(&d.workspace, &c, &d.sync, Some((d.interval_secs, now)))?;
        Ok(claimed.map(|claimed| self.spawn_sync(&d.workspace, claimed)))
    }

    /// Runs a claimed sync in the background; returns its queued run.
    fn spawn_sync(self: &Arc<Self>, workspace: &str, claimed: ClaimedSync) -> Run {
        let run = claimed.run.clone();
        let this = self.clone();
        let ws = workspace.to_string();
        tokio::spawn(async move {
            let id = claimed.run.id.clone();
            if let Err(e) = this.execute_sync(&ws, claimed).await {
                tracing::error!(error = %e, run = %id, "sync run could not be executed");
                let _ = this.store.fail_run(
                    &ws,
                    &id,
                    crate::model::FailureCategory::Platform,
                    "internal",
                );
            }
        });
        run
    }

    /// Syncs whose interval has elapsed since their last run (active connections only; syncs
    /// already running are skipped).
    pub fn due_syncs(&self, now: DateTime<Utc>) -> Result<Vec<DueSync>, ServiceError> {
        let mut due = Vec::new();
        let running = self
            .active_syncs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        for (ws, c) in self.store.list_scheduled_connections()? {
            let Some(interval) = c.schedule_interval_seconds else {
                continue;
            };
            let Ok((_, def, _)) = self.built_version(&ws, &c.package, &c.version) else {
                continue;
            };
            for s in &def.syncs {
                if running.contains(&(ws.clone(), c.id.clone(), s.name.clone())) {
                    continue;
                }
                let last = self.store.last_sync_run_at(&ws, &c.id, &s.name)?;
                let elapsed = last.map(|t| (now - t).num_seconds()).unwrap_or(i64::MAX);
                if elapsed >= interval as i64 {
                    due.push(DueSync {
                        workspace: ws.clone(),
                        connection_id: c.id.clone(),
                        sync: s.name.clone(),
                        interval_secs: interval,
                    });
                }
            }
        }
        Ok(due)
    }

    /// One scheduler tick: starts every due sync in the background; returns the runs this
    /// node started. Every node of a cluster ticks; the store lets one of them start each.
    pub fn scheduler_tick(self: &Arc<Self>, now: DateTime<Utc>) -> Result<Vec<Run>, ServiceError> {
        self.scheduler_tick_placed(now, |_| true)
    }

    /// [`ConnectService::scheduler_tick`] for the due syncs that `runs_here` gives to this
    /// node (the cluster's job placement); the others are left to the nodes it chose.
    pub fn scheduler_tick_placed(
        self: &Arc<Self>,
        now: DateTime<Utc>,
        runs_here: impl Fn(&DueSync) -> bool,
    ) -> Result<Vec<Run>, ServiceError> {
        let mut started = Vec::new();
        for d in self.due_syncs(now)?.into_iter().filter(|d| runs_here(d)) {
            match self.start_scheduled_sync(&d, now) {
                Ok(Some(run)) => started.push(run),
                Ok(None) => {}
                // Raced with Run now, or the connection changed: the next tick decides again.
                Err(e) => {
                    tracing::debug!(error = %e, connection = %d.connection_id, sync = %d.sync, "scheduled sync not started")
                }
            }
        }
        Ok(started)
    }

    /// One run; a running one with the records its attempt has sent so far, when it runs
    /// on this node.
    pub fn get_run(&self, workspace: &str, id: &str) -> Result<Run, ServiceError> {
        let mut run = self.store.get_run(workspace, id)?;
        self.add_progress(&mut run);
        Ok(run)
    }

    /// Sets `records_received` of a running run from this node's progress counters.
    fn add_progress(&self, run: &mut Run) {
        if run.status != RunStatus::Running {
            return;
        }
        let progress = self.progress.lock().unwrap_or_else(|p| p.into_inner());
        run.records_received = progress
            .get(&run.id)
            .map(|n| n.load(std::sync::atomic::Ordering::Relaxed));
    }

    /// Runs of a connection, newest first.
    pub fn list_runs(
        &self,
        workspace: &str,
        connection_id: &str,
        q: &PageQuery,
    ) -> Result<RunsPage, ServiceError> {
        self.store.get_connection(workspace, connection_id)?;
        let limit = q.limit();
        let mut items =
            self.store
                .list_runs(workspace, connection_id, q.cursor.as_deref(), limit)?;
        for run in &mut items {
            self.add_progress(run);
        }
        Ok(page(items, limit, |r| r.id.clone()))
    }

    /// Log lines of a connection (all its runs) or of one run, oldest first.
    pub fn list_logs(
        &self,
        workspace: &str,
        connection_id: Option<&str>,
        run_id: Option<&str>,
        q: &PageQuery,
    ) -> Result<LogsPage, ServiceError> {
        // An unknown (or other tenant's) run or connection is a 404, not an empty page.
        if let Some(id) = connection_id {
            self.store.get_connection(workspace, id)?;
        }
        if let Some(id) = run_id {
            self.store.get_run(workspace, id)?;
        }
        let after = numeric_cursor(q)?;
        let limit = q.limit();
        let items = self
            .store
            .list_logs(workspace, connection_id, run_id, after, limit)?;
        Ok(page(items, limit, |l| l.id.to_string()))
    }

    /// The connection, if it exists and its package version has a sync of this name: an unknown
    /// sync is a 404 on every route, not an empty answer that looks like "nothing synced yet".
    fn check_sync(
        &self,
        workspace: &str,
        connection_id: &str,
        sync: &str,
    ) -> Result<(Connection, Definition), ServiceError> {
        let c = self.store.get_connection(workspace, connection_id)?;
        let (_, def, _) = self.built_version(workspace, &c.package, &c.version)?;
        // A webhook's records are read like a sync's.
        if !def.has_dataset(sync) {
            return Err(ServiceError::NotFound("sync"));
        }
        Ok((c, def))
    }

    /// Committed records of a sync, in commit order; with `key`, only the record of that
    /// primary key (none or one: a key is unique within a sync).
    pub fn read_records(
        &self,
        workspace: &str,
        connection_id: &str,
        sync: &str,
        q: &RecordsQuery,
    ) -> Result<RecordsPage, ServiceError> {
        let (_, def) = self.check_sync(workspace, connection_id, sync)?;
        let page_q = q.page();
        let after = numeric_cursor(&page_q)?;
        let limit = page_q.limit();
        if let Some(key) = &q.key {
            // Only merge datasets store a key: on the others the filter could never match,
            // which would look like "no such record" instead of "cannot filter".
            let mode = def
                .sync(sync)
                .map(|s| s.mode)
                .or_else(|| def.webhook(sync).map(|w| w.mode));
            if mode != Some(SyncMode::Merge) {
                return Err(ServiceError::Invalid(format!(
                    "key: the records of {sync} have no primary key (only merge syncs and \
                     webhooks have one)"
                )));
            }
            let found = self
                .store
                .find_record(workspace, connection_id, sync, key)?
                .filter(|r| after.is_none_or(|a| r.seq > a));
            return Ok(Page {
                items: found.into_iter().collect(),
                next_cursor: None,
            });
        }
        let items = self
            .store
            .read_records(workspace, connection_id, sync, after, limit)?;
        Ok(page(items, limit, |r| r.seq.to_string()))
    }

    /// The last committed checkpoint of a sync.
    pub fn get_checkpoint(
        &self,
        workspace: &str,
        connection_id: &str,
        sync: &str,
    ) -> Result<Option<serde_json::Value>, ServiceError> {
        self.check_sync(workspace, connection_id, sync)?;
        Ok(self.store.get_checkpoint(workspace, connection_id, sync)?)
    }
}
