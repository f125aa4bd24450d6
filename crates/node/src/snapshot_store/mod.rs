//! Where a snapshot's checkpoint files live beyond the node that took them.
//!
//! A snapshot's files are always in a local directory first
//! (`<data>/snapshots/<id>`, written by `runsc checkpoint`). A
//! [`SnapshotStore`] decides what else happens to them:
//!
//! * [`LocalStore`] (the single-node default): nothing; the files stay in the
//!   data dir, and a clone needs them there.
//! * [`S3Store`] (`--snapshot-store s3://bucket/prefix`): [`SnapshotStore::upload`]
//!   copies every file to `<prefix>/snapshots/<id>/files/<path>` and then writes
//!   `<prefix>/snapshots/<id>/manifest.json` with each file's size and SHA-256
//!   (written last: its presence means the upload is complete). Every object
//!   is encrypted under a per-snapshot data key that the manifest carries
//!   sealed by the node's key ring (`seal.rs`). Any node that
//!   lacks the local copy [`SnapshotStore::fetch`]es it: every object is
//!   downloaded into a temporary directory beside the cache, checked against
//!   the manifest, and renamed into place in one step, so a local cache
//!   directory is either whole or absent. [`SnapshotStore::delete`] removes
//!   every object under the snapshot's prefix.

mod local;
mod s3;
mod seal;

pub use local::LocalStore;
pub use s3::{S3Config, S3Store};

use std::path::{Path, PathBuf};
use std::sync::Arc;
use uuid::Uuid;

/// Name of the manifest object, under the snapshot's prefix.
pub const MANIFEST: &str = "manifest.json";

/// Errors of a snapshot store.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotStoreError {
    /// The snapshot (its manifest, or an object the manifest names) is not there.
    #[error("snapshot {id} is missing from {place}: {what}")]
    Missing {
        /// The snapshot.
        id: Uuid,
        /// "object storage" or "the local data dir".
        place: &'static str,
        /// What is missing.
        what: String,
    },
    /// An object does not match the manifest (size or SHA-256), or the
    /// manifest itself cannot be read.
    #[error("snapshot {id} in object storage is corrupt: {what}")]
    Corrupt {
        /// The snapshot.
        id: Uuid,
        /// What did not match.
        what: String,
    },
    /// The object store answered with an error or could not be reached.
    #[error("object storage: {context}: {source}")]
    Remote {
        /// What was being done.
        context: String,
        /// The client's error.
        #[source]
        source: object_store::Error,
    },
    /// A local file operation failed (reading a checkpoint, writing the cache).
    #[error("snapshot files: {context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The store's configuration is unusable.
    #[error("snapshot store configuration: {0}")]
    Config(String),
}

impl SnapshotStoreError {
    /// A missing or corrupt snapshot: a clone of it can never succeed (as
    /// opposed to an unreachable store, which may come back).
    pub fn is_unusable(&self) -> bool {
        matches!(
            self,
            SnapshotStoreError::Missing { .. } | SnapshotStoreError::Corrupt { .. }
        )
    }

    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let context = context.into();
        move |source| SnapshotStoreError::Io { context, source }
    }

    pub(crate) fn remote(context: impl Into<String>) -> impl FnOnce(object_store::Error) -> Self {
        let context = context.into();
        move |source| SnapshotStoreError::Remote { context, source }
    }
}

/// What an upload stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uploaded {
    /// Files uploaded (0 for the local store).
    pub files: usize,
    /// Bytes uploaded.
    pub bytes: u64,
}

/// Keeps snapshot files somewhere and brings them back to a node.
#[async_trait::async_trait]
pub trait SnapshotStore: Send + Sync {
    /// Makes the files under `dir` (the snapshot's local directory) durable
    /// in the store, each with its checksum; returns when all of them are.
    async fn upload(&self, id: Uuid, dir: &Path) -> Result<Uploaded, SnapshotStoreError>;

    /// Makes sure `dir` holds the snapshot's files, fetching and verifying
    /// them when it does not exist. One fetch per snapshot at a time: a
    /// second caller waits for the first and then finds the files in place.
    async fn fetch(&self, id: Uuid, dir: &Path) -> Result<(), SnapshotStoreError>;

    /// Removes the snapshot's copy in the store (not the local directory).
    /// Safe to repeat; absent objects are fine.
    async fn delete(&self, id: Uuid) -> Result<(), SnapshotStoreError>;

    /// Where snapshots go, for logs (`local` or `s3://bucket/prefix`).
    fn describe(&self) -> String;
}

/// Which store `--snapshot-store` names.
#[derive(Debug, Clone, Default)]
pub enum StoreConfig {
    /// Files stay in the data dir.
    #[default]
    Local,
    /// S3-compatible object storage.
    S3(S3Config),
}

impl StoreConfig {
    /// Parses `--snapshot-store`: `local` (or empty) or `s3://bucket[/prefix]`;
    /// the S3 settings other than the location come from `s3`.
    pub fn parse(value: &str, s3: S3Config) -> Result<StoreConfig, SnapshotStoreError> {
        let value = value.trim();
        if value.is_empty() || value == "local" {
            return Ok(StoreConfig::Local);
        }
        let Some(rest) = value.strip_prefix("s3://") else {
            return Err(SnapshotStoreError::Config(format!(
                "--snapshot-store {value:?}: expected `local` or s3://bucket/prefix"
            )));
        };
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let bucket_ok = (3..=63).contains(&bucket.len())
            && bucket
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
        if !bucket_ok {
            return Err(SnapshotStoreError::Config(format!(
                "--snapshot-store {value:?}: bucket {bucket:?} is not a valid bucket name"
            )));
        }
        let prefix = prefix.trim_matches('/');
        if prefix
            .split('/')
            .any(|p| p == "." || p == ".." || (p.is_empty() && !prefix.is_empty()))
            || prefix.chars().any(char::is_control)
        {
            return Err(SnapshotStoreError::Config(format!(
                "--snapshot-store {value:?}: prefix {prefix:?} has an empty, `.` or `..` segment"
            )));
        }
        Ok(StoreConfig::S3(S3Config {
            bucket: bucket.to_string(),
            prefix: prefix.to_string(),
            ..s3
        }))
    }

    /// Builds the store (no network traffic yet). `keys` seal each
    /// snapshot's data key before anything leaves the node: the nodes that
    /// share a store must share the secret key.
    pub fn open(
        &self,
        keys: &sbx_secrets::KeyRing,
    ) -> Result<Arc<dyn SnapshotStore>, SnapshotStoreError> {
        Ok(match self {
            StoreConfig::Local => Arc::new(LocalStore),
            StoreConfig::S3(config) => Arc::new(S3Store::new(config.clone(), keys.clone())?),
        })
    }

    /// The store that keeps custom images' packed root filesystems beside
    /// the snapshots (`None` for the local store: images stay on their node).
    pub fn open_images(
        &self,
        keys: &sbx_secrets::KeyRing,
    ) -> Result<Option<Arc<dyn SnapshotStore>>, SnapshotStoreError> {
        Ok(match self {
            StoreConfig::Local => None,
            StoreConfig::S3(config) => {
                Some(Arc::new(S3Store::for_images(config.clone(), keys.clone())?))
            }
        })
    }

    /// Checks that the store can be built (no network traffic).
    pub fn check(&self) -> Result<(), SnapshotStoreError> {
        match self {
            StoreConfig::Local => Ok(()),
            StoreConfig::S3(config) => S3Store::build_client(config).map(|_| ()),
        }
    }
}

/// The fetch's working directory: beside the cache, so that the final
/// rename stays on one file system.
pub(crate) fn staging_dir(id: Uuid, dir: &Path) -> PathBuf {
    let parent = dir.parent().unwrap_or(Path::new("."));
    parent.join(format!(".fetch-{id}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_locations() {
        assert!(matches!(
            StoreConfig::parse("local", S3Config::default()),
            Ok(StoreConfig::Local)
        ));
        assert!(matches!(
            StoreConfig::parse("", S3Config::default()),
            Ok(StoreConfig::Local)
        ));
        let Ok(StoreConfig::S3(c)) =
            StoreConfig::parse("s3://sbx-snaps/prod/eu/", S3Config::default())
        else {
            panic!("an s3 location");
        };
        assert_eq!(
            (c.bucket.as_str(), c.prefix.as_str()),
            ("sbx-snaps", "prod/eu")
        );
        let Ok(StoreConfig::S3(c)) = StoreConfig::parse("s3://bucket", S3Config::default()) else {
            panic!("a bucket alone");
        };
        assert_eq!(c.prefix, "");
        for bad in [
            "/tmp/x",
            "s3://",
            "s3://B",
            "s3://bucket/a/../b",
            "s3://bucket/a//b",
        ] {
            assert!(
                matches!(
                    StoreConfig::parse(bad, S3Config::default()),
                    Err(SnapshotStoreError::Config(_))
                ),
                "{bad}"
            );
        }
    }
}
