//! The node's image store: one read-only root filesystem directory per image
//! content digest (`<dir>/<hex>/rootfs`), shared by every tenant that has a
//! name for it. Imports unpack into `<dir>/tmp/` and are renamed into place
//! once whole, so a digest directory that exists is complete.

pub mod archive;
pub mod extract;
pub mod remote;
pub mod zstd;

pub use extract::{ExtractError, LayerOptions, Root};

use sbx_api_types::ImageConfig;
use sha2::{Digest, Sha256};
use std::io::{self, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Directories a sandbox's root tar leaves out (the kernel's and the
/// runtime's mounts), created empty in an image made from it, with their modes.
pub const MOUNT_POINTS: &[(&str, u32)] = &[
    ("proc", 0o555),
    ("sys", 0o555),
    ("dev", 0o755),
    ("tmp", 0o1777),
];

/// An image unpacked into the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported {
    /// `sha256:` digest of the canonical form (config and ordered layer digests).
    pub digest: String,
    /// Bytes of regular files in the root filesystem.
    pub size_bytes: u64,
    /// Process defaults.
    pub config: ImageConfig,
}

/// The images of this node.
#[derive(Debug, Clone)]
pub struct ImageStore {
    dir: PathBuf,
}

/// A reader that hashes what passes through it.
struct Hashing<R> {
    inner: R,
    hash: Sha256,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hash.update(&buf[..n]);
        Ok(n)
    }
}

/// The image digest: sha256 of `{"config":…,"layers":[…]}` (serde's fixed field order).
fn image_digest(config: &ImageConfig, layers: &[String]) -> String {
    #[derive(serde::Serialize)]
    struct Canonical<'a> {
        config: &'a ImageConfig,
        layers: &'a [String],
    }
    let json = serde_json::to_vec(&Canonical { config, layers }).unwrap_or_default();
    format!("sha256:{}", hex::encode(Sha256::digest(json)))
}

fn hex_of(digest: &str) -> Option<&str> {
    sbx_api_types::images::is_digest(digest).then(|| &digest["sha256:".len()..])
}

fn io_at(path: &Path) -> impl Fn(io::Error) -> ExtractError + '_ {
    move |source| ExtractError::Io {
        path: path.display().to_string(),
        source,
    }
}

impl ImageStore {
    /// Opens (creating) the store at `dir`, private to root, and removes
    /// whatever an interrupted import left in its `tmp/`.
    pub fn open(dir: &Path) -> io::Result<ImageStore> {
        std::fs::create_dir_all(dir.join("tmp"))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        for entry in std::fs::read_dir(dir.join("tmp"))? {
            let path = entry?.path();
            let _ = if path.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
        }
        Ok(ImageStore {
            dir: dir.to_path_buf(),
        })
    }

    /// The root filesystem of `digest`, if this node has it.
    pub fn rootfs(&self, digest: &str) -> Option<PathBuf> {
        let path = self.dir.join(hex_of(digest)?).join("rootfs");
        path.is_dir().then_some(path)
    }

    /// A fresh path under `tmp/` for spooling an upload (removed at the next open).
    pub fn spool_path(&self) -> PathBuf {
        self.dir
            .join("tmp")
            .join(format!("{}.upload", uuid::Uuid::new_v4()))
    }

    /// The process defaults of `digest`, if this node has it.
    pub fn config(&self, digest: &str) -> Option<ImageConfig> {
        let bytes = std::fs::read(self.dir.join(hex_of(digest)?).join("config.json")).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// The digests this node holds.
    pub fn digests(&self) -> io::Result<Vec<String>> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&self.dir)? {
            let name = entry?.file_name().to_string_lossy().into_owned();
            let digest = format!("sha256:{name}");
            if hex_of(&digest).is_some() {
                out.push(digest);
            }
        }
        Ok(out)
    }

    /// Removes `digest`'s directory (safe to repeat).
    pub fn remove(&self, digest: &str) -> io::Result<()> {
        let Some(hex) = hex_of(digest) else {
            return Ok(());
        };
        // Renamed away first: a half-removed tree is never taken for an image.
        let doomed = self
            .dir
            .join("tmp")
            .join(format!("{hex}.{}", uuid::Uuid::new_v4()));
        match std::fs::rename(self.dir.join(hex), &doomed) {
            Ok(()) => std::fs::remove_dir_all(&doomed),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// A fresh staging directory with an empty `rootfs/` (mode 0755).
    fn stage(&self) -> Result<(PathBuf, Root), ExtractError> {
        let staging = self.dir.join("tmp").join(uuid::Uuid::new_v4().to_string());
        let rootfs = staging.join("rootfs");
        std::fs::create_dir_all(&rootfs).map_err(io_at(&rootfs))?;
        std::fs::set_permissions(&rootfs, std::fs::Permissions::from_mode(0o755))
            .map_err(io_at(&rootfs))?;
        let root = Root::open(&rootfs).map_err(io_at(&rootfs))?;
        Ok((staging, root))
    }

    /// Moves a complete staging directory into place as `digest` (or drops
    /// it when the store already has that content).
    fn commit(
        &self,
        staging: &Path,
        digest: &str,
        config: &ImageConfig,
    ) -> Result<u64, ExtractError> {
        let hex = hex_of(digest).unwrap_or_default();
        let target = self.dir.join(hex);
        let size = extract::tree_size(&staging.join("rootfs")).map_err(io_at(staging))?;
        let json = serde_json::to_vec(config).unwrap_or_default();
        std::fs::write(staging.join("config.json"), json).map_err(io_at(staging))?;
        if target.is_dir() {
            let _ = std::fs::remove_dir_all(staging);
            return Ok(size);
        }
        if let Err(e) = std::fs::rename(staging, &target) {
            let _ = std::fs::remove_dir_all(staging);
            // A concurrent import of the same content won the rename.
            if !target.is_dir() {
                return Err(io_at(&target)(e));
            }
        }
        Ok(size)
    }

    /// Unpacks an OCI image layout or `docker save` tarball at `upload`.
    pub fn import_archive(&self, upload: &Path, max_bytes: u64) -> Result<Imported, ExtractError> {
        let archive = archive::Archive::open(upload)?;
        let contents = archive.contents()?;
        let (staging, mut root) = self.stage()?;
        let applied = (|| {
            let mut layers = Vec::with_capacity(contents.layers.len());
            for name in &contents.layers {
                let mut reader = Hashing {
                    inner: archive.layer(name)?,
                    hash: Sha256::new(),
                };
                let opts = LayerOptions {
                    whiteouts: true,
                    max_bytes,
                };
                root.apply_layer(&mut reader, opts)?;
                // The rest of the stream (tar's end blocks) belongs to the layer's digest.
                io::copy(&mut reader, &mut io::sink())
                    .map_err(|e| ExtractError::Malformed(e.to_string()))?;
                layers.push(format!("sha256:{}", hex::encode(reader.hash.finalize())));
            }
            Ok(layers)
        })();
        let layers = match applied {
            Ok(l) => l,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&staging);
                return Err(e);
            }
        };
        let digest = image_digest(&contents.config, &layers);
        let size_bytes = self.commit(&staging, &digest, &contents.config)?;
        Ok(Imported {
            digest,
            size_bytes,
            config: contents.config,
        })
    }

    /// Unpacks one plain root filesystem tar (no whiteouts), as a sandbox's
    /// `tar` of its `/` produces it (without [`MOUNT_POINTS`], which are
    /// created empty).
    pub fn import_rootfs_tar<R: Read>(
        &self,
        reader: R,
        config: ImageConfig,
        max_bytes: u64,
    ) -> Result<Imported, ExtractError> {
        let (staging, mut root) = self.stage()?;
        let mut reader = Hashing {
            inner: reader,
            hash: Sha256::new(),
        };
        let applied = root
            .apply_layer(
                &mut reader,
                LayerOptions {
                    whiteouts: false,
                    max_bytes,
                },
            )
            .and_then(|_| {
                io::copy(&mut reader, &mut io::sink())
                    .map(|_| ())
                    .map_err(|e| ExtractError::Malformed(e.to_string()))
            });
        // The tar left out the kernel's and runtime's mount points: they exist, empty.
        let applied = applied.and_then(|()| {
            for (dir, mode) in MOUNT_POINTS {
                let path = staging.join("rootfs").join(dir);
                if path.symlink_metadata().is_err() {
                    std::fs::create_dir(&path).map_err(io_at(&path))?;
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(*mode))
                        .map_err(io_at(&path))?;
                }
            }
            Ok(())
        });
        if let Err(e) = applied {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(e);
        }
        let layers = vec![format!("sha256:{}", hex::encode(reader.hash.finalize()))];
        let digest = image_digest(&config, &layers);
        let size_bytes = self.commit(&staging, &digest, &config)?;
        Ok(Imported {
            digest,
            size_bytes,
            config,
        })
    }
}

#[cfg(test)]
mod tests;
