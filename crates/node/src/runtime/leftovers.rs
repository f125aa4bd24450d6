//! Removal of what a sandbox can leave on the host when runsc itself no longer
//! knows about it: a `kill -9` of sbxd in the middle of `runsc run` leaves a
//! running sandbox and gofer whose container `runsc list` does not show, plus
//! state and lock files that make the next `runsc run` of the same id fail.

use std::path::{Path, PathBuf};

/// What [`kill_container_processes`] left behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Killed {
    /// Processes signalled, over all rounds.
    pub signalled: usize,
    /// Processes still alive when patience ran out (0: all dead).
    pub remaining: usize,
}

/// Kills (SIGKILL) every host process of a container, and keeps killing until
/// none is left or `patience` runs out. A process belongs to the container
/// when it is a task of its cgroups (`PARENT/ID` under `cgroup_mount`: the
/// Sentry and its systrap stubs) or when its command line mentions both
/// `runsc_root` and `container_id` (the gofer and any runsc command still
/// working on the container, which live outside those cgroups). Rounds repeat
/// because a fork bomb's Sentry keeps adding stubs until it is dead itself.
pub async fn kill_container_processes(
    runsc_root: &Path,
    container_id: &str,
    cgroup: &CgroupOf,
    patience: std::time::Duration,
) -> Killed {
    let deadline = std::time::Instant::now() + patience;
    let me = std::process::id() as i32;
    let mut signalled = std::collections::HashSet::new();
    loop {
        // The cgroup first and without reading anything per process: the
        // Sentry must die before it forks more stubs, and reading the command
        // lines of stubs thrashing at the memory limit is slow.
        cgroup.kill_all();
        let in_cgroup = cgroup.pids();
        let named: Vec<i32> = processes_naming(runsc_root, container_id, &in_cgroup)
            .into_iter()
            .filter(|pid| is_alive(*pid))
            .collect();
        let alive: Vec<i32> = in_cgroup
            .into_iter()
            .chain(named)
            .filter(|pid| *pid != me)
            .collect();
        if alive.is_empty() || std::time::Instant::now() >= deadline {
            return Killed {
                signalled: signalled.len(),
                remaining: alive.len(),
            };
        }
        for pid in alive {
            // SAFETY: kill(2) with a pid read from /proc or cgroupfs and a constant signal.
            if unsafe { libc::kill(pid, libc::SIGKILL) } == 0 {
                signalled.insert(pid);
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// The cgroup directories of one container: `ROOT/PARENT/ID` in every hierarchy.
#[derive(Debug, Clone)]
pub struct CgroupOf {
    dirs: Vec<PathBuf>,
}

impl CgroupOf {
    /// The container `container_id` under `parent` in the hierarchies mounted at `mount`.
    pub fn new(mount: &Path, parent: &str, container_id: &str) -> Self {
        let rel = parent.trim_start_matches('/');
        let dirs = sbx_runsc::cleanup::cgroup_roots(mount)
            .into_iter()
            .map(|root| root.join(rel).join(container_id))
            .collect();
        CgroupOf { dirs }
    }

    /// Every pid listed in the container's cgroups (none when they are gone).
    fn pids(&self) -> Vec<i32> {
        let mut pids: Vec<i32> = self
            .dirs
            .iter()
            .filter_map(|d| std::fs::read_to_string(d.join("cgroup.procs")).ok())
            .flat_map(|text| {
                text.lines()
                    .filter_map(|l| l.trim().parse::<i32>().ok())
                    .collect::<Vec<_>>()
            })
            .collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// On cgroup v2, `cgroup.kill` kills every task at once, new forks included.
    fn kill_all(&self) {
        for d in &self.dirs {
            let kill = d.join("cgroup.kill");
            if kill.exists() {
                let _ = std::fs::write(kill, "1");
            }
        }
    }
}

/// Alive and not a zombie.
fn is_alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rfind(')').map(|i| s[i + 1..].trim_start().chars().next()))
        .flatten()
        .is_some_and(|state| state != 'Z' && state != 'X')
}

/// Host processes, other than `skip`, whose command line mentions both the
/// runsc root and the container.
fn processes_naming(runsc_root: &Path, container_id: &str, skip: &[i32]) -> Vec<i32> {
    let root_flag = format!("--root={}", runsc_root.display());
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in entries.filter_map(|e| e.ok()) {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if skip.binary_search(&pid).is_ok() {
            continue;
        }
        let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if mentions(&String::from_utf8_lossy(&raw), &root_flag, container_id) {
            found.push(pid);
        }
    }
    found
}

/// Whether a NUL-separated command line belongs to this container under this root.
fn mentions(cmdline: &str, root_flag: &str, container_id: &str) -> bool {
    let mut has_root = false;
    let mut has_id = false;
    for arg in cmdline.split('\0') {
        has_root |= arg == root_flag;
        has_id |= arg == container_id
            || arg.contains(&format!("/{}/", container_id.trim_start_matches("sbx-")));
    }
    has_root && has_id
}

/// Removes runsc's state, lock and socket files for `container_id` under `runsc_root`.
pub fn remove_state_files(runsc_root: &Path, container_id: &str) {
    let Ok(entries) = std::fs::read_dir(runsc_root) else {
        return;
    };
    for entry in entries.filter_map(|e| e.ok()) {
        if entry.file_name().to_string_lossy().contains(container_id) {
            let path = entry.path();
            let _ = if path.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_this_containers_processes_match() {
        let id = "sbx-0b6c4b7e-1111-4222-8333-444455556666";
        let root = "--root=/var/lib/sbx/runsc";
        let sandbox = format!("runsc-sandbox\0{root}\0boot\0--bundle=/var/lib/sbx/sandboxes/0b6c4b7e-1111-4222-8333-444455556666/bundle\0{id}\0");
        let gofer = format!("runsc-gofer\0{root}\0gofer\0--bundle=/var/lib/sbx/sandboxes/0b6c4b7e-1111-4222-8333-444455556666/bundle\0");
        assert!(mentions(&sandbox, root, id));
        assert!(mentions(&gofer, root, id));
        assert!(!mentions(&sandbox, "--root=/other", id));
        assert!(!mentions(
            &sandbox,
            root,
            "sbx-ffffffff-1111-4222-8333-444455556666"
        ));
    }

    /// A process tree that keeps forking inside a container's cgroup, plus one
    /// process outside it that only names the container on its command line:
    /// all are killed, and an unrelated process is left alone.
    #[tokio::test]
    #[ignore = "needs root and cgroupfs; run ./scripts/test"]
    async fn every_task_of_the_cgroup_and_every_named_process_dies() {
        let mount = Path::new(sbx_runsc::cleanup::DEFAULT_CGROUP_MOUNT);
        let parent = format!("sbx-unit-{}", std::process::id());
        let cid = "sbx-0b6c4b7e-1111-4222-8333-444455556666";
        let cgroup = CgroupOf::new(mount, &parent, cid);
        let pids_dir = cgroup
            .dirs
            .iter()
            .find(|d| {
                d.starts_with(mount.join("pids")) || mount.join("cgroup.controllers").exists()
            })
            .expect("a pids hierarchy")
            .clone();
        std::fs::create_dir_all(&pids_dir).expect("create the test cgroup");
        std::fs::write(pids_dir.join("pids.max"), "64").expect("limit the test cgroup");
        let procs = pids_dir.join("cgroup.procs");
        let forker = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "echo $$ > {}; while :; do sleep 300 & done",
                procs.display()
            ))
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn the forker");
        let root = Path::new("/var/tmp/unit-runsc-root");
        // Named on its command line (as the gofer and runsc commands are) but outside the cgroup.
        let named = std::process::Command::new("sh")
            .args(["-c", "read line", "x"])
            .arg(format!("--root={}", root.display()))
            .arg(cid)
            .stdin(std::process::Stdio::piped())
            .spawn()
            .expect("spawn the named process");
        let bystander = std::process::Command::new("sleep")
            .arg("300")
            .spawn()
            .expect("spawn the bystander");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while cgroup.pids().len() < 5 {
            assert!(
                std::time::Instant::now() < deadline,
                "the forker never filled its cgroup"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let killed =
            kill_container_processes(root, cid, &cgroup, std::time::Duration::from_secs(20)).await;
        let left = cgroup.pids();
        let named_alive = is_alive(named.id() as i32);
        let bystander_alive = is_alive(bystander.id() as i32);
        let _ = unsafe { libc::kill(bystander.id() as i32, libc::SIGKILL) };
        let _ = std::fs::remove_dir(&pids_dir);
        let _ = std::fs::remove_dir(pids_dir.parent().expect("parent"));
        drop((forker, named, bystander));
        assert_eq!(killed.remaining, 0, "{killed:?}");
        assert!(killed.signalled >= 6, "{killed:?}");
        assert!(left.is_empty(), "cgroup still lists {left:?}");
        assert!(!named_alive, "the process naming the container survived");
        assert!(bystander_alive, "an unrelated process was killed");
    }
}
