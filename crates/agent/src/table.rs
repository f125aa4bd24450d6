//! The process table and the one zombie reaper.
//!
//! Every child is spawned while the table lock is held and the reaper calls
//! `waitpid(-1, WNOHANG)` only while holding the same lock, so a child that
//! exits immediately can never be reaped before it is registered. Statuses of
//! pids the table does not know (orphans reparented to the agent) are dropped.

use crate::flow::{Flow, StreamSlot, START_HOLD_LIMIT};
use crate::input::Input;
use crate::launch::{self, ChildIo, LaunchError, Spawned};
use crate::pipes::PipeReader;
use crate::ring::{Chunk, Ring};
use crate::spawn::Prepared;
use crate::{console, now_ms};
use sbx_agent_proto::{AgentError, AgentErrorCode, ProcessInfo, ProcessState, StreamKind};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::sync::{oneshot, watch};
use tokio::task::AbortHandle;
use uuid::Uuid;

/// Only the newest this many finished processes keep their output ring.
pub const MAX_RETAINED_OUTPUTS: usize = 32;
/// Metadata of at most this many processes is kept (oldest finished dropped first).
pub const MAX_PROCESS_RECORDS: usize = 1000;
/// Read size for output pipes (and so the largest single read).
pub const PIPE_READ_BYTES: usize = 64 * 1024;
/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Normal exit with a code.
    Code(i32),
    /// Killed by a signal.
    Signal(i32),
}

impl Exit {
    /// Decodes a raw `waitpid` status; `None` for stop/continue reports.
    pub fn from_wait_status(status: libc::c_int) -> Option<Exit> {
        if libc::WIFEXITED(status) {
            Some(Exit::Code(libc::WEXITSTATUS(status)))
        } else if libc::WIFSIGNALED(status) {
            Some(Exit::Signal(libc::WTERMSIG(status)))
        } else {
            None
        }
    }

    /// Shell-style exit code: the code, or 128 + signal.
    pub fn exit_code(self) -> i32 {
        match self {
            Exit::Code(c) => c,
            Exit::Signal(s) => 128 + s,
        }
    }
}

/// Who waits for a pid's status.
enum Owner {
    /// A managed background process.
    Managed(Uuid),
    /// A running exec; the status is handed over once.
    Exec(oneshot::Sender<Exit>),
}

/// One managed process.
pub(crate) struct Proc {
    pub(crate) info: ProcessInfo,
    ring: Option<Ring>,
    /// Collected exit status (the process may still be draining its pipes).
    pub(crate) status: Option<Exit>,
    /// The last signal sent to the whole group: sent again once the leader is
    /// reaped, for members forked while the first one was being delivered.
    group_signal: Option<i32>,
    open_pipes: u8,
    readers: Vec<AbortHandle>,
    pub(crate) changed: watch::Sender<()>,
    /// Writer of the stdin pipe or terminal, while input is open.
    pub(crate) input: Option<Input>,
    /// The terminal's master (for resizing), while the process runs.
    pub(crate) master: Option<OwnedFd>,
    /// Open streams' positions, for a process started with `backpressure`.
    pub(crate) flow: Option<Flow>,
    /// Output was pushed since the exit watcher last looked (see [`crate::drain`]).
    pub(crate) pushed: bool,
}

impl Proc {
    fn new(info: ProcessInfo, ring: Ring) -> Proc {
        Proc {
            info,
            ring: Some(ring),
            status: None,
            group_signal: None,
            open_pipes: 0,
            readers: Vec::new(),
            changed: watch::Sender::new(()),
            input: None,
            master: None,
            flow: None,
            pushed: false,
        }
    }
}

#[derive(Default)]
pub(crate) struct Inner {
    pub(crate) procs: BTreeMap<Uuid, Proc>,
    by_pid: HashMap<i32, Owner>,
    /// Finished processes still holding an output ring, oldest first.
    finished_output: VecDeque<Uuid>,
    /// All finished processes, oldest first (for metadata eviction).
    finished_all: VecDeque<Uuid>,
}

/// A freshly spawned exec child.
pub struct ExecChild {
    /// Guest pid (also the process group id).
    pub pid: i32,
    /// Its stdout.
    pub stdout: PipeReader,
    /// Its stderr.
    pub stderr: PipeReader,
    /// Resolves once the reaper collected the status.
    pub status: oneshot::Receiver<Exit>,
}

/// What a stream reader sees in one look at a process.
pub struct StreamView {
    /// Retained chunks at or after the requested offset.
    pub chunks: Vec<Chunk>,
    /// Offset just past the newest byte produced.
    pub next_offset: u64,
    /// Offset of the oldest retained byte.
    pub oldest_offset: u64,
    /// Whether the process is terminal (its output is final).
    pub terminal: bool,
}

/// The shared process table.
#[derive(Default)]
pub struct Table {
    inner: Mutex<Inner>,
}

pub(crate) fn not_found(id: Uuid) -> AgentError {
    AgentError::new(AgentErrorCode::NotFound, format!("no process {id}"))
}

fn not_retained(id: Uuid) -> AgentError {
    AgentError::new(
        AgentErrorCode::OutputNotRetained,
        format!("output of process {id} is no longer retained"),
    )
}

fn take_pipes(child: Spawned) -> std::io::Result<(PipeReader, PipeReader)> {
    Ok((
        PipeReader::spawn(child.stdout)?,
        PipeReader::spawn(child.stderr)?,
    ))
}

impl Table {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Spawns a managed background process and records it as RUNNING;
    /// `info` carries what the caller knows (argv, env, cwd, tag, user, pty).
    /// With `backpressure`, open streams slow the output readers down
    /// instead of losing output (see [`crate::flow`]).
    ///
    /// Must run inside the tokio runtime (pipe readers are tasks).
    pub fn spawn_managed(
        self: &Arc<Self>,
        prepared: &Prepared,
        opts: &launch::Options,
        mut info: ProcessInfo,
        backpressure: bool,
    ) -> Result<ProcessInfo, LaunchError> {
        let mut inner = self.lock();
        let child = launch::start(prepared, opts)?;
        let pid = child.pid;
        let id = Uuid::new_v4();
        info.id = id;
        info.pid = Some(pid);
        info.state = ProcessState::Running;
        info.started_at_ms = Some(now_ms());
        info.output_retained = true;
        let mut proc = Proc::new(info, Ring::new());
        proc.flow = backpressure.then(Flow::new);
        let outputs = match child.io {
            ChildIo::Pipes {
                stdout,
                stderr,
                stdin,
            } => {
                proc.input = stdin.map(Input::spawn);
                vec![
                    (StreamKind::Stdout, Ok(stdout)),
                    (StreamKind::Stderr, Ok(stderr)),
                ]
            }
            ChildIo::Pty { master } => {
                // Separate fds for the reader and writer threads; the
                // original stays here for resizing.
                match master.try_clone() {
                    Ok(w) => proc.input = Some(Input::spawn(w)),
                    Err(e) => console!("process {id}: cannot write to its terminal: {e}"),
                }
                let reader = master.try_clone();
                proc.master = Some(master);
                vec![(StreamKind::Pty, reader)]
            }
        };
        proc.info.stdin_open = proc.input.is_some();
        for (stream, fd) in outputs {
            match fd.and_then(PipeReader::spawn) {
                Ok(rx) => {
                    proc.open_pipes += 1;
                    let table = Arc::clone(self);
                    let task = tokio::spawn(async move { table.read_pipe(id, stream, rx).await });
                    proc.readers.push(task.abort_handle());
                }
                Err(e) => console!("process {id}: cannot read output: {e}"),
            }
        }
        let info = proc.info.clone();
        if proc.flow.is_some() {
            let table = Arc::clone(self);
            tokio::spawn(async move {
                tokio::time::sleep(START_HOLD_LIMIT).await;
                table.with_flow(id, Flow::release_start_hold);
            });
        }
        inner.by_pid.insert(pid, Owner::Managed(id));
        inner.procs.insert(id, proc);
        Ok(info)
    }

    /// Records a process that could not be started; `info` as for [`Table::spawn_managed`].
    pub fn insert_failed(&self, mut info: ProcessInfo, error: String) -> ProcessInfo {
        let id = Uuid::new_v4();
        let now = now_ms();
        info.id = id;
        info.pid = None;
        info.state = ProcessState::Failed;
        info.error = Some(error);
        info.started_at_ms = Some(now);
        info.ended_at_ms = Some(now);
        info.output_retained = true;
        info.stdin_open = false;
        let mut inner = self.lock();
        inner
            .procs
            .insert(id, Proc::new(info.clone(), Ring::with_capacity(0)));
        inner.finished_all.push_back(id);
        inner.evict_metadata();
        info
    }

    /// Spawns an exec child whose status is handed to the caller, not recorded.
    pub fn spawn_exec(&self, prepared: &Prepared) -> std::io::Result<ExecChild> {
        let mut inner = self.lock();
        let child = launch::spawn(prepared)?;
        let pid = child.pid;
        let (tx, rx) = oneshot::channel();
        inner.by_pid.insert(pid, Owner::Exec(tx));
        match take_pipes(child) {
            Ok((stdout, stderr)) => Ok(ExecChild {
                pid,
                stdout,
                stderr,
                status: rx,
            }),
            Err(e) => {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
                Err(e)
            }
        }
    }

    /// SIGKILLs an exec's process group unless its leader was already reaped
    /// (checked under the lock, so a recycled pid is never hit).
    pub fn kill_exec_group(&self, pid: i32) {
        let inner = self.lock();
        if matches!(inner.by_pid.get(&pid), Some(Owner::Exec(_))) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }

    async fn read_pipe(self: Arc<Self>, id: Uuid, stream: StreamKind, mut rx: PipeReader) {
        let mut buf = vec![0u8; PIPE_READ_BYTES];
        loop {
            match rx.read(&mut buf).await {
                Ok(0) => break,
                Ok(n) => self.append(id, stream, &buf[..n]).await,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        let mut inner = self.lock();
        let finish = match inner.procs.get_mut(&id) {
            Some(p) => {
                p.open_pipes = p.open_pipes.saturating_sub(1);
                p.open_pipes == 0 && p.status.is_some() && !p.info.state.is_terminal()
            }
            None => false,
        };
        if finish {
            inner.finalize(id);
        }
    }

    /// Pushes output into the ring; with backpressure, first waits while
    /// the push would evict bytes the slowest open stream has not sent.
    async fn append(&self, id: Uuid, stream: StreamKind, data: &[u8]) {
        let mut advanced: Option<watch::Receiver<()>> = None;
        let mut waiting = false;
        loop {
            {
                let mut inner = self.lock();
                let Some(p) = inner.procs.get_mut(&id) else {
                    return;
                };
                if p.info.state.is_terminal() {
                    return;
                }
                let blocked = match (p.flow.as_mut(), p.ring.as_ref()) {
                    (Some(flow), Some(ring)) => {
                        // Subscribed before looking, so no advance is missed.
                        match advanced.as_mut() {
                            Some(rx) => {
                                rx.borrow_and_update();
                            }
                            None => advanced = Some(flow.subscribe()),
                        }
                        let blocked = flow.slowest().is_some_and(|slowest| {
                            ring.oldest_after_push(stream, data.len()) > slowest
                        });
                        if blocked && !waiting {
                            flow.waiting += 1;
                            waiting = true;
                        } else if !blocked && waiting {
                            flow.waiting -= 1;
                        }
                        flow.held |= blocked;
                        blocked
                    }
                    _ => false,
                };
                if !blocked {
                    p.info.output_bytes += data.len() as u64;
                    p.pushed = true;
                    if let Some(ring) = p.ring.as_mut() {
                        ring.push(stream, now_ms(), data);
                    }
                    p.changed.send_replace(());
                    return;
                }
            }
            let Some(rx) = advanced.as_mut() else { return };
            if rx.changed().await.is_err() {
                return;
            }
        }
    }

    /// Registers a stream of `id` that sends from `position`, when the
    /// process was started with backpressure.
    pub fn stream_open(self: &Arc<Self>, id: Uuid, position: u64) -> Option<StreamSlot> {
        let mut inner = self.lock();
        let flow = inner.procs.get_mut(&id)?.flow.as_mut()?;
        let token = flow.open(position);
        flow.release_start_hold();
        Some(StreamSlot {
            table: Arc::clone(self),
            id,
            token,
        })
    }

    pub(crate) fn with_flow(&self, id: Uuid, f: impl FnOnce(&mut Flow)) {
        let mut inner = self.lock();
        if let Some(flow) = inner.procs.get_mut(&id).and_then(|p| p.flow.as_mut()) {
            f(flow);
        }
    }

    /// Collects every pending child status and routes it; returns after
    /// `waitpid` reports nothing more.
    pub fn reap(self: &Arc<Self>) {
        let mut inner = self.lock();
        loop {
            let mut status: libc::c_int = 0;
            // SAFETY: plain syscall with a valid out-pointer.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if pid <= 0 {
                if pid < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                break;
            }
            let Some(exit) = Exit::from_wait_status(status) else {
                continue;
            };
            match inner.by_pid.remove(&pid) {
                Some(Owner::Exec(tx)) => {
                    let _ = tx.send(exit);
                }
                Some(Owner::Managed(id)) => self.record_exit(&mut inner, id, exit),
                None => {}
            }
        }
    }

    fn record_exit(self: &Arc<Self>, inner: &mut Inner, id: Uuid, exit: Exit) {
        let Some(p) = inner.procs.get_mut(&id) else {
            return;
        };
        p.status = Some(exit);
        p.info.ended_at_ms = Some(now_ms());
        // Nothing reads input any more: the writer closes its fd (once a
        // write blocked by a grandchild holding the pipe returns).
        p.input = None;
        p.master = None;
        if p.info.stdin_open {
            p.info.stdin_open = false;
            p.changed.send_replace(());
        }
        if let (Some(signal), Some(pid)) = (p.group_signal, p.info.pid) {
            // A member forked while the group signal was being delivered can miss
            // it (gVisor does not hold back a fork racing a group kill the way
            // Linux does), and would outlive a "kill the whole group". The group
            // id stays valid while any member lives. The pid cannot have been
            // given to a new process of ours: spawns register under this lock.
            if !inner.by_pid.contains_key(&pid) {
                // SAFETY: plain syscall; ESRCH (no member left) is the common case.
                unsafe { libc::kill(-pid, signal) };
            }
        }
        if p.open_pipes == 0 {
            inner.finalize(id);
        } else {
            if let Some(flow) = p.flow.as_mut() {
                flow.held = false;
                flow.progressed = false;
            }
            p.pushed = false;
            crate::drain::spawn(Arc::clone(self), id, p.info.pid);
        }
    }

    /// Runs the reaper forever: on every SIGCHLD (and once a second as a
    /// safety net) collect all pending statuses. `sigchld` must have been
    /// registered before the first child was spawned.
    pub async fn run_reaper(self: Arc<Self>, mut sigchld: tokio::signal::unix::Signal) {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = sigchld.recv() => {}
                _ = tick.tick() => {}
            }
            self.reap();
        }
    }

    /// One process.
    pub fn get(&self, id: Uuid) -> Result<ProcessInfo, AgentError> {
        let inner = self.lock();
        inner
            .procs
            .get(&id)
            .map(|p| p.info.clone())
            .ok_or_else(|| not_found(id))
    }

    /// All processes, sorted by id.
    pub fn list(&self) -> Vec<ProcessInfo> {
        self.lock().procs.values().map(|p| p.info.clone()).collect()
    }

    /// A receiver that changes whenever the process gets output or changes state.
    pub fn subscribe(&self, id: Uuid) -> Result<watch::Receiver<()>, AgentError> {
        let inner = self.lock();
        inner
            .procs
            .get(&id)
            .map(|p| p.changed.subscribe())
            .ok_or_else(|| not_found(id))
    }

    /// Sends `signal` to the process (or its group). A process whose status
    /// was already collected is left alone (its pid may be reused).
    pub fn signal(&self, id: Uuid, signal: i32, include_children: bool) -> Result<(), AgentError> {
        let mut inner = self.lock();
        let p = inner.procs.get_mut(&id).ok_or_else(|| not_found(id))?;
        let Some(pid) = p.info.pid else { return Ok(()) };
        if p.status.is_some() || p.info.state.is_terminal() {
            return Ok(());
        }
        if include_children {
            p.group_signal = Some(signal);
        }
        let target = if include_children { -pid } else { pid };
        // SAFETY: plain syscall; the pid is ours and not yet reaped (lock held).
        let rc = unsafe { libc::kill(target, signal) };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::ESRCH) {
                return Err(AgentError::new(AgentErrorCode::Io, format!("kill: {err}")));
            }
        }
        Ok(())
    }

    /// Retained output tail (see [`Ring::tail`]).
    pub fn output(&self, id: Uuid, tail_bytes: u64) -> Result<Vec<Chunk>, AgentError> {
        let inner = self.lock();
        let p = inner.procs.get(&id).ok_or_else(|| not_found(id))?;
        let ring = p.ring.as_ref().ok_or_else(|| not_retained(id))?;
        Ok(ring.tail(tail_bytes))
    }

    /// Offset a stream starts at: the first byte of the requested tail, or
    /// `from_offset` clamped to the bytes produced so far.
    pub fn stream_start(
        &self,
        id: Uuid,
        tail_bytes: u64,
        from_offset: Option<u64>,
    ) -> Result<u64, AgentError> {
        let inner = self.lock();
        let p = inner.procs.get(&id).ok_or_else(|| not_found(id))?;
        let ring = p.ring.as_ref().ok_or_else(|| not_retained(id))?;
        Ok(match from_offset {
            Some(from) => from.min(ring.next_offset()),
            None => ring
                .tail(tail_bytes)
                .first()
                .map(|c| c.offset)
                .unwrap_or(ring.next_offset()),
        })
    }

    /// Chunks at or after `from` plus whether the output is final.
    pub fn stream_view(&self, id: Uuid, from: u64) -> Result<StreamView, AgentError> {
        let inner = self.lock();
        let p = inner.procs.get(&id).ok_or_else(|| not_found(id))?;
        let ring = p.ring.as_ref().ok_or_else(|| not_retained(id))?;
        Ok(StreamView {
            chunks: ring.since(from),
            next_offset: ring.next_offset(),
            oldest_offset: ring.oldest_offset(),
            terminal: p.info.state.is_terminal(),
        })
    }

    /// Kills every running managed process group and exec (agent shutdown).
    pub fn kill_all(&self) {
        let inner = self.lock();
        for (pid, _) in inner.by_pid.iter() {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(*pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

impl Inner {
    /// Marks the process terminal: output is final, waiters wake up, and the
    /// retention limits are applied.
    pub(crate) fn finalize(&mut self, id: Uuid) {
        let Some(p) = self.procs.get_mut(&id) else {
            return;
        };
        for r in p.readers.drain(..) {
            r.abort();
        }
        match p.status {
            Some(Exit::Code(c)) => {
                p.info.state = ProcessState::Exited;
                p.info.exit_code = Some(c);
            }
            Some(Exit::Signal(s)) => {
                p.info.state = ProcessState::Killed;
                p.info.signal = Some(s);
            }
            None => p.info.state = ProcessState::Lost,
        }
        match p.status {
            Some(Exit::Signal(s)) => console!("process {id} killed by signal {s}"),
            Some(Exit::Code(c)) => console!("process {id} exited code {c}"),
            None => console!("process {id} lost"),
        }
        p.changed.send_replace(());
        self.finished_output.push_back(id);
        self.finished_all.push_back(id);
        while self.finished_output.len() > MAX_RETAINED_OUTPUTS {
            if let Some(old) = self.finished_output.pop_front() {
                if let Some(op) = self.procs.get_mut(&old) {
                    op.ring = None;
                    op.info.output_retained = false;
                }
            }
        }
        self.evict_metadata();
    }

    /// Drops the oldest finished records while over [`MAX_PROCESS_RECORDS`].
    fn evict_metadata(&mut self) {
        while self.procs.len() > MAX_PROCESS_RECORDS {
            let Some(old) = self.finished_all.pop_front() else {
                break;
            };
            self.procs.remove(&old);
            self.finished_output.retain(|x| *x != old);
        }
    }
}
