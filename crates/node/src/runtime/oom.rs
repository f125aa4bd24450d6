//! Which process the host's OOM killer takes when a sandbox reaches its
//! memory limit.
//!
//! A gVisor sandbox's memory cgroup holds runsc's sentry and gofer and one
//! host "stub" process per guest address space (systrap platform). Left
//! alone, the kernel often picks the sentry, whose RSS includes guest memory
//! it touched, and the whole sandbox dies. Measured on this host with a
//! `bytearray(1500 MiB)` in a 1 GiB sandbox: 3 of 3 attempts killed the
//! sandbox; with every stub at `oom_score_adj` 1000, 6 of 6 killed only the
//! allocating process and the sandbox kept answering. New stubs inherit the
//! value from the stubs they are cloned from, so setting it once after boot
//! covers processes started later. (Lowering the sentry's value instead is
//! refused: it runs in its own user namespace.)

use std::path::{Path, PathBuf};

/// `oom_score_adj` given to guest processes' stubs: taken first.
const GUEST_OOM_SCORE_ADJ: &str = "1000";

/// Failures while adjusting (reported, never fatal to a start).
#[derive(Debug, thiserror::Error)]
pub enum OomError {
    /// Neither cgroup version has the sandbox's process list.
    #[error("no memory cgroup found for {0}")]
    NoCgroup(String),
    /// Reading the process list failed.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// The sandbox's `cgroup.procs`: cgroup v1's memory hierarchy, else v2's unified one.
fn procs_file(mount: &Path, parent: &str, cid: &str) -> Option<PathBuf> {
    [
        mount.join("memory").join(parent).join(cid),
        mount.join(parent).join(cid),
    ]
    .into_iter()
    .map(|dir| dir.join("cgroup.procs"))
    .find(|f| f.exists())
}

/// Whether `pid` is one of runsc's own processes (named `runsc-sandbox`,
/// `runsc-gofer`, ...); stubs have an empty command line.
fn is_runsc_process(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| !c.is_empty())
        .unwrap_or(true)
}

/// Makes the guest's stub processes the OOM killer's first choice in the
/// sandbox `cid` (cgroup `<mount>/[memory/]<parent>/<cid>`); returns how
/// many processes were adjusted.
pub fn prefer_guest_processes(mount: &Path, parent: &str, cid: &str) -> Result<usize, OomError> {
    let file = procs_file(mount, parent, cid).ok_or_else(|| OomError::NoCgroup(cid.into()))?;
    let procs = std::fs::read_to_string(&file).map_err(|source| OomError::Read {
        path: file.clone(),
        source,
    })?;
    let mut adjusted = 0;
    for pid in procs.lines().filter_map(|l| l.trim().parse::<u32>().ok()) {
        if is_runsc_process(pid) {
            continue;
        }
        // A stub that exited meanwhile is fine to miss.
        if std::fs::write(format!("/proc/{pid}/oom_score_adj"), GUEST_OOM_SCORE_ADJ).is_ok() {
            adjusted += 1;
        }
    }
    Ok(adjusted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_v1_memory_hierarchy_first_then_v2() {
        let mount = tempfile::tempdir().unwrap();
        assert_eq!(procs_file(mount.path(), "sbx", "c1"), None);
        let v2 = mount.path().join("sbx/c1");
        std::fs::create_dir_all(&v2).unwrap();
        std::fs::write(v2.join("cgroup.procs"), "").unwrap();
        assert_eq!(
            procs_file(mount.path(), "sbx", "c1"),
            Some(v2.join("cgroup.procs"))
        );
        let v1 = mount.path().join("memory/sbx/c1");
        std::fs::create_dir_all(&v1).unwrap();
        std::fs::write(v1.join("cgroup.procs"), "").unwrap();
        assert_eq!(
            procs_file(mount.path(), "sbx", "c1"),
            Some(v1.join("cgroup.procs"))
        );
        assert!(matches!(
            prefer_guest_processes(mount.path(), "sbx", "c2"),
            Err(OomError::NoCgroup(_))
        ));
    }

    #[test]
    fn this_process_counts_as_a_named_one() {
        assert!(is_runsc_process(std::process::id()));
    }
}
