//! sbxd as a child subreaper for the sandboxes it starts.
//!
//! `runsc run --detach` leaves the sandbox and gofer processes orphaned; when
//! they exit, `runsc delete` waits until their pid is gone. On hosts whose
//! init reaps slowly that wait took ~2 s per destroy. As subreaper sbxd gets
//! those orphans and reaps them at once. It only reaps the runsc sandbox and
//! gofer processes (comm `exe`): every other child is a `runsc` command that
//! tokio waits for itself, and reaping it here would steal its exit status.

use std::time::Duration;

/// How often zombies are looked for when no SIGCHLD says so (a safety net:
/// the signal is what normally triggers a scan).
const SCAN_INTERVAL: Duration = Duration::from_secs(1);

/// Makes this process the subreaper of its descendants and starts the reaping task.
pub fn start() {
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes plain integer arguments.
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    if rc != 0 {
        tracing::warn!("could not become child subreaper; destroy will be slower");
        return;
    }
    // A scan reads /proc/PID/stat of every child (two per sandbox): polling
    // every 20 ms cost sbxd 3 % of a core with 100 idle sandboxes, 16 % when
    // they were frozen (a frozen task's stat is dearer). An orphan that
    // dies sends sbxd SIGCHLD, so scan on that.
    let mut sigchld = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child()) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e, "no SIGCHLD stream; reaping by polling");
            None
        }
    };
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(match sigchld {
            Some(_) => SCAN_INTERVAL,
            None => Duration::from_millis(20),
        });
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            match sigchld.as_mut() {
                Some(signal) => {
                    tokio::select! {
                        _ = signal.recv() => {}
                        _ = tick.tick() => {}
                    }
                }
                None => {
                    tick.tick().await;
                }
            }
            reap_orphans();
        }
    });
}

fn reap_orphans() {
    let me = std::process::id().to_string();
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
            // SAFETY: waitpid on a specific child pid with WNOHANG.
            unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        }
    }
}

/// `/proc/PID/stat` of a dead runsc sandbox or gofer process: `PID (exe) Z ...`.
fn is_zombie_sandbox_process(stat: &str) -> bool {
    let Some(close) = stat.rfind(')') else {
        return false;
    };
    let comm = stat
        .split_once('(')
        .map(|(_, rest)| &rest[..rest.rfind(')').unwrap_or(0)]);
    comm == Some("exe") && stat[close + 1..].trim_start().starts_with('Z')
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
    }
}
