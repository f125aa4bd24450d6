//! More names for an image's content (`POST /v1/images/{ref}/tag`), and the
//! tenant's default image: the content its `default:latest` names, which
//! every create that names no image boots (the `/v2` and E2B creates
//! included) instead of the node's default. Without that name the node's
//! default image is used, as before.

use super::images::ResolvedImage;
use super::{Result, Service, ServiceError};
use sbx_api_types::images::{ImageRef, DEFAULT_IMAGE};
use sbx_api_types::{Image, ImageTagRequest};

impl Service {
    /// `POST /v1/images/{ref}/tag`: names the content of the tenant's image
    /// `raw` as `name:tag` too (moving that name if it exists).
    pub async fn tag_image(
        &self,
        workspace: &str,
        raw: &str,
        req: ImageTagRequest,
    ) -> Result<Image> {
        let name = req
            .name
            .ok_or(sbx_api_types::validate::ValidationError::Missing("name"))?;
        let target = format!("{name}:{}", req.tag.as_deref().unwrap_or("latest"));
        let (name, tag) = ImageRef::parse_tag_target(&target)?;
        let named = {
            let _turn = self.image_turn.lock().await;
            let Some(source) = self.image_row(workspace, raw).await? else {
                return Err(ServiceError::Conflict(
                    "the node's default image has no content to name; tag an image of your own"
                        .into(),
                ));
            };
            let config = serde_json::from_str(&source.config).unwrap_or_default();
            let content = sbx_node::images::Imported {
                digest: source.digest,
                size_bytes: source.size_bytes,
                config,
            };
            self.name_image(workspace, name, tag, content, &source.origin)
                .await
        };
        self.after_naming(named).await
    }

    /// The tenant's default image for a create that names none (`None`: the
    /// node's default).
    pub(super) async fn tenant_default_image(
        &self,
        workspace: &str,
    ) -> Result<Option<ResolvedImage>> {
        match self.image_row(workspace, DEFAULT_IMAGE).await? {
            Some(row) => self.resolve_row(DEFAULT_IMAGE, row).await.map(Some),
            None => Ok(None),
        }
    }
}
