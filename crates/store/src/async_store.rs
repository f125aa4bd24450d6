//! The store as async code calls it.
//!
//! Both backends answer synchronously: SQLite does its I/O on the calling thread, and
//! the PostgreSQL pool blocks the caller until a worker answers. Called straight from an
//! async task, either would stall every other task of that runtime thread for as long
//! as the database takes (a slow disk, a PostgreSQL failover). [`AsyncStore`] runs each
//! call on Tokio's blocking pool instead, so the runtime keeps serving other requests.
//! Its methods mirror [`Store`]'s one for one.

use crate::{
    ApiKeyRecord, CreateOutcome, E2bRecord, IdempotencyBegin, IdempotencyRecord, NodeRecord,
    NodeRegistration, PreviewRecord, SandboxCursor, SandboxRecord, SecretRecord,
    SnapshotCreateOutcome, SnapshotRecord, SnapshotStatus, Store, StoreError, WorkspaceQuota,
};
use chrono::{DateTime, Utc};
use sbx_api_types::SandboxStatus;
use std::collections::BTreeMap;
use std::sync::Arc;
use uuid::Uuid;

/// A [`Store`] whose calls run off the async runtime's worker threads.
#[derive(Clone)]
pub struct AsyncStore {
    inner: Arc<dyn Store>,
}

impl AsyncStore {
    /// Wraps a store.
    pub fn new(inner: Arc<dyn Store>) -> Self {
        AsyncStore { inner }
    }

    /// The synchronous store, for code that is not on the async runtime (start-up,
    /// blocking tasks, tests).
    pub fn blocking(&self) -> &Arc<dyn Store> {
        &self.inner
    }

    /// See [`Store::is_shared`].
    pub fn is_shared(&self) -> bool {
        self.inner.is_shared()
    }

    /// Runs `f` against the store on the blocking pool: for synchronous code that makes
    /// several calls (or calls and decides) in one go.
    pub async fn run<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&dyn Store) -> Result<T, StoreError> + Send + 'static,
    {
        // Several calls in one go: counted together.
        self.call("batch", f).await
    }

    async fn run_untimed<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&dyn Store) -> Result<T, StoreError> + Send + 'static,
    {
        let store = Arc::clone(&self.inner);
        match tokio::task::spawn_blocking(move || f(store.as_ref())).await {
            Ok(result) => result,
            // A panic in a backend, or the runtime shutting down: nothing is known to
            // have been written, and the caller reports it like any database failure.
            Err(e) => Err(StoreError::Database(Box::new(e))),
        }
    }

    /// [`AsyncStore::run`] for one [`Store`] method, timed and counted as `op`.
    async fn call<T, F>(&self, op: &'static str, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&dyn Store) -> Result<T, StoreError> + Send + 'static,
    {
        let started = std::time::Instant::now();
        let res = self.run_untimed(f).await;
        sbx_metrics::global().store_call(op, started.elapsed(), res.is_err());
        res
    }

    /// See [`Store::create_sandbox`].
    pub async fn create_sandbox(
        &self,
        record: &SandboxRecord,
    ) -> Result<CreateOutcome, StoreError> {
        let record = record.clone();
        self.call("create_sandbox", move |s| s.create_sandbox(&record))
            .await
    }

    /// See [`Store::create_sandbox_within`].
    pub async fn create_sandbox_within(
        &self,
        record: &SandboxRecord,
        quota: WorkspaceQuota,
    ) -> Result<CreateOutcome, StoreError> {
        let record = record.clone();
        self.call("create_sandbox", move |s| {
            s.create_sandbox_within(&record, &quota)
        })
        .await
    }

    /// See [`Store::active_sandbox_named`].
    pub async fn active_sandbox_named(
        &self,
        workspace: &str,
        name: &str,
    ) -> Result<Option<SandboxRecord>, StoreError> {
        let (workspace, name) = (workspace.to_string(), name.to_string());
        self.call("active_sandbox_named", move |s| {
            s.active_sandbox_named(&workspace, &name)
        })
        .await
    }

    /// See [`Store::get_sandbox`].
    pub async fn get_sandbox(&self, id: Uuid) -> Result<Option<SandboxRecord>, StoreError> {
        self.call("get_sandbox", move |s| s.get_sandbox(id)).await
    }

    /// See [`Store::update_sandbox`]: on success `record` carries the row's new generation.
    pub async fn update_sandbox(&self, record: &mut SandboxRecord) -> Result<(), StoreError> {
        let mut copy = record.clone();
        let copy = self
            .call("update_sandbox", move |s| {
                s.update_sandbox(&mut copy).map(|()| copy)
            })
            .await?;
        *record = copy;
        Ok(())
    }

    /// See [`Store::list_sandboxes`].
    pub async fn list_sandboxes(
        &self,
        workspace: &str,
        limit: u32,
        after: Option<&SandboxCursor>,
    ) -> Result<Vec<SandboxRecord>, StoreError> {
        let (workspace, after) = (workspace.to_string(), after.cloned());
        self.call("list_sandboxes", move |s| {
            s.list_sandboxes(&workspace, limit, after.as_ref())
        })
        .await
    }

    /// See [`Store::sandboxes_in_status`].
    pub async fn sandboxes_in_status(
        &self,
        node_id: Option<&str>,
        statuses: &[SandboxStatus],
    ) -> Result<Vec<SandboxRecord>, StoreError> {
        let statuses = statuses.to_vec();
        let node_id = node_id.map(str::to_string);
        self.call("sandboxes_in_status", move |s| {
            s.sandboxes_in_status(node_id.as_deref(), &statuses)
        })
        .await
    }

    /// See [`Store::create_snapshot`].
    pub async fn create_snapshot(
        &self,
        record: &SnapshotRecord,
        now: DateTime<Utc>,
        max_live: u32,
    ) -> Result<SnapshotCreateOutcome, StoreError> {
        let record = record.clone();
        self.call("create_snapshot", move |s| {
            s.create_snapshot(&record, now, max_live)
        })
        .await
    }

    /// See [`Store::get_snapshot`].
    pub async fn get_snapshot(&self, id: Uuid) -> Result<Option<SnapshotRecord>, StoreError> {
        self.call("get_snapshot", move |s| s.get_snapshot(id)).await
    }

    /// See [`Store::update_snapshot`]: on success `record` carries the row's new generation.
    pub async fn update_snapshot(&self, record: &mut SnapshotRecord) -> Result<(), StoreError> {
        let mut copy = record.clone();
        let copy = self
            .call("update_snapshot", move |s| {
                s.update_snapshot(&mut copy).map(|()| copy)
            })
            .await?;
        *record = copy;
        Ok(())
    }

    /// See [`Store::list_snapshots`].
    pub async fn list_snapshots(
        &self,
        workspace: &str,
        name: Option<&str>,
        limit: u32,
        after: Option<&SandboxCursor>,
    ) -> Result<Vec<SnapshotRecord>, StoreError> {
        let (workspace, name, after) = (
            workspace.to_string(),
            name.map(str::to_string),
            after.cloned(),
        );
        self.call("list_snapshots", move |s| {
            s.list_snapshots(&workspace, name.as_deref(), limit, after.as_ref())
        })
        .await
    }

    /// See [`Store::snapshots_in_status`].
    pub async fn snapshots_in_status(
        &self,
        statuses: &[SnapshotStatus],
    ) -> Result<Vec<SnapshotRecord>, StoreError> {
        let statuses = statuses.to_vec();
        self.call("snapshots_in_status", move |s| {
            s.snapshots_in_status(&statuses)
        })
        .await
    }

    /// See [`Store::put_secret`].
    pub async fn put_secret(&self, record: &SecretRecord) -> Result<(), StoreError> {
        let record = record.clone();
        self.call("put_secret", move |s| s.put_secret(&record))
            .await
    }

    /// See [`Store::get_secret`].
    pub async fn get_secret(
        &self,
        workspace: &str,
        name: &str,
    ) -> Result<Option<SecretRecord>, StoreError> {
        let (workspace, name) = (workspace.to_string(), name.to_string());
        self.call("get_secret", move |s| s.get_secret(&workspace, &name))
            .await
    }

    /// See [`Store::list_secrets`].
    pub async fn list_secrets(&self, workspace: &str) -> Result<Vec<SecretRecord>, StoreError> {
        let workspace = workspace.to_string();
        self.call("list_secrets", move |s| s.list_secrets(&workspace))
            .await
    }

    /// See [`Store::delete_secret`].
    pub async fn delete_secret(&self, workspace: &str, name: &str) -> Result<bool, StoreError> {
        let (workspace, name) = (workspace.to_string(), name.to_string());
        self.call("delete_secret", move |s| s.delete_secret(&workspace, &name))
            .await
    }

    /// See [`Store::create_api_key`].
    pub async fn create_api_key(&self, record: &ApiKeyRecord) -> Result<(), StoreError> {
        let record = record.clone();
        self.call("create_api_key", move |s| s.create_api_key(&record))
            .await
    }

    /// See [`Store::find_api_key`].
    pub async fn find_api_key(&self, digest: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        let digest = digest.to_string();
        self.call("find_api_key", move |s| s.find_api_key(&digest))
            .await
    }

    /// See [`Store::list_api_keys`].
    pub async fn list_api_keys(&self) -> Result<Vec<ApiKeyRecord>, StoreError> {
        self.call("list_api_keys", |s| s.list_api_keys()).await
    }

    /// See [`Store::revoke_api_key`].
    pub async fn revoke_api_key(&self, id: Uuid, now: DateTime<Utc>) -> Result<bool, StoreError> {
        self.call("revoke_api_key", move |s| s.revoke_api_key(id, now))
            .await
    }

    /// See [`Store::idempotency_begin`].
    pub async fn idempotency_begin(
        &self,
        record: &IdempotencyRecord,
        now: DateTime<Utc>,
    ) -> Result<IdempotencyBegin, StoreError> {
        let record = record.clone();
        self.call("idempotency_begin", move |s| {
            s.idempotency_begin(&record, now)
        })
        .await
    }

    /// See [`Store::idempotency_get`].
    pub async fn idempotency_get(
        &self,
        tenant: &str,
        path: &str,
        key: &str,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        let (tenant, path, key) = (tenant.to_string(), path.to_string(), key.to_string());
        self.call("idempotency_get", move |s| {
            s.idempotency_get(&tenant, &path, &key)
        })
        .await
    }

    /// See [`Store::idempotency_finish`].
    pub async fn idempotency_finish(
        &self,
        tenant: &str,
        path: &str,
        key: &str,
        status: u16,
        body: &[u8],
    ) -> Result<(), StoreError> {
        let (tenant, path, key, body) = (
            tenant.to_string(),
            path.to_string(),
            key.to_string(),
            body.to_vec(),
        );
        self.call("idempotency_finish", move |s| {
            s.idempotency_finish(&tenant, &path, &key, status, &body)
        })
        .await
    }

    /// See [`Store::idempotency_forget`].
    pub async fn idempotency_forget(
        &self,
        tenant: &str,
        path: &str,
        key: &str,
    ) -> Result<(), StoreError> {
        let (tenant, path, key) = (tenant.to_string(), path.to_string(), key.to_string());
        self.call("idempotency_forget", move |s| {
            s.idempotency_forget(&tenant, &path, &key)
        })
        .await
    }

    /// See [`Store::idempotency_renew`].
    pub async fn idempotency_renew(
        &self,
        owner: Uuid,
        until: DateTime<Utc>,
    ) -> Result<usize, StoreError> {
        self.call("idempotency_renew", move |s| {
            s.idempotency_renew(owner, until)
        })
        .await
    }

    /// See [`Store::idempotency_abandon_others`].
    pub async fn idempotency_abandon_others(&self, owner: Uuid) -> Result<usize, StoreError> {
        self.call("idempotency_abandon_others", move |s| {
            s.idempotency_abandon_others(owner)
        })
        .await
    }

    /// See [`Store::idempotency_expire`].
    pub async fn idempotency_expire(&self, now: DateTime<Utc>) -> Result<usize, StoreError> {
        self.call("idempotency_expire", move |s| s.idempotency_expire(now))
            .await
    }

    /// See [`Store::register_node`].
    pub async fn register_node(
        &self,
        node: &NodeRegistration,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> Result<NodeRecord, StoreError> {
        let node = node.clone();
        self.call("register_node", move |s| {
            s.register_node(&node, now, lease_until)
        })
        .await
    }

    /// See [`Store::heartbeat_node`].
    pub async fn heartbeat_node(
        &self,
        id: &str,
        epoch: u64,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> Result<NodeRecord, StoreError> {
        let id = id.to_string();
        self.call("heartbeat_node", move |s| {
            s.heartbeat_node(&id, epoch, now, lease_until)
        })
        .await
    }

    /// See [`Store::list_nodes`].
    pub async fn list_nodes(&self) -> Result<Vec<NodeRecord>, StoreError> {
        self.call("list_nodes", |s| s.list_nodes()).await
    }

    /// See [`Store::set_node_draining`].
    pub async fn set_node_draining(
        &self,
        id: &str,
        draining: bool,
    ) -> Result<NodeRecord, StoreError> {
        let id = id.to_string();
        self.call("set_node_draining", move |s| {
            s.set_node_draining(&id, draining)
        })
        .await
    }

    /// See [`Store::fail_over_node`].
    pub async fn fail_over_node(
        &self,
        id: &str,
        epoch: u64,
        now: DateTime<Utc>,
    ) -> Result<Option<crate::FailOver>, StoreError> {
        let id = id.to_string();
        self.call("fail_over_node", move |s| s.fail_over_node(&id, epoch, now))
            .await
    }

    /// See [`Store::adopt_unowned_sandboxes`].
    pub async fn adopt_unowned_sandboxes(&self, node_id: &str) -> Result<usize, StoreError> {
        let node_id = node_id.to_string();
        self.call("adopt_unowned_sandboxes", move |s| {
            s.adopt_unowned_sandboxes(&node_id)
        })
        .await
    }

    /// See [`Store::node_usage`].
    pub async fn node_usage(&self) -> Result<Vec<crate::NodeUsage>, StoreError> {
        self.call("node_usage", |s| s.node_usage()).await
    }
    /// See [`Store::create_e2b_record`].
    pub async fn create_e2b_record(&self, record: &E2bRecord) -> Result<bool, StoreError> {
        let record = record.clone();
        self.call("create_e2b_record", move |s| s.create_e2b_record(&record))
            .await
    }

    /// See [`Store::get_e2b_record`].
    pub async fn get_e2b_record(&self, id: Uuid) -> Result<Option<E2bRecord>, StoreError> {
        self.call("get_e2b_record", move |s| s.get_e2b_record(id))
            .await
    }

    /// See [`Store::update_e2b_record`]: on success `record` carries the row's new generation.
    pub async fn update_e2b_record(&self, record: &mut E2bRecord) -> Result<(), StoreError> {
        let mut copy = record.clone();
        let copy = self
            .call("update_e2b_record", move |s| {
                s.update_e2b_record(&mut copy).map(|()| copy)
            })
            .await?;
        *record = copy;
        Ok(())
    }

    /// See [`Store::list_e2b_records`].
    pub async fn list_e2b_records(
        &self,
        workspace: Option<&str>,
        metadata: &BTreeMap<String, String>,
    ) -> Result<Vec<E2bRecord>, StoreError> {
        let (workspace, metadata) = (workspace.map(str::to_string), metadata.clone());
        self.call("list_e2b_records", move |s| {
            s.list_e2b_records(workspace.as_deref(), &metadata)
        })
        .await
    }

    /// See [`Store::e2b_records_due`].
    pub async fn e2b_records_due(
        &self,
        node_id: &str,
        now: DateTime<Utc>,
    ) -> Result<Vec<E2bRecord>, StoreError> {
        let node_id = node_id.to_string();
        self.call("e2b_records_due", move |s| s.e2b_records_due(&node_id, now))
            .await
    }

    /// See [`Store::delete_e2b_record`].
    pub async fn delete_e2b_record(&self, id: Uuid) -> Result<bool, StoreError> {
        self.call("delete_e2b_record", move |s| s.delete_e2b_record(id))
            .await
    }

    /// See [`Store::delete_ended_e2b_records`].
    pub async fn delete_ended_e2b_records(&self) -> Result<usize, StoreError> {
        self.call("delete_ended_e2b_records", |s| s.delete_ended_e2b_records())
            .await
    }

    /// See [`Store::put_preview`].
    pub async fn put_preview(&self, record: &PreviewRecord) -> Result<(), StoreError> {
        let record = record.clone();
        self.run(move |s| s.put_preview(&record)).await
    }

    /// See [`Store::get_preview`].
    pub async fn get_preview(&self, id: Uuid) -> Result<Option<PreviewRecord>, StoreError> {
        self.run(move |s| s.get_preview(id)).await
    }

    /// See [`Store::delete_ended_previews`].
    pub async fn delete_ended_previews(&self) -> Result<usize, StoreError> {
        self.run(|s| s.delete_ended_previews()).await
    }

    /// See [`Store::delete_preview`].
    pub async fn delete_preview(&self, id: Uuid) -> Result<bool, StoreError> {
        self.run(move |s| s.delete_preview(id)).await
    }

    /// See [`Store::insert_volume`].
    pub async fn insert_volume(&self, record: &crate::VolumeRecord) -> Result<bool, StoreError> {
        let record = record.clone();
        self.run(move |s| s.insert_volume(&record)).await
    }

    /// See [`Store::get_volume`].
    pub async fn get_volume(&self, id: Uuid) -> Result<Option<crate::VolumeRecord>, StoreError> {
        self.run(move |s| s.get_volume(id)).await
    }

    /// See [`Store::volume_named`].
    pub async fn volume_named(
        &self,
        workspace: &str,
        name: &str,
    ) -> Result<Option<crate::VolumeRecord>, StoreError> {
        let (workspace, name) = (workspace.to_string(), name.to_string());
        self.run(move |s| s.volume_named(&workspace, &name)).await
    }

    /// See [`Store::list_volumes`].
    pub async fn list_volumes(
        &self,
        workspace: &str,
    ) -> Result<Vec<crate::VolumeRecord>, StoreError> {
        let workspace = workspace.to_string();
        self.run(move |s| s.list_volumes(Some(&workspace))).await
    }

    /// See [`Store::delete_volume`].
    pub async fn delete_volume(&self, id: Uuid) -> Result<bool, StoreError> {
        self.run(move |s| s.delete_volume(id)).await
    }

    /// See [`Store::put_volume_mounts`].
    pub async fn put_volume_mounts(
        &self,
        mounts: Vec<crate::VolumeMountRecord>,
    ) -> Result<(), StoreError> {
        self.run(move |s| s.put_volume_mounts(&mounts)).await
    }

    /// See [`Store::sandbox_mounts`].
    pub async fn sandbox_mounts(
        &self,
        sandbox_id: Uuid,
    ) -> Result<Vec<crate::VolumeMountRecord>, StoreError> {
        self.run(move |s| s.sandbox_mounts(sandbox_id)).await
    }

    /// See [`Store::volume_mounts`].
    pub async fn volume_mounts(
        &self,
        volume_id: Uuid,
    ) -> Result<Vec<crate::VolumeMountRecord>, StoreError> {
        self.run(move |s| s.volume_mounts(volume_id)).await
    }

    /// See [`Store::put_image_build`].
    pub async fn put_image_build(
        &self,
        record: &crate::ImageBuildRecord,
    ) -> Result<(), StoreError> {
        let record = record.clone();
        self.run(move |s| s.put_image_build(&record)).await
    }

    /// See [`Store::get_image_build`].
    pub async fn get_image_build(
        &self,
        workspace: &str,
        cache_key: &str,
    ) -> Result<Option<crate::ImageBuildRecord>, StoreError> {
        let (w, k) = (workspace.to_string(), cache_key.to_string());
        self.run(move |s| s.get_image_build(&w, &k)).await
    }

    /// See [`Store::put_image`].
    pub async fn put_image(
        &self,
        record: &crate::ImageRecord,
    ) -> Result<Option<crate::ImageRecord>, StoreError> {
        let record = record.clone();
        self.run(move |s| s.put_image(&record)).await
    }

    /// See [`Store::get_image`].
    pub async fn get_image(
        &self,
        workspace: &str,
        name: &str,
        tag: &str,
    ) -> Result<Option<crate::ImageRecord>, StoreError> {
        let (w, n, t) = (workspace.to_string(), name.to_string(), tag.to_string());
        self.run(move |s| s.get_image(&w, &n, &t)).await
    }

    /// See [`Store::list_images`].
    pub async fn list_images(
        &self,
        workspace: Option<&str>,
    ) -> Result<Vec<crate::ImageRecord>, StoreError> {
        let workspace = workspace.map(str::to_string);
        self.run(move |s| s.list_images(workspace.as_deref())).await
    }

    /// See [`Store::images_with_digest`].
    pub async fn images_with_digest(
        &self,
        digest: &str,
    ) -> Result<Vec<crate::ImageRecord>, StoreError> {
        let digest = digest.to_string();
        self.run(move |s| s.images_with_digest(&digest)).await
    }

    /// See [`Store::delete_image`].
    pub async fn delete_image(
        &self,
        workspace: &str,
        name: &str,
        tag: &str,
    ) -> Result<bool, StoreError> {
        let (w, n, t) = (workspace.to_string(), name.to_string(), tag.to_string());
        self.run(move |s| s.delete_image(&w, &n, &t)).await
    }

    /// See [`Store::create_template`].
    pub async fn create_template(
        &self,
        record: &crate::TemplateRecord,
    ) -> Result<bool, StoreError> {
        let record = record.clone();
        self.run(move |s| s.create_template(&record)).await
    }

    /// See [`Store::get_template`].
    pub async fn get_template(
        &self,
        workspace: &str,
        name: &str,
    ) -> Result<Option<crate::TemplateRecord>, StoreError> {
        let (w, n) = (workspace.to_string(), name.to_string());
        self.run(move |s| s.get_template(&w, &n)).await
    }

    /// See [`Store::list_templates`].
    pub async fn list_templates(
        &self,
        workspace: Option<&str>,
    ) -> Result<Vec<crate::TemplateRecord>, StoreError> {
        let workspace = workspace.map(str::to_string);
        self.run(move |s| s.list_templates(workspace.as_deref()))
            .await
    }

    /// See [`Store::update_template`].
    pub async fn update_template(
        &self,
        record: &crate::TemplateRecord,
    ) -> Result<bool, StoreError> {
        let record = record.clone();
        self.run(move |s| s.update_template(&record)).await
    }

    /// See [`Store::delete_template`].
    pub async fn delete_template(
        &self,
        workspace: &str,
        name: &str,
        generation: i64,
    ) -> Result<bool, StoreError> {
        let (w, n) = (workspace.to_string(), name.to_string());
        self.run(move |s| s.delete_template(&w, &n, generation))
            .await
    }

    /// See [`Store::set_sandbox_template`].
    pub async fn set_sandbox_template(
        &self,
        sandbox_id: Uuid,
        template: &str,
    ) -> Result<(), StoreError> {
        let t = template.to_string();
        self.run(move |s| s.set_sandbox_template(sandbox_id, &t))
            .await
    }

    /// See [`Store::sandbox_template`].
    pub async fn sandbox_template(&self, sandbox_id: Uuid) -> Result<Option<String>, StoreError> {
        self.run(move |s| s.sandbox_template(sandbox_id)).await
    }
}
