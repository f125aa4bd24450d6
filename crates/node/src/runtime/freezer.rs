//! The cgroup freezer for idle sandboxes: stops every host process of a
//! sandbox (its runsc sandbox, gofer and systrap stubs) until thawed.
//!
//! Why: an idle gVisor sandbox on systrap burns ~2 % of a host core even when
//! paused with `runsc pause`, which only stops the guest's tasks; frozen, it
//! burns nothing (crates/runsc/NOTES.md §10). A frozen sandbox answers
//! nothing, not even runsc's own control calls, so whatever reaches it first
//! thaws it: the agent connection before a frame (`client::doze`), the runtime
//! before runsc commands, and sbxd's start after a crash for all of them.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use uuid::Uuid;

/// How long a freeze may stay in progress (v1 `FREEZING`) before it is undone.
const FREEZE_PATIENCE: Duration = Duration::from_secs(2);

/// Freezer failures.
#[derive(Debug, thiserror::Error)]
pub enum FreezerError {
    /// The sandbox has no freezer cgroup (it ended, or the host has no freezer).
    #[error("no freezer cgroup at {0}")]
    NoCgroup(PathBuf),
    /// Reading or writing the freezer's files failed.
    #[error("freezer file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The freeze did not complete in time (and was undone).
    #[error("freeze of {0} did not complete within {FREEZE_PATIENCE:?}")]
    Stuck(String),
}

/// Which freezer interface the host has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    /// `freezer` controller: `freezer.state` FROZEN / THAWED.
    V1,
    /// Unified hierarchy: `cgroup.freeze` 1 / 0, `cgroup.events` `frozen 1`.
    V2,
}

/// The freezer of the sandboxes under one parent cgroup.
#[derive(Debug, Clone)]
pub struct Freezer {
    mount: PathBuf,
    parent: String,
}

impl Freezer {
    /// The freezer of containers under `mount/…/parent/`.
    pub fn new(mount: &Path, parent: &str) -> Self {
        Freezer {
            mount: mount.to_path_buf(),
            parent: parent.trim_matches('/').to_string(),
        }
    }

    fn dir(&self, cid: &str) -> Result<(Version, PathBuf), FreezerError> {
        let v2 = self.mount.join(&self.parent).join(cid);
        if v2.join("cgroup.freeze").exists() {
            return Ok((Version::V2, v2));
        }
        let v1 = self.mount.join("freezer").join(&self.parent).join(cid);
        if v1.join("freezer.state").exists() {
            return Ok((Version::V1, v1));
        }
        Err(FreezerError::NoCgroup(v1))
    }

    /// Freezes container `cid`; returns once every process is stopped.
    pub fn freeze(&self, cid: &str) -> Result<(), FreezerError> {
        let (version, dir) = self.dir(cid)?;
        match version {
            Version::V1 => write(&dir.join("freezer.state"), "FROZEN")?,
            Version::V2 => write(&dir.join("cgroup.freeze"), "1")?,
        }
        let started = Instant::now();
        // A v1 freeze goes through FREEZING while tasks stop; it takes a
        // millisecond or so. Past the patience something is stuck: undo it
        // rather than leave a sandbox half frozen.
        while !is_frozen_in(version, &dir)? {
            if started.elapsed() > FREEZE_PATIENCE {
                self.thaw(cid)?;
                return Err(FreezerError::Stuck(cid.to_string()));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }

    /// Thaws container `cid` (nothing when it is not frozen or has ended).
    pub fn thaw(&self, cid: &str) -> Result<(), FreezerError> {
        let (version, dir) = match self.dir(cid) {
            Ok(found) => found,
            Err(FreezerError::NoCgroup(_)) => return Ok(()),
            Err(e) => return Err(e),
        };
        match version {
            Version::V1 => write(&dir.join("freezer.state"), "THAWED"),
            Version::V2 => write(&dir.join("cgroup.freeze"), "0"),
        }
    }

    /// Whether container `cid` is frozen (false when it has no cgroup).
    pub fn is_frozen(&self, cid: &str) -> bool {
        match self.dir(cid) {
            Ok((version, dir)) => is_frozen_in(version, &dir).unwrap_or(false),
            Err(_) => false,
        }
    }

    /// Thaws every frozen container of the sandboxes with a directory in
    /// `sandboxes_dir` (named by id; `cid` names its container): those a
    /// previous sbxd left frozen (it died while they slept), and, before
    /// `runsc list` or when sbxd stops, this sbxd's own sleeping ones (`runsc
    /// list` asks each sandbox and waits forever for a frozen one). Returns
    /// how many were thawed.
    pub fn thaw_all(&self, sandboxes_dir: &Path, cid: impl Fn(Uuid) -> String) -> usize {
        let Ok(entries) = std::fs::read_dir(sandboxes_dir) else {
            return 0;
        };
        let mut thawed = 0;
        for e in entries.filter_map(|e| e.ok()) {
            let Some(id) = e.file_name().to_str().and_then(|s| Uuid::parse_str(s).ok()) else {
                continue;
            };
            let cid = cid(id);
            if !self.is_frozen(&cid) {
                continue;
            }
            match self.thaw(&cid) {
                Ok(()) => {
                    tracing::info!(sandbox = %id, "thawed a sleeping sandbox");
                    thawed += 1;
                }
                Err(e) => {
                    tracing::warn!(sandbox = %id, error = %e, "cannot thaw a sleeping sandbox")
                }
            }
        }
        thawed
    }
}

fn is_frozen_in(version: Version, dir: &Path) -> Result<bool, FreezerError> {
    Ok(match version {
        Version::V1 => read(&dir.join("freezer.state"))?.trim() == "FROZEN",
        Version::V2 => read(&dir.join("cgroup.events"))?
            .lines()
            .any(|l| l.trim() == "frozen 1"),
    })
}

fn read(path: &Path) -> Result<String, FreezerError> {
    std::fs::read_to_string(path).map_err(|source| FreezerError::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn write(path: &Path, value: &str) -> Result<(), FreezerError> {
    std::fs::write(path, value).map_err(|source| FreezerError::Io {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    //! Unit tests on a fake cgroup tree (plain files): which interface is
    //! picked and what is written. The real freezer is exercised by the
    //! integration tests (sbxd/tests/idle_freeze.rs).
    use super::*;

    fn v1_tree(cid: &str, state: &str) -> (tempfile::TempDir, Freezer) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("freezer/sbx").join(cid);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("freezer.state"), state).unwrap();
        let f = Freezer::new(tmp.path(), "sbx");
        (tmp, f)
    }

    #[test]
    fn v1_freeze_writes_frozen_and_thaw_writes_thawed() {
        // A plain file reads back what was written: the freeze "completes" at once.
        let (tmp, f) = v1_tree("sbx-a", "THAWED\n");
        let state = tmp.path().join("freezer/sbx/sbx-a/freezer.state");
        assert!(!f.is_frozen("sbx-a"));
        f.freeze("sbx-a").unwrap();
        assert_eq!(std::fs::read_to_string(&state).unwrap(), "FROZEN");
        assert!(f.is_frozen("sbx-a"));
        f.thaw("sbx-a").unwrap();
        assert_eq!(std::fs::read_to_string(&state).unwrap(), "THAWED");
    }

    #[test]
    fn v2_uses_cgroup_freeze_and_waits_for_the_event() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("sbx/sbx-b");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("cgroup.freeze"), "0").unwrap();
        std::fs::write(dir.join("cgroup.events"), "populated 1\nfrozen 1\n").unwrap();
        let f = Freezer::new(tmp.path(), "/sbx/");
        f.freeze("sbx-b").unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join("cgroup.freeze")).unwrap(),
            "1"
        );
        f.thaw("sbx-b").unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join("cgroup.freeze")).unwrap(),
            "0"
        );
    }

    #[test]
    fn a_missing_cgroup_cannot_freeze_and_thaws_as_a_no_op() {
        let tmp = tempfile::tempdir().unwrap();
        let f = Freezer::new(tmp.path(), "sbx");
        assert!(matches!(
            f.freeze("sbx-gone"),
            Err(FreezerError::NoCgroup(_))
        ));
        f.thaw("sbx-gone").unwrap();
        assert!(!f.is_frozen("sbx-gone"));
    }

    #[test]
    fn leftovers_of_this_data_dir_are_thawed_and_no_others() {
        let ours = Uuid::new_v4();
        let theirs = Uuid::new_v4();
        let (tmp, f) = v1_tree(&format!("sbx-{ours}"), "FROZEN");
        let dir = tmp.path().join("freezer/sbx").join(format!("sbx-{theirs}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("freezer.state"), "FROZEN").unwrap();
        let sandboxes = tmp.path().join("sandboxes");
        std::fs::create_dir_all(sandboxes.join(ours.to_string())).unwrap();
        std::fs::create_dir_all(sandboxes.join("not-a-sandbox")).unwrap();
        assert_eq!(f.thaw_all(&sandboxes, |id| format!("sbx-{id}")), 1);
        assert!(!f.is_frozen(&format!("sbx-{ours}")));
        assert!(f.is_frozen(&format!("sbx-{theirs}")));
    }
}
