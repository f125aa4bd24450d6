//! Custom images (`/v1/images`): imports of OCI layouts and `docker save`
//! tarballs, images made from a running sandbox, and what a create needs to
//! boot one. An image is a read-only root filesystem on this node, named by
//! its content digest (`sbx_node::images`); a tenant's `name:tag` rows point
//! at digests, and another tenant's names are "not found". The root
//! filesystem of a digest goes when no name, active sandbox or live snapshot
//! uses it any more ([`Service::sweep_images`]).
//!
//! With an object store (cluster mode) images travel to any node
//! (`image_remote.rs`); without one they stay on their node, where placement
//! pins the creates that name them.

use super::{Result, Service, ServiceError};
use chrono::Utc;
use futures::{Stream, StreamExt};
use sbx_api_types::images::{ImageRef, DEFAULT_IMAGE};
use sbx_api_types::{
    validate::ValidationError, Image, ImageConfig, ImageFromSandboxRequest, ImageList,
    SandboxStatus, SnapshotStatus,
};
use sbx_node::images::ExtractError;
use sbx_store::ImageRecord;
use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use uuid::Uuid;

/// Largest upload `POST /v1/images` takes.
pub const MAX_IMPORT_BYTES: u64 = 8 * 1024 * 1024 * 1024;
/// Most file data one image may unpack to.
pub const MAX_IMAGE_BYTES: u64 = 16 * 1024 * 1024 * 1024;
/// Guest directories a sandbox's image leaves out (besides its volume mounts).
const FROM_SANDBOX_EXCLUDES: &[&str] = &["proc", "sys", "dev", "tmp", ".sbx"];

/// A create's image, resolved in the caller's tenant.
#[derive(Debug, Clone)]
pub(super) struct ResolvedImage {
    /// What the sandbox row records: `default`, `name:tag@sha256:…` or `sha256:…`.
    pub image_ref: String,
    /// The image's process defaults.
    pub config: ImageConfig,
}

/// What a sandbox's image sets for commands that name no cwd or user.
#[derive(Debug, Clone, Default)]
pub(super) struct ImageDefaults {
    /// `workdir`.
    pub workdir: Option<String>,
    /// `user`.
    pub user: Option<String>,
}

/// The digest a sandbox's or snapshot's `image_ref` names (`None`: the default image).
pub(super) fn digest_of(image_ref: &str) -> Option<&str> {
    let digest = image_ref.rsplit_once('@').map_or(image_ref, |(_, d)| d);
    sbx_api_types::images::is_digest(digest).then_some(digest)
}

impl From<ExtractError> for ServiceError {
    fn from(e: ExtractError) -> Self {
        match e {
            ExtractError::Unsafe { .. } | ExtractError::Malformed(_) => {
                ServiceError::ImageInvalid(e.to_string())
            }
            ExtractError::TooLarge(limit) => ServiceError::ImageTooLarge(limit),
            e if e.is_disk_full() => {
                ServiceError::StorageFull(format!("the data disk is full: image storage: {e}"))
            }
            e => ServiceError::Internal(format!("image storage: {e}")),
        }
    }
}

pub(super) fn view(r: &ImageRecord) -> Image {
    Image {
        name: r.name.clone(),
        tag: r.tag.clone(),
        digest: r.digest.clone(),
        size_bytes: r.size_bytes,
        origin: r.origin.clone(),
        config: serde_json::from_str(&r.config).unwrap_or_default(),
        node_id: r.node_id.clone(),
        created_at: sbx_api_types::format_time(r.created_at),
    }
}

impl Service {
    /// The default image as a list entry (every tenant has it; its digest is
    /// the node's image id, the `sourceImageId` of its snapshots).
    fn default_image_view(&self) -> Image {
        Image {
            name: DEFAULT_IMAGE.into(),
            tag: "latest".into(),
            digest: format!("sha256:{}", self.image_id),
            size_bytes: 0,
            origin: "default".into(),
            config: ImageConfig::default(),
            node_id: self.config.node.id.clone(),
            created_at: sbx_api_types::format_time(chrono::DateTime::UNIX_EPOCH),
        }
    }

    /// A tenant's image row by reference (`default` is not a row).
    pub(super) async fn image_row(
        &self,
        workspace: &str,
        raw: &str,
    ) -> Result<Option<ImageRecord>> {
        let found = match ImageRef::parse(raw)? {
            // The tenant's own default (`POST /v1/images/{ref}/tag` to
            // `default`), else the node's.
            ImageRef::Default => {
                return Ok(self
                    .store
                    .get_image(workspace, DEFAULT_IMAGE, "latest")
                    .await?)
            }
            ImageRef::Named { name, tag } => self.store.get_image(workspace, &name, &tag).await?,
            // The default image's id names the default image.
            ImageRef::Digest(d) if d == format!("sha256:{}", self.image_id) => return Ok(None),
            ImageRef::Digest(d) => self
                .store
                .images_with_digest(&d)
                .await?
                .into_iter()
                .find(|r| r.workspace == workspace),
        };
        found
            .map(Some)
            .ok_or_else(|| ServiceError::ImageNotFound(raw.to_string()))
    }

    /// The node holding the tenant's image `raw` (`None`: the default image,
    /// on every node, or a name the create handler will refuse).
    pub(super) async fn image_node(&self, workspace: &str, raw: &str) -> Result<Option<String>> {
        if self.images_shared() {
            return Ok(None);
        }
        match self.image_row(workspace, raw).await {
            Ok(row) => Ok(row.map(|r| r.node_id)),
            Err(ServiceError::ImageNotFound(_) | ServiceError::Invalid(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Whether the tenant has an image named by `raw` (the default image does
    /// not count; a malformed reference is no image).
    pub(super) async fn has_image(&self, workspace: &str, raw: &str) -> Result<bool> {
        match self.image_row(workspace, raw).await {
            Ok(row) => Ok(row.is_some()),
            Err(ServiceError::ImageNotFound(_) | ServiceError::Invalid(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Resolves a create's `image` in the tenant: unknown (or another
    /// tenant's) is 404, an image on another node 409.
    pub(super) async fn resolve_image(&self, workspace: &str, raw: &str) -> Result<ResolvedImage> {
        match self.image_row(workspace, raw).await? {
            Some(row) => self.resolve_row(raw, row).await,
            None => Ok(ResolvedImage {
                image_ref: self.config.image_ref.clone(),
                config: ImageConfig::default(),
            }),
        }
    }

    /// The image `row` (found for the reference `raw`), on this node.
    pub(super) async fn resolve_row(&self, raw: &str, row: ImageRecord) -> Result<ResolvedImage> {
        if !self.images_shared() && row.node_id != self.config.node.id {
            return Err(ServiceError::Conflict(format!(
                "image {raw:?} lives on node {:?} (images are node-local without an object store); create the sandbox there",
                row.node_id
            )));
        }
        self.image_here(&row.digest).await?;
        let image_ref = match ImageRef::parse(raw)? {
            ImageRef::Digest(d) => d,
            _ => format!("{}:{}@{}", row.name, row.tag, row.digest),
        };
        Ok(ResolvedImage {
            image_ref,
            config: serde_json::from_str(&row.config).unwrap_or_default(),
        })
    }

    /// Like [`Service::rootfs_for`], fetching the image from object storage
    /// when this node lacks it (a clone of a snapshot taken elsewhere).
    pub(super) async fn rootfs_fetched(
        &self,
        image_ref: &str,
    ) -> std::result::Result<Option<PathBuf>, String> {
        match digest_of(image_ref) {
            None => Ok(None),
            Some(d) => self
                .image_here(d)
                .await
                .map(Some)
                .map_err(|e| e.to_string()),
        }
    }

    /// The root filesystem a sandbox or snapshot of `image_ref` boots on
    /// (`None`: the default image); an error names what is missing.
    pub(super) fn rootfs_for(
        &self,
        image_ref: &str,
    ) -> std::result::Result<Option<PathBuf>, String> {
        match digest_of(image_ref) {
            None => Ok(None),
            Some(d) => self
                .images
                .rootfs(d)
                .map(Some)
                .ok_or_else(|| format!("image {image_ref} is not on this node")),
        }
    }

    /// Where commands with no `cwd` run in sandbox `id`: its image's working
    /// directory (`None`: the agent's default, the user's home).
    pub(super) async fn image_workdir(&self, id: Uuid) -> Option<String> {
        self.image_defaults(id).await.workdir
    }

    /// The user commands that name none run as in sandbox `id`: its image's
    /// `user` (`None`: root, as always). A `user:group` gives the user.
    pub(super) async fn image_user(&self, id: Uuid) -> Option<String> {
        self.image_defaults(id)
            .await
            .user
            .map(|u| u.split(':').next().unwrap_or_default().to_string())
            .filter(|u| !u.is_empty() && u != "root" && u != "0")
    }

    /// Sandbox `id`'s image's working directory and user. Images are
    /// immutable, so the answer is kept per sandbox.
    async fn image_defaults(&self, id: Uuid) -> ImageDefaults {
        if let Some(known) = self.workdirs.lock().ok().and_then(|k| k.get(&id).cloned()) {
            return known;
        }
        let Ok(Some(record)) = self.store.get_sandbox(id).await else {
            return ImageDefaults::default();
        };
        let config = digest_of(&record.image_ref).and_then(|d| self.images.config(d));
        let defaults = ImageDefaults {
            workdir: config.as_ref().and_then(|c| c.workdir.clone()),
            user: config.and_then(|c| c.user),
        };
        if let Ok(mut known) = self.workdirs.lock() {
            known.insert(id, defaults.clone());
        }
        defaults
    }

    /// Records a new image row for `name:tag`, within the tenant's quota.
    /// Called under `image_turn`; answers whether the name moved off other
    /// content, which the caller sweeps once the turn is released (the sweep
    /// takes the turn itself).
    pub(super) async fn name_image(
        &self,
        workspace: &str,
        name: String,
        tag: String,
        imported: sbx_node::images::Imported,
        origin: &str,
    ) -> Result<(Image, bool)> {
        // Under `image_turn`: two imports cannot both fit the quota's last bytes.
        self.check_image_quota(workspace, &name, &tag, &imported)
            .await?;
        // Stored for the other nodes before the name exists, so a name never
        // points at content only a lost node had.
        self.publish_image(&imported.digest).await?;
        let record = ImageRecord {
            workspace: workspace.to_string(),
            name,
            tag,
            digest: imported.digest,
            size_bytes: imported.size_bytes,
            origin: origin.to_string(),
            config: serde_json::to_string(&imported.config).unwrap_or_else(|_| "{}".into()),
            node_id: self.config.node.id.clone(),
            created_at: Utc::now(),
        };
        let replaced = self.store.put_image(&record).await?;
        let moved = replaced.is_some_and(|r| r.digest != record.digest);
        if moved {
            self.templates_follow_image(workspace, &record.name, &record.tag);
        }
        Ok((view(&record), moved))
    }

    /// `POST /v1/images?name=&tag=`: spools the uploaded archive (at most
    /// [`MAX_IMPORT_BYTES`]), unpacks it safely and names it.
    pub async fn import_image<S, E>(
        &self,
        workspace: &str,
        name: Option<String>,
        tag: Option<String>,
        mut body: S,
    ) -> Result<Image>
    where
        S: Stream<Item = std::result::Result<bytes::Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        let (name, tag) = new_name(name, tag)?;
        let spool = self.images.spool_path();
        let written: Result<()> = async {
            let mut file = tokio::fs::File::create(&spool)
                .await
                .map_err(|e| ServiceError::Internal(format!("spooling the upload: {e}")))?;
            let mut total = 0u64;
            while let Some(chunk) = body.next().await {
                let chunk = chunk
                    .map_err(|e| ServiceError::BadRequest(format!("reading the upload: {e}")))?;
                total += chunk.len() as u64;
                if total > MAX_IMPORT_BYTES {
                    return Err(ServiceError::ImageTooLarge(MAX_IMPORT_BYTES));
                }
                file.write_all(&chunk).await.map_err(|e| {
                    if sbx_runsc::is_enospc(&e) {
                        ServiceError::StorageFull(format!("the data disk is full: {e}"))
                    } else {
                        ServiceError::Internal(format!("spooling the upload: {e}"))
                    }
                })?;
            }
            if total == 0 {
                return Err(ServiceError::ImageInvalid(
                    "the request has no body; send the image tarball".into(),
                ));
            }
            file.flush()
                .await
                .map_err(|e| ServiceError::Internal(format!("spooling the upload: {e}")))
        }
        .await;
        let named = match written {
            Ok(()) => {
                let (images, path) = (self.images.clone(), spool.clone());
                let _turn = self.image_turn.lock().await;
                let result = tokio::task::spawn_blocking(move || {
                    images.import_archive(&path, MAX_IMAGE_BYTES)
                })
                .await
                .map_err(|e| ServiceError::Internal(e.to_string()));
                let _ = tokio::fs::remove_file(&spool).await;
                match result {
                    Ok(Ok(imported)) => {
                        self.name_image(workspace, name, tag, imported, "import")
                            .await
                    }
                    Ok(Err(e)) => Err(e.into()),
                    Err(e) => Err(e),
                }
            }
            Err(e) => {
                let _ = tokio::fs::remove_file(&spool).await;
                Err(e)
            }
        };
        self.after_naming(named).await
    }

    /// Sweeps what a naming left unused (content a name moved off, or an
    /// unpacked image the quota refused) and answers the naming's result.
    pub(super) async fn after_naming(&self, named: Result<(Image, bool)>) -> Result<Image> {
        match named {
            Ok((image, moved)) => {
                if moved {
                    self.sweep_images().await;
                }
                Ok(image)
            }
            Err(e) => {
                // An unpacked image the quota or the object store refused.
                self.sweep_images().await;
                Err(e)
            }
        }
    }

    /// `POST /v1/sandboxes/{id}/image`: the running sandbox's files (a `tar`
    /// of its `/` run inside it, without the kernel's and runtime's mounts,
    /// `/tmp` and its volumes) become an image with its image's defaults.
    pub async fn image_from_sandbox(
        self: &Arc<Self>,
        workspace: &str,
        id: Uuid,
        req: ImageFromSandboxRequest,
    ) -> Result<Image> {
        let (name, tag) = new_name(req.name, req.tag)?;
        let record = self.load(workspace, id).await?;
        if record.status != SandboxStatus::Running {
            return Err(ServiceError::not_running(record.status));
        }
        let config = digest_of(&record.image_ref)
            .and_then(|d| self.images.config(d))
            .unwrap_or_default();
        self.capture_sandbox(workspace, id, name, tag, config, "sandbox")
            .await
    }

    /// The running sandbox `id`'s files (a `tar` of its `/` run inside it,
    /// without the kernel's and runtime's mounts, `/tmp` and its volumes)
    /// named `name:tag` with `config` (image from a sandbox, and the end of a
    /// Dockerfile build).
    pub(super) async fn capture_sandbox(
        self: &Arc<Self>,
        workspace: &str,
        id: Uuid,
        name: String,
        tag: String,
        config: ImageConfig,
        origin: &str,
    ) -> Result<Image> {
        let mut argv: Vec<String> = [
            "tar",
            "-C",
            "/",
            "-cf",
            "-",
            "--numeric-owner",
            "--anchored",
        ]
        .map(String::from)
        .to_vec();
        let mounts = self.store.sandbox_mounts(id).await?;
        let excluded = FROM_SANDBOX_EXCLUDES
            .iter()
            .map(|d| format!("./{d}"))
            .chain(mounts.iter().map(|m| format!(".{}", m.path)));
        argv.extend(excluded.map(|p| format!("--exclude={p}")));
        argv.push(".".into());
        let mut child = self
            .runtime
            .spawn_exec(id, argv)
            .map_err(|e| ServiceError::Unavailable(format!("starting tar in the sandbox: {e}")))?;
        drop(child.stdin.take());
        let Some(mut stdout) = child.stdout.take() else {
            return Err(ServiceError::Internal("tar process has no stdout".into()));
        };
        let spool = self.images.spool_path();
        let copied: Result<u64> = async {
            let file = tokio::fs::File::create(&spool).await.map_err(|e| {
                ServiceError::Internal(format!("spooling the sandbox's files: {e}"))
            })?;
            // The tar stream holds headers and padding besides the file data.
            let cap = MAX_IMAGE_BYTES * 2;
            let mut limited = tokio::io::AsyncReadExt::take(&mut stdout, cap);
            let mut file = tokio::io::BufWriter::new(file);
            let n = tokio::io::copy(&mut limited, &mut file)
                .await
                .map_err(|e| {
                    if sbx_runsc::is_enospc(&e) {
                        ServiceError::StorageFull(format!("the data disk is full: {e}"))
                    } else {
                        ServiceError::Unavailable(format!("reading the sandbox's files: {e}"))
                    }
                })?;
            file.flush()
                .await
                .map_err(|e| ServiceError::Internal(format!("spooling: {e}")))?;
            // A stream cut at the cap could end on an entry boundary and
            // read as a smaller, valid image: refuse it instead.
            if n >= cap {
                return Err(ServiceError::ImageTooLarge(MAX_IMAGE_BYTES));
            }
            Ok(n)
        }
        .await;
        let status = child.wait().await;
        let imported = async {
            copied?;
            // GNU tar exits 1 when a file changed while it was read: the copy is still whole.
            match status {
                Ok(s) if matches!(s.code(), Some(0 | 1)) => {}
                Ok(s) => {
                    return Err(ServiceError::BadRequest(format!(
                        "tar in the sandbox failed ({s}): the image needs GNU tar at /usr/bin/tar or on PATH"
                    )))
                }
                Err(e) => return Err(ServiceError::Internal(format!("waiting for tar: {e}"))),
            }
            let (images, path) = (self.images.clone(), spool.clone());
            let _turn = self.image_turn.lock().await;
            let imported = tokio::task::spawn_blocking(move || {
                let file = std::fs::File::open(&path).map_err(|source| ExtractError::Io {
                    path: path.display().to_string(),
                    source,
                })?;
                images.import_rootfs_tar(std::io::BufReader::new(file), config, MAX_IMAGE_BYTES)
            })
            .await
            .map_err(|e| ServiceError::Internal(e.to_string()))??;
            self.name_image(workspace, name, tag, imported, origin)
                .await
        }
        .await;
        let _ = tokio::fs::remove_file(&spool).await;
        self.after_naming(imported).await
    }

    /// `GET /v1/images`: the default image, then the tenant's by name and tag.
    pub async fn list_images(&self, workspace: &str) -> Result<ImageList> {
        let rows = self.store.list_images(Some(workspace)).await?;
        let own_default = rows.iter().find(|r| r.name == DEFAULT_IMAGE).map(view);
        let mut images = vec![own_default.unwrap_or_else(|| self.default_image_view())];
        images.extend(rows.iter().filter(|r| r.name != DEFAULT_IMAGE).map(view));
        Ok(ImageList {
            images,
            usage_bytes: super::image_quota::usage(&rows),
            quota_bytes: self.image_quota_bytes(),
        })
    }

    /// `GET /v1/images/{name:tag}` (or a digest).
    pub async fn get_image(&self, workspace: &str, raw: &str) -> Result<Image> {
        match self.image_row(workspace, raw).await? {
            None => Ok(self.default_image_view()),
            Some(r) => Ok(view(&r)),
        }
    }

    /// `DELETE /v1/images/{name:tag}`: refused (409) while an active sandbox
    /// or a live snapshot of the tenant runs that content, and for `default`.
    pub async fn delete_image(&self, workspace: &str, raw: &str) -> Result<()> {
        let Some(row) = self.image_row(workspace, raw).await? else {
            return Err(ServiceError::Conflict(
                "the node's default image cannot be deleted".into(),
            ));
        };
        let mut users = self.template_users(workspace, &row).await?;
        users.extend(self.image_users(Some(workspace), &row.digest).await?);
        if !users.is_empty() {
            return Err(ServiceError::Conflict(format!(
                "image {}:{} is used by {}; delete them first",
                row.name,
                row.tag,
                users.join(", ")
            )));
        }
        self.store
            .delete_image(workspace, &row.name, &row.tag)
            .await?;
        self.sweep_images().await;
        Ok(())
    }

    /// Active sandboxes and live snapshots (of `workspace`, or of every
    /// tenant) that run `digest`, as `sandbox <id>` / `snapshot <id>`.
    async fn image_users(&self, workspace: Option<&str>, digest: &str) -> Result<Vec<String>> {
        let mine = |w: &str| workspace.is_none_or(|ws| ws == w);
        let mut users = Vec::new();
        for s in self
            .store
            .sandboxes_in_status(None, &SandboxStatus::ACTIVE)
            .await?
        {
            if mine(&s.workspace) && digest_of(&s.image_ref) == Some(digest) {
                users.push(format!("sandbox {}", s.id));
            }
        }
        for s in self
            .store
            .snapshots_in_status(&[SnapshotStatus::Creating, SnapshotStatus::Ready])
            .await?
        {
            if mine(&s.workspace) && digest_of(&s.image_ref) == Some(digest) {
                users.push(format!("snapshot {}", s.id));
            }
        }
        Ok(users)
    }

    /// Removes the root filesystems of this node that no image name, active
    /// sandbox or live snapshot uses. Failures are logged (the next sweep
    /// tries again).
    pub async fn sweep_images(&self) {
        let _turn = self.image_turn.lock().await;
        let on_disk = match self.images.digests() {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(error = %e, "listing image directories");
                return;
            }
        };
        if on_disk.is_empty() {
            return;
        }
        let named: HashSet<String> = match self.store.list_images(None).await {
            Ok(rows) => rows.into_iter().map(|r| r.digest).collect(),
            Err(e) => {
                tracing::warn!(error = %e, "listing images to sweep");
                return;
            }
        };
        for digest in on_disk.into_iter().filter(|d| !named.contains(d)) {
            match self.image_users(None, &digest).await {
                Ok(users) if users.is_empty() => {
                    let images = self.images.clone();
                    let d = digest.clone();
                    self.unpublish_image(&digest).await;
                    match tokio::task::spawn_blocking(move || images.remove(&d)).await {
                        Ok(Ok(())) => tracing::info!(%digest, "removed unused image"),
                        Ok(Err(e)) => tracing::warn!(%digest, error = %e, "removing unused image"),
                        Err(e) => tracing::warn!(%digest, error = %e, "removing unused image"),
                    }
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(%digest, error = %e, "reading an image's users"),
            }
        }
    }
}

/// The image's environment entries (`KEY=value`) as a map (malformed ones left out).
pub(super) fn image_env(config: &ImageConfig) -> BTreeMap<String, String> {
    config
        .env
        .iter()
        .filter_map(|kv| kv.split_once('='))
        .filter(|(k, _)| !k.is_empty())
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A new image's `name` and `tag` (default `latest`), validated.
pub(super) fn new_name(name: Option<String>, tag: Option<String>) -> Result<(String, String)> {
    let name = name.ok_or(ValidationError::Missing("name"))?;
    let raw = format!("{name}:{}", tag.as_deref().unwrap_or("latest"));
    Ok(ImageRef::parse_new_name(&raw)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_refs_name_their_digest_and_default_names_none() {
        let d = format!("sha256:{}", "ab".repeat(32));
        assert_eq!(digest_of(&format!("py:1@{d}")), Some(d.as_str()));
        assert_eq!(digest_of(&d), Some(d.as_str()));
        assert_eq!(digest_of("default"), None);
        assert_eq!(digest_of("py:1@sha256:short"), None);
    }

    #[test]
    fn image_env_keeps_well_formed_entries() {
        let config = ImageConfig {
            env: vec![
                "PATH=/usr/bin".into(),
                "EMPTY=".into(),
                "A=b=c".into(),
                "no-equals".into(),
                "=value".into(),
            ],
            ..ImageConfig::default()
        };
        let env = image_env(&config);
        assert_eq!(env.len(), 3);
        assert_eq!(env["PATH"], "/usr/bin");
        assert_eq!(env["EMPTY"], "");
        assert_eq!(env["A"], "b=c");
    }

    #[test]
    fn new_names_default_to_latest_and_refuse_default() {
        assert_eq!(
            new_name(Some("py".into()), None).unwrap(),
            ("py".to_string(), "latest".to_string())
        );
        assert!(new_name(None, None).is_err());
        assert!(new_name(Some("default".into()), None).is_err());
        assert!(new_name(Some("Py".into()), Some("1".into())).is_err());
    }
}
