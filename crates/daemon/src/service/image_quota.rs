//! The per-tenant image storage quota (`--image-quota-mb`): the bytes of
//! the distinct contents a tenant names, each counted once however many of
//! its names point at it. Content shared with another tenant counts for
//! both (neither can tell it is shared). The check runs where a name is
//! recorded, under the node's image turn; two nodes of a cluster naming at
//! the same moment can together pass it (see docs/images.md).

use super::{Result, Service, ServiceError};
use sbx_store::ImageRecord;
use std::collections::HashMap;

/// Bytes the images of `rows` (one tenant's) take: each digest once.
pub(super) fn usage(rows: &[ImageRecord]) -> u64 {
    distinct(rows.iter().map(|r| (r.digest.as_str(), r.size_bytes)))
}

fn distinct<'a>(images: impl Iterator<Item = (&'a str, u64)>) -> u64 {
    images.collect::<HashMap<_, _>>().values().sum()
}

impl Service {
    /// The tenant image quota in bytes (0: none).
    pub(super) fn image_quota_bytes(&self) -> u64 {
        self.config
            .limits
            .image_quota_mb
            .saturating_mul(1024 * 1024)
    }

    /// Refuses naming `name:tag` → `imported` when the tenant's images
    /// would then take more than the quota. Moving a name off content that
    /// nothing else of the tenant names frees that content's bytes.
    pub(super) async fn check_image_quota(
        &self,
        workspace: &str,
        name: &str,
        tag: &str,
        imported: &sbx_node::images::Imported,
    ) -> Result<()> {
        let quota = self.image_quota_bytes();
        if quota == 0 {
            return Ok(());
        }
        let rows = self.store.list_images(Some(workspace)).await?;
        let used = usage(&rows);
        let after = rows
            .iter()
            .filter(|r| !(r.name == name && r.tag == tag))
            .map(|r| (r.digest.as_str(), r.size_bytes))
            .chain(std::iter::once((
                imported.digest.as_str(),
                imported.size_bytes,
            )));
        let needed = distinct(after);
        // A naming that does not grow the tenant's usage is always allowed,
        // so a tenant over a lowered quota can still move names around.
        if needed > quota && needed > used {
            return Err(ServiceError::ImageQuota {
                used,
                needed,
                quota,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_digest_counts_once() {
        let images = [("sha256:a", 10), ("sha256:b", 5), ("sha256:a", 10)];
        assert_eq!(distinct(images.into_iter()), 15);
        assert_eq!(distinct(std::iter::empty()), 0);
    }
}
