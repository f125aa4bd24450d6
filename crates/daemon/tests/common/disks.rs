//! Sandbox disks in integration tests: mounts and loop devices under a
//! test's data dir, their cleanup, and which of them a live sandbox owns.

use super::Daemon;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Mount points at or below `dir`, from /proc/self/mountinfo (test data
/// dirs have no characters the kernel escapes).
pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    mountinfo
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(PathBuf::from)
        .filter(|p| p.starts_with(dir))
        .collect()
}

/// Backing files below `dir` of attached loop devices (`losetup -a`, read from sysfs).
pub fn loop_files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir("/sys/block")
        .into_iter()
        .flatten()
        .flatten()
    {
        if !entry.file_name().to_string_lossy().starts_with("loop") {
            continue;
        }
        if let Ok(backing) = std::fs::read_to_string(entry.path().join("loop/backing_file")) {
            let file = PathBuf::from(backing.trim().trim_end_matches(" (deleted)"));
            if file.starts_with(dir) {
                files.push(file);
            }
        }
    }
    files
}

/// Lazily unmounts every mount at or below `dir`, deepest first.
pub fn unmount_under(dir: &Path) {
    let mut points = mounts_under(dir);
    points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for point in points {
        let _ = Command::new("umount").arg("-l").arg(&point).output();
    }
}

impl Daemon {
    /// Mounts and loop devices under the data dir that no RUNNING or PAUSED
    /// sandbox owns (its disk: `sandboxes/<id>/overlay` on `sandboxes/<id>/disk.img`).
    pub(super) fn disk_mismatches(&self, sandboxes: &[Value]) -> Vec<String> {
        let live: std::collections::BTreeSet<&str> = sandboxes
            .iter()
            .filter(|s| matches!(s["status"].as_str(), Some("RUNNING" | "PAUSED")))
            .filter_map(|s| s["id"].as_str())
            .collect();
        let sandboxes_dir = self.dir.path().join("sandboxes");
        let owner = |path: &Path, leaf: &str| -> Option<String> {
            let rest = path.strip_prefix(&sandboxes_dir).ok()?;
            let mut parts = rest.components();
            let id = parts.next()?.as_os_str().to_string_lossy().into_owned();
            let tail = parts.as_path();
            (tail == Path::new(leaf) && live.contains(id.as_str())).then_some(id)
        };
        let mut problems = Vec::new();
        for mount in mounts_under(self.dir.path()) {
            // A test may put the data dir itself on its own filesystem (disk_full.rs).
            if mount == self.dir.path() {
                continue;
            }
            if owner(&mount, "overlay").is_none() {
                problems.push(format!(
                    "mount {} belongs to no live sandbox",
                    mount.display()
                ));
            }
        }
        for file in loop_files_under(self.dir.path()) {
            if owner(&file, "disk.img").is_none() {
                problems.push(format!(
                    "loop device on {} belongs to no live sandbox",
                    file.display()
                ));
            }
        }
        problems
    }
}
