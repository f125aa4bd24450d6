//! Images in object storage (cluster mode, `--snapshot-store s3://…`): the
//! node that names new content packs its root filesystem and uploads it
//! before the name exists, so every node can fetch it on demand; a create,
//! clone or restore on a node without the image fetches it first. Without
//! an object store images stay on the node that made them (placement pins
//! creates there). Objects of content that no name, sandbox or snapshot uses
//! are deleted by the sweep of a node that held it.

use super::images::MAX_IMAGE_BYTES;
use super::{Result, Service, ServiceError};
use sbx_node::images::remote::object_id;
use std::path::PathBuf;

impl Service {
    /// Whether images travel through object storage (no node pinning).
    pub(super) fn images_shared(&self) -> bool {
        self.image_objects.is_some()
    }

    /// Uploads `digest` (already unpacked here) to object storage unless
    /// some name of any tenant already holds it (then it is there). A no-op
    /// without an object store.
    pub(super) async fn publish_image(&self, digest: &str) -> Result<()> {
        let Some(objects) = &self.image_objects else {
            return Ok(());
        };
        if !self.store.images_with_digest(digest).await?.is_empty() {
            return Ok(());
        }
        let id = object_id(digest)
            .ok_or_else(|| ServiceError::Internal(format!("{digest:?} is not a digest")))?;
        let dir = self.images.transfer_dir();
        let (images, d, out) = (self.images.clone(), digest.to_string(), dir.clone());
        let packed = tokio::task::spawn_blocking(move || images.pack(&d, &out))
            .await
            .map_err(|e| ServiceError::Internal(e.to_string()))
            .and_then(|r| r.map_err(ServiceError::from));
        let uploaded = match packed {
            Ok(()) => objects.upload(id, &dir).await.map_err(|e| {
                ServiceError::Unavailable(format!("storing the image in object storage: {e}"))
            }),
            Err(e) => Err(e),
        };
        let _ = tokio::fs::remove_dir_all(&dir).await;
        let up = uploaded?;
        tracing::info!(%digest, bytes = up.bytes, "image stored in object storage");
        Ok(())
    }

    /// The root filesystem of `digest` on this node, fetched from object
    /// storage when the node lacks it.
    pub(super) async fn image_here(&self, digest: &str) -> Result<PathBuf> {
        if let Some(path) = self.images.rootfs(digest) {
            return Ok(path);
        }
        let Some(objects) = &self.image_objects else {
            return Err(ServiceError::Conflict(format!(
                "image {digest} is not on this node (images are node-local without an object store)"
            )));
        };
        let id = object_id(digest)
            .ok_or_else(|| ServiceError::Internal(format!("{digest:?} is not a digest")))?;
        // Under the image turn: the sweep never removes a fetched image
        // before a sandbox record names it, and one fetch runs at a time.
        let _turn = self.image_turn.lock().await;
        if let Some(path) = self.images.rootfs(digest) {
            return Ok(path);
        }
        let started = std::time::Instant::now();
        let dir = self.images.transfer_dir();
        let fetched = objects.fetch(id, &dir).await.map_err(|e| {
            if e.is_unusable() {
                ServiceError::Internal(format!("image {digest} in object storage: {e}"))
            } else {
                ServiceError::Unavailable(format!("fetching image {digest}: {e}"))
            }
        });
        let installed = match fetched {
            Ok(()) => {
                let (images, d, from) = (self.images.clone(), digest.to_string(), dir.clone());
                tokio::task::spawn_blocking(move || {
                    images.install_packed(&d, &from, MAX_IMAGE_BYTES)
                })
                .await
                .map_err(|e| ServiceError::Internal(e.to_string()))
                .and_then(|r| r.map_err(ServiceError::from))
            }
            Err(e) => Err(e),
        };
        let _ = tokio::fs::remove_dir_all(&dir).await;
        installed?;
        tracing::info!(%digest, ms = started.elapsed().as_millis() as u64, "image fetched from object storage");
        self.images.rootfs(digest).ok_or_else(|| {
            ServiceError::Internal(format!("image {digest} vanished after its fetch"))
        })
    }

    /// Deletes `digest`'s objects (the sweep found nothing using it).
    pub(super) async fn unpublish_image(&self, digest: &str) {
        let (Some(objects), Some(id)) = (&self.image_objects, object_id(digest)) else {
            return;
        };
        if let Err(e) = objects.delete(id).await {
            tracing::warn!(%digest, error = %e, "deleting an unused image from object storage");
        }
    }
}
