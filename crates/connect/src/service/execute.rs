//! Runs one job to its end: a fresh sandbox per attempt, the protocol driver, the commit of a
//! sync's spool, platform failures retried, and the run row kept up to date.

use super::{ConnectService, ServiceError, StoreLogs, StoreTokens};
use crate::broker::BrokerSession;
use crate::commit::{CommitError, CommitTarget};
use crate::job::{drive, JobEnv, JobOutcome, JobSpec};
use crate::model::{Connection, Definition, FailureCategory, JobKind, LogLevel, Run};
use crate::sandbox::{JobSandboxRequest, SandboxEnd};
use crate::spool::Spool;
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// How long a runner may take to exit after the job ended before it is killed.
const FINISH_GRACE: Duration = Duration::from_secs(5);

/// One job to run.
pub(super) struct JobPlan<'a> {
    pub workspace: &'a str,
    pub run: &'a Run,
    pub connection: Option<&'a Connection>,
    pub definition: Option<&'a Definition>,
    pub artifact_dir: PathBuf,
    pub spec: JobSpec,
    /// Extra attempts after platform failures.
    pub retries: u32,
    /// The webhook delivery the job handles: settled in the commit of its records.
    pub delivery: Option<&'a str>,
}

/// How the job ended, as stored on the run.
#[derive(Debug)]
pub(super) enum JobResult {
    Succeeded {
        result: Value,
    },
    Failed {
        category: FailureCategory,
        kind: String,
    },
}

/// Refines a failure with what the sandbox reported.
fn classify(outcome: JobOutcome, end: &SandboxEnd) -> JobOutcome {
    match (outcome, end) {
        (
            JobOutcome::Failed {
                category: FailureCategory::Platform,
                ..
            },
            SandboxEnd::MemoryLimit,
        ) => JobOutcome::Failed {
            category: FailureCategory::MemoryLimit,
            kind: "memory_limit".into(),
        },
        // The runner exited without `done` or `fail` (e.g. the package called process.exit).
        (
            JobOutcome::Failed {
                category: FailureCategory::Platform,
                kind,
            },
            SandboxEnd::Exited(_),
        ) if kind == "channel_lost" => JobOutcome::Failed {
            category: FailureCategory::PackageError,
            kind: "exited".into(),
        },
        (other, _) => other,
    }
}

impl ConnectService {
    fn broker_session(
        &self,
        workspace: &str,
        c: &Connection,
        def: &Definition,
    ) -> Result<BrokerSession, ServiceError> {
        let credentials = self.open_credentials(workspace, &c.id)?;
        let tokens = Arc::new(StoreTokens {
            store: self.store.clone(),
            crypto: self.crypto.clone(),
            workspace: workspace.to_string(),
            connection_id: c.id.clone(),
        });
        BrokerSession::new(
            self.broker.clone(),
            &c.origin,
            def.auth.clone(),
            credentials,
            tokens,
        )
        .map_err(|e| ServiceError::Invalid(e.to_string()))
    }

    /// Commits a finished spool; a failure comes back as (category, kind).
    async fn commit_spool(
        &self,
        plan: &JobPlan<'_>,
        connection_id: &str,
        target: &crate::job::SyncTarget,
        spool: Spool,
    ) -> Result<u64, (FailureCategory, &'static str)> {
        let store = self.store.clone();
        let (ws, run_id, conn_id, sync, mode) = (
            plan.workspace.to_string(),
            plan.run.id.clone(),
            connection_id.to_string(),
            target.name.clone(),
            target.mode,
        );
        let delivery = plan.delivery.map(str::to_string);
        // A large commit takes seconds of CPU and disk: keep it off the async workers.
        let joined = tokio::task::spawn_blocking(move || -> Result<u64, CommitError> {
            let target = CommitTarget {
                workspace: &ws,
                connection_id: &conn_id,
                sync: &sync,
                mode,
                run_id: Some(&run_id),
                delivery: delivery.as_deref(),
            };
            Ok(store.commit(target, spool)?.records)
        })
        .await;
        match joined {
            Ok(Ok(records)) => Ok(records),
            Ok(Err(CommitError::MissingKey)) => Err((FailureCategory::PackageError, "bad_batch")),
            Ok(Err(e @ CommitError::Settled(_))) => {
                tracing::info!(error = %e, "delivery commit refused");
                Err((FailureCategory::Platform, "delivery_settled"))
            }
            Ok(Err(e @ CommitError::Fenced(_))) => {
                tracing::warn!(error = %e, "sync commit refused");
                Err((FailureCategory::Platform, crate::store::NODE_LOST_KIND))
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "sync commit failed");
                Err((FailureCategory::Platform, "commit"))
            }
            Err(e) => {
                tracing::error!(error = %e, "sync commit task failed");
                Err((FailureCategory::Platform, "commit"))
            }
        }
    }

    async fn attempt(
        &self,
        plan: &JobPlan<'_>,
        attempt: u32,
    ) -> Result<(JobOutcome, u64), ServiceError> {
        let ws = plan.workspace;
        let run_id = &plan.run.id;
        // Listed until this attempt (and its commit) ends: GET .../runs/{id} reads it.
        let (_progress, received) = super::ProgressEntry::start(&self.progress, run_id);
        let broker = match (plan.connection, plan.definition) {
            (Some(c), Some(d)) => Some(Arc::new(self.broker_session(ws, c, d)?)),
            _ => None,
        };
        let env = JobEnv {
            broker,
            spool_path: plan
                .spec
                .sync
                .as_ref()
                .map(|_| self.spool_dir().join(format!("{run_id}.spool"))),
            logs: Arc::new(StoreLogs {
                store: self.store.clone(),
                workspace: ws.to_string(),
                run_id: run_id.clone(),
                connection_id: plan.connection.map(|c| c.id.clone()),
            }),
            max_log_message_bytes: self.limits.max_log_message_bytes,
            max_log_bytes_per_run: self.limits.max_log_bytes_per_run,
            received,
        };
        let req = JobSandboxRequest {
            workspace: ws.to_string(),
            run_id: run_id.clone(),
            attempt,
            kind: plan.spec.kind,
            artifact_dir: plan.artifact_dir.clone(),
            memory_mib: self.limits.memory_mib,
            time_budget: plan.spec.time_budget,
        };
        let outcome = match self.sandboxes.start_job(req).await {
            Err(e) => {
                tracing::warn!(error = %e, run = %run_id, "starting the job sandbox failed");
                JobOutcome::Failed {
                    category: FailureCategory::Platform,
                    kind: "sandbox_start".into(),
                }
            }
            Ok(mut sandbox) => match sandbox.take_channel().await {
                None => {
                    let end = sandbox.finish(FINISH_GRACE).await;
                    classify(
                        JobOutcome::Failed {
                            category: FailureCategory::Platform,
                            kind: "no_channel".into(),
                        },
                        &end,
                    )
                }
                Some(channel) => {
                    let outcome = drive(channel, plan.spec.clone(), &env).await;
                    let end = sandbox.finish(FINISH_GRACE).await;
                    classify(outcome, &end)
                }
            },
        };
        // Only the sandbox's end tells a memory kill apart: say the limit here, as the driver
        // says the time and output limits.
        if let JobOutcome::Failed {
            category: FailureCategory::MemoryLimit,
            ..
        } = &outcome
        {
            env.logs.record(
                LogLevel::Error,
                &crate::limits::memory_limit_notice(self.limits.memory_mib),
            );
        }
        let outcome = match (outcome, plan.connection, &plan.spec.sync) {
            (
                JobOutcome::Succeeded {
                    spool: Some(spool),
                    result,
                },
                Some(c),
                Some(target),
            ) => match self.commit_spool(plan, &c.id, target, spool).await {
                Ok(records) => {
                    return Ok((
                        JobOutcome::Succeeded {
                            result,
                            spool: None,
                        },
                        records,
                    ))
                }
                Err((category, kind)) => JobOutcome::Failed {
                    category,
                    kind: kind.to_string(),
                },
            },
            (other, _, _) => other,
        };
        Ok((outcome, 0))
    }

    /// Runs the plan to its end and records the result on the run.
    pub(super) async fn execute(&self, plan: JobPlan<'_>) -> Result<JobResult, ServiceError> {
        let started = std::time::Instant::now();
        let result = self.execute_timed(plan).await;
        if let Ok((outcome, records, _)) = &result {
            sbx_metrics::global().connect_run(outcome, started.elapsed(), *records);
        }
        result.map(|(_, _, r)| r)
    }

    /// [`Self::execute`]: the result with its metrics outcome and records committed.
    async fn execute_timed(
        &self,
        plan: JobPlan<'_>,
    ) -> Result<(&'static str, u64, JobResult), ServiceError> {
        let ws = plan.workspace;
        let run_id = plan.run.id.clone();
        if let Err(e) = self.ensure_artifact(&plan.artifact_dir).await {
            tracing::warn!(error = %e, run = %run_id, "the built package is not available on this node");
            let (category, kind) = (FailureCategory::Platform, "package_unavailable".to_string());
            self.store.fail_run(ws, &run_id, category, &kind)?;
            return Ok((category.as_str(), 0, JobResult::Failed { category, kind }));
        }
        let mut attempt = 0;
        loop {
            attempt += 1;
            self.store.start_run(ws, &run_id, attempt)?;
            let (outcome, records) = self.attempt(&plan, attempt).await?;
            match outcome {
                JobOutcome::Succeeded { result, .. } => {
                    let stored = !matches!(plan.spec.kind, JobKind::Sync | JobKind::Webhook);
                    let stored = stored.then_some(&result);
                    self.store.succeed_run(ws, &run_id, records, stored)?;
                    return Ok(("succeeded", records, JobResult::Succeeded { result }));
                }
                JobOutcome::Failed { category, kind } => {
                    if category == FailureCategory::Platform && attempt <= plan.retries {
                        tracing::info!(run = %run_id, attempt, %kind, "platform failure; retrying in a fresh sandbox");
                        continue;
                    }
                    self.store.fail_run(ws, &run_id, category, &kind)?;
                    return Ok((category.as_str(), 0, JobResult::Failed { category, kind }));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classify_uses_the_sandbox_end() {
        let lost = || JobOutcome::Failed {
            category: FailureCategory::Platform,
            kind: "channel_lost".into(),
        };
        let cat = |o: JobOutcome| o.failure_category();
        assert_eq!(
            cat(classify(lost(), &SandboxEnd::MemoryLimit)),
            Some(FailureCategory::MemoryLimit)
        );
        assert_eq!(
            cat(classify(lost(), &SandboxEnd::Exited(Some(1)))),
            Some(FailureCategory::PackageError)
        );
        assert_eq!(
            cat(classify(lost(), &SandboxEnd::Crashed("runsc".into()))),
            Some(FailureCategory::Platform)
        );
        let time = JobOutcome::Failed {
            category: FailureCategory::TimeLimit,
            kind: "time_limit".into(),
        };
        assert_eq!(
            cat(classify(time, &SandboxEnd::MemoryLimit)),
            Some(FailureCategory::TimeLimit)
        );
    }
}
