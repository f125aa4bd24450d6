//! Custom images: a tenant's `name:tag` pointing at a content digest.

use chrono::{DateTime, Utc};

/// One tenant's name for an image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRecord {
    /// Its tenant scope (`workspace/env`).
    pub workspace: String,
    /// Name, with `tag` unique in the tenant.
    pub name: String,
    /// Tag.
    pub tag: String,
    /// `sha256:` and 64 hex digits naming the content (its rootfs directory on the node).
    pub digest: String,
    /// Bytes of the flattened root filesystem.
    pub size_bytes: u64,
    /// How it was made: `import`, `sandbox` (later `build`).
    pub origin: String,
    /// The image's process defaults (env, workdir, user, entrypoint, cmd) as JSON.
    pub config: String,
    /// The node holding its root filesystem.
    pub node_id: String,
    /// When the name was (last) pointed at the digest.
    pub created_at: DateTime<Utc>,
}

/// The columns of the `images` table, in the order both backends read them.
pub(crate) const IMAGE_COLUMNS: &str =
    "workspace, name, tag, digest, size_bytes, origin, config, node_id, created_at_ms";

/// A Dockerfile build cache entry: what a build whose last step had
/// `cache_key` produced, per tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageBuildRecord {
    /// Its tenant scope (`workspace/env`).
    pub workspace: String,
    /// Hex sha256 chaining every step of the build (see `docs/images.md`).
    pub cache_key: String,
    /// The image content the build produced.
    pub digest: String,
    /// Bytes of that content's root filesystem.
    pub size_bytes: u64,
    /// When the build finished.
    pub created_at: DateTime<Utc>,
}
