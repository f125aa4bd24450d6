//! The one error type of this crate.

use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::Duration;

/// Everything that can go wrong while driving `runsc` or writing its inputs.
///
/// Failures of the CLI keep the full argv, the exit status and what the
/// process printed, so callers can log them verbatim.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The `runsc` binary could not be started at all.
    #[error("spawning {argv:?}: {source}")]
    Spawn {
        /// Full command line, binary first.
        argv: Vec<String>,
        /// Why the spawn failed.
        source: std::io::Error,
    },

    /// `runsc` ran and exited unsuccessfully.
    #[error("{argv:?} failed with {status}: {}", stderr.trim())]
    Failed {
        /// Full command line, binary first.
        argv: Vec<String>,
        /// Exit status of the `runsc` process.
        status: ExitStatus,
        /// Captured stdout (empty when stdout went to a file).
        stdout: String,
        /// Captured stderr; for detached runs whose stderr is a file, the
        /// bytes the command appended to that file.
        stderr: String,
    },

    /// `runsc` succeeded but its JSON output did not parse.
    #[error("parsing output of {argv:?}: {source}")]
    Parse {
        /// Full command line, binary first.
        argv: Vec<String>,
        /// The JSON error.
        source: serde_json::Error,
        /// The output that failed to parse.
        stdout: String,
    },

    /// `runsc` reported that the container does not exist under this root.
    #[error("container {id} does not exist")]
    NotFound {
        /// The container id that was asked for.
        id: String,
    },

    /// `runsc` did not finish within [`crate::Runsc::timeout`]; it was killed.
    #[error("{argv:?} timed out after {after:?}")]
    Timeout {
        /// Full command line, binary first.
        argv: Vec<String>,
        /// The timeout that expired.
        after: Duration,
    },

    /// A local file operation (bundle, console log, cgroup dir) failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done, e.g. "writing".
        op: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

impl Error {
    /// True for [`Error::NotFound`]; lets destroy paths be idempotent.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::NotFound { .. })
    }

    /// Whether the disk was full (ENOSPC): writing the bundle or console log,
    /// or inside `runsc` itself (its state file, a checkpoint image).
    pub fn is_disk_full(&self) -> bool {
        match self {
            Error::Spawn { source, .. } | Error::Io { source, .. } => is_enospc(source),
            Error::Failed { stderr, .. } => stderr
                .to_ascii_lowercase()
                .contains("no space left on device"),
            _ => false,
        }
    }

    /// The stderr `runsc` printed, when this error carries one.
    pub fn stderr(&self) -> Option<&str> {
        match self {
            Error::Failed { stderr, .. } => Some(stderr),
            _ => None,
        }
    }
}

/// Whether an I/O error is ENOSPC (the filesystem is full).
pub fn is_enospc(e: &std::io::Error) -> bool {
    // std maps ENOSPC to this kind.
    e.kind() == std::io::ErrorKind::StorageFull
}

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Whether `stderr` of a failed per-container command means "no such
/// container". runsc 20240729 prints `loading container: file does not exist`
/// (state, kill, pause, checkpoint), `loading container "ID": file does not
/// exist` (delete) and `loading sandbox: file does not exist` (exec); other
/// versions say `container ... not found`.
pub(crate) fn means_not_found(stderr: &str) -> bool {
    let s = stderr.to_ascii_lowercase();
    let missing = s.contains("does not exist") || s.contains("not found");
    let about_container = s.contains("container") || s.contains("loading sandbox");
    missing && about_container
}

#[cfg(test)]
mod tests {
    use super::{means_not_found, Error};

    #[test]
    fn recognises_a_full_disk() {
        let io = Error::Io {
            op: "writing",
            path: "/x".into(),
            source: std::io::Error::from_raw_os_error(28),
        };
        assert!(io.is_disk_full());
        let other = Error::Io {
            op: "writing",
            path: "/x".into(),
            source: std::io::Error::from_raw_os_error(13),
        };
        assert!(!other.is_disk_full());
        let failed = Error::Failed {
            argv: vec!["runsc".into()],
            status: std::os::unix::process::ExitStatusExt::from_raw(256),
            stdout: String::new(),
            stderr: "writing state file: write /x: No space left on device".into(),
        };
        assert!(failed.is_disk_full());
    }

    #[test]
    fn recognises_runsc_messages() {
        assert!(means_not_found("loading container: file does not exist\n"));
        assert!(means_not_found(
            "loading container \"sbx-1\": file does not exist"
        ));
        assert!(means_not_found("loading sandbox: file does not exist"));
        assert!(means_not_found("container \"x\" not found"));
        assert!(!means_not_found("sandbox is not running"));
        assert!(!means_not_found(
            "cannot delete container that is not stopped without --force flag"
        ));
        assert!(!means_not_found("open /b/config.json: file does not exist"));
    }
}
