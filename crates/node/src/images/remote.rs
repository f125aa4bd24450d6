//! An image as files for object storage, and back. A node that names an
//! image in cluster mode packs its root filesystem into one tar beside its
//! config (`pack`); the snapshot store's S3 layout then keeps them encrypted
//! and checksummed. A node that lacks the image fetches that directory and
//! unpacks it with the same safe extractor as an import (`install_packed`),
//! under the digest it was stored as: the manifest's checksums and the
//! authenticated encryption already prove the files are the ones packed.

use super::{hex_of, io_at, ExtractError, ImageStore, LayerOptions};
use sbx_api_types::ImageConfig;
use std::path::{Path, PathBuf};

/// Name of the packed root filesystem in the directory `pack` writes.
pub const PACKED_ROOTFS: &str = "rootfs.tar";
/// Name of the image config beside it.
pub const PACKED_CONFIG: &str = "config.json";

/// The object id of a digest: the first 128 bits of its sha256, so every
/// node derives the same key for the same content.
pub fn object_id(digest: &str) -> Option<uuid::Uuid> {
    let bytes = hex::decode(hex_of(digest)?).ok()?;
    let first: [u8; 16] = bytes.get(..16)?.try_into().ok()?;
    Some(uuid::Uuid::from_bytes(first))
}

impl ImageStore {
    /// A fresh directory under `tmp/` for packing or fetching (removed at
    /// the next open, or by the caller when done).
    pub fn transfer_dir(&self) -> PathBuf {
        self.dir
            .join("tmp")
            .join(format!("transfer-{}", uuid::Uuid::new_v4()))
    }

    /// Writes `digest`'s root filesystem as `dir/rootfs.tar` (owners, modes
    /// and symlinks kept; hard links stored as copies) and its config as
    /// `dir/config.json`.
    pub fn pack(&self, digest: &str, dir: &Path) -> Result<(), ExtractError> {
        let rootfs = self.rootfs(digest).ok_or_else(|| {
            ExtractError::Malformed(format!("image {digest} is not on this node"))
        })?;
        std::fs::create_dir_all(dir).map_err(io_at(dir))?;
        let config = self.config(digest).unwrap_or_default();
        let json = serde_json::to_vec(&config).unwrap_or_default();
        let config_path = dir.join(PACKED_CONFIG);
        std::fs::write(&config_path, json).map_err(io_at(&config_path))?;
        let tar_path = dir.join(PACKED_ROOTFS);
        let file = std::fs::File::create(&tar_path).map_err(io_at(&tar_path))?;
        let mut builder = tar::Builder::new(std::io::BufWriter::new(file));
        builder.mode(tar::HeaderMode::Complete);
        builder.follow_symlinks(false);
        builder
            .append_dir_all(".", &rootfs)
            .and_then(|()| builder.into_inner())
            .and_then(|mut w| std::io::Write::flush(&mut w))
            .map_err(io_at(&tar_path))
    }

    /// Unpacks a directory `pack` wrote as the image `digest` (nothing to do
    /// when the node already has it); answers the root filesystem's bytes.
    pub fn install_packed(
        &self,
        digest: &str,
        dir: &Path,
        max_bytes: u64,
    ) -> Result<u64, ExtractError> {
        if hex_of(digest).is_none() {
            return Err(ExtractError::Malformed(format!(
                "{digest:?} is not a digest"
            )));
        }
        let config_path = dir.join(PACKED_CONFIG);
        let config: ImageConfig = std::fs::read(&config_path)
            .map_err(io_at(&config_path))
            .and_then(|b| {
                serde_json::from_slice(&b).map_err(|e| ExtractError::Malformed(e.to_string()))
            })?;
        let tar_path = dir.join(PACKED_ROOTFS);
        let file = std::fs::File::open(&tar_path).map_err(io_at(&tar_path))?;
        let (staging, mut root) = self.stage()?;
        let applied = root.apply_layer(
            std::io::BufReader::new(file),
            LayerOptions {
                whiteouts: false,
                max_bytes,
            },
        );
        if let Err(e) = applied {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(e);
        }
        self.commit(&staging, digest, &config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, PermissionsExt};

    #[test]
    fn object_ids_come_from_the_digest() {
        let d = format!("sha256:{}", "0123456789abcdef".repeat(4));
        let id = object_id(&d).unwrap();
        assert_eq!(id.to_string(), "01234567-89ab-cdef-0123-456789abcdef");
        assert_eq!(object_id(&d), Some(id));
        assert_eq!(object_id("sha256:short"), None);
        assert_eq!(object_id("default"), None);
    }

    #[test]
    fn a_packed_image_installs_as_the_same_tree_on_another_store() {
        let tmp = tempfile::tempdir().unwrap();
        let a = ImageStore::open(&tmp.path().join("a")).unwrap();
        let b = ImageStore::open(&tmp.path().join("b")).unwrap();
        let layer = {
            let src = tmp.path().join("src");
            std::fs::create_dir_all(src.join("bin")).unwrap();
            std::fs::write(src.join("bin/tool"), b"#!/bin/sh\necho hi\n").unwrap();
            std::fs::set_permissions(src.join("bin/tool"), std::fs::Permissions::from_mode(0o755))
                .unwrap();
            symlink("/bin/tool", src.join("link")).unwrap();
            let mut t = tar::Builder::new(Vec::new());
            t.follow_symlinks(false);
            t.append_dir_all(".", &src).unwrap();
            t.into_inner().unwrap()
        };
        let config = ImageConfig {
            workdir: Some("/bin".into()),
            ..ImageConfig::default()
        };
        let imported = a
            .import_rootfs_tar(&layer[..], config.clone(), 1 << 20)
            .unwrap();
        let dir = a.transfer_dir();
        a.pack(&imported.digest, &dir).unwrap();
        let size = b.install_packed(&imported.digest, &dir, 1 << 20).unwrap();
        assert_eq!(size, imported.size_bytes);
        let root = b.rootfs(&imported.digest).unwrap();
        assert_eq!(
            std::fs::read(root.join("bin/tool")).unwrap(),
            b"#!/bin/sh\necho hi\n"
        );
        let mode = std::fs::metadata(root.join("bin/tool"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
        assert_eq!(
            std::fs::read_link(root.join("link")).unwrap(),
            Path::new("/bin/tool")
        );
        assert_eq!(b.config(&imported.digest), Some(config));
        // An unsafe packed tree is refused like any import.
        let evil = tmp.path().join("evil");
        std::fs::create_dir_all(&evil).unwrap();
        std::fs::write(evil.join(PACKED_CONFIG), b"{}").unwrap();
        let mut t = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.as_old_mut().name[..9].copy_from_slice(b"../escape");
        h.set_size(1);
        h.set_mode(0o644);
        h.set_cksum();
        t.append(&h, &b"x"[..]).unwrap();
        std::fs::write(evil.join(PACKED_ROOTFS), t.into_inner().unwrap()).unwrap();
        let other = format!("sha256:{}", "ab".repeat(32));
        assert!(b.install_packed(&other, &evil, 1 << 20).is_err());
        assert!(b.rootfs(&other).is_none());
        assert!(!tmp.path().join("b/escape").exists() && !tmp.path().join("escape").exists());
    }
}
