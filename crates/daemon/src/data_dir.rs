//! The data dir belongs to one sbxd at a time: it holds an exclusive lock on
//! `<data dir>/sbxd.lock` for as long as it runs, so that a second sbxd, or
//! `sbxd migrate-store` copying the store underneath it, is refused instead of
//! corrupting what the first one holds. The kernel drops the lock when the
//! process dies, kill -9 included, so a crash never leaves it stale.

use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// Errors of taking the lock.
#[derive(Debug, thiserror::Error)]
pub enum DataDirError {
    /// Another process holds the data dir.
    #[error("another sbxd is using the data dir {0} (it holds {0}/sbxd.lock); stop it first")]
    InUse(PathBuf),
    /// The lock file could not be opened or locked.
    #[error("locking the data dir {path}: {source}")]
    Io {
        /// The data dir.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
}

/// Held while this process owns the data dir; dropping it releases the lock.
#[derive(Debug)]
pub struct DataDirLock {
    _file: File,
}

impl DataDirLock {
    /// Takes the lock, or says who holds it; never waits.
    pub fn acquire(dir: &Path) -> Result<DataDirLock, DataDirError> {
        let io = |source| DataDirError::Io {
            path: dir.to_path_buf(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join("sbxd.lock"))
            .map_err(io)?;
        // SAFETY: flock on a descriptor this function owns; no memory is shared.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            return Err(if e.kind() == std::io::ErrorKind::WouldBlock {
                DataDirError::InUse(dir.to_path_buf())
            } else {
                io(e)
            });
        }
        Ok(DataDirLock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time_and_released_on_drop() {
        let dir = tempfile::tempdir().expect("tempdir");
        let held = DataDirLock::acquire(dir.path()).expect("first");
        // flock is per open file description: a second open in this process conflicts too.
        match DataDirLock::acquire(dir.path()) {
            Err(DataDirError::InUse(p)) => assert_eq!(p, dir.path()),
            other => panic!("a second holder must be refused: {other:?}"),
        }
        drop(held);
        DataDirLock::acquire(dir.path()).expect("free again after drop");
    }
}
