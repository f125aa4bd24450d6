//! Create, get, list and destroy; booting and tearing down in the background.

use super::{Result, Service, ServiceError};
use crate::runtime::{AgentConn, SandboxSpec};
use chrono::Utc;
use sbx_agent_proto::Request;
use sbx_api_types::{validate, CreateSandboxRequest, NetworkMode, NetworkPolicy, SandboxStatus};
use sbx_store::{SandboxCursor, SandboxRecord};
use std::collections::BTreeMap;
use std::sync::Arc;
use uuid::Uuid;

/// What create did.
#[derive(Debug)]
pub enum CreateOutcome {
    /// A new sandbox (RUNNING if it booted within the sync wait, else STARTING).
    Created(SandboxRecord),
    /// The name is held by an active sandbox with the same configuration.
    Existing(SandboxRecord),
}

/// What destroy did.
#[derive(Debug)]
pub enum DestroyOutcome {
    /// Teardown is in progress.
    Terminating(Box<SandboxRecord>),
    /// Nothing is left.
    Terminated,
}

/// One page of sandboxes.
#[derive(Debug)]
pub struct SandboxPage {
    /// Items, newest first.
    pub items: Vec<SandboxRecord>,
    /// Cursor for the next page.
    pub next_cursor: Option<String>,
    /// Limit applied.
    pub limit: u32,
}

impl Service {
    /// `POST /v2/sandboxes`: the server's default network policy.
    pub async fn create(
        self: &Arc<Self>,
        workspace: &str,
        req: CreateSandboxRequest,
    ) -> Result<CreateOutcome> {
        self.create_with_network(workspace, req, None).await
    }

    /// `POST /v1/sandboxes`: like `create`, with an egress policy (`None`: the
    /// server's default). A clone always keeps its source's policy.
    pub async fn create_with_network(
        self: &Arc<Self>,
        workspace: &str,
        req: CreateSandboxRequest,
        network: Option<NetworkPolicy>,
    ) -> Result<CreateOutcome> {
        if network.is_some() && req.snapshot_id.is_some() {
            return Err(validate::ValidationError::Format {
                field: "network",
                reason:
                    "a clone keeps its source's network policy; do not send network with snapshotId"
                        .into(),
            }
            .into());
        }
        let network = match network {
            Some(p) => p
                .validate()
                .map_err(|reason| validate::ValidationError::Format {
                    field: "network",
                    reason,
                })?,
            None => self.network.default_policy().clone(),
        };
        let name = req
            .name
            .clone()
            .ok_or(validate::ValidationError::Missing("name"))?;
        validate::name("name", &name)?;
        if let Some(snapshot_id) = req.snapshot_id {
            if req.vcpu.is_some()
                || req.memory_mb.is_some()
                || req.environment.is_some()
                || req.secrets.is_some()
            {
                return Err(validate::ValidationError::Format {
                    field: "snapshotId",
                    reason: "a clone takes its resources, environment and secrets from the snapshot; send only name and snapshotId".into(),
                }
                .into());
            }
            let snap = self.clone_source(workspace, snapshot_id)?;
            let mut record = self.new_record(
                workspace,
                name,
                snap.vcpu,
                snap.memory_mb,
                snap.environment,
                snap.secrets,
                Some(snapshot_id),
            );
            record.network = snap.network;
            let admitted = match self.admit(record.vcpu, record.memory_mb) {
                Ok(r) => r,
                Err(e) => return self.existing_or(&record, e),
            };
            return self.insert_and_boot_with(record, None, admitted).await;
        }
        let vcpu = req.vcpu.ok_or(validate::ValidationError::Missing("vcpu"))?;
        let memory_mb = req
            .memory_mb
            .ok_or(validate::ValidationError::Missing("memoryMb"))?;
        let (vcpu, memory_mb) = validate::shape(vcpu, memory_mb)?;
        let environment = req.environment.clone().unwrap_or_default();
        let mut secrets = req.secrets.clone().unwrap_or_default();
        for s in &secrets {
            validate::secret_name(s)?;
            if environment.contains_key(s) {
                return Err(validate::ValidationError::Format {
                    field: "secrets",
                    reason: format!("{s:?} is also a key in environment"),
                }
                .into());
            }
        }
        validate::environment("environment", &environment, &secrets)?;
        secrets.sort();
        if secrets.windows(2).any(|w| w[0] == w[1]) {
            return Err(validate::ValidationError::Format {
                field: "secrets",
                reason: "duplicate secret name".into(),
            }
            .into());
        }
        self.check_secrets_exist(workspace, &secrets)?;
        let mut record =
            self.new_record(workspace, name, vcpu, memory_mb, environment, secrets, None);
        record.network = network;
        // A warm pool member replaces the runtime start (fresh sandboxes only).
        let warm = self.take_member((vcpu, memory_mb)).await;
        let admitted = match &warm {
            Some(_) => self.hold(vcpu, memory_mb),
            None => match self.admit(vcpu, memory_mb) {
                Ok(r) => r,
                Err(e) => return self.existing_or(&record, e),
            },
        };
        self.insert_and_boot_with(record, warm, admitted).await
    }

    #[allow(clippy::too_many_arguments)]
    fn new_record(
        &self,
        workspace: &str,
        name: String,
        vcpu: u32,
        memory_mb: u32,
        environment: BTreeMap<String, String>,
        secrets: Vec<String>,
        snapshot_id: Option<Uuid>,
    ) -> SandboxRecord {
        SandboxRecord {
            id: Uuid::new_v4(),
            workspace: workspace.to_string(),
            name,
            status: SandboxStatus::Starting,
            vcpu,
            memory_mb,
            environment,
            secrets,
            snapshot_id,
            image_ref: self.config.image_ref.clone(),
            created_at: Utc::now(),
            started_at: None,
            ended_at: None,
            error: None,
            active_ms: 0,
            running_since: None,
            network: NetworkPolicy::default(),
        }
    }

    /// A create refused by admission: a repeat of a create whose sandbox
    /// exists still gets that sandbox (create is idempotent by name).
    fn existing_or(&self, record: &SandboxRecord, refused: ServiceError) -> Result<CreateOutcome> {
        match self
            .store
            .active_sandbox_named(&record.workspace, &record.name)?
        {
            Some(existing) if same_config(&existing, record) => {
                Ok(CreateOutcome::Existing(existing))
            }
            Some(_) => Err(ServiceError::NameTaken(record.name.clone())),
            None => Err(refused),
        }
    }

    /// Inserts the row (or finds the active sandbox holding the name) and boots
    /// it. `warm` is a booted pool member that takes the place of the runtime
    /// start: its uuid becomes the sandbox id. An unused member (name held,
    /// store error) goes back to the pool untouched. `admitted` holds the
    /// create's capacity until its row exists.
    async fn insert_and_boot_with(
        self: &Arc<Self>,
        mut record: SandboxRecord,
        warm: Option<super::pool::Member>,
        admitted: super::Reservation,
    ) -> Result<CreateOutcome> {
        if let Some(member) = &warm {
            record.id = member.id;
        }
        let shape = (record.vcpu, record.memory_mb);
        let inserted = self.store.create_sandbox(&record);
        drop(admitted);
        let created = match inserted {
            Ok(created) => created,
            Err(e) => {
                if let Some(member) = warm {
                    self.return_member(shape, member);
                }
                return Err(e.into());
            }
        };
        match created {
            sbx_store::CreateOutcome::NameHeld(existing) => {
                if let Some(member) = warm {
                    self.return_member(shape, member);
                }
                if same_config(&existing, &record) {
                    Ok(CreateOutcome::Existing(*existing))
                } else {
                    Err(ServiceError::NameTaken(record.name))
                }
            }
            sbx_store::CreateOutcome::Created => {
                let conn = warm.map(|m| m.conn);
                if conn.is_some() {
                    self.refill_pool();
                }
                let done = self.spawn_boot_with(record.id, conn);
                let wait = self.config.limits.create_sync_wait;
                let _ = tokio::time::timeout(wait, wait_done(done)).await;
                Ok(CreateOutcome::Created(
                    self.load(&record.workspace, record.id)?,
                ))
            }
        }
    }

    /// `GET /v2/sandboxes/{id}`.
    pub fn get(&self, workspace: &str, id: Uuid) -> Result<SandboxRecord> {
        self.load(workspace, id)
    }

    /// `GET /v2/sandboxes`.
    pub fn list(&self, workspace: &str, limit: u32, cursor: Option<&str>) -> Result<SandboxPage> {
        let after = cursor.map(parse_cursor).transpose()?;
        let mut items = self
            .store
            .list_sandboxes(workspace, limit + 1, after.as_ref())?;
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
            items,
            next_cursor,
            limit,
        })
    }

    /// `DELETE /v2/sandboxes/{id}`: records the intent, then tears down in the background.
    pub async fn destroy(self: &Arc<Self>, workspace: &str, id: Uuid) -> Result<DestroyOutcome> {
        let record = self.load(workspace, id)?;
        if !record.status.is_active() {
            return Ok(DestroyOutcome::Terminated);
        }
        if record.status != SandboxStatus::Terminating {
            self.transition(id, |r| {
                if r.status.is_active() && r.status != SandboxStatus::Terminating {
                    stop_clock(r);
                    r.status = SandboxStatus::Terminating;
                }
            })
            .await?;
        }
        let done = self.spawn_teardown(id, None);
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), wait_done(done)).await;
        let now = self.load(workspace, id)?;
        Ok(match now.status {
            SandboxStatus::Terminating => DestroyOutcome::Terminating(Box::new(now)),
            _ => DestroyOutcome::Terminated,
        })
    }

    /// Reads, changes and writes a sandbox under its transition lock.
    pub(super) async fn transition(
        &self,
        id: Uuid,
        change: impl FnOnce(&mut SandboxRecord),
    ) -> Result<SandboxRecord> {
        let lock = self.lock_for(id);
        let _guard = lock.lock().await;
        let mut record = self
            .store
            .get_sandbox(id)?
            .ok_or(ServiceError::SandboxNotFound)?;
        change(&mut record);
        self.store.update_sandbox(&record)?;
        Ok(record)
    }

    /// Boots a STARTING sandbox in the background; the receiver turns true when done.
    pub(super) fn spawn_boot(self: &Arc<Self>, id: Uuid) -> tokio::sync::watch::Receiver<bool> {
        self.spawn_boot_with(id, None)
    }

    /// Like `spawn_boot`; `warm` is the agent of an already started (pool) sandbox.
    fn spawn_boot_with(
        self: &Arc<Self>,
        id: Uuid,
        warm: Option<AgentConn>,
    ) -> tokio::sync::watch::Receiver<bool> {
        let (tx, rx) = tokio::sync::watch::channel(false);
        self.boots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, rx.clone());
        let this = self.clone();
        tokio::spawn(async move {
            this.boot(id, warm).await;
            this.boots
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&id);
            let _ = tx.send(true);
        });
        rx
    }

    /// Runtime part (start, restore, or a warm pool member's agent), then the
    /// finish shared by all: configuration, network, RUNNING, agent registration.
    async fn boot(self: &Arc<Self>, id: Uuid, warm: Option<AgentConn>) {
        let Ok(Some(record)) = self.store.get_sandbox(id) else {
            if warm.is_some() {
                let _ = self.runtime.destroy(id).await;
            }
            return;
        };
        let spec = SandboxSpec {
            id,
            vcpu: record.vcpu,
            memory_mb: record.memory_mb,
        };
        let boot = async {
            if let Some(conn) = warm {
                return Ok(Some(conn));
            }
            match record.snapshot_id {
                // A clone's agent, environment and secrets come back with its
                // memory: it is RUNNING as soon as runsc restored it, and the
                // agent connection is opened right after (see below).
                Some(snap) => {
                    let image = self.snapshot_dir(snap).join("checkpoint");
                    self.runtime.restore(spec, image).await.map(|()| None)
                }
                None => self.runtime.start(spec).await.map(Some),
            }
        };
        let started = tokio::time::timeout(self.config.limits.start_timeout, boot).await;
        let conn = match started {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => return self.fail(id, format!("sandbox failed to start: {e}")).await,
            Err(_) => return self.fail(id, "sandbox did not start in time".into()).await,
        };
        if let Some(conn) = &conn {
            let env = match self.sandbox_environment(&record) {
                Ok(env) => env,
                Err(reason) => return self.fail(id, reason).await,
            };
            if let Err(e) = conn.call(Request::Configure { env }).await {
                let reason = format!("sandbox agent refused its configuration: {e}");
                return self.fail(id, reason).await;
            }
            // Before RUNNING, so the first command finds the proxies up.
            self.network.serve(id, &record.network, conn).await;
        }
        let result = self
            .transition(id, |r| {
                if r.status == SandboxStatus::Starting {
                    let now = Utc::now();
                    r.status = SandboxStatus::Running;
                    r.started_at.get_or_insert(now);
                    r.running_since = Some(now);
                }
            })
            .await;
        match result {
            Ok(r) if r.status == SandboxStatus::Running => {
                match conn {
                    Some(conn) => self.register_agent(id, conn),
                    None => self.spawn_first_connect(r).await,
                }
                tracing::info!(sandbox = %id, "sandbox running");
            }
            // Destroyed while booting: whoever tears down may have run before the
            // container existed, so clean up here too.
            _ => {
                let _ = self.runtime.destroy(id).await;
            }
        }
    }

    /// Opens a restored sandbox's first agent connection in the background;
    /// fails the sandbox if it cannot be reached and is not running.
    ///
    /// The sandbox's lock is taken before this returns (so before create
    /// answers) and held until the connection is up: a request that arrives
    /// first waits for it instead of racing a restore that is still settling.
    async fn spawn_first_connect(self: &Arc<Self>, record: SandboxRecord) {
        let guard = self.lock_for(record.id).lock_owned().await;
        let this = self.clone();
        tokio::spawn(async move {
            let result = this.runtime.wait_ready(record.id).await;
            let error = match result {
                Ok(conn) => {
                    this.register_agent(record.id, conn.clone());
                    this.network.serve(record.id, &record.network, &conn).await;
                    return;
                }
                Err(e) => e,
            };
            drop(guard);
            if !matches!(this.runtime.is_alive(record.id).await, Ok(true)) {
                let reason = format!("restored sandbox stopped: {error}");
                this.fail(record.id, reason).await;
            }
        });
    }

    /// The base environment of a sandbox: configuration plus secret values.
    fn sandbox_environment(
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
        env.extend(self.resolve_secrets(&record.workspace, &record.secrets)?);
        Ok(env)
    }

    /// Marks a sandbox FAILED (unless it is already ending) and removes its runtime state.
    pub(super) async fn fail(self: &Arc<Self>, id: Uuid, reason: String) {
        tracing::warn!(sandbox = %id, %reason, "sandbox failed");
        self.forget_agent(id);
        let _ = self
            .transition(id, |r| {
                if r.status.is_active() && r.status != SandboxStatus::Terminating {
                    stop_clock(r);
                    r.status = SandboxStatus::Failed;
                    r.error = Some(reason);
                    r.ended_at = Some(Utc::now());
                }
            })
            .await;
        if let Err(e) = self.runtime.destroy(id).await {
            tracing::error!(sandbox = %id, error = %e, "cleanup of failed sandbox");
        }
    }

    /// Tears a TERMINATING sandbox down in the background; `reason` is recorded as `error`.
    pub(super) fn spawn_teardown(
        self: &Arc<Self>,
        id: Uuid,
        reason: Option<String>,
    ) -> tokio::sync::watch::Receiver<bool> {
        let (tx, rx) = tokio::sync::watch::channel(false);
        let this = self.clone();
        tokio::spawn(async move {
            this.teardown(id, reason).await;
            let _ = tx.send(true);
        });
        rx
    }

    async fn teardown(self: &Arc<Self>, id: Uuid, reason: Option<String>) {
        self.forget_agent(id);
        let lock = self.lock_for(id);
        let _guard = lock.lock().await;
        let Ok(Some(mut record)) = self.store.get_sandbox(id) else {
            return;
        };
        if record.status != SandboxStatus::Terminating {
            return;
        }
        if let Err(e) = self.runtime.destroy(id).await {
            // Stay TERMINATING: reconciliation retries at the next start.
            tracing::error!(sandbox = %id, error = %e, "teardown failed");
            return;
        }
        self.network.forget(id);
        record.status = SandboxStatus::Terminated;
        record.ended_at = Some(Utc::now());
        if reason.is_some() {
            record.error = reason;
        }
        if let Err(e) = self.store.update_sandbox(&record) {
            tracing::error!(sandbox = %id, error = %e, "recording TERMINATED");
        }
        drop(_guard);
        self.locks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
        tracing::info!(sandbox = %id, "sandbox terminated");
    }

    /// Watches an agent connection; when it drops, reconnects or fails the sandbox.
    pub(super) fn spawn_monitor(self: &Arc<Self>, id: Uuid, conn: AgentConn) {
        let this = self.clone();
        tokio::spawn(async move {
            conn.closed().await;
            let lock = this.lock_for(id);
            let guard = lock.lock().await;
            // Whoever reconnected first (a snapshot, a request) gave that connection its own monitor.
            if this.cached_agent(id).is_some() {
                return;
            }
            let running = matches!(this.store.get_sandbox(id), Ok(Some(r)) if r.status == SandboxStatus::Running);
            if !running {
                return;
            }
            let reason = match this.runtime.is_alive(id).await {
                Ok(true) => match this.attach_locked(id).await {
                    Ok(_) => return,
                    Err(e) => format!("sandbox agent stopped answering: {e}"),
                },
                _ => this
                    .runtime
                    .death_reason(id)
                    .unwrap_or_else(|| "sandbox stopped unexpectedly".to_string()),
            };
            drop(guard);
            this.fail(id, reason).await;
        });
    }

    /// Ends sandboxes whose active runtime is used up; runs every second.
    pub async fn enforce_runtime_limits(self: &Arc<Self>) {
        let limit = self.config.limits.active_runtime;
        let Ok(running) = self.store.sandboxes_in_status(&[SandboxStatus::Running]) else {
            return;
        };
        let now = Utc::now();
        for r in running {
            if r.active_runtime_ms(now) >= limit.as_millis() as u64 {
                let reason = format!("active runtime limit of {}s reached", limit.as_secs());
                let moved = self
                    .transition(r.id, |r| {
                        if r.status == SandboxStatus::Running {
                            stop_clock(r);
                            r.status = SandboxStatus::Terminating;
                        }
                    })
                    .await;
                if matches!(moved, Ok(ref m) if m.status == SandboxStatus::Terminating) {
                    tracing::info!(sandbox = %r.id, "{reason}");
                    self.spawn_teardown(r.id, Some(reason));
                }
            }
        }
    }
}

/// Folds the current running period into `active_ms`.
pub(super) fn stop_clock(r: &mut SandboxRecord) {
    r.active_ms = r.active_runtime_ms(Utc::now());
    r.running_since = None;
}

async fn wait_done(mut rx: tokio::sync::watch::Receiver<bool>) {
    let _ = rx.wait_for(|d| *d).await;
}

fn same_config(a: &SandboxRecord, b: &SandboxRecord) -> bool {
    a.vcpu == b.vcpu
        && a.memory_mb == b.memory_mb
        && a.environment == b.environment
        && a.secrets == b.secrets
        && a.snapshot_id == b.snapshot_id
        && a.network == b.network
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
