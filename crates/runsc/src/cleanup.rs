//! Removing what killed runs left behind: runsc containers (state files and
//! sandbox processes) and cgroup directories.
//!
//! Convention: a container's `linux.cgroupsPath` is `PARENT/ID` (e.g.
//! `/sbx/sbx-123`), so the cgroup directories of a container are named after
//! its id under `PARENT` in every hierarchy.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use crate::{Result, Runsc};

/// Default mount point of the cgroup filesystems.
pub const DEFAULT_CGROUP_MOUNT: &str = "/sys/fs/cgroup";

/// What a cleanup pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CleanupReport {
    /// Container ids deleted with `runsc delete --force`.
    pub deleted: Vec<String>,
    /// Container ids whose deletion failed, with the error text.
    pub failed: Vec<(String, String)>,
    /// cgroup directories removed.
    pub cgroups_removed: Vec<PathBuf>,
    /// cgroup directories that could not be removed (e.g. still busy).
    pub cgroups_failed: Vec<(PathBuf, String)>,
}

/// Where to look for cgroup directories.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupCleanup {
    /// Mount point of the cgroup filesystems (`/sys/fs/cgroup`).
    pub mount: PathBuf,
    /// Parent of the per-container cgroups, e.g. `/sbx`.
    pub parent: String,
}

impl CgroupCleanup {
    /// `/sys/fs/cgroup` with the given parent.
    pub fn new(parent: impl Into<String>) -> Self {
        CgroupCleanup {
            mount: PathBuf::from(DEFAULT_CGROUP_MOUNT),
            parent: parent.into(),
        }
    }
}

/// Deletes (`delete --force`) every container under `runsc.root` whose id
/// satisfies `should_delete`, then, when `cgroups` is given, removes the
/// cgroup directories `PARENT/NAME` whose name satisfies `should_delete`.
/// Failures of single containers or directories are collected in the
/// report; only a failing `runsc list` is an error.
pub async fn cleanup<F>(
    runsc: &Runsc,
    should_delete: F,
    cgroups: Option<&CgroupCleanup>,
) -> Result<CleanupReport>
where
    F: Fn(&str) -> bool,
{
    let mut report = CleanupReport::default();
    for c in runsc.list().await? {
        if !should_delete(&c.id) {
            continue;
        }
        match runsc.delete(&c.id, true).await {
            Ok(()) => report.deleted.push(c.id),
            Err(e) if e.is_not_found() => report.deleted.push(c.id),
            Err(e) => {
                tracing::warn!(id = %c.id, error = %e, "cleanup: delete failed");
                report.failed.push((c.id, e.to_string()));
            }
        }
    }
    if let Some(cg) = cgroups {
        let (removed, failed) = remove_cgroups(&cg.mount, &cg.parent, &should_delete);
        report.cgroups_removed = removed;
        report.cgroups_failed = failed;
    }
    Ok(report)
}

/// The hierarchy roots under a cgroup mount point: the mount itself when it
/// is a v2 unified hierarchy (has `cgroup.controllers`), else every
/// non-symlink subdirectory holding `cgroup.procs` (v1 controllers, named
/// hierarchies and, on hybrid hosts, `unified`).
pub fn cgroup_roots(mount: &Path) -> Vec<PathBuf> {
    if mount.join("cgroup.controllers").exists() {
        return vec![mount.to_path_buf()];
    }
    let Ok(entries) = std::fs::read_dir(mount) else {
        return Vec::new();
    };
    let mut roots: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
        .map(|e| e.path())
        .filter(|p| p.join("cgroup.procs").exists())
        .collect();
    roots.sort();
    roots
}

/// Removes `ROOT/PARENT/NAME` (children first) in every hierarchy root for
/// each `NAME` satisfying `should_remove`. Uses `rmdir` only, as cgroupfs
/// requires; a cgroup that still has tasks fails with `EBUSY` and is
/// reported. Returns (removed, failed).
pub fn remove_cgroups<F>(
    mount: &Path,
    parent: &str,
    should_remove: F,
) -> (Vec<PathBuf>, Vec<(PathBuf, String)>)
where
    F: Fn(&str) -> bool,
{
    let mut removed = Vec::new();
    let mut failed = Vec::new();
    let rel = parent.trim_start_matches('/');
    for root in cgroup_roots(mount) {
        let dir = if rel.is_empty() { root } else { root.join(rel) };
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.filter_map(|e| e.ok()) {
            let name = e.file_name().to_string_lossy().into_owned();
            let is_dir = e.file_type().map(|t| t.is_dir()).unwrap_or(false);
            if !is_dir || !should_remove(&name) {
                continue;
            }
            rmdir_tree(&e.path(), &mut removed, &mut failed);
        }
    }
    (removed, failed)
}

/// `rmdir` of a cgroup directory after its child directories.
fn rmdir_tree(dir: &Path, removed: &mut Vec<PathBuf>, failed: &mut Vec<(PathBuf, String)>) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.filter_map(|e| e.ok()) {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                rmdir_tree(&e.path(), removed, failed);
            }
        }
    }
    match std::fs::remove_dir(dir) {
        Ok(()) => removed.push(dir.to_path_buf()),
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => failed.push((dir.to_path_buf(), e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mkdirs(base: &Path, rels: &[&str]) {
        for r in rels {
            std::fs::create_dir_all(base.join(r)).expect("mkdir");
        }
    }

    fn touch(p: &Path) {
        std::fs::write(p, b"").expect("touch");
    }

    #[test]
    fn v1_hybrid_layout() {
        let t = tempfile::tempdir().expect("tempdir");
        let m = t.path();
        mkdirs(
            m,
            &[
                "memory/sbx/sbx-a/child",
                "memory/sbx/other",
                "pids/sbx/sbx-a",
                "unified/sbx/sbx-b",
                "notacgroup/sbx/sbx-c",
            ],
        );
        for c in ["memory", "pids", "unified"] {
            touch(&m.join(c).join("cgroup.procs"));
        }
        std::os::unix::fs::symlink(m.join("memory"), m.join("mem-link")).expect("symlink");
        let roots = cgroup_roots(m);
        assert_eq!(
            roots,
            vec![m.join("memory"), m.join("pids"), m.join("unified")]
        );
        let (removed, failed) = remove_cgroups(m, "/sbx", |n| n.starts_with("sbx-"));
        assert!(failed.is_empty(), "{failed:?}");
        assert_eq!(removed.len(), 4, "{removed:?}");
        assert!(!m.join("memory/sbx/sbx-a").exists());
        assert!(m.join("memory/sbx/other").exists());
        assert!(!m.join("unified/sbx/sbx-b").exists());
        assert!(m.join("notacgroup/sbx/sbx-c").exists());
    }

    #[test]
    fn v2_layout_and_failures_reported() {
        let t = tempfile::tempdir().expect("tempdir");
        let m = t.path();
        touch(&m.join("cgroup.controllers"));
        mkdirs(m, &["sbx/sbx-x", "sbx/sbx-y"]);
        // A regular file inside makes rmdir fail, like a busy cgroup.
        touch(&m.join("sbx/sbx-y/busy"));
        assert_eq!(cgroup_roots(m), vec![m.to_path_buf()]);
        let (removed, failed) = remove_cgroups(m, "sbx", |n| n.starts_with("sbx-"));
        assert_eq!(removed, vec![m.join("sbx/sbx-x")]);
        assert_eq!(failed.len(), 1);
        assert_eq!(failed[0].0, m.join("sbx/sbx-y"));
    }
}
