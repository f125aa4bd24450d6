//! E2B semantics on top of the lifecycle service: templates, metadata, the
//! E2B timeout (a sandbox lives until its end time unless extended; then it is
//! destroyed, or paused with auto-pause), connect (resume), and snapshots as
//! templates. Every sandbox here is an ordinary sbx sandbox, visible through
//! `/v1` and `/v2` too; the E2B fields live in the store ([`records`]), so
//! that any node of a cluster answers with them. Requests about a sandbox that
//! runs on another node are forwarded there (`api::forward`); the timeout
//! sweep of each node ends only its own sandboxes, each expiry claimed by a
//! compare-and-set of the record first, so that it acts once.

pub mod records;
mod snapshots;
mod timeouts;
mod types;

pub use types::{CreateSpec, E2bError, E2bSandbox, E2bState, ListFilter, Result};

use super::lifecycle::format_cursor;
use super::{Sandbox, Service, ServiceError, Snapshot};
use chrono::{Duration as ChronoDuration, Utc};
use records::E2bRecord;
use sbx_api_types::{CreateSandboxRequest, SandboxStatus};
use sbx_store::{AsyncStore, SandboxCursor, StoreError};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use uuid::Uuid;

/// The envd version announced to the SDKs: every feature gate of the SDK open (contract §2.3).
pub const ENVD_VERSION: &str = "0.6.4";
/// The `clientID` field (deprecated in E2B; any string).
pub const CLIENT_ID: &str = "sbx";
/// Timeout of a sandbox created or resumed without one, seconds (E2B's default).
pub const DEFAULT_TIMEOUT_SECS: u64 = 300;
/// Where a create's template comes from.
enum TemplateSource {
    /// The default image.
    Default,
    /// An image of the tenant, by reference.
    Image(String),
    /// A ready snapshot of the tenant.
    Snapshot(Snapshot),
    /// A template of the tenant (`/v1/templates`), by name: a clone of its snapshot.
    Template(String),
}

/// Template ids that name the default image.
pub const DEFAULT_TEMPLATES: &[&str] = &["base"];
/// vCPUs and MiB of an E2B sandbox: E2B's default template has 2 vCPUs, and
/// 2/2048 is the sbx shape with 2 vCPUs.
pub const DEFAULT_SHAPE: (u64, u64) = (2, 2048);

/// The shape of a fresh E2B sandbox on a node offering `allowed` (`--shapes`):
/// [`DEFAULT_SHAPE`], or when the node leaves it out the smallest allowed
/// shape with 2 vCPUs, else the smallest allowed shape (E2B's create has no
/// resources field: a template decides them).
pub fn shape_for(allowed: &[(u32, u32)]) -> (u64, u64) {
    let default = (DEFAULT_SHAPE.0 as u32, DEFAULT_SHAPE.1 as u32);
    let chosen = if allowed.contains(&default) {
        Some(default)
    } else {
        allowed
            .iter()
            .copied()
            .find(|(c, _)| *c == default.0)
            .or_else(|| allowed.first().copied())
    };
    let (vcpu, memory_mb) = chosen.unwrap_or(default);
    (u64::from(vcpu), u64::from(memory_mb))
}
/// Most metadata entries per sandbox.
pub const MAX_METADATA: usize = 64;
/// Longest metadata key and value, bytes.
const MAX_METADATA_KEY: usize = 256;
const MAX_METADATA_VALUE: usize = 2048;
/// How long create and connect wait for a boot, a resume or a snapshot to settle.
const SETTLE_WAIT: Duration = Duration::from_secs(120);
/// Page size of the scans behind filtered lists.
const SCAN_PAGE: u32 = 250;
/// Every how many sweeps the records of ended sandboxes are deleted.
const FORGET_EVERY: u64 = 10;

/// The E2B face of the service.
pub struct E2b {
    svc: Arc<Service>,
    /// Sandboxes whose timeout is being acted on (one task each).
    ending: Mutex<HashSet<Uuid>>,
}

impl E2b {
    /// Imports the record files of an earlier sbxd (`DATA_DIR/e2b/`) into the
    /// store once, and starts the timeout sweep (when called inside a tokio
    /// runtime; it stops when the `E2b` is dropped).
    pub fn start(svc: Arc<Service>) -> Result<Arc<E2b>, records::ImportError> {
        let imported =
            records::import_files(svc.store.blocking().as_ref(), &svc.config().data_dir)?;
        if let Some(done) = imported {
            tracing::info!(
                written = done.written,
                present = done.present,
                skipped = done.skipped,
                "imported the E2B record files of an earlier sbxd into the store"
            );
        }
        let e2b = Arc::new(E2b {
            svc,
            ending: Mutex::new(HashSet::new()),
        });
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let weak: Weak<E2b> = Arc::downgrade(&e2b);
            handle.spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_secs(1));
                let mut n: u64 = 0;
                loop {
                    tick.tick().await;
                    let Some(e2b) = weak.upgrade() else { return };
                    e2b.enforce_timeouts().await;
                    n += 1;
                    if n.is_multiple_of(FORGET_EVERY) {
                        e2b.forget_ended().await;
                    }
                }
            });
        }
        Ok(e2b)
    }

    fn store(&self) -> &AsyncStore {
        &self.svc.store
    }

    /// The lifecycle service (for authentication).
    pub fn service(&self) -> &Arc<Service> {
        &self.svc
    }

    /// The E2B record of a sandbox, if it has one (envd's access token lives there).
    pub async fn envd_record(&self, id: Uuid) -> Result<Option<E2bRecord>, ServiceError> {
        Ok(self.store().get_e2b_record(id).await?)
    }

    /// Tenant, id and envd access token of every E2B sandbox of the cluster
    /// (a signed `/files` URL without a sandbox id names its sandbox only
    /// through the token that signed it).
    pub async fn envd_tokens(&self) -> Result<Vec<(String, Uuid, String)>, ServiceError> {
        Ok(self
            .store()
            .list_e2b_records(None, &BTreeMap::new())
            .await?
            .into_iter()
            .map(|r| (r.workspace, r.sandbox_id, r.envd_access_token))
            .collect())
    }

    /// `POST /v2/sandboxes`: boots a sandbox from a template (the default image) or a
    /// snapshot id, and waits until it runs.
    pub async fn create(&self, workspace: &str, spec: CreateSpec) -> Result<E2bSandbox> {
        let template = if spec.template_id.is_empty() {
            DEFAULT_TEMPLATES[0].to_string()
        } else {
            spec.template_id.clone()
        };
        let timeout = self.check_timeout(spec.timeout_secs.unwrap_or(DEFAULT_TIMEOUT_SECS))?;
        check_metadata(&spec.metadata)?;
        let name = format!("e2b-{}", Uuid::new_v4().simple());
        let allow_internet_access = spec
            .network
            .as_ref()
            .is_none_or(|p| p.mode != sbx_api_types::NetworkMode::None);
        let fresh = |name: String| {
            let (vcpu, memory_mb) = shape_for(&self.svc.config().shapes);
            CreateSandboxRequest {
                name: Some(name),
                vcpu: Some(vcpu),
                memory_mb: Some(memory_mb),
                environment: (!spec.env_vars.is_empty()).then(|| spec.env_vars.clone()),
                ..CreateSandboxRequest::default()
            }
        };
        let outcome = match self.template_source(workspace, &template).await? {
            TemplateSource::Default => {
                self.svc
                    .create_with_network(workspace, fresh(name), spec.network.clone())
                    .await?
            }
            TemplateSource::Image(image) => {
                self.svc
                    .create_v1(
                        workspace,
                        fresh(name),
                        spec.network.clone(),
                        None,
                        Vec::new(),
                        Some(image),
                        None,
                    )
                    .await?
            }
            TemplateSource::Template(t) => {
                if !spec.env_vars.is_empty() || spec.network.is_some() {
                    return Err(E2bError::BadRequest(
                        "a sandbox created from a template keeps the template's envVars and network; do not send them".into(),
                    ));
                }
                let req = CreateSandboxRequest {
                    name: Some(name),
                    ..CreateSandboxRequest::default()
                };
                self.svc
                    .create_v1(workspace, req, None, None, Vec::new(), None, Some(t))
                    .await?
            }
            TemplateSource::Snapshot(snapshot) => {
                if !spec.env_vars.is_empty() || spec.network.is_some() {
                    return Err(E2bError::BadRequest(
                        "a sandbox created from a snapshot keeps the snapshot's envVars and network; do not send them".into(),
                    ));
                }
                let req = CreateSandboxRequest {
                    name: Some(name),
                    snapshot_id: Some(snapshot.id),
                    ..CreateSandboxRequest::default()
                };
                self.svc.create_with_network(workspace, req, None).await?
            }
        };
        let created = match outcome {
            super::CreateOutcome::Created(s) | super::CreateOutcome::Existing(s) => s,
        };
        let record = E2bRecord {
            sandbox_id: created.id,
            workspace: workspace.to_string(),
            template_id: template,
            metadata: spec.metadata,
            end_at: Utc::now() + secs(timeout),
            auto_pause: spec.auto_pause,
            envd_access_token: new_token(),
            allow_internet_access,
            allow_public_traffic: spec.allow_public_traffic,
            traffic_access_token: (!spec.allow_public_traffic).then(new_token),
            generation: 0,
        };
        // Written before the wait, so that the timeout applies even if the caller goes away.
        self.store().create_e2b_record(&record).await?;
        let sandbox = self.settle(workspace, created.id).await?;
        if sandbox.status != SandboxStatus::Running {
            return Err(E2bError::Service(ServiceError::StartFailed(
                sandbox
                    .error
                    .unwrap_or_else(|| format!("the sandbox is {}", sandbox.status.as_str())),
            )));
        }
        Ok(E2bSandbox {
            sandbox,
            record,
            state: E2bState::Running,
            domain: self.svc.config().e2b_domain.clone(),
        })
    }

    /// `POST /v2/sandboxes/{id}/connect`: resumes a paused sandbox (true: it was
    /// paused) or, for a running one, extends its end time if `timeout` is longer.
    pub async fn connect(
        &self,
        workspace: &str,
        id: Uuid,
        timeout_secs: Option<u64>,
    ) -> Result<(E2bSandbox, bool)> {
        let timeout = timeout_secs.map(|t| self.check_timeout(t)).transpose()?;
        // Each pass reads the record and writes it back by compare-and-set; a
        // conflict (a timeout set meanwhile, or the sweep claiming the expiry)
        // means another writer went first: read again, as if this call came after.
        let (record, resumed) = loop {
            let sandbox = self.settle(workspace, id).await?;
            let state = E2bState::of(sandbox.status).ok_or_else(|| not_found(id))?;
            let mut record = self.stored_record(&sandbox, workspace).await?;
            match state {
                E2bState::Paused => {
                    // The new end time first: once resumed, the sweep must not
                    // find the old one (past) and end the sandbox again.
                    record.end_at = Utc::now() + secs(timeout.unwrap_or(DEFAULT_TIMEOUT_SECS));
                    if !self.write_record(&mut record).await? {
                        continue;
                    }
                    self.svc.resume(workspace, id).await?;
                    break (record, true);
                }
                E2bState::Running => {
                    if let Some(t) = timeout {
                        record.end_at = record.end_at.max(Utc::now() + secs(t));
                        if !self.write_record(&mut record).await? {
                            continue;
                        }
                    }
                    break (record, false);
                }
            }
        };
        let sandbox = self.svc.get(workspace, id).await?;
        let state = E2bState::of(sandbox.status).ok_or_else(|| not_found(id))?;
        Ok((
            E2bSandbox {
                sandbox,
                record,
                state,
                domain: self.svc.config().e2b_domain.clone(),
            },
            resumed,
        ))
    }

    /// `GET /sandboxes/{id}`.
    pub async fn info(&self, workspace: &str, id: Uuid) -> Result<E2bSandbox> {
        let sandbox = self
            .svc
            .get(workspace, id)
            .await
            .map_err(not_found_as(id))?;
        let stored = self.store().get_e2b_record(id).await?;
        self.view(sandbox, workspace, stored)
            .ok_or_else(|| not_found(id))
    }

    /// `PUT /sandboxes/{id}/network`: a new egress policy for a running E2B
    /// sandbox (`None`: the server's default), for its next connections.
    pub async fn update_network(
        &self,
        workspace: &str,
        id: Uuid,
        policy: Option<sbx_api_types::NetworkPolicy>,
    ) -> Result<()> {
        self.info(workspace, id).await?;
        let policy = policy.unwrap_or_else(|| self.svc.default_network_policy());
        self.svc
            .update_network(workspace, id, policy)
            .await
            .map_err(not_found_as(id))?;
        Ok(())
    }

    /// `GET /v2/sandboxes`: running and paused sandboxes of the tenant, newest
    /// first, filtered; the token is the cursor after the last item returned.
    pub async fn list(
        &self,
        workspace: &str,
        filter: &ListFilter,
        limit: u32,
        token: Option<&str>,
    ) -> Result<(Vec<E2bSandbox>, Option<String>)> {
        let mut out = Vec::new();
        let mut cursor = token.map(str::to_string);
        // The tenant's records holding the metadata filter, read once: a sandbox
        // without one has no metadata (and E2B defaults).
        let mut records: HashMap<Uuid, E2bRecord> = self
            .store()
            .list_e2b_records(Some(workspace), &filter.metadata)
            .await?
            .into_iter()
            .map(|r| (r.sandbox_id, r))
            .collect();
        loop {
            let page = self
                .svc
                .list(workspace, SCAN_PAGE, cursor.as_deref())
                .await
                .map_err(bad_token)?;
            for sandbox in page.items {
                let stored = records.remove(&sandbox.id);
                if stored.is_none() && !filter.metadata.is_empty() {
                    continue;
                }
                let Some(view) = self.view(sandbox, workspace, stored) else {
                    continue;
                };
                if !filter.matches(&view) {
                    continue;
                }
                let after = format_cursor(&SandboxCursor {
                    created_at_ms: view.sandbox.created_at.timestamp_millis(),
                    id: view.sandbox.id,
                });
                out.push(view);
                if out.len() >= limit as usize {
                    return Ok((out, Some(after)));
                }
            }
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => return Ok((out, None)),
            }
        }
    }

    /// `DELETE /sandboxes/{id}`: destroys the sandbox (404 when it is already gone).
    pub async fn kill(&self, workspace: &str, id: Uuid) -> Result<()> {
        let sandbox = self
            .svc
            .get(workspace, id)
            .await
            .map_err(not_found_as(id))?;
        if E2bState::of(sandbox.status).is_none() {
            return Err(not_found(id));
        }
        self.svc.destroy(workspace, id).await?;
        self.store().delete_e2b_record(id).await?;
        Ok(())
    }

    /// `POST /sandboxes/{id}/timeout`: the sandbox now ends `timeout` seconds from now.
    pub async fn set_timeout(&self, workspace: &str, id: Uuid, timeout_secs: u64) -> Result<()> {
        let timeout = self.check_timeout(timeout_secs)?;
        loop {
            let view = self.info(workspace, id).await?;
            let mut record = self.stored_record(&view.sandbox, workspace).await?;
            record.end_at = Utc::now() + secs(timeout);
            // Lost to another writer: read again (the last timeout set wins).
            if self.write_record(&mut record).await? {
                return Ok(());
            }
        }
    }

    /// `POST /sandboxes/{id}/pause`: `Conflict` when it is paused already.
    pub async fn pause(&self, workspace: &str, id: Uuid) -> Result<()> {
        let view = self.info(workspace, id).await?;
        if view.state == E2bState::Paused {
            return Err(E2bError::Conflict(format!(
                "sandbox {id} is already paused"
            )));
        }
        // Records the sandbox's E2B fields (a `/v2` sandbox gets its token now), so that
        // a later connect answers the same token.
        self.stored_record(&view.sandbox, workspace).await?;
        self.svc
            .pause(workspace, id)
            .await
            .map_err(conflict_on_state)?;
        Ok(())
    }

    /// `GET /sandboxes/{id}/metrics`: the sandbox (for its shape) and the usage
    /// samples this node took of it (`service::usage`) at `start..=end` (unix
    /// seconds, either optional), oldest first. A paused sandbox has the
    /// samples of before its pause; none right after a start.
    pub async fn metrics(
        &self,
        workspace: &str,
        id: Uuid,
        start: Option<i64>,
        end: Option<i64>,
    ) -> Result<(Sandbox, Vec<sbx_node::usage::Sample>)> {
        if let (Some(s), Some(e)) = (start, end) {
            if s > e {
                return Err(E2bError::BadRequest(format!(
                    "start ({s}) is after end ({e})"
                )));
            }
        }
        let view = self.info(workspace, id).await?;
        let within = |ms: u64| {
            let secs = (ms / 1000) as i64;
            start.is_none_or(|s| secs >= s) && end.is_none_or(|e| secs <= e)
        };
        let samples = self
            .svc
            .usage_samples(id)
            .into_iter()
            .filter(|s| within(s.unix_ms))
            .collect();
        Ok((view.sandbox, samples))
    }

    /// Writes a record by compare-and-set: false (nothing written) when
    /// another writer changed it since it was read.
    async fn write_record(&self, record: &mut E2bRecord) -> Result<bool> {
        match self.store().update_e2b_record(record).await {
            Ok(()) => Ok(true),
            Err(StoreError::Conflict(_)) => Ok(false),
            Err(StoreError::NotFound) => Err(not_found(record.sandbox_id)),
            Err(e) => Err(e.into()),
        }
    }

    /// The stored record of a sandbox; one with the defaults of
    /// [`E2b::record_of`] is stored first if it has none (a `/v1` or `/v2`
    /// sandbox gets its E2B fields, and its envd token, once).
    async fn stored_record(&self, sandbox: &Sandbox, workspace: &str) -> Result<E2bRecord> {
        if let Some(r) = self.store().get_e2b_record(sandbox.id).await? {
            return Ok(r);
        }
        self.store()
            .create_e2b_record(&self.record_of(sandbox, workspace, None))
            .await?;
        self.store()
            .get_e2b_record(sandbox.id)
            .await?
            .ok_or_else(|| not_found(sandbox.id))
    }

    /// A sandbox with its E2B fields (`stored`, or defaults); `None` when it is gone or going.
    fn view(
        &self,
        sandbox: Sandbox,
        workspace: &str,
        stored: Option<E2bRecord>,
    ) -> Option<E2bSandbox> {
        let state = E2bState::of(sandbox.status)?;
        let record = self.record_of(&sandbox, workspace, stored);
        Some(E2bSandbox {
            sandbox,
            record,
            state,
            domain: self.svc.config().e2b_domain.clone(),
        })
    }

    /// The stored E2B fields, or the defaults of a sandbox made through another API:
    /// template `base`, no metadata, ending when its active runtime runs out.
    fn record_of(
        &self,
        sandbox: &Sandbox,
        workspace: &str,
        stored: Option<E2bRecord>,
    ) -> E2bRecord {
        if let Some(r) = stored {
            return r;
        }
        let limit = self.svc.config().limits.active_runtime.as_millis() as i64;
        let left = (limit - sandbox.active_runtime_ms as i64).max(0);
        E2bRecord {
            sandbox_id: sandbox.id,
            workspace: workspace.to_string(),
            template_id: match sandbox.snapshot_id {
                Some(s) => s.to_string(),
                None => DEFAULT_TEMPLATES[0].to_string(),
            },
            metadata: BTreeMap::new(),
            end_at: Utc::now() + ChronoDuration::milliseconds(left),
            auto_pause: false,
            envd_access_token: new_token(),
            allow_internet_access: sandbox.network.mode != sbx_api_types::NetworkMode::None,
            // Not made through E2B: its preview URLs are not public unless
            // its owner said so, so they need the token this answer gives.
            allow_public_traffic: false,
            traffic_access_token: Some(new_token()),
            generation: 0,
        }
    }

    /// Waits until the sandbox is no longer starting, pausing or resuming.
    async fn settle(&self, workspace: &str, id: Uuid) -> Result<Sandbox> {
        let deadline = tokio::time::Instant::now() + SETTLE_WAIT;
        loop {
            let sandbox = self
                .svc
                .get(workspace, id)
                .await
                .map_err(not_found_as(id))?;
            let moving = matches!(
                sandbox.status,
                SandboxStatus::Pending
                    | SandboxStatus::Starting
                    | SandboxStatus::Pausing
                    | SandboxStatus::Resuming
            );
            if !moving || tokio::time::Instant::now() >= deadline {
                return Ok(sandbox);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// What a template id names, in this order: `base` and `--e2b-template`
    /// aliases (the default image or an image of the tenant), a snapshot of
    /// the tenant (what `createSnapshot` answered), a template of the tenant
    /// by name (`/v1/templates`: a clone of its snapshot), an image of the
    /// tenant by its reference (`name:tag`, `name`, `sha256:…`); else `404`.
    async fn template_source(&self, workspace: &str, template: &str) -> Result<TemplateSource> {
        if DEFAULT_TEMPLATES.contains(&template) {
            return Ok(TemplateSource::Default);
        }
        if let Some(image) = self.svc.config().e2b_templates.get(template) {
            return Ok(match image.as_str() {
                "default" => TemplateSource::Default,
                other => TemplateSource::Image(other.to_string()),
            });
        }
        if Uuid::parse_str(template).is_ok() {
            return Ok(TemplateSource::Snapshot(
                self.template_snapshot(workspace, template).await?,
            ));
        }
        if self.svc.has_template(workspace, template).await? {
            return Ok(TemplateSource::Template(template.to_string()));
        }
        if self.svc.has_image(workspace, template).await? {
            return Ok(TemplateSource::Image(template.to_string()));
        }
        Err(not_found_template(template))
    }

    /// A timeout must be 1 s up to the active runtime limit (which ends a sandbox anyway).
    fn check_timeout(&self, secs: u64) -> Result<u64> {
        let max = self.svc.config().limits.active_runtime.as_secs();
        if secs == 0 || secs > max {
            return Err(E2bError::BadRequest(format!(
                "timeout: must be 1 to {max} seconds (sbxd's --active-runtime-secs)"
            )));
        }
        Ok(secs)
    }
}

/// Checks metadata sizes (the store keeps them in the E2B record).
fn check_metadata(metadata: &BTreeMap<String, String>) -> Result<()> {
    if metadata.len() > MAX_METADATA {
        return Err(E2bError::BadRequest(format!(
            "metadata: at most {MAX_METADATA} entries"
        )));
    }
    for (k, v) in metadata {
        if k.is_empty() || k.len() > MAX_METADATA_KEY || v.len() > MAX_METADATA_VALUE {
            return Err(E2bError::BadRequest(format!(
                "metadata: keys must be 1-{MAX_METADATA_KEY} bytes and values at most {MAX_METADATA_VALUE} bytes"
            )));
        }
    }
    Ok(())
}

fn secs(s: u64) -> ChronoDuration {
    ChronoDuration::seconds(s as i64)
}

/// 64 random hex digits (two v4 UUIDs: 244 random bits).
fn new_token() -> String {
    format!("{}{}", Uuid::new_v4().simple(), Uuid::new_v4().simple())
}

fn not_found(id: Uuid) -> E2bError {
    E2bError::NotFound(format!("sandbox {id} not found"))
}

fn not_found_template(template: &str) -> E2bError {
    E2bError::NotFound(format!("template {template:?} not found"))
}

/// Maps the service's not-found to E2B's message for this sandbox.
fn not_found_as(id: Uuid) -> impl Fn(ServiceError) -> E2bError {
    move |e| match e {
        ServiceError::SandboxNotFound => not_found(id),
        other => other.into(),
    }
}

/// A page token the service could not read is the caller's mistake.
fn bad_token(e: ServiceError) -> E2bError {
    match e {
        ServiceError::Invalid(_) => {
            E2bError::BadRequest("nextToken: not a token this server issued".into())
        }
        other => other.into(),
    }
}

/// A pause refused for the sandbox's state (starting, being snapshotted) is a conflict.
fn conflict_on_state(e: ServiceError) -> E2bError {
    match e {
        ServiceError::WrongState { .. } | ServiceError::Conflict(_) => {
            E2bError::Conflict(e.to_string())
        }
        other => other.into(),
    }
}
