//! Starting a child with `posix_spawn(3)` directly.
//!
//! Why not `std::process::Command`: std uses posix_spawn (a `CLONE_VFORK`
//! clone) only when it can express every setting; a working directory needs
//! `posix_spawn_file_actions_addchdir_np`, which std looks up with `dlsym`,
//! and in this statically linked agent that lookup fails, so every command
//! with a cwd fell back to a full `fork` of the multi-threaded agent. Under
//! gVisor that fork is the expensive part of an exec: measured on the same
//! sandbox, an exec of `true` spent 9–25 ms in `spawn` with the fork and
//! 4–7 ms with posix_spawn. Calling glibc's posix_spawn ourselves always
//! takes the vfork path.

use crate::spawn::Prepared;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

/// RLIMIT_NPROC given to every child; unset: children inherit the agent's (unlimited).
static TASK_LIMIT: std::sync::OnceLock<u64> = std::sync::OnceLock::new();

/// Sets the RLIMIT_NPROC of every child started from now on (first call wins).
///
/// gVisor enforces RLIMIT_NPROC for root too, counting the user's tasks
/// across the sandbox, so a fork bomb gets EAGAIN at the limit instead of
/// filling the sandbox's memory with processes. The agent keeps its own
/// limit unlimited so that it can still start commands (and threads) when
/// the guest processes are at theirs.
pub fn set_task_limit(limit: u64) {
    let _ = TASK_LIMIT.set(limit);
}

/// Why a child could not be started.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// The child could not enter its working directory (as its user).
    #[error("cannot enter the working directory: {0}")]
    Cwd(io::Error),
    /// Anything else: the program could not be run, or a setup step failed.
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Identity a child runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
}

/// How a managed child is started beyond [`spawn`]'s defaults.
#[derive(Debug, Default, Clone)]
pub struct Options {
    /// stdin is a pipe whose write end the caller keeps.
    pub stdin_pipe: bool,
    /// Run on a new pseudo-terminal of this size, in a new session.
    pub pty: Option<sbx_agent_proto::PtySize>,
    /// Switch to this identity before the exec.
    pub creds: Option<Credentials>,
}

/// The agent's ends of a started child's standard streams.
#[derive(Debug)]
pub enum ChildIo {
    /// Separate pipes; `stdin` is the write end when a stdin pipe was asked for.
    Pipes {
        /// Read end of stdout.
        stdout: OwnedFd,
        /// Read end of stderr.
        stderr: OwnedFd,
        /// Write end of stdin.
        stdin: Option<OwnedFd>,
    },
    /// The terminal's master side (output and input).
    Pty {
        /// Master of the pseudo-terminal.
        master: OwnedFd,
    },
}

/// A started managed child.
#[derive(Debug)]
pub struct Started {
    /// Process id (also its process group id).
    pub pid: i32,
    /// Its streams.
    pub io: ChildIo,
}

/// A started child: its pid and the read ends of its stdout and stderr pipes.
#[derive(Debug)]
pub struct Spawned {
    /// Process id (also its process group id).
    pub pid: i32,
    /// Read end of the child's stdout.
    pub stdout: OwnedFd,
    /// Read end of the child's stderr.
    pub stderr: OwnedFd,
}

fn cstring(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(rc))
    }
}

/// A close-on-exec copy of `fd` numbered 3 or above: a pipe that landed on
/// 0–2 (the agent's own stdio closed) would otherwise be `dup2`ed onto
/// itself, which keeps close-on-exec set and loses the stream in the child.
pub(crate) fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: fcntl on an fd we own; the result is a new fd we then own.
    let new = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if new < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `new` is a fresh, valid fd owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

/// A pipe as (read end, write end), both close-on-exec and above 2.
pub(crate) fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 fills two fds on success.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both fds were just created and are owned by nobody else.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((above_stdio(r)?, above_stdio(w)?))
}

/// glibc's spawn attributes and file actions, destroyed on drop.
struct SpawnSetup {
    attr: libc::posix_spawnattr_t,
    actions: libc::posix_spawn_file_actions_t,
}

impl SpawnSetup {
    fn new() -> io::Result<Box<Self>> {
        // SAFETY: zeroed structs are only passed to their init functions.
        let mut setup: Box<Self> = Box::new(unsafe { std::mem::zeroed() });
        // SAFETY: initialising the boxed (stable address) structs.
        unsafe {
            check(libc::posix_spawnattr_init(&mut setup.attr))?;
            if let Err(e) = check(libc::posix_spawn_file_actions_init(&mut setup.actions)) {
                libc::posix_spawnattr_destroy(&mut setup.attr);
                return Err(e);
            }
        }
        Ok(setup)
    }
}

impl Drop for SpawnSetup {
    fn drop(&mut self) {
        // SAFETY: both were initialised in `new`.
        unsafe {
            libc::posix_spawn_file_actions_destroy(&mut self.actions);
            libc::posix_spawnattr_destroy(&mut self.attr);
        }
    }
}

/// Starts `p` in a new process group with stdin from `/dev/null`, stdout and
/// stderr piped, an empty signal mask and default signal dispositions.
/// A missing or non-executable program fails here with its errno.
pub fn spawn(p: &Prepared) -> io::Result<Spawned> {
    posix(p, None)
}

/// Starts a managed child. Plain children (and ones that only want a stdin
/// pipe) go through posix_spawn; a user switch or a terminal needs steps
/// posix_spawn cannot express (setgroups/setuid, `TIOCSCTTY`), done by
/// [`crate::forkexec`] with the same vfork-style clone.
pub fn start(p: &Prepared, opts: &Options) -> Result<Started, LaunchError> {
    if opts.pty.is_none() && opts.creds.is_none() {
        let stdin = opts.stdin_pipe.then(pipe).transpose()?;
        let (stdin_r, stdin_w) = match stdin {
            Some((r, w)) => (Some(r), Some(w)),
            None => (None, None),
        };
        let s = posix(p, stdin_r)?;
        return Ok(Started {
            pid: s.pid,
            io: ChildIo::Pipes {
                stdout: s.stdout,
                stderr: s.stderr,
                stdin: stdin_w,
            },
        });
    }
    // The child sets its own task limit before the exec there.
    crate::forkexec::start(p, opts, TASK_LIMIT.get().copied())
}

/// The C strings of a command, kept alive while their pointers are used.
pub(crate) struct CCommand {
    /// Resolved program.
    pub program: CString,
    /// Working directory.
    pub cwd: CString,
    _argv: Vec<CString>,
    _envp: Vec<CString>,
    /// NULL-terminated pointers into the argv strings.
    pub argv_ptrs: Vec<*mut libc::c_char>,
    /// NULL-terminated pointers into the `KEY=value` strings.
    pub envp_ptrs: Vec<*mut libc::c_char>,
}

impl CCommand {
    pub(crate) fn new(p: &Prepared) -> io::Result<CCommand> {
        let program = cstring(p.program.as_os_str().as_bytes())?;
        let argv: Vec<CString> = p
            .argv
            .iter()
            .map(|a| cstring(a.as_bytes()))
            .collect::<io::Result<_>>()?;
        let envp: Vec<CString> = p
            .env
            .iter()
            .map(|(k, v)| cstring(format!("{k}={v}").as_bytes()))
            .collect::<io::Result<_>>()?;
        let cwd = cstring(p.cwd.as_os_str().as_bytes())?;
        let mut argv_ptrs: Vec<*mut libc::c_char> =
            argv.iter().map(|a| a.as_ptr() as *mut _).collect();
        argv_ptrs.push(std::ptr::null_mut());
        let mut envp_ptrs: Vec<*mut libc::c_char> =
            envp.iter().map(|e| e.as_ptr() as *mut _).collect();
        envp_ptrs.push(std::ptr::null_mut());
        Ok(CCommand {
            program,
            cwd,
            _argv: argv,
            _envp: envp,
            argv_ptrs,
            envp_ptrs,
        })
    }
}

/// posix_spawn with stdin from `stdin` (a pipe read end) or `/dev/null`.
fn posix(p: &Prepared, stdin: Option<OwnedFd>) -> io::Result<Spawned> {
    // Kept whole: the pointers below point into its strings.
    let cmd = CCommand::new(p)?;
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    let mut setup = SpawnSetup::new()?;
    let devnull = c"/dev/null";
    let mut pid: libc::pid_t = 0;
    // SAFETY: every pointer passed below outlives the posix_spawn call (the
    // CStrings, pointer vectors, fds and the boxed setup are all still owned
    // here); sigset functions only write into the local sets.
    unsafe {
        let s = &mut *setup;
        match &stdin {
            Some(fd) => check(libc::posix_spawn_file_actions_adddup2(
                &mut s.actions,
                fd.as_raw_fd(),
                0,
            ))?,
            None => check(libc::posix_spawn_file_actions_addopen(
                &mut s.actions,
                0,
                devnull.as_ptr(),
                libc::O_RDONLY,
                0,
            ))?,
        }
        // dup2 onto 1 and 2 clears close-on-exec on the child's copies.
        check(libc::posix_spawn_file_actions_adddup2(
            &mut s.actions,
            out_w.as_raw_fd(),
            1,
        ))?;
        check(libc::posix_spawn_file_actions_adddup2(
            &mut s.actions,
            err_w.as_raw_fd(),
            2,
        ))?;
        check(libc::posix_spawn_file_actions_addchdir_np(
            &mut s.actions,
            cmd.cwd.as_ptr(),
        ))?;
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        check(libc::posix_spawnattr_setsigmask(&mut s.attr, &empty))?;
        // The agent ignores SIGPIPE (Rust's default); children must not inherit that.
        check(libc::posix_spawnattr_setsigdefault(&mut s.attr, &all))?;
        check(libc::posix_spawnattr_setpgroup(&mut s.attr, 0))?;
        let flags = libc::POSIX_SPAWN_SETPGROUP
            | libc::POSIX_SPAWN_SETSIGMASK
            | libc::POSIX_SPAWN_SETSIGDEF;
        check(libc::posix_spawnattr_setflags(&mut s.attr, flags as _))?;
        check(libc::posix_spawn(
            &mut pid,
            cmd.program.as_ptr(),
            &s.actions,
            &s.attr,
            cmd.argv_ptrs.as_ptr(),
            cmd.envp_ptrs.as_ptr(),
        ))?;
    }
    // The child has its copies; ours must close so the readers see EOF
    // (and, for stdin, so that closing the write end gives the child EOF).
    drop((out_w, err_w, stdin));
    if let Some(limit) = TASK_LIMIT.get() {
        limit_tasks(pid, *limit);
    }
    Ok(Spawned {
        pid,
        stdout: out_r,
        stderr: err_r,
    })
}

/// Applies RLIMIT_NPROC to a child that posix_spawn has just exec'd. The
/// child is still loading its program (milliseconds under gVisor) when this
/// runs microseconds later, so it cannot fork before its limit is set in
/// practice; a child that has already exited (ESRCH) needs no limit.
fn limit_tasks(pid: libc::pid_t, limit: u64) {
    let rlimit = libc::rlimit {
        rlim_cur: limit,
        rlim_max: limit,
    };
    // SAFETY: prlimit with a valid pointer to a local struct and no old-value pointer.
    let rc = unsafe { libc::prlimit(pid, libc::RLIMIT_NPROC, &rlimit, std::ptr::null_mut()) };
    if rc != 0 {
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::ESRCH) {
            crate::console!("cannot limit the tasks of pid {pid}: {err}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::io::Read;
    use std::path::PathBuf;

    fn prepared(argv: &[&str], cwd: &str) -> Prepared {
        Prepared {
            program: PathBuf::from("/bin/sh"),
            argv: argv.iter().map(|s| s.to_string()).collect(),
            cwd: PathBuf::from(cwd),
            env: BTreeMap::from([("ONLY".to_string(), "this".to_string())]),
        }
    }

    fn read_all(fd: OwnedFd) -> String {
        let mut s = String::new();
        std::fs::File::from(fd).read_to_string(&mut s).unwrap();
        s
    }

    fn wait(pid: i32) -> i32 {
        let mut status = 0;
        // SAFETY: waiting for our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        libc::WEXITSTATUS(status)
    }

    #[test]
    fn runs_with_cwd_env_group_and_default_signals() {
        let dir = tempfile::tempdir().unwrap();
        let cwd = dir.path().to_str().unwrap();
        let p = prepared(
            &[
                "sh",
                "-c",
                // pgid == pid; SIGPIPE not ignored (SigIgn mask bit 13 clear); stdin is /dev/null.
                "pwd; env; echo pgid=$(cut -d' ' -f5 /proc/$$/stat)/$$; \
                 grep SigIgn /proc/self/status; read x; echo read=$?; echo oops >&2; exit 3",
            ],
            cwd,
        );
        let s = spawn(&p).unwrap();
        let out = read_all(s.stdout);
        let err = read_all(s.stderr);
        assert_eq!(wait(s.pid), 3);
        let mut lines = out.lines();
        assert_eq!(
            std::fs::canonicalize(lines.next().unwrap()).unwrap(),
            std::fs::canonicalize(cwd).unwrap()
        );
        assert!(out.contains("ONLY=this\n"), "{out}");
        assert!(!out.contains("HOME="), "environment not replaced: {out}");
        assert!(out.contains("read=1"), "stdin is not /dev/null: {out}");
        let sigign = out
            .lines()
            .find(|l| l.starts_with("SigIgn:"))
            .and_then(|l| u64::from_str_radix(l.split_whitespace().nth(1)?, 16).ok())
            .unwrap();
        assert_eq!(sigign & (1 << (libc::SIGPIPE - 1)), 0, "SIGPIPE ignored");
        let line = out.lines().find(|l| l.starts_with("pgid=")).unwrap();
        let (pgid, pid) = line["pgid=".len()..].split_once('/').unwrap();
        assert_eq!(pgid, pid, "not a process group leader");
        assert_eq!(err, "oops\n");
    }

    #[test]
    fn a_missing_program_fails_with_its_errno() {
        let mut p = prepared(&["nope"], "/");
        p.program = PathBuf::from("/definitely/not/here");
        let e = spawn(&p).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
        let mut p = prepared(&["sh"], "/definitely/not/a/dir");
        p.program = PathBuf::from("/bin/sh");
        assert!(spawn(&p).is_err());
    }

    /// This process's soft RLIMIT_NPROC.
    fn own_task_limit() -> libc::rlim_t {
        // SAFETY: getrlimit into a local struct.
        unsafe {
            let mut r: libc::rlimit = std::mem::zeroed();
            assert_eq!(libc::getrlimit(libc::RLIMIT_NPROC, &mut r), 0);
            r.rlim_cur
        }
    }

    /// The limit is in place when spawn returns (read from outside the child,
    /// so no race with the child's own start). The agent's own limit is untouched.
    #[test]
    fn children_get_the_task_limit_and_the_agent_keeps_its_own() {
        let own_before = own_task_limit();
        set_task_limit(777);
        let s = spawn(&prepared(&["sh", "-c", "exec sleep 30"], "/")).unwrap();
        let limits = std::fs::read_to_string(format!("/proc/{}/limits", s.pid)).unwrap();
        // SAFETY: killing and reaping our own child.
        unsafe { libc::kill(s.pid, libc::SIGKILL) };
        wait(s.pid);
        let line = limits
            .lines()
            .find(|l| l.starts_with("Max processes"))
            .unwrap();
        assert_eq!(
            line.split_whitespace().collect::<Vec<_>>()[2..4],
            ["777", "777"],
            "{line}"
        );
        assert_eq!(own_before, own_task_limit());
    }
}
