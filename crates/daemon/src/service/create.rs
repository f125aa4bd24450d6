//! Create: validation, admission, the name-idempotent insert, then the boot.

use super::lifecycle::CreateOutcome;
use super::{Result, Service, ServiceError};
use chrono::Utc;
use sbx_api_types::{validate, CreateSandboxRequest, NetworkPolicy, SandboxStatus};
use sbx_store::SandboxRecord;
use std::collections::BTreeMap;
use std::sync::Arc;
use uuid::Uuid;

impl Service {
    /// `POST /v2/sandboxes`: the server's default network policy.
    pub async fn create(
        self: &Arc<Self>,
        workspace: &str,
        req: CreateSandboxRequest,
    ) -> Result<CreateOutcome> {
        self.create_with_network(workspace, req, None).await
    }

    /// `POST /v1/sandboxes`: [`Service::create_with_network`] with volume
    /// mounts and an image (or a template to clone), then preview URLs turned
    /// on when asked (also for an existing sandbox of the name).
    #[allow(clippy::too_many_arguments)]
    pub async fn create_v1(
        self: &Arc<Self>,
        workspace: &str,
        req: CreateSandboxRequest,
        network: Option<NetworkPolicy>,
        preview: Option<sbx_api_types::PreviewRequest>,
        volumes: Vec<sbx_api_types::VolumeMount>,
        image: Option<String>,
        template: Option<String>,
    ) -> Result<CreateOutcome> {
        match template {
            Some(template) => {
                self.create_from_template(
                    workspace, req, network, preview, volumes, image, template,
                )
                .await
            }
            None => {
                self.create_of_image(workspace, req, network, preview, volumes, image)
                    .await
            }
        }
    }

    /// [`Service::create_v1`] without a template.
    async fn create_of_image(
        self: &Arc<Self>,
        workspace: &str,
        req: CreateSandboxRequest,
        network: Option<NetworkPolicy>,
        preview: Option<sbx_api_types::PreviewRequest>,
        volumes: Vec<sbx_api_types::VolumeMount>,
        image: Option<String>,
    ) -> Result<CreateOutcome> {
        if image.is_some() && req.snapshot_id.is_some() {
            return Err(validate::ValidationError::Format {
                field: "image",
                reason: "a clone runs its snapshot's image; do not send image with snapshotId"
                    .into(),
            }
            .into());
        }
        let image = match image {
            Some(raw) => Some(self.resolve_image(workspace, &raw).await?),
            None => None,
        };
        if !volumes.is_empty() && req.snapshot_id.is_some() {
            return Err(validate::ValidationError::Format {
                field: "volumes",
                reason: "a clone mounts its source's volumes; do not send volumes with snapshotId"
                    .into(),
            }
            .into());
        }
        let mounts = self.resolve_mounts(workspace, &volumes).await?;
        let outcome = self
            .create_with_mounts(workspace, req, network, mounts, image)
            .await?;
        if let Some(preview) = preview {
            let id = match &outcome {
                CreateOutcome::Created(r) | CreateOutcome::Existing(r) => r.id,
            };
            self.enable_preview(workspace, id, preview.public).await?;
        }
        Ok(outcome)
    }

    /// `POST /v1/sandboxes` with `template`: a clone of the template's
    /// snapshot, recorded as created from it. Only `name` (and `preview`)
    /// go with a template: the rest is the template's.
    #[allow(clippy::too_many_arguments)]
    async fn create_from_template(
        self: &Arc<Self>,
        workspace: &str,
        mut req: CreateSandboxRequest,
        network: Option<NetworkPolicy>,
        preview: Option<sbx_api_types::PreviewRequest>,
        volumes: Vec<sbx_api_types::VolumeMount>,
        image: Option<String>,
        template: String,
    ) -> Result<CreateOutcome> {
        let other = [
            ("image", image.is_some()),
            ("snapshotId", req.snapshot_id.is_some()),
            ("network", network.is_some()),
            ("volumes", !volumes.is_empty()),
            ("vcpu", req.vcpu.is_some()),
            ("memoryMb", req.memory_mb.is_some()),
            ("environment", req.environment.is_some()),
            ("secrets", req.secrets.is_some()),
        ];
        if let Some((field, _)) = other.iter().find(|(_, sent)| *sent) {
            return Err(validate::ValidationError::Format {
                field,
                reason: format!(
                    "a create from a template takes its {field} from the template; send only name (and preview) with template"
                ),
            }
            .into());
        }
        // A rebuild may delete the snapshot read here before the clone reads
        // it: the template then names its new one (read again, once).
        let mut attempt = 0;
        let outcome = loop {
            req.snapshot_id = Some(self.template_snapshot(workspace, &template).await?);
            match self
                .create_of_image(workspace, req.clone(), None, preview, Vec::new(), None)
                .await
            {
                Err(ServiceError::SnapshotNotFound) if attempt == 0 => attempt += 1,
                other => break other?,
            }
        };
        let id = match &outcome {
            CreateOutcome::Created(r) | CreateOutcome::Existing(r) => r.id,
        };
        self.store.set_sandbox_template(id, &template).await?;
        Ok(match outcome {
            CreateOutcome::Created(mut r) => {
                r.template = Some(template);
                CreateOutcome::Created(r)
            }
            CreateOutcome::Existing(mut r) => {
                r.template = Some(template);
                CreateOutcome::Existing(r)
            }
        })
    }

    /// `POST /v1/sandboxes`: like `create`, with an egress policy (`None`: the
    /// server's default). A clone always keeps its source's policy.
    pub async fn create_with_network(
        self: &Arc<Self>,
        workspace: &str,
        req: CreateSandboxRequest,
        network: Option<NetworkPolicy>,
    ) -> Result<CreateOutcome> {
        self.create_with_mounts(workspace, req, network, Vec::new(), None)
            .await
    }

    /// [`Service::create_with_network`] with resolved volume mounts (their
    /// `sandbox_id` is filled in here) and image (`None`: the default). A
    /// clone takes its source's mounts and image.
    async fn create_with_mounts(
        self: &Arc<Self>,
        workspace: &str,
        req: CreateSandboxRequest,
        network: Option<NetworkPolicy>,
        mut mounts: Vec<sbx_store::VolumeMountRecord>,
        image: Option<super::images::ResolvedImage>,
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
        // A fresh sandbox that names no image boots the tenant's default.
        let image = match image {
            None if req.snapshot_id.is_none() => self.tenant_default_image(workspace).await?,
            image => image,
        };
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
            let snap = self.clone_source(workspace, snapshot_id).await?;
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
            // The checkpoint's root filesystem: the clone boots on the same image.
            record.image_ref = snap.image_ref;
            // runsc restores a checkpoint with the mounts it was taken with:
            // the clone binds the source's volumes again (their current data).
            let mounts = self.store.sandbox_mounts(snap.source_sandbox).await?;
            self.record_mounts(record.id, mounts).await?;
            let admitted = match self.admit(record.vcpu, record.memory_mb).await {
                Ok(r) => r,
                Err(e) => return self.existing_or(&record, e).await,
            };
            return self.insert_and_boot_with(record, None, admitted).await;
        }
        let vcpu = req.vcpu.ok_or(validate::ValidationError::Missing("vcpu"))?;
        let memory_mb = req
            .memory_mb
            .ok_or(validate::ValidationError::Missing("memoryMb"))?;
        let (vcpu, memory_mb) = validate::shape_in(&self.config.shapes, vcpu, memory_mb)?;
        let mut environment = req.environment.clone().unwrap_or_default();
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
        // The image's environment is the base the request's overrides (the
        // request's keys were validated above; the image's are its own).
        if let Some(image) = &image {
            let mut merged = super::images::image_env(&image.config);
            for s in &secrets {
                merged.remove(s);
            }
            merged.extend(environment);
            // The merged map is what the sandbox gets: held to the same limits.
            validate::environment("image", &merged, &secrets)?;
            environment = merged;
        }
        let mut record =
            self.new_record(workspace, name, vcpu, memory_mb, environment, secrets, None);
        record.network = network;
        if let Some(image) = &image {
            record.image_ref = image.image_ref.clone();
        }
        // A retry of a create that succeeded keeps its sandbox even if one of its secrets was
        // deleted since (names were resolved when it was created): look for it first.
        if let Err(missing) = self.check_secrets_exist(workspace, &record.secrets).await {
            return self.existing_or(&record, missing).await;
        }
        // A warm pool member replaces the runtime start (fresh sandboxes of
        // the default image without volumes only: a member booted on that
        // image without the mounts).
        let warm = if mounts.is_empty() && image.is_none() {
            self.take_member((vcpu, memory_mb)).await
        } else {
            None
        };
        if let Some(member) = &warm {
            record.id = member.id;
        }
        for m in &mut mounts {
            m.sandbox_id = record.id;
        }
        // Before the row: the boot reads them. Rows of a create that then
        // finds its name held name a sandbox that never existed (inert).
        self.record_mounts(record.id, mounts).await?;
        let admitted = match &warm {
            Some(_) => self.hold(vcpu, memory_mb),
            None => match self.admit(vcpu, memory_mb).await {
                Ok(r) => r,
                Err(e) => return self.existing_or(&record, e).await,
            },
        };
        self.insert_and_boot_with(record, warm, admitted).await
    }

    /// Records the mounts of sandbox `id`.
    async fn record_mounts(
        &self,
        id: Uuid,
        mounts: Vec<sbx_store::VolumeMountRecord>,
    ) -> Result<()> {
        if mounts.is_empty() {
            return Ok(());
        }
        let mounts = mounts
            .into_iter()
            .map(|m| sbx_store::VolumeMountRecord {
                sandbox_id: id,
                ..m
            })
            .collect();
        Ok(self.store.put_volume_mounts(mounts).await?)
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
            generation: 0,
            node_id: self.config.node.id.clone(),
        }
    }

    /// A create refused by admission: a repeat of a create whose sandbox
    /// exists still gets that sandbox (create is idempotent by name).
    async fn existing_or(
        &self,
        record: &SandboxRecord,
        refused: ServiceError,
    ) -> Result<CreateOutcome> {
        match self
            .store
            .active_sandbox_named(&record.workspace, &record.name)
            .await?
        {
            Some(existing) if same_config(&existing, record) => {
                Ok(CreateOutcome::Existing(existing.into()))
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
        let inserted = self
            .store
            .create_sandbox_within(&record, self.config.limits.workspace_quota)
            .await;
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
                    Ok(CreateOutcome::Existing((*existing).into()))
                } else {
                    Err(ServiceError::NameTaken(record.name))
                }
            }
            sbx_store::CreateOutcome::QuotaReached(used) => {
                if let Some(member) = warm {
                    self.return_member(shape, member);
                }
                sbx_metrics::global().admission_refused("quota");
                Err(ServiceError::WorkspaceQuota(quota_text(
                    &self.config.limits.workspace_quota,
                    &used,
                )))
            }
            sbx_store::CreateOutcome::Created => {
                let conn = warm.map(|m| m.conn);
                if conn.is_some() {
                    self.refill_pool();
                }
                let (workspace, id) = (record.workspace.clone(), record.id);
                let boot = self.spawn_boot_with(id, conn, Some(record));
                let wait = self.config.limits.create_sync_wait;
                let row = match tokio::time::timeout(wait, boot).await {
                    // RUNNING, as the boot's own write left it.
                    Ok(Ok(Some(row))) => row,
                    // Failed, destroyed meanwhile, or still booting: as stored now.
                    _ => self.load(&workspace, id).await?,
                };
                if let Some(refused) = super::lifecycle::clone_refused(&row) {
                    return Err(refused);
                }
                Ok(CreateOutcome::Created(row.into()))
            }
        }
    }
}

/// What a workspace holds against its quota, for the error message: the
/// limits that are set, e.g. `3 of 3 sandboxes in use, 4 of 8 vCPUs in use`.
fn quota_text(quota: &sbx_store::WorkspaceQuota, used: &sbx_store::WorkspaceUsage) -> String {
    [
        (quota.sandboxes, used.sandboxes, "sandboxes"),
        (quota.vcpus, used.vcpus, "vCPUs"),
        (quota.memory_mb, used.memory_mb, "MiB of memory"),
    ]
    .iter()
    .filter(|(limit, _, _)| *limit > 0)
    .map(|(limit, used, what)| format!("{used} of {limit} {what} in use"))
    .collect::<Vec<_>>()
    .join(", ")
}

fn same_config(a: &SandboxRecord, b: &SandboxRecord) -> bool {
    a.vcpu == b.vcpu
        && a.memory_mb == b.memory_mb
        && a.environment == b.environment
        && a.secrets == b.secrets
        && a.snapshot_id == b.snapshot_id
        && a.network == b.network
        && a.image_ref == b.image_ref
}
