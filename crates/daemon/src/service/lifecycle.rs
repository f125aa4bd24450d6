//! Get, list and destroy; booting and tearing down in the background (create is in `create.rs`).

use super::views::Sandbox;
use super::{Result, Service, ServiceError};
use crate::runtime::{AgentConn, SandboxSpec};
use chrono::Utc;
use sbx_agent_proto::Request;
use sbx_api_types::{validate, NetworkMode, SandboxStatus};
use sbx_store::{SandboxCursor, SandboxRecord};
use std::collections::BTreeMap;
use std::sync::Arc;
use tracing::Instrument;
use uuid::Uuid;

/// Wait before the first retry of a failed teardown; doubled per retry.
const TEARDOWN_RETRY_FIRST: std::time::Duration = std::time::Duration::from_secs(2);
/// Longest wait between teardown retries.
const TEARDOWN_RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(60);

/// How often a state change refused for a full disk is written again.
pub(super) const RECORD_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// Start of a clone's error when the snapshot's files are missing or
/// corrupt (in object storage or the local data dir): the clone cannot work.
pub(super) const SNAPSHOT_UNUSABLE: &str = "the snapshot's files could not be fetched";
/// Start of a clone's error when the snapshot store could not be reached.
pub(super) const SNAPSHOT_UNREACHABLE: &str =
    "the snapshot's files could not be fetched (object storage unreachable; retry later)";

/// The error a create answers for a clone that failed before it booted
/// because its snapshot's files could not be brought to this node (the
/// sandbox itself is FAILED with the same reason).
pub(super) fn clone_refused(row: &SandboxRecord) -> Option<ServiceError> {
    if row.status != SandboxStatus::Failed || row.snapshot_id.is_none() {
        return None;
    }
    let error = row.error.as_deref()?;
    if error.starts_with(SNAPSHOT_UNREACHABLE) {
        Some(ServiceError::Unavailable(error.to_string()))
    } else if error.starts_with(SNAPSHOT_UNUSABLE) {
        Some(ServiceError::StartFailed(error.to_string()))
    } else {
        None
    }
}

/// What create did.
#[derive(Debug)]
pub enum CreateOutcome {
    /// A new sandbox (RUNNING if it booted within the sync wait, else STARTING).
    Created(Sandbox),
    /// The name is held by an active sandbox with the same configuration.
    Existing(Sandbox),
}

/// What destroy did.
#[derive(Debug)]
pub enum DestroyOutcome {
    /// Teardown is in progress.
    Terminating(Box<Sandbox>),
    /// Nothing is left.
    Terminated,
}

/// One page of sandboxes.
#[derive(Debug)]
pub struct SandboxPage {
    /// Items, newest first.
    pub items: Vec<Sandbox>,
    /// Cursor for the next page.
    pub next_cursor: Option<String>,
    /// Limit applied.
    pub limit: u32,
}

impl Service {
    /// `GET /v2/sandboxes/{id}`.
    pub async fn get(&self, workspace: &str, id: Uuid) -> Result<Sandbox> {
        self.load(workspace, id).await.map(Sandbox::from)
    }

    /// `GET /v2/sandboxes`.
    pub async fn list(
        &self,
        workspace: &str,
        limit: u32,
        cursor: Option<&str>,
    ) -> Result<SandboxPage> {
        let after = cursor.map(parse_cursor).transpose()?;
        let mut items = self
            .store
            .list_sandboxes(workspace, limit + 1, after.as_ref())
            .await?;
        let has_more = items.len() > limit as usize;
        items.truncate(limit as usize);
        let next_cursor = if has_more {
            items.last().map(|r| {
                format_cursor(&SandboxCursor {
                    created_at_ms: r.created_at.timestamp_millis(),
                    id: r.id,
                })
            })
        } else {
            None
        };
        Ok(SandboxPage {
            items: items.iter().map(Sandbox::from).collect(),
            next_cursor,
            limit,
        })
    }

    /// `DELETE /v2/sandboxes/{id}`: records the intent, then tears down in the background.
    pub async fn destroy(self: &Arc<Self>, workspace: &str, id: Uuid) -> Result<DestroyOutcome> {
        let record = self.load(workspace, id).await?;
        if !record.status.is_active() {
            return Ok(DestroyOutcome::Terminated);
        }
        let (_, won) = self
            .transition_won(id, |r| {
                if r.status.is_active() && r.status != SandboxStatus::Terminating {
                    stop_clock(r);
                    r.status = SandboxStatus::Terminating;
                }
            })
            .await?;
        let wait = std::time::Duration::from_secs(5);
        if won || self.teardown_running(id) {
            // Ours to tear down (or a teardown of this process is on it already: join it).
            let done = self.spawn_teardown(id, None);
            let _ = tokio::time::timeout(wait, wait_done(done)).await;
        } else {
            // Another actor moved it to TERMINATING and tears it down: wait for its
            // result in the store rather than calling the runtime a second time.
            let deadline = tokio::time::Instant::now() + wait;
            while tokio::time::Instant::now() < deadline
                && self.load(workspace, id).await?.status == SandboxStatus::Terminating
            {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
        let now = self.load(workspace, id).await?;
        Ok(match now.status {
            SandboxStatus::Terminating => DestroyOutcome::Terminating(Box::new(now.into())),
            _ => DestroyOutcome::Terminated,
        })
    }

    /// Boots a STARTING sandbox in the background; the receiver turns true when done.
    pub(super) fn spawn_boot(self: &Arc<Self>, id: Uuid) {
        self.spawn_boot_with(id, None, None);
    }

    /// Like `spawn_boot`; `warm` is the agent of an already started (pool)
    /// sandbox, `inserted` the row as create just inserted it (saves reading it
    /// back). The task answers the row as the boot left it (None: it found no
    /// row), so a create that waits for it need not read it again either.
    pub(super) fn spawn_boot_with(
        self: &Arc<Self>,
        id: Uuid,
        warm: Option<AgentConn>,
        inserted: Option<SandboxRecord>,
    ) -> tokio::task::JoinHandle<Option<SandboxRecord>> {
        let (tx, rx) = tokio::sync::watch::channel(false);
        self.boots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, rx.clone());
        let this = self.clone();
        // In the span of the request that created the sandbox (when one did):
        // the runtime's boot span is its child in the trace.
        tokio::spawn(
            async move {
                let row = this.boot(id, warm, inserted).await;
                this.boots
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&id);
                let _ = tx.send(true);
                row
            }
            .in_current_span(),
        )
    }

    /// Runtime part (start, restore, or a warm pool member's agent), then the
    /// finish shared by all: configuration, network, RUNNING, agent registration.
    async fn boot(
        self: &Arc<Self>,
        id: Uuid,
        warm: Option<AgentConn>,
        inserted: Option<SandboxRecord>,
    ) -> Option<SandboxRecord> {
        let record = match inserted {
            Some(r) => r,
            None => match self.store.get_sandbox(id).await {
                Ok(Some(r)) => r,
                _ => {
                    if warm.is_some() {
                        let _ = self.runtime.destroy(id).await;
                    }
                    return None;
                }
            },
        };
        let volumes = if warm.is_some() {
            Vec::new()
        } else {
            match self.volume_binds(id).await {
                Ok(v) => v,
                Err(e) => {
                    let reason = format!("sandbox failed to start: reading its volume mounts: {e}");
                    return self.fail_answering(id, reason).await;
                }
            }
        };
        if let Err(e) = self.mount_volumes(&volumes).await {
            let reason = format!("sandbox failed to start: {e}");
            return self.fail_answering(id, reason).await;
        }
        let rootfs = match self.rootfs_fetched(&record.image_ref).await {
            Ok(r) => r,
            Err(why) => {
                let reason = format!("sandbox failed to start: {why}");
                return self.fail_answering(id, reason).await;
            }
        };
        let spec = SandboxSpec {
            id,
            vcpu: record.vcpu,
            memory_mb: record.memory_mb,
            volumes,
            rootfs,
        };
        // A clone needs its snapshot's files on this node first: fetched
        // and verified before runsc sees them, so a missing or corrupt
        // snapshot fails the clone cleanly, never half-restored.
        let mut image = None;
        if let (None, Some(snap)) = (&warm, record.snapshot_id) {
            let fetch = self.snapshot_locally(snap);
            match tokio::time::timeout(self.config.limits.start_timeout, fetch).await {
                Ok(Ok(path)) => image = Some(path),
                Ok(Err(reason)) => return self.fail_answering(id, reason).await,
                Err(_) => {
                    let reason =
                        format!("{SNAPSHOT_UNREACHABLE}: the fetch did not finish in time");
                    return self.fail_answering(id, reason).await;
                }
            }
        }
        let boot = async {
            if let Some(conn) = warm {
                return Ok(Some(conn));
            }
            match record.snapshot_id {
                // A clone's agent, environment and secrets come back with its
                // memory: it is RUNNING as soon as runsc restored it, and the
                // agent connection is opened right after (see below).
                Some(snap) => {
                    let image = image.unwrap_or_else(|| self.snapshot_dir(snap).join("checkpoint"));
                    self.runtime.restore(spec, image).await.map(|()| None)
                }
                None => self.runtime.start(spec).await.map(Some),
            }
        };
        let started = tokio::time::timeout(self.config.limits.start_timeout, boot).await;
        let conn = match started {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) if e.is_disk_full() => {
                let reason = format!("sandbox failed to start: the data disk is full ({e})");
                return self.fail_answering(id, reason).await;
            }
            Ok(Err(e)) => {
                let reason = format!("sandbox failed to start: {e}");
                return self.fail_answering(id, reason).await;
            }
            Err(_) => {
                let reason = "sandbox did not start in time".to_string();
                return self.fail_answering(id, reason).await;
            }
        };
        if let Some(conn) = &conn {
            let env = match self.sandbox_environment(&record).await {
                Ok(env) => env,
                Err(reason) => return self.fail_answering(id, reason).await,
            };
            if let Err(e) = conn.call(Request::Configure { env }).await {
                let reason = format!("sandbox agent refused its configuration: {e}");
                return self.fail_answering(id, reason).await;
            }
            // Before RUNNING, so the first command finds the proxies up.
            self.network.serve(id, &record.network, conn).await;
        }
        // Written over the row as it was read or inserted: if anything changed
        // it since (a destroy during the boot), the compare-and-set fails and
        // the change is decided again on the current row.
        let result = {
            let lock = self.lock_for(id);
            let _guard = lock.lock().await;
            self.change_row(record, |r| {
                if r.status == SandboxStatus::Starting {
                    let now = Utc::now();
                    r.status = SandboxStatus::Running;
                    r.started_at.get_or_insert(now);
                    r.running_since = Some(now);
                }
            })
            .await
            .map(|(r, _)| r)
        };
        match result {
            Ok(r) if r.status == SandboxStatus::Running => {
                match conn {
                    Some(conn) => self.register_agent(id, conn),
                    None => self.spawn_first_connect(r.clone()).await,
                }
                tracing::info!(sandbox = %id, "sandbox running");
                Some(r)
            }
            // Destroyed while booting: whoever tears down may have run before the
            // container existed, so clean up here too.
            _ => {
                let _ = self.runtime.destroy(id).await;
                None
            }
        }
    }

    /// `fail`, for a boot: it answers no row (the caller reads the store).
    async fn fail_answering(self: &Arc<Self>, id: Uuid, reason: String) -> Option<SandboxRecord> {
        self.fail(id, reason).await;
        None
    }

    /// Opens a restored sandbox's first agent connection in the background;
    /// fails the sandbox if it cannot be reached and is not running.
    ///
    /// The sandbox's attach gate is taken before this returns (so before
    /// create answers) and held until the connection is up: a request that
    /// arrives first waits for it instead of racing a restore that is still
    /// settling. The transition lock stays free (a destroy need not wait).
    async fn spawn_first_connect(self: &Arc<Self>, record: SandboxRecord) {
        let gate = self.gate_for(record.id).lock_owned().await;
        let this = self.clone();
        tokio::spawn(async move {
            let result = this.runtime.wait_ready(record.id).await;
            let error = match result {
                Ok(conn) => {
                    // Not RUNNING any more (destroyed meanwhile): adopt closes it.
                    let _ = this.adopt(record.id, conn).await;
                    return;
                }
                Err(e) => e,
            };
            drop(gate);
            if !matches!(this.runtime.is_alive(record.id).await, Ok(true)) {
                let reason = format!("restored sandbox stopped: {error}");
                this.fail(record.id, reason).await;
            }
        });
    }

    /// The base environment of a sandbox: configuration plus secret values.
    pub(super) async fn sandbox_environment(
        &self,
        record: &SandboxRecord,
    ) -> Result<BTreeMap<String, String>, String> {
        // Proxy variables first: the user's environment overrides them.
        let mut env = if record.network.mode == NetworkMode::None {
            BTreeMap::new()
        } else {
            crate::network::proxy_env()
        };
        env.extend(record.environment.clone());
        env.extend(
            self.resolve_secrets(&record.workspace, &record.secrets)
                .await?,
        );
        Ok(env)
    }

    /// Marks a sandbox FAILED (unless it is already ending) and removes its runtime state.
    pub(super) async fn fail(self: &Arc<Self>, id: Uuid, reason: String) {
        tracing::warn!(sandbox = %id, %reason, "sandbox failed");
        self.forget_agent(id);
        let mark_failed = move |r: &mut SandboxRecord| {
            if r.status.is_active() && r.status != SandboxStatus::Terminating {
                stop_clock(r);
                r.status = SandboxStatus::Failed;
                r.error = Some(reason.clone());
                r.ended_at = Some(Utc::now());
            }
        };
        let recorded = self.transition(id, &mark_failed).await;
        if let Err(e) = self.runtime.destroy(id).await {
            tracing::error!(sandbox = %id, error = %e, "cleanup of failed sandbox");
        }
        self.release_volumes_later(id);
        if let Err(ServiceError::StorageFull(_)) = recorded {
            self.record_when_space_returns(id, "FAILED", mark_failed);
        }
    }

    /// Writes a change the store refused for a full disk again and again (the
    /// first time at once: removing the sandbox's files may have freed enough)
    /// until it goes through, so that the row does not keep claiming a state
    /// that is over without a restart of sbxd.
    pub(super) fn record_when_space_returns(
        self: &Arc<Self>,
        id: Uuid,
        what: &'static str,
        change: impl Fn(&mut SandboxRecord) + Send + Sync + 'static,
    ) {
        tracing::warn!(sandbox = %id, what, "data disk full: recording the sandbox's state once space returns");
        let this = self.clone();
        tokio::spawn(async move {
            loop {
                match this.transition(id, &change).await {
                    Err(ServiceError::StorageFull(_)) => {
                        tokio::time::sleep(RECORD_RETRY).await;
                    }
                    Ok(_) => {
                        tracing::info!(sandbox = %id, what, "recorded after the data disk had been full");
                        return;
                    }
                    Err(e) => {
                        tracing::error!(sandbox = %id, what, error = %e, "recording the sandbox's state");
                        return;
                    }
                }
            }
        });
    }

    /// Tears a TERMINATING sandbox down in the background, retrying until it
    /// succeeds; `reason` is recorded as `error`. A teardown already running
    /// for `id` is joined rather than started twice.
    pub(super) fn spawn_teardown(
        self: &Arc<Self>,
        id: Uuid,
        reason: Option<String>,
    ) -> tokio::sync::watch::Receiver<bool> {
        let mut teardowns = self.teardowns.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(running) = teardowns.get(&id) {
            return running.clone();
        }
        let (tx, rx) = tokio::sync::watch::channel(false);
        teardowns.insert(id, rx.clone());
        drop(teardowns);
        let this = self.clone();
        tokio::spawn(
            async move {
                this.forget_agent(id);
                let mut delay = TEARDOWN_RETRY_FIRST;
                while !this.teardown_once(id, &reason).await {
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(TEARDOWN_RETRY_MAX);
                }
                this.teardowns
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&id);
                let _ = tx.send(true);
            }
            // The runtime's teardown span is a child of the request that asked for it.
            .in_current_span(),
        );
        rx
    }

    /// Whether this process runs a teardown of `id` now.
    fn teardown_running(&self, id: Uuid) -> bool {
        self.teardowns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(&id)
    }

    /// One teardown attempt; false when the runtime failed and it should be retried.
    async fn teardown_once(self: &Arc<Self>, id: Uuid, reason: &Option<String>) -> bool {
        let lock = self.lock_for(id);
        let _guard = lock.lock().await;
        let Ok(Some(record)) = self.store.get_sandbox(id).await else {
            return true;
        };
        if record.status != SandboxStatus::Terminating {
            return true;
        }
        if let Err(e) = self.runtime.destroy(id).await {
            // Stay TERMINATING (the truth: resources may be left) and retry.
            tracing::error!(sandbox = %id, error = %e, "teardown failed; retrying");
            return false;
        }
        self.network.forget(id);
        let ended_at = Some(Utc::now());
        let error = reason.clone();
        let finish = move |r: &mut SandboxRecord| {
            if r.status == SandboxStatus::Terminating {
                r.status = SandboxStatus::Terminated;
                r.ended_at = ended_at;
                if error.is_some() {
                    r.error = error.clone();
                }
            }
        };
        match self.change_row(record, &finish).await {
            Ok(_) => {}
            Err(ServiceError::StorageFull(_)) => {
                self.record_when_space_returns(id, "TERMINATED", finish);
            }
            Err(e) => tracing::error!(sandbox = %id, error = %e, "recording TERMINATED"),
        }
        drop(_guard);
        self.locks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
        self.gates
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
        self.reconnects
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
        self.workdirs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
        self.release_volumes_later(id);
        tracing::info!(sandbox = %id, "sandbox terminated");
        true
    }

    /// [`Service::release_volumes`] of an ended sandbox, in the background:
    /// an unmount waits for rclone's uploads, which no caller should.
    fn release_volumes_later(self: &Arc<Self>, id: Uuid) {
        let this = self.clone();
        tokio::spawn(async move { this.release_volumes(id).await });
    }

    /// Watches an agent connection; when it drops, reconnects or fails the sandbox.
    ///
    /// Runs under the attach gate only: a reconnect that stalls (an agent
    /// that does not answer its handshake) never holds the transition lock.
    pub(super) fn spawn_monitor(self: &Arc<Self>, id: Uuid, conn: AgentConn) {
        let this = self.clone();
        tokio::spawn(async move {
            conn.closed().await;
            let Ok(gate) = this.enter_gate(id).await else {
                // Someone else holds the gate (a snapshot, a reconnect) and owns the outcome.
                return;
            };
            // Whoever reconnected first (a snapshot, a request) gave that connection its own monitor.
            if this.cached_agent(id).is_some() {
                return;
            }
            let running = matches!(this.store.get_sandbox(id).await, Ok(Some(r)) if r.status == SandboxStatus::Running);
            if !running {
                return;
            }
            let reason = if !this.note_reconnect(id) {
                format!(
                    "sandbox agent connection dropped more than {} times in a minute",
                    super::MAX_RECONNECTS
                )
            } else {
                match this.runtime.is_alive(id).await {
                    Ok(true) => match this.attach_gated(id).await {
                        Ok(_) => return,
                        Err(crate::runtime::RuntimeError::NotRunning) => return,
                        // A sandbox at its memory limit can stall instead of
                        // dying: the cgroup's OOM count says so.
                        Err(e) => this
                            .runtime
                            .death_reason(id)
                            .unwrap_or_else(|| format!("sandbox agent stopped answering: {e}")),
                    },
                    _ => this
                        .runtime
                        .death_reason(id)
                        .unwrap_or_else(|| "sandbox stopped unexpectedly".to_string()),
                }
            };
            // A pause or destroy that came while the reconnect waited owns the
            // sandbox now: a frozen or removed agent does not answer, and that
            // is no reason to fail (and destroy) it.
            let still_running = matches!(this.store.get_sandbox(id).await,
                Ok(Some(r)) if r.status == SandboxStatus::Running);
            drop(gate);
            if still_running {
                this.fail(id, reason).await;
            }
        });
    }

    /// Ends sandboxes whose active runtime is used up; runs every second.
    ///
    /// Each ending runs in its own task: one sandbox whose lock is held (a
    /// long snapshot) must not delay the limits of every other sandbox.
    pub async fn enforce_runtime_limits(self: &Arc<Self>) {
        let limit = self.config.limits.active_runtime;
        let Ok(running) = self
            .store
            .sandboxes_in_status(Some(&self.config.node.id), &[SandboxStatus::Running])
            .await
        else {
            return;
        };
        let now = Utc::now();
        for r in running {
            if r.active_runtime_ms(now) < limit.as_millis() as u64 {
                continue;
            }
            if !self
                .ending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(r.id)
            {
                continue;
            }
            let this = self.clone();
            tokio::spawn(async move {
                let reason = format!("active runtime limit of {}s reached", limit.as_secs());
                let moved = this
                    .transition_won(r.id, |r| {
                        if r.status == SandboxStatus::Running {
                            stop_clock(r);
                            r.status = SandboxStatus::Terminating;
                        }
                    })
                    .await;
                // Only the actor whose write ended it tears it down.
                if matches!(moved, Ok((_, true))) {
                    tracing::info!(sandbox = %r.id, "{reason}");
                    this.spawn_teardown(r.id, Some(reason));
                }
                this.ending
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&r.id);
            });
        }
    }
}

/// Folds the current running period into `active_ms`.
pub(super) fn stop_clock(r: &mut SandboxRecord) {
    r.active_ms = r.active_runtime_ms(Utc::now());
    r.running_since = None;
}

pub(super) async fn wait_done(mut rx: tokio::sync::watch::Receiver<bool>) {
    let _ = rx.wait_for(|d| *d).await;
}

/// Formats an opaque list cursor.
pub(super) fn format_cursor(c: &SandboxCursor) -> String {
    format!("{}_{}", c.created_at_ms, c.id.simple())
}

/// Parses a cursor made by [`format_cursor`].
pub(super) fn parse_cursor(cursor: &str) -> Result<SandboxCursor> {
    let bad = || {
        ServiceError::Invalid(validate::ValidationError::Format {
            field: "cursor",
            reason: "not a cursor this server issued".into(),
        })
    };
    let (ms, id) = cursor.split_once('_').ok_or_else(bad)?;
    Ok(SandboxCursor {
        created_at_ms: ms.parse().map_err(|_| bad())?,
        id: Uuid::parse_str(id).map_err(|_| bad())?,
    })
}
