//! The single-node default: snapshot files stay in the data dir.

use super::{SnapshotStore, SnapshotStoreError, Uploaded};
use std::path::Path;
use uuid::Uuid;

/// Keeps nothing beyond the local directory: upload and delete do nothing,
/// and a fetch only checks that the files are there.
#[derive(Debug, Default, Clone, Copy)]
pub struct LocalStore;

#[async_trait::async_trait]
impl SnapshotStore for LocalStore {
    async fn upload(&self, _id: Uuid, _dir: &Path) -> Result<Uploaded, SnapshotStoreError> {
        Ok(Uploaded { files: 0, bytes: 0 })
    }

    async fn fetch(&self, id: Uuid, dir: &Path) -> Result<(), SnapshotStoreError> {
        match tokio::fs::metadata(dir).await {
            Ok(m) if m.is_dir() => Ok(()),
            Ok(_) => Err(SnapshotStoreError::Missing {
                id,
                place: "the local data dir",
                what: format!("{} is not a directory", dir.display()),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(SnapshotStoreError::Missing {
                    id,
                    place: "the local data dir",
                    what: format!(
                        "{} does not exist (snapshots are kept on the node that took them; \
                         see --snapshot-store)",
                        dir.display()
                    ),
                })
            }
            Err(e) => Err(SnapshotStoreError::io(format!("reading {}", dir.display()))(e)),
        }
    }

    async fn delete(&self, _id: Uuid) -> Result<(), SnapshotStoreError> {
        Ok(())
    }

    fn describe(&self) -> String {
        "local".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn fetch_checks_presence_only() {
        let tmp = tempfile::tempdir().unwrap();
        let id = Uuid::new_v4();
        let dir = tmp.path().join(id.to_string());
        let missing = LocalStore.fetch(id, &dir).await.unwrap_err();
        assert!(missing.is_unusable(), "{missing}");
        std::fs::create_dir(&dir).unwrap();
        LocalStore.fetch(id, &dir).await.unwrap();
        assert_eq!(LocalStore.upload(id, &dir).await.unwrap().files, 0);
        LocalStore.delete(id).await.unwrap();
        assert!(dir.exists(), "the local store never removes the cache");
    }
}
