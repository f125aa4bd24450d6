//! The bench as a child subreaper, as sbxd is (crates/node/src/reaper.rs).
//!
//! `runsc run --detach` and `runsc restore --detach` leave the sandbox and
//! gofer processes orphaned, and `runsc delete` waits until their pids are
//! gone. On a host whose init reaps lazily that wait is ~1.5 s, which would
//! make the raw `destroy` column measure the host's init rather than runsc.
//! sbxd avoids it by being a subreaper; the bench does the same so both
//! sides run under the same conditions. Only zombie `exe` processes (runsc
//! sandbox/gofer) are reaped: every other child is a `runsc` command that
//! tokio waits for itself.

use std::time::Duration;

/// How often zombies are looked for (sbxd's interval).
const SCAN_INTERVAL: Duration = Duration::from_millis(20);

/// Becomes the subreaper of this process's descendants and starts reaping.
/// Returns false when prctl fails.
pub fn start() -> bool {
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes plain integer arguments.
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    if rc != 0 {
        return false;
    }
    tokio::spawn(async {
        let mut tick = tokio::time::interval(SCAN_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            reap_orphans();
        }
    });
    true
}

fn reap_orphans() {
    let me = std::process::id();
    let Ok(children) = std::fs::read_to_string(format!("/proc/{me}/task/{me}/children")) else {
        return;
    };
    for pid in children
        .split_whitespace()
        .filter_map(|p| p.parse::<i32>().ok())
    {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        if is_zombie_sandbox_process(&stat) {
            let mut status = 0;
            // SAFETY: waitpid on one specific child pid with WNOHANG.
            unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        }
    }
}

/// `/proc/PID/stat` of a dead runsc sandbox or gofer process: `PID (exe) Z ...`.
fn is_zombie_sandbox_process(stat: &str) -> bool {
    let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
        return false;
    };
    if open >= close {
        return false;
    }
    &stat[open + 1..close] == "exe" && stat[close + 1..].trim_start().starts_with('Z')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_dead_sandbox_processes_are_reaped() {
        assert!(is_zombie_sandbox_process("123 (exe) Z 1 2 3"));
        assert!(!is_zombie_sandbox_process("123 (exe) S 1 2 3"));
        assert!(!is_zombie_sandbox_process("123 (runsc) Z 1 2 3"));
        assert!(!is_zombie_sandbox_process("garbage"));
        assert!(!is_zombie_sandbox_process(") (exe"));
    }
}
