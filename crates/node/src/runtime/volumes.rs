//! Local volumes on this node: each volume is its own sparse ext4 image
//! (`VOLUMES_DIR/<id>.img`), loop-mounted (nodev, nosuid) on
//! `VOLUMES_DIR/<id>/` from its creation until its deletion, and bound into
//! the sandboxes that mount it. The filesystem is the size limit: a sandbox
//! that fills a volume gets ENOSPC and nothing else notices (the data dir's
//! filesystem and other volumes keep their space). The loop and mount
//! machinery is the sandbox disks' ([`super::disk`]).
//!
//! After a host reboot the images are still there and the mounts are not:
//! [`LocalVolumes::mounted`] mounts an image again when a sandbox needs it.

use super::disk::{self, DiskError};
use std::path::{Path, PathBuf};
use uuid::Uuid;

/// The volumes of this node.
pub struct LocalVolumes {
    dir: PathBuf,
    /// One mount or unmount at a time: two sandboxes booting with one
    /// volume must not both find it unmounted and mount it twice.
    lock: tokio::sync::Mutex<()>,
}

fn io(context: String) -> impl FnOnce(std::io::Error) -> DiskError {
    move |source| DiskError::Io { context, source }
}

/// Runs blocking volume work off the async workers.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, DiskError> + Send + 'static,
) -> Result<T, DiskError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| DiskError::Io {
            context: "volume task".into(),
            source: std::io::Error::other(e.to_string()),
        })?
}

impl LocalVolumes {
    /// Volumes kept under `dir` (created if missing).
    pub fn new(dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        Ok(LocalVolumes {
            dir: dir.to_path_buf(),
            lock: tokio::sync::Mutex::new(()),
        })
    }

    fn image(&self, id: Uuid) -> PathBuf {
        self.dir.join(format!("{id}.img"))
    }

    /// Host directory the volume is mounted on.
    pub fn mount_point(&self, id: Uuid) -> PathBuf {
        self.dir.join(id.to_string())
    }

    /// Formats a new volume of `size_mb` and mounts it. Its root directory is
    /// mode 0777, so that every guest user may write there (as in `/tmp`,
    /// without the sticky bit: sandboxes sharing it are one tenant's).
    pub async fn create(&self, id: Uuid, size_mb: u64) -> Result<PathBuf, DiskError> {
        let image = self.image(id);
        let size = size_mb.saturating_mul(1024 * 1024);
        let made = image.clone();
        let formatted = blocking(move || format_volume(&made, size)).await;
        if let Err(e) = formatted {
            let _ = std::fs::remove_file(&image);
            return Err(e);
        }
        let point = self.mounted(id).await?;
        let root = point.clone();
        blocking(move || {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o777))
                .map_err(io(format!("opening up {}", root.display())))
        })
        .await?;
        Ok(point)
    }

    /// The volume's mount point, mounting its image first when it is not
    /// mounted (a restart of the host).
    pub async fn mounted(&self, id: Uuid) -> Result<PathBuf, DiskError> {
        let _one = self.lock.lock().await;
        let (image, point) = (self.image(id), self.mount_point(id));
        blocking(move || {
            if is_mount_point(&point)? {
                return Ok(point);
            }
            if !image.exists() {
                return Err(DiskError::Io {
                    context: format!("volume image {}", image.display()),
                    source: std::io::Error::from(std::io::ErrorKind::NotFound),
                });
            }
            std::fs::create_dir_all(&point).map_err(io(format!("creating {}", point.display())))?;
            disk::mount_image(&image, &point)?;
            Ok(point)
        })
        .await
    }

    /// Bytes in use on the volume's filesystem (0 when it is not mounted).
    pub fn used_bytes(&self, id: Uuid) -> Result<u64, DiskError> {
        let point = self.mount_point(id);
        if !is_mount_point(&point)? {
            return Ok(0);
        }
        let stat = nix_statvfs(&point)?;
        Ok(stat)
    }

    /// Unmounts the volume and removes its image and mount point. A mount a
    /// sandbox still uses (a forced delete) is detached lazily: that
    /// sandbox keeps its open files until it ends, then the kernel frees the
    /// loop device and the image's blocks. Safe to repeat.
    pub async fn remove(&self, id: Uuid) -> Result<(), DiskError> {
        let _one = self.lock.lock().await;
        let (image, point) = (self.image(id), self.mount_point(id));
        blocking(move || {
            disk::unmount_under(&point)?;
            match std::fs::remove_dir(&point) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(io(format!("removing {}", point.display()))(e))
                }
                _ => {}
            }
            match std::fs::remove_file(&image) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    Err(io(format!("removing {}", image.display()))(e))
                }
                _ => Ok(()),
            }
        })
        .await
    }
}

/// Whether `point` is listed as a mount point in `/proc/self/mountinfo`.
fn is_mount_point(point: &Path) -> Result<bool, DiskError> {
    let point = match std::fs::canonicalize(point) {
        Ok(p) => p,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(io(format!("resolving {}", point.display()))(e)),
    };
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(io("reading /proc/self/mountinfo".into()))?;
    Ok(disk::mount_points(&mountinfo).contains(&point))
}

/// Used bytes of the filesystem mounted at `point` (blocks in use times block size).
fn nix_statvfs(point: &Path) -> Result<u64, DiskError> {
    let path = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(point.as_os_str()))
        .map_err(|_| DiskError::Io {
            context: format!("path {} has a NUL byte", point.display()),
            source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
        })?;
    // SAFETY: an all-zero statvfs is a valid out-parameter.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is NUL-terminated and `stat` outlives the call.
    if unsafe { libc::statvfs(path.as_ptr(), &mut stat) } != 0 {
        return Err(io(format!("statvfs {}", point.display()))(
            std::io::Error::last_os_error(),
        ));
    }
    let used = stat.f_blocks.saturating_sub(stat.f_bfree);
    Ok(used.saturating_mul(stat.f_frsize))
}

/// Creates a sparse image of `size` bytes at `path` and formats it as ext4
/// with a journal (a volume outlives its sandboxes and host crashes), no
/// reserved blocks and the default inode density (volumes hold many files).
fn format_volume(path: &Path, size: u64) -> Result<(), DiskError> {
    let file =
        std::fs::File::create_new(path).map_err(io(format!("creating {}", path.display())))?;
    disk::make_ext4(
        file,
        path,
        size,
        &[
            "-m",
            "0",
            "-O",
            "^resize_inode",
            "-E",
            "lazy_itable_init=1,lazy_journal_init=1,nodiscard",
        ],
    )
}
