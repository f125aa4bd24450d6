//! quotafs: the size limit of S3 volumes.
//!
//! rclone has no quota, so a thin FUSE passthrough sits between rclone's
//! mount of a volume (the source, a directory only root reaches) and the
//! mount point sbxd binds into sandboxes. It counts the bytes of regular
//! files (a walk of the source at mount, then every operation that changes
//! a size) and refuses with `ENOSPC` a write, truncate or fallocate that
//! would take the total past the limit; `statfs` reports the volume's size
//! and free space. Everything else is passed through as is: an `fsync`
//! and a close in the sandbox reach rclone as before (they publish files).
//!
//! The count is this node's: what it saw at mount plus its own changes. Two
//! nodes writing at once can together exceed the limit by what each wrote
//! (S3 has no shared counter to check against; see docs/volumes.md).
//!
//! It runs as `sbxd quotafs`, a process of its own per mounted volume
//! (started by [`super::s3_volumes`]), and exits when its mount is
//! unmounted.

mod fuse;
mod inodes;
mod ledger;
mod ops;
mod sys;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

/// The source of a quotafs mount in `mountinfo` (its type is `fuse`, or
/// `fuse.sbxquota` when mounted through fusermount3).
pub const FS_NAME: &str = "sbx-quotafs";

/// Errors of quotafs.
#[derive(Debug, thiserror::Error)]
pub enum QuotafsError {
    /// The walk of the source at mount failed.
    #[error("counting the bytes under {path}: {source}")]
    Walk {
        /// The source.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Mounting or serving failed.
    #[error("serving {mount}: {source}")]
    Serve {
        /// The mount point.
        mount: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// Mounts a passthrough of `source` on `mount` whose regular files may take
/// `limit_bytes`, and serves it until it is unmounted.
pub fn serve(source: &Path, mount: &Path, limit_bytes: u64) -> Result<(), QuotafsError> {
    let used = ops::walk(source).map_err(|e| QuotafsError::Walk {
        path: source.to_path_buf(),
        source: e,
    })?;
    tracing::info!(
        source = %source.display(),
        mount = %mount.display(),
        limit_bytes,
        used_bytes = used,
        "quotafs mounting"
    );
    let fs = fuse::QuotaFs(ops::Passthrough::new(source, limit_bytes, used));
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        fuser::MountOption::FSName(FS_NAME.into()),
        fuser::MountOption::Subtype("sbxquota".into()),
        fuser::MountOption::NoDev,
        fuser::MountOption::NoSuid,
        fuser::MountOption::RW,
    ];
    // runsc's gofer opens the files from its own namespaces, as another
    // user than the mounter: `allow_other`, as rclone's mount had. No
    // `default_permissions`, also as rclone's: gVisor checks permissions
    // for the guest, and rclone stores none.
    config.acl = fuser::SessionACL::All;
    // Requests of several sandboxes (and readers while a write waits on
    // the ledger) are served side by side.
    config.n_threads = Some(4);
    fuser::mount(fs, mount, &config).map_err(|e| QuotafsError::Serve {
        mount: mount.to_path_buf(),
        source: e,
    })
}
