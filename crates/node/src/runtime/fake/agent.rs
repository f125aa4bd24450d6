//! The fake agent: one tokio task per connection, speaking the agent protocol
//! over a `tokio::io::duplex` pipe, with the guest's state (environment, a
//! tiny file system, processes) in memory.

use crate::runtime::agent_conn::Closing;
use crate::runtime::AgentConn;
use sbx_agent_proto::{
    read_frame, write_frame, AgentError, AgentErrorCode, Body, Event, FileKind, FileStat, Frame,
    Header, ProcessInfo, ProcessState, Reply, Request, PROTOCOL_VERSION,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{oneshot, watch};
use uuid::Uuid;

/// What a fake sandbox is doing, as the host sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Life {
    /// Running: the agent answers.
    Running,
    /// Frozen: the agent reads nothing until resumed.
    Paused,
    /// Frozen while idle (`Runtime::freeze`): reads nothing until thawed,
    /// but runsc would still call it running.
    Asleep,
    /// The container exists but its processes are dead (connections closed).
    Stopped,
}

/// Answers an exec: `(exit code, stdout, stderr)` for an argv.
pub type ExecHandler = Arc<dyn Fn(&[String]) -> (i32, Vec<u8>, Vec<u8>) + Send + Sync>;

/// The runtime's exec handler, shared with every connection (`None`: built-in commands).
pub(super) type SharedExec = Arc<Mutex<Option<ExecHandler>>>;

/// What lives in the guest's memory (and so survives a checkpoint).
#[derive(Debug, Clone, Default)]
pub(super) struct GuestData {
    /// Base environment from the last `configure`.
    pub env: BTreeMap<String, String>,
    /// Regular files: path → (mode, bytes).
    pub files: BTreeMap<String, (u32, Vec<u8>)>,
    /// Processes started with `process_start`.
    pub processes: BTreeMap<Uuid, ProcessInfo>,
    /// The agent predates `guest_processes` and answers it as an unknown
    /// message, as an agent booted before an upgrade of sbxd would.
    pub older_agent: bool,
}

/// One fake sandbox.
pub(super) struct Guest {
    /// Survives checkpoint and restore, like the real agent's.
    pub boot_id: Uuid,
    /// Host-visible state; the agent tasks watch it.
    pub life: watch::Sender<Life>,
    /// Bumped to close every open connection while the sandbox stays up.
    pub epoch: watch::Sender<u64>,
    /// The agent reads requests and never answers them.
    pub stall: AtomicBool,
    /// Guest memory.
    pub data: Mutex<GuestData>,
    /// Why the sandbox stopped, when it was killed with a reason.
    pub death_reason: Mutex<Option<String>>,
}

impl Guest {
    /// A new guest in state `life`.
    pub fn new(boot_id: Uuid, life: Life, data: GuestData) -> Arc<Guest> {
        Arc::new(Guest {
            boot_id,
            life: watch::Sender::new(life),
            epoch: watch::Sender::new(0),
            stall: AtomicBool::new(false),
            data: Mutex::new(data),
            death_reason: Mutex::new(None),
        })
    }

    /// Current host-visible state.
    pub fn life(&self) -> Life {
        *self.life.borrow()
    }

    fn data(&self) -> std::sync::MutexGuard<'_, GuestData> {
        self.data.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Opens a connection to `guest`'s agent (no handshake yet).
pub(super) fn connect(guest: Arc<Guest>, exec: SharedExec) -> AgentConn {
    let (client, server) = tokio::io::duplex(1 << 20);
    let (cr, cw) = tokio::io::split(client);
    let (conn, closing) = AgentConn::with_closer(cr, cw);
    tokio::spawn(serve(guest, server, closing, exec));
    conn
}

/// An upload in progress on one request id.
struct Upload {
    path: String,
    mode: u32,
    max_bytes: u64,
    bytes: Vec<u8>,
}

/// Per-connection state of the agent task.
struct Session {
    guest: Arc<Guest>,
    exec: SharedExec,
    uploads: HashMap<u64, Upload>,
    /// Id of the open `net_serve`, ended by a newer one or by `quiesce`.
    net_serve: Option<u64>,
}

async fn serve(
    guest: Arc<Guest>,
    server: tokio::io::DuplexStream,
    mut closing: oneshot::Receiver<Closing>,
    exec: SharedExec,
) {
    let (mut rd, mut wr) = tokio::io::split(server);
    let mut life = guest.life.subscribe();
    let mut epoch = guest.epoch.subscribe();
    epoch.mark_unchanged();
    let mut session = Session {
        guest: guest.clone(),
        exec,
        uploads: HashMap::new(),
        net_serve: None,
    };
    let closed_by_daemon = loop {
        let frame = tokio::select! {
            f = read_frame(&mut rd) => match f {
                Ok(f) => f,
                Err(_) => break None,
            },
            c = &mut closing => break c.ok(),
            _ = epoch.changed() => break None,
            _ = wait_life(&mut life, |l| l == Life::Stopped) => break None,
        };
        // A frozen guest reads nothing: wait for the thaw (or the end).
        let thawed = tokio::select! {
            running = wait_life(&mut life, |l| l != Life::Paused && l != Life::Asleep) => running,
            c = &mut closing => break c.ok(),
            _ = epoch.changed() => break None,
        };
        if !thawed || guest.life() == Life::Stopped {
            break None;
        }
        if guest.stall.load(Ordering::SeqCst) {
            continue;
        }
        let mut broken = false;
        for out in session.answer(frame) {
            if write_frame(&mut wr, &out).await.is_err() {
                broken = true;
                break;
            }
        }
        if broken {
            break None;
        }
    };
    // Dropping both halves of the pipe is what the daemon's reader sees as EOF.
    drop(rd);
    drop(wr);
    if let Some(c) = closed_by_daemon {
        let _ = c.done.send(());
    }
}

/// Waits until the state satisfies `want`; true if it does, false if the sender is gone.
async fn wait_life(rx: &mut watch::Receiver<Life>, want: impl Fn(Life) -> bool) -> bool {
    rx.wait_for(|l| want(*l)).await.is_ok()
}

fn now_ms() -> u64 {
    chrono::Utc::now().timestamp_millis().max(0) as u64
}

fn reply(id: u64, reply: Reply) -> Frame {
    Frame::new(Header {
        id,
        body: Body::Reply(reply),
    })
}

fn error(id: u64, code: AgentErrorCode, message: impl Into<String>) -> Frame {
    Frame::new(Header {
        id,
        body: Body::Error(AgentError::new(code, message)),
    })
}

fn stat(path: &str, mode: u32, size: u64) -> FileStat {
    FileStat {
        path: path.to_string(),
        name: path.rsplit('/').next().unwrap_or(path).to_string(),
        kind: FileKind::File,
        size,
        mode,
        mtime_ms: now_ms(),
        uid: 0,
        gid: 0,
        owner: Some("root".into()),
        group: Some("root".into()),
        symlink_target: None,
        target_kind: None,
        metadata: Default::default(),
    }
}

impl Session {
    /// The frames that answer one frame from the daemon (none for most
    /// stream continuations, cancels and the long-lived `net_serve`).
    fn answer(&mut self, frame: Frame) -> Vec<Frame> {
        let id = frame.header.id;
        let request = match frame.header.body {
            Body::Request(r) => r,
            Body::Cancel => {
                self.uploads.remove(&id);
                return Vec::new();
            }
            _ => return vec![error(id, AgentErrorCode::Protocol, "not a request")],
        };
        let not_found = |what: &str| vec![error(id, AgentErrorCode::NotFound, what.to_string())];
        match request {
            Request::Ping => vec![reply(id, Reply::Pong)],
            Request::Hello => vec![reply(
                id,
                Reply::Hello {
                    version: PROTOCOL_VERSION,
                    boot_id: self.guest.boot_id,
                },
            )],
            Request::Configure { env } => {
                self.guest.data().env = env;
                vec![reply(id, Reply::Ok)]
            }
            Request::Sync => vec![reply(id, Reply::Ok)],
            Request::GuestProcesses if self.guest.data().older_agent => {
                vec![error(id, AgentErrorCode::Protocol, "unknown message")]
            }
            Request::GuestProcesses => {
                // PID 1 and the pids a test added as `/proc/N` files, except
                // those whose contents say `relay` (sbxd's relay processes).
                let count = 1 + self
                    .guest
                    .data()
                    .files
                    .iter()
                    .filter(|(p, (_, bytes))| {
                        p.strip_prefix("/proc/")
                            .is_some_and(|pid| pid.bytes().all(|b| b.is_ascii_digit()))
                            && bytes.as_slice() != b"relay"
                    })
                    .count() as u64;
                vec![reply(id, Reply::GuestProcesses { count })]
            }
            Request::Quiesce => {
                let mut out: Vec<Frame> = self
                    .net_serve
                    .take()
                    .map(|serve| reply(serve, Reply::Ok))
                    .into_iter()
                    .collect();
                out.push(reply(id, Reply::Ok));
                out
            }
            Request::NetServe => {
                // Stays open; a newer one replaces it (the protocol's rule).
                let old = self.net_serve.replace(id);
                old.map(|serve| reply(serve, Reply::Ok))
                    .into_iter()
                    .collect()
            }
            Request::NetDialResult { .. }
            | Request::NetData { .. }
            | Request::NetAck { .. }
            | Request::NetClose { .. }
            | Request::NetResolveResult { .. }
            | Request::PortData
            | Request::PortAck { .. }
            | Request::PortClose { .. } => Vec::new(),
            // The fake guest runs no servers: every port is closed.
            Request::PortOpen { port } => vec![error(
                id,
                AgentErrorCode::ConnectionRefused,
                format!("nothing listens on port {port}"),
            )],
            Request::Exec { command, .. } => {
                let (exit_code, stdout, stderr) = self.exec(&command.argv);
                let header = Header {
                    id,
                    body: Body::Reply(Reply::Exec {
                        exit_code,
                        stdout_len: stdout.len() as u64,
                        stderr_len: stderr.len() as u64,
                    }),
                };
                vec![Frame::with_payload(header, [stdout, stderr].concat())]
            }
            Request::ProcessStart { command, options } => {
                // Every fake process exits at once with code 0; it answers RUNNING
                // (as the real agent does once it has started).
                let pid = self.guest.data().processes.len() as i32 + 2;
                let info = ProcessInfo {
                    id: Uuid::new_v4(),
                    argv: command.argv,
                    pid: Some(pid),
                    state: ProcessState::Running,
                    exit_code: None,
                    signal: None,
                    error: None,
                    started_at_ms: Some(now_ms()),
                    ended_at_ms: None,
                    output_retained: true,
                    output_bytes: 0,
                    env: command.env,
                    cwd: command.cwd,
                    tag: options.tag,
                    user: options.user,
                    pty: options.pty.is_some(),
                    stdin_open: options.stdin,
                };
                let exited = ProcessInfo {
                    state: ProcessState::Exited,
                    exit_code: Some(0),
                    ended_at_ms: Some(now_ms()),
                    ..info.clone()
                };
                self.guest.data().processes.insert(info.id, exited);
                vec![reply(id, Reply::Process { process: info })]
            }
            Request::ProcessList => {
                let processes = self.guest.data().processes.values().cloned().collect();
                vec![reply(id, Reply::Processes { processes })]
            }
            Request::ProcessGet { process } | Request::ProcessWait { process, .. } => {
                match self.guest.data().processes.get(&process).cloned() {
                    Some(process) => vec![reply(id, Reply::Process { process })],
                    None => not_found("no such process"),
                }
            }
            // Fake processes have already exited: there is no stdin or
            // terminal left to write to, as with a real one that ended.
            Request::ProcessInput { process }
            | Request::ProcessCloseStdin { process }
            | Request::ProcessResize { process, .. } => {
                if self.guest.data().processes.contains_key(&process) {
                    vec![error(
                        id,
                        AgentErrorCode::InvalidArgument,
                        "the process has ended",
                    )]
                } else {
                    not_found("no such process")
                }
            }
            // The tiny file system never changes behind the daemon's back:
            // a watch reports nothing until it is cancelled.
            Request::Watch { .. } => Vec::new(),
            Request::ProcessSignal { process, .. } => {
                if self.guest.data().processes.contains_key(&process) {
                    vec![reply(id, Reply::Ok)]
                } else {
                    not_found("no such process")
                }
            }
            Request::ProcessOutput { .. } => {
                vec![reply(id, Reply::Output { chunks: Vec::new() })]
            }
            Request::ProcessStream { .. } => {
                vec![reply(id, Reply::StreamEnd { next_offset: 0 })]
            }
            Request::FileWriteBegin {
                path,
                mode,
                max_bytes,
                ..
            } => {
                let upload = Upload {
                    path,
                    mode,
                    max_bytes,
                    bytes: Vec::new(),
                };
                self.uploads.insert(id, upload);
                Vec::new()
            }
            Request::FileWriteData => {
                let Some(upload) = self.uploads.get_mut(&id) else {
                    return Vec::new();
                };
                upload.bytes.extend_from_slice(&frame.payload);
                if upload.bytes.len() as u64 > upload.max_bytes {
                    self.uploads.remove(&id);
                    return vec![error(id, AgentErrorCode::TooLarge, "file too large")];
                }
                Vec::new()
            }
            Request::FileWriteEnd => match self.uploads.remove(&id) {
                Some(u) => {
                    let bytes_written = u.bytes.len() as u64;
                    self.guest.data().files.insert(u.path, (u.mode, u.bytes));
                    vec![reply(id, Reply::FileWritten { bytes_written })]
                }
                None => vec![error(id, AgentErrorCode::Protocol, "no upload")],
            },
            Request::FileWriteAbort => {
                self.uploads.remove(&id);
                Vec::new()
            }
            Request::FileRead { path, max_bytes } => {
                let Some((mode, bytes)) = self.guest.data().files.get(&path).cloned() else {
                    return not_found("no such file");
                };
                if bytes.len() as u64 > max_bytes {
                    return vec![error(id, AgentErrorCode::TooLarge, "file too large")];
                }
                let size = bytes.len() as u64;
                let event = |body, payload| {
                    Frame::with_payload(
                        Header {
                            id,
                            body: Body::Event(body),
                        },
                        payload,
                    )
                };
                vec![
                    event(
                        Event::FileMeta {
                            stat: stat(&path, mode, size),
                        },
                        Vec::new(),
                    ),
                    event(Event::FileData, bytes),
                    reply(id, Reply::FileRead { bytes: size }),
                ]
            }
            Request::Stat { path } => match self.guest.data().files.get(&path) {
                Some((mode, bytes)) => vec![reply(
                    id,
                    Reply::Stat {
                        stat: stat(&path, *mode, bytes.len() as u64),
                    },
                )],
                None => not_found("no such file"),
            },
            Request::Remove { path, .. } => match self.guest.data().files.remove(&path) {
                Some(_) => vec![reply(id, Reply::Ok)],
                None => not_found("no such file"),
            },
            Request::Rename { from, to, .. } => {
                let mut data = self.guest.data();
                match data.files.remove(&from) {
                    Some(file) => {
                        data.files.insert(to, file);
                        vec![reply(id, Reply::Ok)]
                    }
                    None => not_found("no such file"),
                }
            }
            // Directories are implicit in the tiny file system.
            Request::Mkdir { .. } => vec![reply(id, Reply::Ok)],
            Request::ListDir { path, .. } => {
                let prefix = format!("{}/", path.trim_end_matches('/'));
                let entries = self
                    .guest
                    .data()
                    .files
                    .iter()
                    .filter(|(p, _)| p.starts_with(&prefix) && !p[prefix.len()..].contains('/'))
                    .map(|(p, (mode, bytes))| stat(p, *mode, bytes.len() as u64))
                    .collect::<Vec<_>>();
                // The guest's /proc always lists PID 1, the agent (fake
                // processes have exited; a test adds pids as files).
                let mut entries = entries;
                if prefix == "/proc/" {
                    entries.push(stat("/proc/1", 0o555, 0));
                }
                vec![reply(id, Reply::Dir { entries })]
            }
        }
    }

    /// The test's exec handler, or the built-in one: `printenv NAME` and
    /// `cat PATH` read the guest state; anything else exits 0 with the argv
    /// joined by spaces as stdout.
    fn exec(&self, argv: &[String]) -> (i32, Vec<u8>, Vec<u8>) {
        let handler = self.exec.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(handler) = handler {
            return handler(argv);
        }
        let data = self.guest.data();
        match argv {
            [cmd, name] if cmd == "printenv" => match data.env.get(name) {
                Some(v) => (0, format!("{v}\n").into_bytes(), Vec::new()),
                None => (1, Vec::new(), Vec::new()),
            },
            [cmd, path] if cmd == "cat" => match data.files.get(path) {
                Some((_, bytes)) => (0, bytes.clone(), Vec::new()),
                None => (
                    1,
                    Vec::new(),
                    format!("cat: {path}: not found\n").into_bytes(),
                ),
            },
            _ => (0, argv.join(" ").into_bytes(), Vec::new()),
        }
    }
}
