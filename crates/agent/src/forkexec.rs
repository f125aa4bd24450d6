//! Starting a child that needs setup posix_spawn cannot express: a user
//! switch (setgroups, setgid, setuid) and a controlling terminal (setsid,
//! `TIOCSCTTY`).
//!
//! Why a `clone(CLONE_VM | CLONE_VFORK)` and not `fork`: under gVisor a fork
//! of the multi-threaded agent costs 9–25 ms against 4–7 ms for the vfork
//! path posix_spawn takes (see launch.rs), and E2B runs most commands as a
//! user. This is what glibc's posix_spawn does internally: the child shares
//! the agent's memory while the calling thread is suspended until the exec,
//! so it may only make raw system calls on the data prepared here, and must
//! never allocate or take a lock. Credentials are changed with raw syscalls:
//! glibc's `setuid` & co. would broadcast the change to every thread of what
//! it believes is its process — the agent's threads, whose memory we share.

use crate::launch::{pipe, CCommand, ChildIo, Credentials, LaunchError, Options, Started};
use crate::spawn::Prepared;
use std::ffi::c_void;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

/// Stack of the cloned child; only the setup below runs on it.
const CHILD_STACK_BYTES: usize = 256 * 1024;

/// Which step failed in the child.
const STAGE_SETUP: libc::c_int = 1;
const STAGE_CWD: libc::c_int = 2;
const STAGE_EXEC: libc::c_int = 3;

/// Everything the child reads (prepared before the clone) and the failure it
/// reports back through the shared memory.
#[repr(C)]
struct ChildArgs {
    program: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    cwd: *const libc::c_char,
    /// Sources of the child's fds 0, 1 and 2.
    fds: [libc::c_int; 3],
    /// setsid and make fd 0 the controlling terminal (else setpgid(0, 0)).
    session: bool,
    switch_user: bool,
    uid: libc::uid_t,
    gid: libc::gid_t,
    groups: *const libc::gid_t,
    ngroups: usize,
    /// RLIMIT_NPROC to set before the exec (`u64::MAX`: leave it).
    task_limit: u64,
    failed_stage: libc::c_int,
    failed_errno: libc::c_int,
}

/// Records the failing step and errno, then exits. Runs in the child.
unsafe fn fail(a: *mut ChildArgs, stage: libc::c_int) -> ! {
    (*a).failed_errno = *libc::__errno_location();
    (*a).failed_stage = stage;
    libc::_exit(127)
}

/// The child: raw system calls only (see the module comment).
extern "C" fn child(arg: *mut c_void) -> libc::c_int {
    let a = arg as *mut ChildArgs;
    // SAFETY: `a` points to the parent's ChildArgs, alive (the parent is
    // suspended) until this child execs or exits; every pointer in it is
    // valid for the same span. Only async-signal-safe calls are made.
    unsafe {
        // Default dispositions for every signal (the agent ignores SIGPIPE
        // and has handlers that must not run here); failures for the
        // signals libc reserves are expected and harmless.
        let mut dfl: libc::sigaction = std::mem::zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        for sig in 1..=64 {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                libc::sigaction(sig, &dfl, std::ptr::null_mut());
            }
        }
        if (*a).session {
            if libc::setsid() < 0 {
                fail(a, STAGE_SETUP);
            }
        } else if libc::setpgid(0, 0) < 0 {
            fail(a, STAGE_SETUP);
        }
        for target in 0..3 {
            let src = (*a).fds[target as usize];
            // Our fds are all above 2 (launch::above_stdio), so a dup2
            // never clobbers a source still needed; dup2 clears close-on-exec.
            if src != target && libc::dup2(src, target) < 0 {
                fail(a, STAGE_SETUP);
            }
        }
        if (*a).session && libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
            fail(a, STAGE_SETUP);
        }
        if (*a).task_limit != u64::MAX {
            let r = libc::rlimit {
                rlim_cur: (*a).task_limit,
                rlim_max: (*a).task_limit,
            };
            if libc::syscall(libc::SYS_setrlimit, libc::RLIMIT_NPROC, &r) < 0 {
                fail(a, STAGE_SETUP);
            }
        }
        if (*a).switch_user {
            let (uid, gid) = ((*a).uid, (*a).gid);
            if libc::syscall(libc::SYS_setgroups, (*a).ngroups, (*a).groups) < 0
                || libc::syscall(libc::SYS_setresgid, gid, gid, gid) < 0
                || libc::syscall(libc::SYS_setresuid, uid, uid, uid) < 0
            {
                fail(a, STAGE_SETUP);
            }
        }
        // After the user switch: the user must be able to enter it.
        if libc::chdir((*a).cwd) < 0 {
            fail(a, STAGE_CWD);
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        libc::execve((*a).program, (*a).argv, (*a).envp);
        fail(a, STAGE_EXEC)
    }
}

/// Starts `p` as described by `opts` (a user, a terminal, a stdin pipe).
pub fn start(
    p: &Prepared,
    opts: &Options,
    task_limit: Option<u64>,
) -> Result<Started, LaunchError> {
    let cmd = CCommand::new(p)?;
    // The agent's ends of the streams, and the child's (closed here after the clone).
    let (io, child_fds): (ChildIo, Vec<OwnedFd>) = match opts.pty {
        Some(size) => {
            let pty = crate::pty::open(size)?;
            (ChildIo::Pty { master: pty.master }, vec![pty.slave])
        }
        None => {
            let (out_r, out_w) = pipe()?;
            let (err_r, err_w) = pipe()?;
            let (stdin_child, stdin_ours) = if opts.stdin_pipe {
                let (r, w) = pipe()?;
                (r, Some(w))
            } else {
                let null = std::fs::File::open("/dev/null")?;
                (crate::launch::above_stdio(OwnedFd::from(null))?, None)
            };
            let io = ChildIo::Pipes {
                stdout: out_r,
                stderr: err_r,
                stdin: stdin_ours,
            };
            (io, vec![stdin_child, out_w, err_w])
        }
    };
    let fds = match child_fds.as_slice() {
        [tty] => [tty.as_raw_fd(); 3],
        [i, o, e] => [i.as_raw_fd(), o.as_raw_fd(), e.as_raw_fd()],
        _ => return Err(io::Error::from_raw_os_error(libc::EINVAL).into()),
    };
    let no_groups: Vec<libc::gid_t> = Vec::new();
    let creds: Option<&Credentials> = opts.creds.as_ref();
    let groups = creds.map(|c| &c.groups).unwrap_or(&no_groups);
    let mut args = ChildArgs {
        program: cmd.program.as_ptr(),
        argv: cmd.argv_ptrs.as_ptr() as *const *const libc::c_char,
        envp: cmd.envp_ptrs.as_ptr() as *const *const libc::c_char,
        cwd: cmd.cwd.as_ptr(),
        fds,
        session: opts.pty.is_some(),
        switch_user: creds.is_some(),
        uid: creds.map(|c| c.uid).unwrap_or(0),
        gid: creds.map(|c| c.gid).unwrap_or(0),
        groups: groups.as_ptr(),
        ngroups: groups.len(),
        task_limit: task_limit.unwrap_or(u64::MAX),
        failed_stage: 0,
        failed_errno: 0,
    };
    let pid = clone_child(&mut args)?;
    drop(child_fds);
    if args.failed_stage != 0 {
        reap(pid);
        let err = io::Error::from_raw_os_error(args.failed_errno);
        return Err(match args.failed_stage {
            STAGE_CWD => LaunchError::Cwd(err),
            _ => LaunchError::Io(err),
        });
    }
    Ok(Started { pid, io })
}

/// Runs [`child`] in a vfork-style clone; returns once it exec'd or failed.
fn clone_child(args: &mut ChildArgs) -> io::Result<libc::pid_t> {
    let mut stack = vec![0u8; CHILD_STACK_BYTES];
    // The stack grows down from its (16-byte aligned) end.
    let top = (stack.as_mut_ptr() as usize + CHILD_STACK_BYTES) & !15;
    // SAFETY: signals are blocked around the clone so that none of the
    // agent's handlers runs on the child's stack in shared memory before the
    // child resets them; `args` and the stack outlive the child's use of
    // them (CLONE_VFORK suspends this thread until the exec or exit).
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let pid = libc::clone(
            child,
            top as *mut c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            args as *mut ChildArgs as *mut c_void,
        );
        let err = io::Error::last_os_error();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        drop(stack);
        if pid < 0 {
            return Err(err);
        }
        Ok(pid)
    }
}

/// Collects a child that failed before its exec. The agent's reaper cannot
/// race this: spawns happen under the table lock the reaper takes.
fn reap(pid: libc::pid_t) {
    let mut status = 0;
    loop {
        // SAFETY: waiting for our own, already exited child.
        let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
        if rc >= 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::io::{Read, Write};
    use std::path::PathBuf;

    fn prepared(script: &str, cwd: &str) -> Prepared {
        Prepared {
            program: PathBuf::from("/bin/sh"),
            argv: vec!["sh".into(), "-c".into(), script.into()],
            cwd: PathBuf::from(cwd),
            env: BTreeMap::from([("ONLY".to_string(), "this".to_string())]),
        }
    }

    fn wait(pid: i32) -> i32 {
        let mut status = 0;
        // SAFETY: waiting for our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        libc::WEXITSTATUS(status)
    }

    fn pipes(io: ChildIo) -> (OwnedFd, OwnedFd, Option<OwnedFd>) {
        match io {
            ChildIo::Pipes {
                stdout,
                stderr,
                stdin,
            } => (stdout, stderr, stdin),
            ChildIo::Pty { .. } => panic!("not pipes"),
        }
    }

    /// Root can become any uid: run as nobody's ids with extra groups.
    #[test]
    fn switches_user_and_groups_with_a_stdin_pipe() {
        let opts = Options {
            stdin_pipe: true,
            pty: None,
            creds: Some(Credentials {
                uid: 65534,
                gid: 65534,
                groups: vec![65534, 4242],
            }),
        };
        let script = "echo $(id -u) $(id -g) $(id -G); pwd; echo $ONLY; \
                      echo pgid=$(cut -d' ' -f5 /proc/$$/stat)/$$; cat; echo oops >&2";
        let s = start(&prepared(script, "/tmp"), &opts, None).unwrap();
        let (out, err, stdin) = pipes(s.io);
        let mut stdin = std::fs::File::from(stdin.unwrap());
        stdin.write_all(b"typed\n").unwrap();
        drop(stdin);
        let mut o = String::new();
        std::fs::File::from(out).read_to_string(&mut o).unwrap();
        let mut e = String::new();
        std::fs::File::from(err).read_to_string(&mut e).unwrap();
        assert_eq!(wait(s.pid), 0);
        let lines: Vec<&str> = o.lines().collect();
        assert_eq!(lines[0], "65534 65534 65534 4242");
        assert_eq!(lines[1], "/tmp");
        assert_eq!(lines[2], "this");
        let (pgid, pid) = lines[3]["pgid=".len()..].split_once('/').unwrap();
        assert_eq!(pgid, pid);
        assert_eq!(lines[4], "typed");
        assert_eq!(e, "oops\n");
    }

    #[test]
    fn failures_name_their_stage() {
        let dir = tempfile::tempdir().unwrap();
        let private = dir.path().join("private");
        std::fs::create_dir(&private).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
        let nobody = Options {
            creds: Some(Credentials {
                uid: 65534,
                gid: 65534,
                groups: vec![],
            }),
            ..Default::default()
        };
        let e = start(&prepared("true", private.to_str().unwrap()), &nobody, None).unwrap_err();
        assert!(
            matches!(&e, LaunchError::Cwd(io) if io.raw_os_error() == Some(libc::EACCES)),
            "{e:?}"
        );
        let mut p = prepared("true", "/");
        p.program = PathBuf::from("/definitely/not/here");
        let e = start(&p, &nobody, None).unwrap_err();
        assert!(
            matches!(&e, LaunchError::Io(io) if io.raw_os_error() == Some(libc::ENOENT)),
            "{e:?}"
        );
    }
}
