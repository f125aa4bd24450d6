//! Templates (`/v1/templates`): an image booted in a build sandbox, its start
//! command run until the ready check passes, then snapshotted through the
//! ordinary snapshot machinery (verified like any snapshot). A create from
//! the template is a clone of that snapshot, so its server is already
//! listening. The store decides between writers: every write of a template
//! row is conditional on the generation read, so a build whose template was
//! rebuilt or deleted meanwhile loses and removes its own snapshot.

use super::{Result, Service, ServiceError};
use chrono::{DateTime, Utc};
use sbx_agent_proto::{CommandSpec, ProcessOptions, ProcessState, Reply, Request};
use sbx_api_types::templates::{ReadyCheck, Template, TemplateList, TemplateSpec, TemplateStatus};
use sbx_api_types::{CreateSandboxRequest, SandboxStatus, SnapshotStatus};
use sbx_store::TemplateRecord;
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

/// How long a build waits for its sandbox to be RUNNING.
const BOOT_WAIT: Duration = Duration::from_secs(180);
/// How long a build waits for its snapshot to be READY.
const SNAPSHOT_WAIT: Duration = Duration::from_secs(600);
/// Pause between two ready checks (and status polls of a build).
const POLL: Duration = Duration::from_millis(100);
/// Output of the start command kept in a failed build's reason.
const TAIL_BYTES: u64 = 2048;
/// Snapshots of templates do not expire: they live as long as their template.
const TEMPLATE_SNAPSHOT_YEARS: i64 = 100;
/// The longest a `?wait=true` call waits for its build.
const WAIT_LIMIT: Duration = Duration::from_secs(900);

fn view(r: &TemplateRecord) -> Template {
    let spec: TemplateSpec = serde_json::from_str(&r.spec).unwrap_or_default();
    Template {
        spec,
        status: TemplateStatus::parse(&r.status).unwrap_or(TemplateStatus::Failed),
        error: r.error.clone(),
        image_ref: r.image_ref.clone(),
        snapshot_id: r.snapshot_id,
        creatable: r.snapshot_id.is_some(),
        created_at: rfc3339(r.created_at),
        updated_at: rfc3339(r.updated_at),
    }
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// What a successful build produced.
struct Built {
    snapshot_id: Uuid,
    image_ref: String,
}

impl Service {
    /// `POST /v1/templates`: records the template BUILDING and starts its
    /// build (`wait`: answers once the build ended).
    pub async fn template_create(
        self: &Arc<Self>,
        workspace: &str,
        spec: TemplateSpec,
        wait: bool,
    ) -> Result<Template> {
        spec.validate()?;
        let image = spec.image.clone().unwrap_or_else(|| "default".into());
        // Unknown images are refused now rather than as a failed build.
        self.resolve_image(workspace, &image).await?;
        let now = Utc::now();
        let record = TemplateRecord {
            workspace: workspace.to_string(),
            name: spec.name.clone(),
            spec: serde_json::to_string(&spec)
                .map_err(|e| ServiceError::Internal(e.to_string()))?,
            status: TemplateStatus::Building.as_str().into(),
            error: None,
            image_ref: image,
            snapshot_id: None,
            generation: 0,
            created_at: now,
            updated_at: now,
        };
        if !self.store.create_template(&record).await? {
            return Err(ServiceError::TemplateNameTaken(spec.name));
        }
        self.start_build(record, wait).await
    }

    /// `GET /v1/templates`.
    pub async fn template_list(&self, workspace: &str) -> Result<TemplateList> {
        let rows = self.store.list_templates(Some(workspace)).await?;
        Ok(TemplateList {
            templates: rows.iter().map(view).collect(),
        })
    }

    /// `GET /v1/templates/{name}`.
    pub async fn template_get(&self, workspace: &str, name: &str) -> Result<Template> {
        Ok(view(&self.template_row(workspace, name).await?))
    }

    /// `POST /v1/templates/{name}/rebuild`: a new build; the current snapshot
    /// serves creates until the new one is READY.
    pub async fn template_rebuild(
        self: &Arc<Self>,
        workspace: &str,
        name: &str,
        wait: bool,
    ) -> Result<Template> {
        let row = self.template_row(workspace, name).await?;
        self.start_build(row, wait).await
    }

    /// `DELETE /v1/templates/{name}`: removes the template and its snapshot.
    /// A build still running is abandoned: its last write loses against the
    /// deletion and it removes what it made.
    pub async fn template_delete(&self, workspace: &str, name: &str) -> Result<()> {
        for _ in 0..super::transition::CAS_ATTEMPTS {
            let row = self.template_row(workspace, name).await?;
            if self
                .store
                .delete_template(workspace, name, row.generation)
                .await?
            {
                if let Some(snap) = row.snapshot_id {
                    self.drop_template_snapshot(workspace, snap).await;
                }
                return Ok(());
            }
        }
        Err(ServiceError::Conflict(format!(
            "template {name:?} kept changing; try again"
        )))
    }

    /// The snapshot a create from template `name` clones: 404 for an unknown
    /// template, 409 while it has no READY snapshot.
    pub(super) async fn template_snapshot(&self, workspace: &str, name: &str) -> Result<Uuid> {
        sbx_api_types::templates::validate_name(name)?;
        let row = self.template_row(workspace, name).await?;
        row.snapshot_id
            .ok_or_else(|| ServiceError::TemplateNotReady {
                name: name.to_string(),
                status: row.status.clone(),
                error: row.error.clone(),
            })
    }

    /// Whether the tenant has a template named `name` (E2B `templateID`).
    pub(super) async fn has_template(&self, workspace: &str, name: &str) -> Result<bool> {
        if sbx_api_types::templates::validate_name(name).is_err() {
            return Ok(false);
        }
        Ok(self.store.get_template(workspace, name).await?.is_some())
    }

    /// The template whose snapshot `id` is (a snapshot a template owns is not
    /// deleted through `/v2/snapshots`).
    pub(super) async fn template_owning(
        &self,
        workspace: &str,
        id: Uuid,
    ) -> Result<Option<String>> {
        Ok(self
            .store
            .list_templates(Some(workspace))
            .await?
            .into_iter()
            .find(|t| t.snapshot_id == Some(id))
            .map(|t| t.name))
    }

    /// Templates of the tenant that name the image `name:tag` (or run its
    /// digest), as `template <name>`: the image cannot be deleted under them.
    pub(super) async fn template_users(
        &self,
        workspace: &str,
        image: &sbx_store::ImageRecord,
    ) -> Result<Vec<String>> {
        let named = format!("{}:{}", image.name, image.tag);
        Ok(self
            .store
            .list_templates(Some(workspace))
            .await?
            .into_iter()
            .filter(|t| {
                let spec: TemplateSpec = serde_json::from_str(&t.spec).unwrap_or_default();
                let image_names = spec.image.as_deref().map(|i| {
                    i == named || i == image.digest || (image.tag == "latest" && i == image.name)
                });
                image_names == Some(true)
                    || super::images::digest_of(&t.image_ref) == Some(image.digest.as_str())
            })
            .map(|t| format!("template {}", t.name))
            .collect())
    }

    /// The hook where an image name moves to new content: templates of the
    /// tenant naming `name:tag` rebuild in the background.
    pub(super) fn templates_follow_image(&self, workspace: &str, name: &str, tag: &str) {
        let Some(this) = self.me.upgrade() else {
            return;
        };
        let (workspace, named) = (workspace.to_string(), format!("{name}:{tag}"));
        let bare = (tag == "latest").then(|| name.to_string());
        tokio::spawn(async move {
            let rows = match this.store.list_templates(Some(&workspace)).await {
                Ok(rows) => rows,
                Err(e) => {
                    tracing::warn!(error = %e, "listing templates to rebuild");
                    return;
                }
            };
            for row in rows {
                let spec: TemplateSpec = serde_json::from_str(&row.spec).unwrap_or_default();
                let image = spec.image.as_deref().unwrap_or("default");
                if image == named || Some(image) == bare.as_deref() {
                    tracing::info!(template = %row.name, image = %named, "image moved: rebuilding template");
                    if let Err(e) = this.start_build(row, false).await {
                        tracing::warn!(error = %e, "starting a template rebuild");
                    }
                }
            }
        });
    }

    /// At start: builds an earlier sbxd left BUILDING start again (their
    /// build sandboxes were failed as lost). Single node only: in a cluster
    /// another node may be running the build.
    pub(super) async fn resume_template_builds(self: &Arc<Self>) {
        if self.config.node.cluster {
            return;
        }
        let rows = match self.store.list_templates(None).await {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(error = %e, "listing templates to resume their builds");
                return;
            }
        };
        for row in rows {
            if row.status == TemplateStatus::Building.as_str() {
                tracing::info!(template = %row.name, workspace = %row.workspace, "resuming an interrupted template build");
                if let Err(e) = self.start_build(row, false).await {
                    tracing::warn!(error = %e, "resuming a template build");
                }
            }
        }
    }

    async fn template_row(&self, workspace: &str, name: &str) -> Result<TemplateRecord> {
        self.store
            .get_template(workspace, name)
            .await?
            .ok_or_else(|| ServiceError::TemplateNotFound(name.to_string()))
    }

    /// Marks `row` BUILDING (one generation on) and runs the build in the
    /// background; `wait`: answers once it ended.
    async fn start_build(
        self: &Arc<Self>,
        mut row: TemplateRecord,
        wait: bool,
    ) -> Result<Template> {
        for _ in 0..super::transition::CAS_ATTEMPTS {
            let mut next = row.clone();
            next.status = TemplateStatus::Building.as_str().into();
            next.error = None;
            next.updated_at = Utc::now();
            if self.store.update_template(&next).await? {
                next.generation += 1;
                let this = self.clone();
                let building = next.clone();
                let done = tokio::spawn(async move { this.build(building).await });
                if wait {
                    let _ = tokio::time::timeout(WAIT_LIMIT, done).await;
                    return self.template_get(&next.workspace, &next.name).await;
                }
                return Ok(view(&next));
            }
            row = self.template_row(&row.workspace, &row.name).await?;
        }
        Err(ServiceError::Conflict(format!(
            "template {:?} kept changing; try again",
            row.name
        )))
    }

    /// Runs one build of `row` (at its generation) and records the result if
    /// the row is still at that generation; otherwise drops the snapshot it made.
    async fn build(self: Arc<Self>, row: TemplateRecord) {
        let started = std::time::Instant::now();
        let result = self.build_snapshot(&row).await;
        let mut next = row.clone();
        next.updated_at = Utc::now();
        match &result {
            Ok(built) => {
                next.status = TemplateStatus::Ready.as_str().into();
                next.error = None;
                next.snapshot_id = Some(built.snapshot_id);
                next.image_ref = built.image_ref.clone();
            }
            Err(reason) => {
                next.status = TemplateStatus::Failed.as_str().into();
                next.error = Some(reason.clone());
            }
        }
        let written = match self.store.update_template(&next).await {
            Ok(w) => w,
            Err(e) => {
                tracing::error!(template = %row.name, error = %e, "recording a template build");
                false
            }
        };
        match (result, written) {
            (Ok(built), true) => {
                tracing::info!(template = %row.name, snapshot = %built.snapshot_id,
                    ms = started.elapsed().as_millis() as u64, "template ready");
                // The snapshot it replaced serves nothing any more.
                if let Some(old) = row.snapshot_id.filter(|o| *o != built.snapshot_id) {
                    self.drop_template_snapshot(&row.workspace, old).await;
                }
            }
            (Ok(built), false) => {
                tracing::info!(template = %row.name, "template changed during its build: dropping its snapshot");
                self.drop_template_snapshot(&row.workspace, built.snapshot_id)
                    .await;
            }
            (Err(reason), _) => {
                tracing::warn!(template = %row.name, %reason, "template build failed")
            }
        }
    }

    /// Deletes a snapshot a template no longer uses (logged on failure: the
    /// snapshot then stays listed and can be deleted by hand).
    async fn drop_template_snapshot(&self, workspace: &str, id: Uuid) {
        if let Err(e) = self.snapshot_delete(workspace, id).await {
            tracing::warn!(snapshot = %id, error = %e, "deleting a template's old snapshot");
        }
    }

    /// Boots the build sandbox, starts and checks it, snapshots it; the
    /// sandbox is destroyed whatever happens. `Err` is the build's reason.
    async fn build_snapshot(self: &Arc<Self>, row: &TemplateRecord) -> Result<Built, String> {
        let spec: TemplateSpec =
            serde_json::from_str(&row.spec).map_err(|e| format!("stored template spec: {e}"))?;
        let image = spec.image.clone().unwrap_or_else(|| "default".into());
        let resolved = self
            .resolve_image(&row.workspace, &image)
            .await
            .map_err(|e| format!("image {image:?}: {e}"))?;
        let (vcpu, memory_mb) = self.config.shapes.first().copied().unwrap_or((1, 1024));
        let req = CreateSandboxRequest {
            name: Some(format!("template-build-{}", Uuid::new_v4().simple())),
            vcpu: Some(spec.vcpu.unwrap_or(vcpu as u64)),
            memory_mb: Some(spec.memory_mb.unwrap_or(memory_mb as u64)),
            environment: (!spec.environment.is_empty()).then(|| spec.environment.clone()),
            secrets: None,
            snapshot_id: None,
        };
        let created = self
            .create_v1(
                &row.workspace,
                req,
                spec.network.clone(),
                None,
                Vec::new(),
                Some(image),
                None,
            )
            .await
            .map_err(|e| format!("booting the build sandbox: {e}"))?;
        let id = match created {
            super::CreateOutcome::Created(r) | super::CreateOutcome::Existing(r) => r.id,
        };
        let result = self
            .build_in(&row.workspace, id, &spec, resolved.config.user.as_deref())
            .await;
        let (this, workspace) = (self.clone(), row.workspace.clone());
        // Its snapshot is whole once READY: the build sandbox is not needed.
        tokio::spawn(async move {
            if let Err(e) = this.destroy(&workspace, id).await {
                tracing::warn!(sandbox = %id, error = %e, "destroying a template build sandbox");
            }
        });
        let snapshot_id = result?;
        let snap = self
            .store
            .get_snapshot(snapshot_id)
            .await
            .map_err(|e| e.to_string())?
            .ok_or("the template's snapshot vanished")?;
        let image_ref = snap.image_ref.clone();
        // A template's snapshot lives as long as the template, not the snapshot TTL.
        let expires = Utc::now() + chrono::Duration::days(365 * TEMPLATE_SNAPSHOT_YEARS);
        self.change_snapshot(snap, move |s| s.expires_at = expires)
            .await
            .map_err(|e| format!("keeping the template's snapshot: {e}"))?;
        Ok(Built {
            snapshot_id,
            image_ref,
        })
    }

    /// In the RUNNING build sandbox `id`: start, ready check, snapshot.
    async fn build_in(
        self: &Arc<Self>,
        workspace: &str,
        id: Uuid,
        spec: &TemplateSpec,
        user: Option<&str>,
    ) -> Result<Uuid, String> {
        self.wait_running(workspace, id).await?;
        let conn = self
            .agent(workspace, id)
            .await
            .map_err(|e| format!("reaching the build sandbox: {e}"))?;
        let cwd = self.image_workdir(id).await;
        let start = match &spec.start_command {
            None => None,
            Some(cmd) => {
                // An OCI user may be `name`, `uid`, or `user:group`: the agent takes a name.
                let user = user
                    .map(|u| u.split(':').next().unwrap_or(u))
                    .filter(|u| !u.is_empty() && *u != "root" && *u != "0")
                    .map(str::to_string);
                let answer = conn
                    .call(Request::ProcessStart {
                        command: CommandSpec {
                            argv: vec!["/bin/sh".into(), "-c".into(), cmd.clone()],
                            env: Default::default(),
                            cwd: cwd.clone(),
                        },
                        options: ProcessOptions {
                            user,
                            tag: Some("template-start".into()),
                            ..Default::default()
                        },
                    })
                    .await;
                match answer {
                    Ok((Reply::Process { process }, _))
                        if process.state != ProcessState::Failed =>
                    {
                        Some(process.id)
                    }
                    Ok((Reply::Process { process }, _)) => {
                        return Err(format!(
                            "the start command could not start: {}",
                            process.error.unwrap_or_default()
                        ))
                    }
                    Ok((other, _)) => return Err(format!("unexpected agent reply {other:?}")),
                    Err(e) => return Err(format!("starting the start command: {e}")),
                }
            }
        };
        let timeout = Duration::from_secs(spec.ready_timeout());
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(pid) = start {
                if let Some(ended) = self.start_ended(workspace, id, pid).await {
                    return Err(ended);
                }
            }
            let ready = match &spec.ready_check {
                None => true,
                Some(ReadyCheck::Port { port }) => conn.open_port(*port).await.is_ok(),
                Some(ReadyCheck::Command { command }) => {
                    let call = conn.call(Request::Exec {
                        command: CommandSpec {
                            argv: vec!["/bin/sh".into(), "-c".into(), command.clone()],
                            env: Default::default(),
                            cwd: cwd.clone(),
                        },
                        timeout_ms: 10_000,
                        max_output_bytes: 64 * 1024,
                    });
                    matches!(call.await, Ok((Reply::Exec { exit_code: 0, .. }, _)))
                }
            };
            if ready {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                let tail = match start {
                    Some(pid) => self.output_tail(workspace, id, pid).await,
                    None => String::new(),
                };
                return Err(format!(
                    "ready timeout: the ready check did not pass within {}s; start command output: {tail:?}",
                    timeout.as_secs()
                ));
            }
            tokio::time::sleep(POLL).await;
        }
        let snap = self
            .snapshot_create(workspace, id, None)
            .await
            .map_err(|e| format!("snapshot: {e}"))?;
        let snap_id = snap.id;
        let deadline = tokio::time::Instant::now() + SNAPSHOT_WAIT;
        loop {
            match self.store.get_snapshot(snap_id).await {
                Ok(Some(s)) if s.status == SnapshotStatus::Ready => return Ok(snap_id),
                Ok(Some(s)) if s.status == SnapshotStatus::Creating => {}
                Ok(Some(s)) => {
                    return Err(format!(
                        "snapshot {snap_id} is {}: {}",
                        s.status.as_str(),
                        s.error.unwrap_or_default()
                    ))
                }
                Ok(None) => return Err(format!("snapshot {snap_id} vanished")),
                Err(e) => return Err(e.to_string()),
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!("snapshot {snap_id} was not READY in time"));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits for the build sandbox to be RUNNING; `Err` if it failed or took too long.
    async fn wait_running(&self, workspace: &str, id: Uuid) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + BOOT_WAIT;
        loop {
            let s = self
                .get(workspace, id)
                .await
                .map_err(|e| format!("the build sandbox: {e}"))?;
            match s.status {
                SandboxStatus::Running => return Ok(()),
                SandboxStatus::Starting => {}
                other => {
                    return Err(format!(
                        "the build sandbox is {}: {}",
                        other.as_str(),
                        s.error.unwrap_or_default()
                    ))
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return Err("the build sandbox did not start in time".into());
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// `Some(reason)` once the start command ended unsuccessfully (a start
    /// command that exits 0 may have started a daemon: the check decides).
    async fn start_ended(self: &Arc<Self>, workspace: &str, id: Uuid, pid: Uuid) -> Option<String> {
        let info = self.process_get(workspace, id, pid).await.ok()?;
        let why = match info.state {
            ProcessState::Exited if info.exit_code == Some(0) => return None,
            ProcessState::Exited => format!(
                "the start command exited with code {}",
                info.exit_code.unwrap_or(-1)
            ),
            ProcessState::Killed => format!(
                "the start command was killed by signal {}",
                info.signal.unwrap_or(0)
            ),
            ProcessState::Failed | ProcessState::Lost => format!(
                "the start command failed: {}",
                info.error.unwrap_or_default()
            ),
            ProcessState::Starting | ProcessState::Running => return None,
        };
        let tail = self.output_tail(workspace, id, pid).await;
        Some(format!("{why}; output: {tail:?}"))
    }

    /// The last bytes the start command wrote (stdout and stderr, in order).
    async fn output_tail(self: &Arc<Self>, workspace: &str, id: Uuid, pid: Uuid) -> String {
        match self.process_output(workspace, id, pid, TAIL_BYTES).await {
            Ok(out) => {
                let bytes: Vec<u8> = out.chunks.into_iter().flat_map(|(_, b)| b).collect();
                String::from_utf8_lossy(&bytes).into_owned()
            }
            Err(e) => format!("(output unavailable: {e})"),
        }
    }
}
