//! The delivery worker: runs each stored webhook delivery in its own fresh job sandbox, one
//! job per delivery, and settles it (committed with its records in one transaction, failed
//! with a category) or reschedules it after a platform failure.

use super::execute::{JobPlan, JobResult};
use super::{ConnectService, ServiceError};
use crate::job::{JobSpec, SyncTarget};
use crate::model::{FailureCategory, JobKind, RunKind};
use crate::store::NewRun;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use chrono::{DateTime, Utc};
use std::sync::Arc;
use std::time::Duration;

/// Delivery jobs running at once on a node: each is a sandbox, and a burst of deliveries
/// must not start dozens of them at once (the rest wait in the inbox).
const MAX_JOBS: usize = 4;

/// Backoff before the next job of a delivery whose job failed on the platform's side.
fn backoff(attempts: u32) -> Duration {
    Duration::from_secs(5u64.saturating_mul(1 << attempts.min(7))).min(Duration::from_secs(600))
}

impl ConnectService {
    /// Starts the worker that runs stored deliveries: woken by each new delivery, and every
    /// second for retries that came due (and deliveries another node stored).
    pub fn start_delivery_worker(self: &Arc<Self>) {
        let this = Arc::clone(self);
        tokio::spawn(async move {
            let running: Arc<std::sync::Mutex<std::collections::HashSet<String>>> = Arc::default();
            loop {
                let svc = Arc::clone(&this);
                let due = tokio::task::spawn_blocking(move || {
                    svc.store.due_deliveries(Utc::now(), MAX_JOBS as u32)
                })
                .await;
                match due {
                    Ok(Ok(due)) => {
                        for (ws, id) in due {
                            let fresh = {
                                let mut running = running.lock().unwrap_or_else(|p| p.into_inner());
                                if running.len() >= MAX_JOBS {
                                    break;
                                }
                                running.insert(id.clone())
                            };
                            if !fresh {
                                continue;
                            }
                            let (svc, running) = (Arc::clone(&this), Arc::clone(&running));
                            tokio::spawn(async move {
                                svc.process_delivery(&ws, &id).await;
                                running
                                    .lock()
                                    .unwrap_or_else(|p| p.into_inner())
                                    .remove(&id);
                                svc.deliveries_due.notify_one();
                            });
                        }
                    }
                    Ok(Err(e)) => tracing::warn!(error = %e, "connect: reading due deliveries"),
                    Err(e) => tracing::error!(error = %e, "connect: delivery worker task"),
                }
                let _ =
                    tokio::time::timeout(Duration::from_secs(1), this.deliveries_due.notified())
                        .await;
            }
        });
    }

    /// Runs one delivery's job to its end and settles or reschedules the delivery.
    async fn process_delivery(&self, workspace: &str, id: &str) {
        if let Err(e) = self.try_process_delivery(workspace, id).await {
            tracing::warn!(error = %e, delivery = id, "connect: delivery job could not run");
            let at = Utc::now() + backoff(1);
            let _ = self.store.retry_delivery(workspace, id, at);
        }
    }

    async fn try_process_delivery(&self, ws: &str, id: &str) -> Result<(), ServiceError> {
        let d = self.store.get_delivery(ws, id)?;
        let c = self.store.get_connection(ws, &d.connection_id)?;
        let (pv, def, artifact_dir) = self.built_version(ws, &c.package, &c.version)?;
        let Some(hook) = def.webhook(&d.webhook).cloned() else {
            self.store
                .fail_delivery(ws, id, FailureCategory::PackageError, "no_such_webhook")?;
            return Ok(());
        };
        let run = self.store.insert_run(
            ws,
            &NewRun {
                connection_id: Some(c.id.clone()),
                package: pv.name.clone(),
                version: pv.version.clone(),
                kind: RunKind::Webhook,
                sync: Some(hook.name.clone()),
            },
        )?;
        let now = Utc::now();
        let budget = self.limits.sync_time * (self.limits.platform_retries + 1);
        let lease: DateTime<Utc> = now
            + chrono::Duration::from_std(budget + Duration::from_secs(60))
                .unwrap_or(chrono::Duration::hours(1));
        let Some(job) = self.store.claim_delivery(ws, id, &run.id, now, lease)? else {
            // Another worker took it meanwhile.
            self.store
                .fail_run(ws, &run.id, FailureCategory::Platform, "superseded")?;
            return Ok(());
        };
        let headers: serde_json::Value =
            serde_json::from_str(&job.headers).unwrap_or_else(|_| serde_json::json!({}));
        let spec = JobSpec {
            kind: JobKind::Webhook,
            entry: format!("/pkg/{}", pv.entry),
            config: c.config.clone(),
            sync: Some(SyncTarget {
                name: hook.name.clone(),
                mode: hook.mode,
                primary_key: hook.primary_key.clone(),
            }),
            checkpoint: None,
            oauth_step: None,
            delivery: Some(serde_json::json!({
                "id": job.delivery.sender_id,
                "receivedAt": job.delivery.received_at,
                "headers": headers,
                "body": STANDARD.encode(&job.body),
            })),
            time_budget: self.limits.sync_time,
            limits: self.limits.output,
            retry: self.limits.fetch_retry,
        };
        let plan = JobPlan {
            workspace: ws,
            run: &run,
            connection: Some(&c),
            definition: Some(&def),
            artifact_dir,
            spec,
            retries: self.limits.platform_retries,
            delivery: Some(id),
        };
        match self.execute(plan).await? {
            // Committed with its records (or settled by another worker).
            JobResult::Succeeded { .. } => {}
            JobResult::Failed { category, kind } => {
                let attempts = job.delivery.attempts;
                if category == FailureCategory::Platform
                    && attempts < self.limits.webhooks.max_attempts
                {
                    tracing::info!(delivery = id, attempts, %kind, "delivery job failed on the platform; retrying later");
                    self.store
                        .retry_delivery(ws, id, Utc::now() + backoff(attempts))?;
                } else {
                    tracing::info!(delivery = id, category = category.as_str(), %kind, "delivery failed");
                    self.store.fail_delivery(ws, id, category, &kind)?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        assert_eq!(backoff(0), Duration::from_secs(5));
        assert_eq!(backoff(2), Duration::from_secs(20));
        assert_eq!(backoff(30), Duration::from_secs(600));
    }
}
