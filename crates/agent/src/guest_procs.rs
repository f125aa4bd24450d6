//! `GuestProcesses`: how many processes the guest runs, sbxd's relays left out.
//!
//! sbxd lets a sandbox sleep only when PID 1 is all that runs. A sandbox it
//! reaches through a relay (`runsc exec … sbx-agent relay`, after an sbxd
//! restart) always has that relay in `/proc` too, so counting every pid kept
//! such sandboxes awake forever. A relay is told apart by two things the
//! guest cannot fake together: its parent pid is 0 (only `runsc exec` from
//! the host starts a process without a parent in the guest; orphans go to
//! PID 1) and its command line is `… sbx-agent relay`. The one-shot helpers
//! sbxd also starts that way (`write-file`, `read-file`) do count: freezing a
//! transfer in flight would stall it.

use sbx_agent_proto::Reply;
use std::path::Path;

/// `GuestProcesses` on this guest's `/proc`.
pub fn guest_processes() -> Reply {
    Reply::GuestProcesses {
        count: count_in(Path::new("/proc")),
    }
}

/// The pids under `proc` that are not sbxd's relays.
pub fn count_in(proc: &Path) -> u64 {
    let Ok(read) = std::fs::read_dir(proc) else {
        return 0;
    };
    read.filter_map(Result::ok)
        .filter(|e| is_pid(&e.file_name().to_string_lossy()))
        .filter(|e| !is_relay(&e.path()))
        .count() as u64
}

fn is_pid(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_digit())
}

/// Whether `/proc/PID` (as `dir`) is a relay sbxd started. A process that
/// exits while it is read is not one (it no longer runs either way).
fn is_relay(dir: &Path) -> bool {
    let Ok(stat) = std::fs::read_to_string(dir.join("stat")) else {
        return false;
    };
    if parent_pid(&stat) != Some(0) {
        return false;
    }
    let Ok(cmdline) = std::fs::read(dir.join("cmdline")) else {
        return false;
    };
    let mut args = cmdline.split(|b| *b == 0);
    let program = args.next().unwrap_or_default();
    program.ends_with(b"sbx-agent") && args.next() == Some(b"relay".as_slice())
}

/// The fourth field of `/proc/PID/stat`. The second, the command name in
/// parentheses, may itself hold spaces and parentheses: fields are counted
/// from its last `)`.
fn parent_pid(stat: &str) -> Option<u32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes a fake `/proc/PID` with its `stat` and `cmdline`.
    fn process(proc: &Path, pid: u32, comm: &str, ppid: u32, argv: &[&str]) {
        let dir = proc.join(pid.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("stat"), format!("{pid} ({comm}) S {ppid} 1 1 0")).unwrap();
        let mut cmdline = argv.join("\0").into_bytes();
        cmdline.push(0);
        std::fs::write(dir.join("cmdline"), cmdline).unwrap();
    }

    #[test]
    fn relays_started_from_the_host_do_not_count_anything_else_does() {
        let proc = tempfile::tempdir().unwrap();
        let p = proc.path();
        process(p, 1, "sbx-agent", 0, &["/.sbx/sbx-agent", "init"]);
        std::fs::create_dir(p.join("self")).unwrap();
        assert_eq!(count_in(p), 1, "PID 1 alone");

        process(p, 7, "sbx-agent", 0, &["/.sbx/sbx-agent", "relay"]);
        assert_eq!(count_in(p), 1, "a relay is left out");

        // A guest process dressed as a relay still has a parent.
        process(p, 9, "sbx-agent", 1, &["/.sbx/sbx-agent", "relay"]);
        // A transfer in flight counts: freezing it would stall it.
        process(
            p,
            11,
            "sbx-agent",
            0,
            &["/.sbx/sbx-agent", "write-file", "/x"],
        );
        // A command name with spaces and parentheses does not shift the fields.
        process(p, 13, "a) S 0 (b", 1, &["python3"]);
        assert_eq!(count_in(p), 4);
    }

    #[test]
    fn a_process_that_exits_while_it_is_read_is_not_a_relay() {
        let proc = tempfile::tempdir().unwrap();
        std::fs::create_dir(proc.path().join("5")).unwrap();
        assert!(!is_relay(&proc.path().join("5")));
        assert_eq!(count_in(proc.path()), 1);
        assert_eq!(count_in(&proc.path().join("missing")), 0);
    }

    #[test]
    fn parent_pid_is_read_after_the_last_parenthesis() {
        assert_eq!(parent_pid("12 (sh) S 0 12 12"), Some(0));
        assert_eq!(parent_pid("12 (x) y) R 3 12 12"), Some(3));
        assert_eq!(parent_pid("garbage"), None);
    }
}
