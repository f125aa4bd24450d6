//! An in-process [`Runtime`] for tests: no root, no runsc, no processes.
//!
//! Each fake sandbox is an entry in a map (running, paused or stopped) with
//! its guest state in memory; each connection is a [`AgentConn`] over a
//! `tokio::io::duplex` pipe whose other end is a fake agent task (see
//! `fake/agent.rs` for what it answers). Checkpoints are entries in a map
//! keyed by their directory, plus a small marker file written there so that
//! the service's snapshot files exist (and deleting them makes the
//! checkpoint unrestorable, as on a real host).
//!
//! Tests steer it with knobs (fail or hang the next call, stall an agent,
//! kill a sandbox behind the service's back, slow an operation down) and
//! read every call back from its log ([`FakeRuntime::calls_for`]).
//!
//! Always compiled (it is small and has no dependencies of its own) so that
//! integration tests and several services sharing one runtime can use it.
//! [`Runtime::spawn_exec`] is not simulated: it fails (`NotRunning` for a
//! sandbox that is not running, an `Unsupported` I/O error otherwise), so the
//! direct file-transfer path answers `503` on this runtime.

mod agent;

pub use agent::{ExecHandler, Life};

use super::{AgentConn, JobOptions, Runtime, RuntimeError, SandboxSpec};
use agent::{Guest, GuestData};
use futures::future::BoxFuture;
use futures::FutureExt;
use sbx_agent_proto::{Reply, Request};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use uuid::Uuid;

/// The file a fake checkpoint writes into its directory.
const CHECKPOINT_MARKER: &str = "fake-checkpoint";

/// A runtime operation, as counted by [`FakeRuntime::calls`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// [`Runtime::start`].
    Start,
    /// [`Runtime::start_job`].
    StartJob,
    /// [`Runtime::wait_ready`].
    WaitReady,
    /// [`Runtime::connect`].
    Connect,
    /// [`Runtime::is_alive`].
    IsAlive,
    /// [`Runtime::is_paused`].
    IsPaused,
    /// [`Runtime::destroy`].
    Destroy,
    /// [`Runtime::list`] (logged with the nil id).
    List,
    /// [`Runtime::pause`].
    Pause,
    /// [`Runtime::resume`].
    Resume,
    /// [`Runtime::checkpoint`].
    Checkpoint,
    /// [`Runtime::freeze`].
    Freeze,
    /// [`Runtime::thaw`] (logged only when it thawed something).
    Thaw,
    /// [`Runtime::restore`] (logged with the new sandbox's id).
    Restore,
}

/// A checkpoint: the guest's memory at the time it was taken.
struct Checkpoint {
    boot_id: Uuid,
    data: GuestData,
}

#[derive(Default)]
struct State {
    sandboxes: HashMap<Uuid, Arc<Guest>>,
    checkpoints: HashMap<PathBuf, Checkpoint>,
    /// Fail the next call of an operation with this message.
    fail_next: HashMap<Op, String>,
    /// Wait this long inside each call of an operation before acting.
    delays: HashMap<Op, Duration>,
    /// The next start creates its sandbox, then never returns.
    hang_next_start: bool,
    /// The next start's agent never answers (not even its hello).
    stall_next_start: bool,
    /// What [`Runtime::usage`] reports per sandbox (default: zeros).
    usage: HashMap<Uuid, crate::usage::Reading>,
}

/// In-process [`Runtime`]; see the module documentation.
pub struct FakeRuntime {
    state: Mutex<State>,
    calls: Mutex<Vec<(Op, Uuid)>>,
    /// Sandboxes whose hello was not answered in time, once per failed handshake.
    failed_handshakes: Mutex<Vec<Uuid>>,
    /// The test's exec handler, read by every agent connection at each exec.
    exec: agent::SharedExec,
    /// How long a new connection's hello may take (the real one: 10 s).
    handshake_timeout: Duration,
    /// How long `wait_ready` retries (the real one: 30 s).
    ready_timeout: Duration,
    /// Where [`Runtime::console_log`] points (nothing is written there).
    console_dir: PathBuf,
}

impl Default for FakeRuntime {
    fn default() -> Self {
        Self::new()
    }
}

impl FakeRuntime {
    /// A fake runtime with no sandboxes and short deadlines (handshake 1 s, ready 3 s):
    /// short for tests, long enough for a loaded machine.
    pub fn new() -> FakeRuntime {
        FakeRuntime {
            state: Mutex::new(State::default()),
            calls: Mutex::new(Vec::new()),
            failed_handshakes: Mutex::new(Vec::new()),
            exec: Arc::default(),
            handshake_timeout: Duration::from_secs(1),
            ready_timeout: Duration::from_secs(3),
            console_dir: std::env::temp_dir().join("sbx-fake-runtime"),
        }
    }

    /// Replaces the handshake deadline of new connections.
    pub fn with_handshake_timeout(mut self, limit: Duration) -> FakeRuntime {
        self.handshake_timeout = limit;
        self
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn guest(&self, id: Uuid) -> Option<Arc<Guest>> {
        self.state().sandboxes.get(&id).cloned()
    }

    // ---- knobs ----

    /// Makes the next call of `op` fail with an I/O error saying `message`.
    pub fn fail_next(&self, op: Op, message: &str) {
        self.state().fail_next.insert(op, message.to_string());
    }

    /// Makes every call of `op` wait `delay` before it acts (zero: no wait).
    pub fn set_delay(&self, op: Op, delay: Duration) {
        self.state().delays.insert(op, delay);
    }

    /// The next start creates its sandbox and then never returns (a boot that hangs).
    pub fn hang_next_start(&self) {
        self.state().hang_next_start = true;
    }

    /// The next start's agent reads requests and never answers, not even hello.
    pub fn stall_next_start(&self) {
        self.state().stall_next_start = true;
    }

    /// Makes a sandbox's agent stop (or resume) answering on every connection.
    pub fn set_stall(&self, id: Uuid, stall: bool) {
        if let Some(g) = self.guest(id) {
            g.stall.store(stall, Ordering::SeqCst);
        }
    }

    /// Kills a sandbox behind the service's back: it stays listed, `is_alive`
    /// turns false and its connections close. `reason` is its death reason.
    pub fn kill(&self, id: Uuid, reason: Option<&str>) {
        if let Some(g) = self.guest(id) {
            *g.death_reason.lock().unwrap_or_else(|p| p.into_inner()) = reason.map(String::from);
            g.life.send_replace(Life::Stopped);
        }
    }

    /// Closes every open connection of a sandbox that stays up (a relay that died).
    pub fn drop_connections(&self, id: Uuid) {
        if let Some(g) = self.guest(id) {
            g.epoch.send_modify(|e| *e += 1);
        }
    }

    /// Answers every exec (on open connections too) with `handler` instead of the built-in commands.
    pub fn set_exec(&self, handler: ExecHandler) {
        *self.exec.lock().unwrap_or_else(|p| p.into_inner()) = Some(handler);
    }

    /// Puts a sandbox on the "host" without a start (state left by an earlier sbxd).
    pub fn add_host_sandbox(&self, id: Uuid, life: Life) {
        let guest = Guest::new(Uuid::new_v4(), life, GuestData::default());
        self.state().sandboxes.insert(id, guest);
    }

    /// Puts a file into a sandbox's guest (`/proc/N` makes pid N show up
    /// in the guest's process listing; with the contents `relay` it stands
    /// for a relay sbxd started, which `guest_processes` leaves out).
    pub fn put_guest_file(&self, id: Uuid, path: &str, bytes: &[u8]) {
        if let Some(g) = self.guest(id) {
            g.data
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .files
                .insert(path.to_string(), (0o644, bytes.to_vec()));
        }
    }

    /// Makes a sandbox's agent one that predates `guest_processes`.
    pub fn use_older_agent(&self, id: Uuid) {
        if let Some(g) = self.guest(id) {
            g.data.lock().unwrap_or_else(|p| p.into_inner()).older_agent = true;
        }
    }

    /// Sets what [`Runtime::usage`] reports for a running sandbox.
    pub fn set_usage(&self, id: Uuid, reading: crate::usage::Reading) {
        self.state().usage.insert(id, reading);
    }

    // ---- observations ----

    /// The host-visible state of a sandbox (`None`: nothing on the host).
    pub fn life(&self, id: Uuid) -> Option<Life> {
        self.guest(id).map(|g| g.life())
    }

    /// Ids of every sandbox on the fake host.
    pub fn host_ids(&self) -> Vec<Uuid> {
        self.state().sandboxes.keys().copied().collect()
    }

    /// The environment the sandbox's agent was last configured with.
    pub fn configured_env(&self, id: Uuid) -> Option<BTreeMap<String, String>> {
        self.guest(id)
            .map(|g| g.data.lock().unwrap_or_else(|p| p.into_inner()).env.clone())
    }

    /// How many times `op` was called, for any sandbox.
    pub fn calls(&self, op: Op) -> usize {
        let calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        calls.iter().filter(|(o, _)| *o == op).count()
    }

    /// How many times `op` was called for sandbox `id`.
    pub fn calls_for(&self, op: Op, id: Uuid) -> usize {
        let calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        calls.iter().filter(|c| **c == (op, id)).count()
    }

    /// How many connection attempts to sandbox `id` failed their handshake.
    pub fn failed_handshakes(&self, id: Uuid) -> usize {
        let failed = self
            .failed_handshakes
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        failed.iter().filter(|f| **f == id).count()
    }

    /// Every call so far, in order.
    pub fn call_log(&self) -> Vec<(Op, Uuid)> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    // ---- the operations ----

    /// Records a call in the log [`FakeRuntime::calls_for`] reads.
    fn log(&self, op: Op, id: Uuid) {
        self.calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((op, id));
    }

    /// Logs the call, waits its delay, and takes a failure scripted for it.
    async fn enter(&self, op: Op, id: Uuid) -> Result<(), RuntimeError> {
        self.log(op, id);
        let delay = self.state().delays.get(&op).copied();
        if let Some(delay) = delay.filter(|d| !d.is_zero()) {
            tokio::time::sleep(delay).await;
        }
        match self.state().fail_next.remove(&op) {
            Some(message) => Err(RuntimeError::Io(std::io::Error::other(message))),
            None => Ok(()),
        }
    }

    /// One connection attempt with the hello handshake under its deadline.
    async fn open(&self, id: Uuid) -> Result<AgentConn, RuntimeError> {
        let guest = match self.guest(id) {
            Some(g) if g.life() != Life::Stopped => g,
            _ => return Err(RuntimeError::NotRunning),
        };
        let conn = agent::connect(guest, self.exec.clone());
        let failure = match conn
            .call_within(Request::Hello, self.handshake_timeout)
            .await
        {
            Ok((Reply::Hello { .. }, _)) => return Ok(conn),
            Ok((other, _)) => format!("unexpected hello reply {other:?}"),
            Err(e) => e.to_string(),
        };
        conn.shutdown().await;
        self.failed_handshakes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(id);
        Err(RuntimeError::AgentNotReady(failure))
    }

    async fn start_inner(&self, op: Op, spec: SandboxSpec) -> Result<AgentConn, RuntimeError> {
        self.enter(op, spec.id).await?;
        let guest = Guest::new(Uuid::new_v4(), Life::Running, GuestData::default());
        let hang = {
            let mut state = self.state();
            if std::mem::take(&mut state.stall_next_start) {
                guest.stall.store(true, Ordering::SeqCst);
            }
            state.sandboxes.insert(spec.id, guest);
            std::mem::take(&mut state.hang_next_start)
        };
        if hang {
            // The container exists; its agent never comes up.
            futures::future::pending::<()>().await;
        }
        self.open(spec.id).await
    }

    async fn wait_ready_inner(&self, id: Uuid) -> Result<AgentConn, RuntimeError> {
        self.enter(Op::WaitReady, id).await?;
        super::open_within(self.ready_timeout, || self.open(id)).await
    }

    async fn destroy_inner(&self, id: Uuid) -> Result<(), RuntimeError> {
        self.enter(Op::Destroy, id).await?;
        if let Some(g) = self.state().sandboxes.remove(&id) {
            g.life.send_replace(Life::Stopped);
        }
        Ok(())
    }

    /// Moves a sandbox from state `from` to `to`; `NotRunning` otherwise.
    async fn flip(&self, op: Op, id: Uuid, from: Life, to: Life) -> Result<(), RuntimeError> {
        self.enter(op, id).await?;
        match self.guest(id) {
            Some(g) if g.life() == from => {
                g.life.send_replace(to);
                Ok(())
            }
            _ => Err(RuntimeError::NotRunning),
        }
    }

    /// What the real runtime does before runsc talks to a sandbox: thaw it.
    fn thaw_inner(&self, id: Uuid) {
        if let Some(g) = self.guest(id) {
            if g.life() == Life::Asleep {
                g.life.send_replace(Life::Running);
                self.log(Op::Thaw, id);
            }
        }
    }

    /// Thaws a sleeping sandbox behind its connection's back (as a direct
    /// transfer's `runsc exec` does).
    pub fn thaw_behind_its_back(&self, id: Uuid) {
        self.thaw_inner(id);
    }

    /// Whether the sandbox is frozen by [`Runtime::freeze`] and not thawed.
    pub fn is_asleep(&self, id: Uuid) -> bool {
        self.life(id) == Some(Life::Asleep)
    }

    async fn checkpoint_inner(&self, id: Uuid, dir: PathBuf) -> Result<(), RuntimeError> {
        self.thaw_inner(id);
        self.enter(Op::Checkpoint, id).await?;
        let guest = match self.guest(id) {
            Some(g) if g.life() == Life::Running => g,
            _ => return Err(RuntimeError::NotRunning),
        };
        let data = guest.data.lock().unwrap_or_else(|p| p.into_inner()).clone();
        tokio::fs::create_dir_all(&dir).await?;
        tokio::fs::write(dir.join(CHECKPOINT_MARKER), id.as_bytes()).await?;
        let checkpoint = Checkpoint {
            boot_id: guest.boot_id,
            data,
        };
        self.state().checkpoints.insert(dir, checkpoint);
        Ok(())
    }

    async fn restore_inner(&self, spec: SandboxSpec, dir: PathBuf) -> Result<(), RuntimeError> {
        self.enter(Op::Restore, spec.id).await?;
        let mut state = self.state();
        let checkpoint = match state.checkpoints.get(&dir) {
            Some(c) if marker_exists(&dir) => c,
            _ => {
                return Err(RuntimeError::Io(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("no checkpoint in {}", dir.display()),
                )))
            }
        };
        let guest = Guest::new(checkpoint.boot_id, Life::Running, checkpoint.data.clone());
        state.sandboxes.insert(spec.id, guest);
        Ok(())
    }
}

fn marker_exists(dir: &Path) -> bool {
    dir.join(CHECKPOINT_MARKER).is_file()
}

impl Runtime for FakeRuntime {
    fn start(&self, spec: SandboxSpec) -> BoxFuture<'_, Result<AgentConn, RuntimeError>> {
        self.start_inner(Op::Start, spec).boxed()
    }

    fn start_job(
        &self,
        spec: SandboxSpec,
        _job: JobOptions,
    ) -> BoxFuture<'_, Result<AgentConn, RuntimeError>> {
        self.start_inner(Op::StartJob, spec).boxed()
    }

    fn wait_ready(&self, id: Uuid) -> BoxFuture<'_, Result<AgentConn, RuntimeError>> {
        self.wait_ready_inner(id).boxed()
    }

    fn connect(&self, id: Uuid) -> BoxFuture<'_, Result<AgentConn, RuntimeError>> {
        async move {
            self.enter(Op::Connect, id).await?;
            self.open(id).await
        }
        .boxed()
    }

    fn spawn_exec(
        &self,
        id: Uuid,
        _argv: Vec<String>,
    ) -> Result<tokio::process::Child, RuntimeError> {
        match self.life(id) {
            Some(Life::Running) => Err(RuntimeError::Io(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "the fake runtime has no direct file transfer",
            ))),
            _ => Err(RuntimeError::NotRunning),
        }
    }

    fn is_alive(&self, id: Uuid) -> BoxFuture<'_, Result<bool, RuntimeError>> {
        async move {
            self.enter(Op::IsAlive, id).await?;
            Ok(matches!(
                self.life(id),
                Some(Life::Running | Life::Paused | Life::Asleep)
            ))
        }
        .boxed()
    }

    fn is_paused(&self, id: Uuid) -> BoxFuture<'_, Result<Option<bool>, RuntimeError>> {
        async move {
            self.enter(Op::IsPaused, id).await?;
            Ok(match self.life(id) {
                Some(Life::Paused) => Some(true),
                Some(Life::Running | Life::Asleep) => Some(false),
                Some(Life::Stopped) | None => None,
            })
        }
        .boxed()
    }

    fn death_reason(&self, id: Uuid) -> Option<String> {
        let guest = self.guest(id)?;
        let reason = guest
            .death_reason
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        reason
    }

    fn destroy(&self, id: Uuid) -> BoxFuture<'_, Result<(), RuntimeError>> {
        self.destroy_inner(id).boxed()
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<Uuid>, RuntimeError>> {
        async move {
            self.enter(Op::List, Uuid::nil()).await?;
            Ok(self.host_ids())
        }
        .boxed()
    }

    fn pause(&self, id: Uuid) -> BoxFuture<'_, Result<(), RuntimeError>> {
        async move {
            self.thaw_inner(id);
            self.flip(Op::Pause, id, Life::Running, Life::Paused).await
        }
        .boxed()
    }

    fn freeze(&self, id: Uuid) -> BoxFuture<'_, Result<(), RuntimeError>> {
        self.flip(Op::Freeze, id, Life::Running, Life::Asleep)
            .boxed()
    }

    fn thaw(&self, id: Uuid) -> BoxFuture<'_, Result<(), RuntimeError>> {
        async move {
            self.thaw_inner(id);
            Ok(())
        }
        .boxed()
    }

    fn is_frozen(&self, id: Uuid) -> bool {
        self.is_asleep(id)
    }

    fn resume(&self, id: Uuid) -> BoxFuture<'_, Result<(), RuntimeError>> {
        self.flip(Op::Resume, id, Life::Paused, Life::Running)
            .boxed()
    }

    fn checkpoint(&self, id: Uuid, dir: PathBuf) -> BoxFuture<'_, Result<(), RuntimeError>> {
        self.checkpoint_inner(id, dir).boxed()
    }

    fn restore(&self, spec: SandboxSpec, dir: PathBuf) -> BoxFuture<'_, Result<(), RuntimeError>> {
        self.restore_inner(spec, dir).boxed()
    }

    fn compatibility_id(&self) -> String {
        "fake-runtime-v1".to_string()
    }

    fn console_log(&self, id: Uuid) -> PathBuf {
        self.console_dir.join(id.to_string()).join("console.log")
    }

    fn trim_console_logs(&self, _max_bytes: u64) {}

    fn usage(&self, id: Uuid) -> Result<crate::usage::Reading, RuntimeError> {
        match self.life(id) {
            Some(Life::Running) => Ok(self.state().usage.get(&id).copied().unwrap_or_default()),
            _ => Err(RuntimeError::NotRunning),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> SandboxSpec {
        SandboxSpec {
            id: Uuid::new_v4(),
            vcpu: 1,
            memory_mb: 1024,
            volumes: Vec::new(),
            rootfs: None,
        }
    }

    #[tokio::test]
    async fn start_exec_pause_and_kill() {
        let rt = FakeRuntime::new();
        let s = spec();
        let conn = rt.start(s.clone()).await.unwrap();
        let exec = Request::Exec {
            command: sbx_agent_proto::CommandSpec {
                argv: vec!["echo".into(), "hi".into()],
                ..Default::default()
            },
            timeout_ms: 1000,
            max_output_bytes: 1024,
        };
        let (reply, payload) = conn.call(exec.clone()).await.unwrap();
        assert!(matches!(reply, Reply::Exec { exit_code: 0, .. }));
        assert_eq!(payload, b"echo hi");
        rt.pause(s.id).await.unwrap();
        assert_eq!(rt.is_paused(s.id).await.unwrap(), Some(true));
        // Frozen: the call waits, then is answered after the thaw.
        let pending = tokio::spawn({
            let conn = conn.clone();
            async move { conn.call(Request::Ping).await }
        });
        rt.resume(s.id).await.unwrap();
        assert!(matches!(pending.await.unwrap(), Ok((Reply::Pong, _))));
        rt.kill(s.id, Some("oom"));
        conn.closed().await;
        assert!(!rt.is_alive(s.id).await.unwrap());
        assert_eq!(rt.death_reason(s.id).as_deref(), Some("oom"));
        assert!(rt.connect(s.id).await.is_err());
        assert_eq!(rt.calls_for(Op::Start, s.id), 1);
        assert_eq!(rt.calls_for(Op::Connect, s.id), 1);
    }

    #[tokio::test]
    async fn a_stalled_agent_fails_its_handshake_and_checkpoints_restore() {
        let rt = FakeRuntime::new();
        rt.stall_next_start();
        let s = spec();
        let err = rt.start(s.clone()).await.err().unwrap();
        assert!(matches!(err, RuntimeError::AgentNotReady(_)), "{err}");
        rt.set_stall(s.id, false);
        let conn = rt.connect(s.id).await.unwrap();
        conn.call(Request::Configure {
            env: [("K".to_string(), "v".to_string())].into(),
        })
        .await
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("checkpoint");
        rt.checkpoint(s.id, image.clone()).await.unwrap();
        let clone = spec();
        rt.restore(clone.clone(), image.clone()).await.unwrap();
        assert_eq!(rt.configured_env(clone.id).unwrap()["K"], "v");
        rt.wait_ready(clone.id).await.unwrap();
        std::fs::remove_dir_all(&image).unwrap();
        assert!(rt.restore(spec(), image).await.is_err());
        rt.fail_next(Op::Destroy, "busy");
        assert!(rt.destroy(s.id).await.is_err());
        rt.destroy(s.id).await.unwrap();
        assert_eq!(rt.life(s.id), None);
        assert_eq!(rt.calls_for(Op::Destroy, s.id), 2);
    }
}
