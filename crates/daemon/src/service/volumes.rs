//! Persistent volumes (`/v1/volumes`, local kind) and the mounts sandboxes
//! take at create. A volume belongs to one tenant (another tenant's is "not
//! found"); its data lives on the node that created it, in its own
//! size-limited filesystem (see `sbx_node::runtime::volumes`).

use super::{Result, Service, ServiceError};
use chrono::Utc;
use sbx_api_types::validate::{self, ValidationError};
use sbx_api_types::volumes as rules;
use sbx_api_types::{CreateVolumeRequest, Volume, VolumeKind, VolumeList, VolumeMount};
use sbx_node::runtime::VolumeBind;
use sbx_store::{VolumeMountRecord, VolumeRecord};
use std::sync::Arc;
use uuid::Uuid;

/// What a create with `kind: "s3"` is told when sbxd has no object store.
pub const S3_NOT_CONFIGURED: &str = "volume kind \"s3\" needs an object store: start sbxd with \
     --snapshot-store s3://BUCKET/PREFIX (S3 volumes live beside the snapshots)";

/// The kind a row records (rows are written by this code: `local` or `s3`).
fn kind_of(v: &VolumeRecord) -> VolumeKind {
    VolumeKind::parse(&v.kind).unwrap_or(VolumeKind::Local)
}

fn view(v: &VolumeRecord, used_bytes: Option<u64>) -> Volume {
    Volume {
        id: v.id,
        name: v.name.clone(),
        kind: kind_of(v),
        size_mb: v.size_mb,
        used_bytes,
        node_id: v.node_id.clone(),
        created_at: sbx_api_types::format_time(v.created_at),
    }
}

impl Service {
    /// `POST /v1/volumes`: formats and mounts the volume on this node, then records it.
    pub async fn create_volume(&self, workspace: &str, req: CreateVolumeRequest) -> Result<Volume> {
        let name = req.name.ok_or(ValidationError::Missing("name"))?;
        validate::name("name", &name)?;
        let kind = req.kind.unwrap_or(VolumeKind::Local);
        let size_mb = rules::volume_size(req.size_mb)?;
        if !self.runtime.volume_kind_available(kind) {
            // The request names what this server cannot hold: a 400, not a 5xx.
            return Err(ValidationError::Format {
                field: "kind",
                reason: S3_NOT_CONFIGURED.into(),
            }
            .into());
        }
        if self.store.volume_named(workspace, &name).await?.is_some() {
            return Err(ServiceError::VolumeNameTaken(name));
        }
        let record = VolumeRecord {
            id: Uuid::new_v4(),
            workspace: workspace.to_string(),
            name,
            kind: kind.as_str().to_string(),
            size_mb,
            // An S3 volume is on no node: any node mounts it.
            node_id: match kind {
                VolumeKind::Local => self.config.node.id.clone(),
                VolumeKind::S3 => String::new(),
            },
            created_at: Utc::now(),
        };
        // The data first: a row never names a volume that has no filesystem.
        // (An S3 volume's objects appear with its first file.)
        let made = match kind {
            VolumeKind::Local => self.runtime.create_volume(record.id, size_mb).await,
            VolumeKind::S3 => Ok(()),
        };
        if let Err(e) = made {
            let _ = self.runtime.delete_volume(record.id, kind).await;
            return Err(if e.is_disk_full() {
                ServiceError::StorageFull(format!("the data disk is full: {e}"))
            } else {
                ServiceError::Internal(format!("creating the volume: {e}"))
            });
        }
        let inserted = self.store.insert_volume(&record).await;
        if !matches!(inserted, Ok(true)) {
            let _ = self.runtime.delete_volume(record.id, kind).await;
        }
        match inserted? {
            true => Ok(view(&record, Some(0))),
            // A concurrent create of the same name won.
            false => Err(ServiceError::VolumeNameTaken(record.name)),
        }
    }

    /// `GET /v1/volumes`: the tenant's volumes by name.
    pub async fn list_volumes(&self, workspace: &str) -> Result<VolumeList> {
        let volumes = self.store.list_volumes(workspace).await?;
        Ok(VolumeList {
            volumes: volumes.iter().map(|v| view(v, None)).collect(),
        })
    }

    /// A tenant's volume by name, or by id when `key` is a canonical id.
    async fn volume(&self, workspace: &str, key: &str) -> Result<VolumeRecord> {
        let found = match validate::canonical_id("volume", key) {
            Ok(id) => self.store.get_volume(id).await?,
            Err(_) => self.store.volume_named(workspace, key).await?,
        };
        match found {
            Some(v) if v.workspace == workspace => Ok(v),
            _ => Err(ServiceError::VolumeNotFound(key.to_string())),
        }
    }

    /// `GET /v1/volumes/{name}`: the volume with its usage in bytes.
    pub async fn get_volume(&self, workspace: &str, key: &str) -> Result<Volume> {
        let v = self.volume(workspace, key).await?;
        let kind = kind_of(&v);
        // A local volume's usage is its node's to read; an S3 one's, anyone's.
        let used = if kind == VolumeKind::S3 || v.node_id == self.config.node.id {
            let (runtime, id) = (self.runtime.clone(), v.id);
            tokio::task::spawn_blocking(move || runtime.volume_used_bytes(id, kind))
                .await
                .map_err(|e| ServiceError::Internal(e.to_string()))?
                .map_err(|e| ServiceError::Internal(format!("reading the volume's usage: {e}")))?
        } else {
            0
        };
        Ok(view(&v, Some(used)))
    }

    /// Active sandboxes that mount the volume.
    async fn volume_users(&self, volume_id: Uuid) -> Result<Vec<Uuid>> {
        let mut users = Vec::new();
        for m in self.store.volume_mounts(volume_id).await? {
            let active = self
                .store
                .get_sandbox(m.sandbox_id)
                .await?
                .is_some_and(|s| s.status.is_active());
            if active && !users.contains(&m.sandbox_id) {
                users.push(m.sandbox_id);
            }
        }
        Ok(users)
    }

    /// `DELETE /v1/volumes/{name}[?force=true]`: refused (409) while an
    /// active sandbox mounts it, unless forced. A forced delete removes the
    /// row and the data; the host mount is detached lazily, so a sandbox
    /// that still has it keeps working on the (now nameless) files until it
    /// ends, and its next clone or restart finds no volume.
    pub async fn delete_volume(&self, workspace: &str, key: &str, force: bool) -> Result<()> {
        let v = self.volume(workspace, key).await?;
        let users = self.volume_users(v.id).await?;
        if !users.is_empty() && !force {
            let ids: Vec<String> = users.iter().map(Uuid::to_string).collect();
            return Err(ServiceError::Conflict(format!(
                "volume {:?} is mounted by active sandbox(es) {}; destroy them first, or delete with ?force=true",
                v.name,
                ids.join(", ")
            )));
        }
        let kind = kind_of(&v);
        if kind == VolumeKind::Local && v.node_id != self.config.node.id {
            return Err(ServiceError::Conflict(format!(
                "volume {:?} lives on node {:?}; delete it through that node",
                v.name, v.node_id
            )));
        }
        // The row first: no create can resolve the name once this returns.
        self.store.delete_volume(v.id).await?;
        self.runtime
            .delete_volume(v.id, kind)
            .await
            .map_err(|e| ServiceError::Internal(format!("removing the volume's data: {e}")))
    }

    /// The mounts of a create request, checked and resolved in the tenant:
    /// unknown names are 404, volumes of another node 409.
    pub(super) async fn resolve_mounts(
        &self,
        workspace: &str,
        mounts: &[VolumeMount],
    ) -> Result<Vec<VolumeMountRecord>> {
        rules::mounts(mounts)?;
        let mut out = Vec::with_capacity(mounts.len());
        for m in mounts {
            let v = match self.store.volume_named(workspace, &m.name).await? {
                Some(v) => v,
                None => return Err(ServiceError::VolumeNotFound(m.name.clone())),
            };
            if kind_of(&v) == VolumeKind::Local && v.node_id != self.config.node.id {
                return Err(ServiceError::Conflict(format!(
                    "volume {:?} lives on node {:?}; create the sandbox there",
                    v.name, v.node_id
                )));
            }
            out.push(VolumeMountRecord {
                sandbox_id: Uuid::nil(),
                volume_id: v.id,
                path: m.path.clone(),
                read_only: m.read_only,
            });
        }
        Ok(out)
    }

    /// What the runtime binds into sandbox `id`: its recorded mounts of
    /// volumes that still exist.
    pub(super) async fn volume_binds(&self, id: Uuid) -> Result<Vec<VolumeBind>> {
        let mut binds = Vec::new();
        for m in self.store.sandbox_mounts(id).await? {
            let Some(v) = self.store.get_volume(m.volume_id).await? else {
                continue;
            };
            binds.push(VolumeBind {
                volume_id: m.volume_id,
                path: m.path,
                read_only: m.read_only,
                kind: kind_of(&v),
                size_mb: v.size_mb,
            });
        }
        Ok(binds)
    }

    /// Mounts the S3 volumes of a sandbox about to boot here, in turn with
    /// [`Service::release_volumes`]: a release that decided a volume had no
    /// user on this node unmounts it before this mounts it again.
    pub(super) async fn mount_volumes(&self, binds: &[VolumeBind]) -> Result<()> {
        let _turn = self.volume_turn.lock().await;
        for b in binds.iter().filter(|b| b.kind == VolumeKind::S3) {
            self.runtime
                .mount_volume(b.volume_id, b.kind, b.size_mb)
                .await
                .map_err(|e| {
                    ServiceError::Internal(format!("mounting volume {}: {e}", b.volume_id))
                })?;
        }
        Ok(())
    }

    /// After sandbox `id` ended on this node: unmounts each S3 volume it
    /// mounted that no other active sandbox of this node mounts (rclone
    /// finishes its uploads first). Failures are logged; the mount stays.
    pub(super) async fn release_volumes(&self, id: Uuid) {
        let binds = match self.volume_binds(id).await {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(sandbox = %id, error = %e, "reading the mounts to release");
                return;
            }
        };
        for b in binds.into_iter().filter(|b| b.kind == VolumeKind::S3) {
            let _turn = self.volume_turn.lock().await;
            let used_here = match self.volume_users(b.volume_id).await {
                Ok(users) => {
                    let mut here = false;
                    for user in users.into_iter().filter(|u| *u != id) {
                        if let Ok(Some(s)) = self.store.get_sandbox(user).await {
                            here |= s.node_id == self.config.node.id;
                        }
                    }
                    here
                }
                Err(e) => {
                    tracing::warn!(volume = %b.volume_id, error = %e, "reading the volume's users");
                    true
                }
            };
            if used_here {
                continue;
            }
            if let Err(e) = self.runtime.release_volume(b.volume_id, b.kind).await {
                tracing::warn!(volume = %b.volume_id, error = %e, "unmounting an unused S3 volume");
            }
        }
    }

    /// `GET /v1/sandboxes/{id}`: the sandbox and its mounts.
    pub async fn get_detail(
        &self,
        workspace: &str,
        id: Uuid,
    ) -> Result<(super::views::Sandbox, Vec<VolumeMount>)> {
        let mut r = self.get(workspace, id).await?;
        r.template = self.store.sandbox_template(id).await?;
        let mounts = self.mounts_view(id).await?;
        Ok((r, mounts))
    }

    /// `PUT /v1/sandboxes/{id}/network`: the change, answered with the mounts as `GET` does.
    pub async fn update_network_detail(
        self: &Arc<Self>,
        workspace: &str,
        id: Uuid,
        policy: sbx_api_types::NetworkPolicy,
    ) -> Result<(super::views::Sandbox, Vec<VolumeMount>)> {
        let mut r = self.update_network(workspace, id, policy).await?;
        r.template = self.store.sandbox_template(id).await?;
        let mounts = self.mounts_view(id).await?;
        Ok((r, mounts))
    }

    /// The mounts of a sandbox as the API shows them (volumes deleted since are left out).
    async fn mounts_view(&self, id: Uuid) -> Result<Vec<VolumeMount>> {
        let mut out = Vec::new();
        for m in self.store.sandbox_mounts(id).await? {
            if let Some(v) = self.store.get_volume(m.volume_id).await? {
                out.push(VolumeMount {
                    name: v.name,
                    path: m.path,
                    read_only: m.read_only,
                });
            }
        }
        Ok(out)
    }
}
