//! Removal of what a sandbox can leave on the host when runsc itself no longer
//! knows about it: a `kill -9` of sbxd in the middle of `runsc run` leaves a
//! running sandbox and gofer whose container `runsc list` does not show, plus
//! state and lock files that make the next `runsc run` of the same id fail.

use std::path::Path;

/// Kills (SIGKILL) every host process whose command line mentions both
/// `runsc_root` and `container_id` (the runsc sandbox, gofer and any runsc
/// command still working on that container) and waits until they are dead.
/// Returns how many were killed.
pub async fn kill_container_processes(runsc_root: &Path, container_id: &str) -> usize {
    let pids = signal_container_processes(runsc_root, container_id);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while pids.iter().any(|pid| is_alive(*pid)) && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    pids.len()
}

/// Alive and not a zombie.
fn is_alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rfind(')').map(|i| s[i + 1..].trim_start().chars().next()))
        .flatten()
        .is_some_and(|state| state != 'Z' && state != 'X')
}

fn signal_container_processes(runsc_root: &Path, container_id: &str) -> Vec<i32> {
    let root_flag = format!("--root={}", runsc_root.display());
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let me = std::process::id();
    let mut killed = Vec::new();
    for entry in entries.filter_map(|e| e.ok()) {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if pid as u32 == me {
            continue;
        }
        let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&raw);
        if mentions(&cmdline, &root_flag, container_id) {
            // SAFETY: kill(2) with a pid read from /proc and a constant signal.
            if unsafe { libc::kill(pid, libc::SIGKILL) } == 0 {
                killed.push(pid);
            }
        }
    }
    killed
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
}
