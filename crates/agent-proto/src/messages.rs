//! Typed messages carried in frame headers.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use uuid::Uuid;

/// The JSON header of every frame.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// Request id chosen by the daemon; replies and events echo it.
    pub id: u64,
    /// What the frame says.
    #[serde(flatten)]
    pub body: Body,
}

/// The four kinds of frame.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "msg", rename_all = "snake_case")]
pub enum Body {
    /// Daemon → agent: start an operation (or, for uploads, continue one).
    Request(Request),
    /// Agent → daemon: the final, successful answer to request `id`.
    Reply(Reply),
    /// Agent → daemon: the final, failed answer to request `id`.
    Error(AgentError),
    /// Agent → daemon: an intermediate item of a streaming request.
    Event(Event),
    /// Daemon → agent: abandon request `id` (a stream whose client left).
    Cancel,
}

/// A command to run: argv, per-call environment and working directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct CommandSpec {
    /// Argument vector; `argv[0]` is resolved through `PATH` when it has no `/`.
    pub argv: Vec<String>,
    /// Merged over the sandbox environment for this command only.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Working directory; `None` means `/`.
    #[serde(default)]
    pub cwd: Option<String>,
}

/// Operations the agent performs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Liveness check; answered with [`Reply::Pong`].
    Ping,
    /// Identify the agent; answered with [`Reply::Hello`].
    Hello,
    /// Replace the sandbox's base environment (configuration and secrets).
    Configure {
        /// Base environment layered over the guest defaults.
        env: BTreeMap<String, String>,
    },
    /// Run a command to completion and capture its output.
    Exec {
        /// What to run.
        #[serde(flatten)]
        command: CommandSpec,
        /// Kill the process group and fail with `timed_out` after this long.
        timeout_ms: u64,
        /// Fail with `output_too_large` (and kill) once stdout+stderr exceed this.
        max_output_bytes: u64,
    },
    /// Start a background process; answered once it is running.
    ProcessStart {
        /// What to run.
        #[serde(flatten)]
        command: CommandSpec,
        /// User, stdin, terminal, tag and lifetime; all off by default.
        #[serde(flatten, default)]
        options: ProcessOptions,
    },
    /// Write the payload to a process's stdin pipe (or its terminal); answered with [`Reply::Ok`].
    ProcessInput {
        /// Process id.
        process: Uuid,
    },
    /// Close a process's stdin pipe (EOF); refused for a terminal process.
    ProcessCloseStdin {
        /// Process id.
        process: Uuid,
    },
    /// Resize a terminal process's pseudo-terminal (`TIOCSWINSZ`).
    ProcessResize {
        /// Process id.
        process: Uuid,
        /// New size.
        size: PtySize,
    },
    /// All processes the agent still has metadata for, sorted by id.
    ProcessList,
    /// One process.
    ProcessGet {
        /// Process id.
        process: Uuid,
    },
    /// Send a signal to a process (and its group when asked).
    ProcessSignal {
        /// Process id.
        process: Uuid,
        /// Signal number 1–64.
        signal: i32,
        /// Signal the whole process group, not just the leader.
        include_children: bool,
    },
    /// Long-poll until the process is terminal or the timeout passes.
    ProcessWait {
        /// Process id.
        process: Uuid,
        /// Give up with `timed_out` after this long.
        timeout_ms: u64,
    },
    /// Retained output: whole chunks from the newest back until `tail_bytes` are covered (0 = all).
    ProcessOutput {
        /// Process id.
        process: Uuid,
        /// How much of the tail to return; 0 means everything retained.
        tail_bytes: u64,
    },
    /// Retained tail (or everything from `from_offset`) as events, then live output until exit.
    ProcessStream {
        /// Process id.
        process: Uuid,
        /// How much of the tail to start with; 0 means everything retained.
        tail_bytes: u64,
        /// Resume point: send chunks whose offset is at or after this instead of a tail.
        #[serde(default)]
        from_offset: Option<u64>,
    },
    /// Begin an upload; followed by [`Request::FileWriteData`] frames and [`Request::FileWriteEnd`].
    FileWriteBegin {
        /// Absolute destination path.
        path: String,
        /// Permission bits of the new file.
        mode: u32,
        /// Abort with `too_large` past this many bytes.
        max_bytes: u64,
        /// Guest user (name in `/etc/passwd`) who owns the file and any
        /// parent directories created for it; `None`: root.
        #[serde(default)]
        owner: Option<String>,
        /// User metadata stored on the new file as `user.e2b.*` xattrs
        /// (see [`crate::file_metadata`]); the file replaced had its own.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        metadata: crate::file_metadata::FileMetadata,
    },
    /// Upload bytes (in the payload) for the upload with the same id.
    FileWriteData,
    /// Finish the upload: fsync and rename into place; answered with [`Reply::FileWritten`].
    FileWriteEnd,
    /// Abort the upload with the same id; the temp file is removed.
    FileWriteAbort,
    /// Download a regular file: [`Event::FileMeta`], then [`Event::FileData`] events, then [`Reply::FileRead`].
    FileRead {
        /// Absolute path.
        path: String,
        /// Fail with `too_large` if the file is bigger.
        max_bytes: u64,
    },
    /// Metadata of a path (not following a final symlink).
    Stat {
        /// Absolute path.
        path: String,
    },
    /// Entries of a directory, sorted by path; with `depth` > 1 also the
    /// entries of subdirectories down to that many levels (symlinks not followed).
    ListDir {
        /// Absolute path.
        path: String,
        /// Levels to descend; 0 and 1 both mean the direct children only.
        #[serde(default)]
        depth: u32,
    },
    /// Create a directory (and its parents).
    Mkdir {
        /// Absolute path.
        path: String,
        /// Guest user (name in `/etc/passwd`) who owns the directories created; `None`: root.
        #[serde(default)]
        owner: Option<String>,
    },
    /// Remove a file, symlink or (empty, or with `recursive`) directory.
    Remove {
        /// Absolute path.
        path: String,
        /// Remove a directory with its contents.
        recursive: bool,
    },
    /// Rename within the sandbox filesystem.
    Rename {
        /// Existing path.
        from: String,
        /// New path; replaced if it is a file.
        to: String,
        /// Create missing parents of `to`, owned by this guest user (`None`: parents must exist).
        #[serde(default)]
        parents_owner: Option<String>,
    },
    /// Long-lived: report changes under a directory as [`Event::FsChange`]
    /// events until the request is cancelled. Answers `not_found` for a
    /// missing path and `invalid_argument` for one that is not a directory.
    Watch {
        /// Absolute path of a directory.
        path: String,
        /// Also watch every subdirectory, including ones created later.
        recursive: bool,
    },
    /// Flush filesystem buffers (before a snapshot).
    Sync,
    /// How many processes the guest runs: the pids in its `/proc` except the
    /// relays sbxd started with `runsc exec` (parent pid 0, `sbx-agent
    /// relay`); answered with [`Reply::GuestProcesses`]. 1 means only PID 1,
    /// the agent, runs: the sandbox is idle and may sleep.
    GuestProcesses,
    /// Before a checkpoint: end every `net_serve`, reset the proxied
    /// connections and close the proxy and DNS listeners, answering only once
    /// they are closed. A checkpoint taken with those listeners open can
    /// crash the agent when it is restored (gVisor 20240729); the next
    /// `net_serve` opens them again.
    Quiesce,
    /// Long-lived: carry the in-sandbox proxies' connections (events
    /// [`Event::NetDial`], [`Event::NetData`], [`Event::NetAck`], [`Event::NetClose`])
    /// and the DNS responder's lookups ([`Event::NetResolve`]).
    /// Starts the proxies and the DNS responder on first use; a newer `net_serve` (any connection) replaces
    /// this one, which then ends with [`Reply::Ok`].
    NetServe,
    /// Answer to [`Event::NetDial`] (same id as the `net_serve`); no reply.
    NetDialResult {
        /// Proxy connection id.
        conn: u64,
        /// `None` when connected.
        #[serde(default)]
        error: Option<NetError>,
    },
    /// Bytes (payload) from the remote end for `conn` (same id as the `net_serve`); no reply.
    NetData {
        /// Proxy connection id.
        conn: u64,
    },
    /// The daemon wrote `bytes` of `conn`'s data to the remote end: that much more credit.
    NetAck {
        /// Proxy connection id.
        conn: u64,
        /// Bytes consumed.
        bytes: u64,
    },
    /// The remote end finished sending (`reset: false`) or the connection failed (`reset: true`).
    NetClose {
        /// Proxy connection id.
        conn: u64,
        /// Abort both directions at once.
        #[serde(default)]
        reset: bool,
    },
    /// Answer to [`Event::NetResolve`] (same id as the `net_serve`); no reply.
    NetResolveResult {
        /// Query id chosen by the agent.
        query: u64,
        /// Addresses the policy allows (empty: none, answer NXDOMAIN).
        #[serde(default)]
        addrs: Vec<std::net::IpAddr>,
        /// `None` when the name was resolved (even to nothing allowed).
        #[serde(default)]
        error: Option<NetError>,
    },
    /// Long-lived: dial `127.0.0.1:port` (then `[::1]:port`) inside the
    /// sandbox and carry that connection (a preview URL's request): event
    /// [`Event::PortOpened`] once connected, then [`Event::PortData`],
    /// [`Event::PortAck`] and [`Event::PortClose`] both ways on this id;
    /// answered with [`Reply::Ok`] once both directions are closed.
    /// Nothing listening: `connection_refused`; port 0: `invalid_argument`.
    PortOpen {
        /// TCP port inside the sandbox, 1–65535.
        port: u16,
    },
    /// Bytes (payload, ≤ [`NET_CHUNK_BYTES`]) for the guest server, on a `port_open`'s id; no reply.
    PortData,
    /// The daemon wrote `bytes` of the guest server's data to its client: more credit.
    PortAck {
        /// Bytes consumed.
        bytes: u64,
    },
    /// The daemon's client finished sending (`reset: false`, half-close) or went away (`reset: true`).
    PortClose {
        /// Abort both directions at once.
        #[serde(default)]
        reset: bool,
    },
}

/// Successful final answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Reply {
    /// Answer to [`Request::Ping`].
    Pong,
    /// Answer to [`Request::Hello`].
    Hello {
        /// [`crate::PROTOCOL_VERSION`] of the agent.
        version: u32,
        /// Random id chosen when the agent booted; survives checkpoint/restore.
        boot_id: Uuid,
    },
    /// A request with nothing to return succeeded.
    Ok,
    /// Exec finished; the payload is stdout bytes followed by stderr bytes.
    Exec {
        /// Exit code, or 128+signal when killed by a signal.
        exit_code: i32,
        /// Length of the stdout part of the payload.
        stdout_len: u64,
        /// Length of the stderr part of the payload.
        stderr_len: u64,
    },
    /// One process.
    Process {
        /// The process.
        process: ProcessInfo,
    },
    /// Several processes, sorted by id.
    Processes {
        /// The processes.
        processes: Vec<ProcessInfo>,
    },
    /// Retained output; the payload is the chunks' bytes concatenated in order.
    Output {
        /// The chunks, oldest first.
        chunks: Vec<ChunkMeta>,
    },
    /// A process stream ended because the process is terminal and all output was sent.
    StreamEnd {
        /// Offset just past the last byte sent (resume point).
        next_offset: u64,
    },
    /// Upload committed.
    FileWritten {
        /// Bytes in the file.
        bytes_written: u64,
    },
    /// Download finished.
    FileRead {
        /// Bytes sent.
        bytes: u64,
    },
    /// Metadata of one path.
    Stat {
        /// The metadata.
        stat: FileStat,
    },
    /// Directory entries.
    Dir {
        /// Entries sorted by name.
        entries: Vec<FileStat>,
    },
    /// Answer to [`Request::GuestProcesses`].
    GuestProcesses {
        /// Processes in the guest, PID 1 included, sbxd's relays not.
        count: u64,
    },
}

/// Intermediate items of streaming requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// Output bytes (in the payload) of a streamed process.
    Chunk {
        /// Where the bytes sit in the process's output.
        chunk: ChunkMeta,
    },
    /// Something changed under a watched directory.
    FsChange {
        /// Path relative to the watched directory.
        name: String,
        /// What happened.
        change: FsChangeKind,
    },
    /// First event of a download.
    FileMeta {
        /// The file being sent.
        stat: FileStat,
    },
    /// Download bytes in the payload.
    FileData,
    /// A proxy client wants a TCP connection to `host:port` (a name or an IP literal).
    NetDial {
        /// Proxy connection id chosen by the agent.
        conn: u64,
        /// Hostname or IP address as the client gave it.
        host: String,
        /// Destination port.
        port: u16,
    },
    /// Bytes (payload) the sandbox client sent on `conn`.
    NetData {
        /// Proxy connection id.
        conn: u64,
    },
    /// The agent wrote `bytes` of the daemon's data for `conn` to the client: more credit.
    NetAck {
        /// Proxy connection id.
        conn: u64,
        /// Bytes consumed.
        bytes: u64,
    },
    /// The client finished sending (`reset: false`) or the connection failed (`reset: true`).
    NetClose {
        /// Proxy connection id.
        conn: u64,
        /// Abort both directions at once.
        #[serde(default)]
        reset: bool,
    },
    /// The in-sandbox DNS responder wants `name`'s addresses (A, or AAAA with `ipv6`).
    NetResolve {
        /// Query id chosen by the agent.
        query: u64,
        /// The queried name as the client sent it.
        name: String,
        /// AAAA (IPv6) rather than A (IPv4).
        #[serde(default)]
        ipv6: bool,
    },
    /// A `port_open` connected; data may flow.
    PortOpened,
    /// Bytes (payload) the guest server sent on a `port_open`'s connection.
    PortData,
    /// The agent wrote `bytes` of the daemon's data to the guest server: more credit.
    PortAck {
        /// Bytes consumed.
        bytes: u64,
    },
    /// The guest server finished sending (`reset: false`) or the connection failed (`reset: true`).
    PortClose {
        /// Abort both directions at once.
        #[serde(default)]
        reset: bool,
    },
}

/// Why the daemon did not connect a proxied connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetError {
    /// The sandbox's network policy refuses the destination.
    Denied,
    /// The name did not resolve.
    Resolve,
    /// The destination refused the connection.
    Refused,
    /// No route to the destination.
    Unreachable,
    /// The dial timed out.
    TimedOut,
    /// Anything else (including: too many connections).
    Failed,
}

/// Bytes one side may send on a proxied connection before the other side acknowledges them.
pub const NET_WINDOW_BYTES: u64 = 512 * 1024;
/// Largest payload of one `net_data` frame.
pub const NET_CHUNK_BYTES: usize = 64 * 1024;

/// Which output stream a chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StreamKind {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
    /// The pseudo-terminal of a process started with a `pty` (stdout and stderr merged).
    Pty,
}

/// What happened to a path under a watched directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FsChangeKind {
    /// Created (or moved in).
    Create,
    /// Written to.
    Write,
    /// Removed (or moved out).
    Remove,
    /// Renamed (the old name; the new one is reported as `create`).
    Rename,
    /// Permissions or ownership changed.
    Chmod,
}

/// Size of a pseudo-terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PtySize {
    /// Columns.
    pub cols: u16,
    /// Rows.
    pub rows: u16,
}

/// How a process is started beyond its command; the default is a root
/// process with stdin on `/dev/null`, separate stdout and stderr pipes, no
/// tag and no deadline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct ProcessOptions {
    /// Run as this guest user (a name in the guest's `/etc/passwd`): its
    /// uid, gid and groups, with `HOME`, `USER` and `LOGNAME` set and the
    /// working directory defaulting to its home. Unknown → `invalid_argument`.
    #[serde(default)]
    pub user: Option<String>,
    /// Keep a stdin pipe open for [`Request::ProcessInput`].
    #[serde(default)]
    pub stdin: bool,
    /// Run on a new pseudo-terminal of this size (its controlling
    /// terminal, in a new session); output arrives as [`StreamKind::Pty`]
    /// and input goes to the terminal.
    #[serde(default)]
    pub pty: Option<PtySize>,
    /// Free-form label reported in [`ProcessInfo::tag`].
    #[serde(default)]
    pub tag: Option<String>,
    /// Kill the process group (SIGKILL) this long after the start.
    #[serde(default)]
    pub kill_after_ms: Option<u64>,
    /// While a `process_stream` of this process is open and behind, stop
    /// reading the process's output (so its writes block) instead of
    /// dropping unsent output from the ring; with no stream open, old output
    /// is dropped as usual.
    #[serde(default)]
    pub backpressure: bool,
}

/// A run of output bytes; the bytes travel in the frame payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChunkMeta {
    /// stdout or stderr.
    pub stream: StreamKind,
    /// Byte offset of this chunk in the process's combined output (monotonic, never reused).
    pub offset: u64,
    /// Number of bytes.
    pub len: u64,
    /// When the agent read the bytes, milliseconds since the Unix epoch.
    pub at_ms: u64,
}

/// Lifecycle of a managed process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ProcessState {
    /// Being started.
    Starting,
    /// Running.
    Running,
    /// Exited normally with an exit code.
    Exited,
    /// Ended by a signal.
    Killed,
    /// Could not be started.
    Failed,
    /// The agent lost track of it.
    Lost,
}

impl ProcessState {
    /// Whether the state is final.
    pub fn is_terminal(self) -> bool {
        !matches!(self, ProcessState::Starting | ProcessState::Running)
    }
}

/// What the agent knows about a managed process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessInfo {
    /// Public id.
    pub id: Uuid,
    /// argv as run.
    pub argv: Vec<String>,
    /// Guest pid, once started.
    #[serde(default)]
    pub pid: Option<i32>,
    /// Current state.
    pub state: ProcessState,
    /// Exit code, when `state` is `Exited`.
    #[serde(default)]
    pub exit_code: Option<i32>,
    /// Terminating signal, when `state` is `Killed`.
    #[serde(default)]
    pub signal: Option<i32>,
    /// Why it failed, when `state` is `Failed`.
    #[serde(default)]
    pub error: Option<String>,
    /// Start time, ms since the epoch.
    #[serde(default)]
    pub started_at_ms: Option<u64>,
    /// End time, ms since the epoch.
    #[serde(default)]
    pub ended_at_ms: Option<u64>,
    /// False once the output ring was evicted.
    pub output_retained: bool,
    /// The per-call environment it was started with (not the sandbox's).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The working directory as requested.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Its tag, if started with one.
    #[serde(default)]
    pub tag: Option<String>,
    /// The guest user it runs as, if started with one.
    #[serde(default)]
    pub user: Option<String>,
    /// Whether it runs on a pseudo-terminal.
    #[serde(default)]
    pub pty: bool,
    /// Whether its stdin pipe is still open for input.
    #[serde(default)]
    pub stdin_open: bool,
    /// Total bytes of output produced so far (the next chunk's offset).
    pub output_bytes: u64,
}

/// Kinds of filesystem object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileKind {
    /// Regular file.
    File,
    /// Directory.
    Dir,
    /// Symbolic link.
    Symlink,
    /// Device, fifo or socket.
    Other,
}

/// Metadata of a path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileStat {
    /// Absolute path (for directory entries: the entry's full path).
    pub path: String,
    /// Last path component.
    pub name: String,
    /// Object kind.
    pub kind: FileKind,
    /// Size in bytes.
    pub size: u64,
    /// Permission bits (`mode & 0o7777`).
    pub mode: u32,
    /// Modification time, ms since the epoch.
    pub mtime_ms: u64,
    /// Owner's uid.
    #[serde(default)]
    pub uid: u32,
    /// Owner's gid.
    #[serde(default)]
    pub gid: u32,
    /// Owner's name from the guest's `/etc/passwd`, if it has one.
    #[serde(default)]
    pub owner: Option<String>,
    /// Group's name from the guest's `/etc/group`, if it has one.
    #[serde(default)]
    pub group: Option<String>,
    /// For a symlink: where it points, resolved to an absolute path.
    #[serde(default)]
    pub symlink_target: Option<String>,
    /// For a symlink: the kind of what it points to (`None` when dangling).
    #[serde(default)]
    pub target_kind: Option<FileKind>,
    /// User metadata (`user.e2b.*` xattrs, see [`crate::file_metadata`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: crate::file_metadata::FileMetadata,
}

/// Stable error codes returned by the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentErrorCode {
    /// Malformed or out-of-range request.
    InvalidArgument,
    /// No such process or path.
    NotFound,
    /// Exec or wait ran out of time.
    TimedOut,
    /// Exec output over `max_output_bytes`.
    OutputTooLarge,
    /// File over `max_bytes`.
    TooLarge,
    /// The path is not a regular file.
    NotRegularFile,
    /// The process's output ring was evicted.
    OutputNotRetained,
    /// A directory is not empty (remove without `recursive`).
    NotEmpty,
    /// Permission denied inside the sandbox.
    PermissionDenied,
    /// The command could not be started (no such executable, bad cwd...).
    SpawnFailed,
    /// No space left on the sandbox's disk.
    NoSpace,
    /// Any other I/O failure.
    Io,
    /// A protocol violation (unknown upload id, frame out of order).
    Protocol,
    /// Nothing listens on the port a `port_open` named.
    ConnectionRefused,
}

/// A failed answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[error("{code:?}: {message}")]
pub struct AgentError {
    /// Stable code.
    pub code: AgentErrorCode,
    /// Human-readable detail.
    pub message: String,
}

impl AgentError {
    /// Builds an error.
    pub fn new(code: AgentErrorCode, message: impl Into<String>) -> Self {
        AgentError {
            code,
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_json_shape_is_stable() {
        let h = Header {
            id: 3,
            body: Body::Request(Request::ProcessWait {
                process: Uuid::nil(),
                timeout_ms: 5,
            }),
        };
        let json = serde_json::to_value(&h).unwrap();
        assert_eq!(json["id"], 3);
        assert_eq!(json["kind"], "request");
        assert_eq!(json["msg"]["op"], "process_wait");
        let back: Header = serde_json::from_value(json).unwrap();
        assert_eq!(back, h);
        let e = Header {
            id: 4,
            body: Body::Error(AgentError::new(AgentErrorCode::NotFound, "x")),
        };
        let json = serde_json::to_value(&e).unwrap();
        assert_eq!(json["msg"]["code"], "not_found");
    }

    #[test]
    fn net_resolve_shapes() {
        let ev = Event::NetResolve {
            query: 7,
            name: "example.com".into(),
            ipv6: true,
        };
        let json = serde_json::to_value(&ev).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"type": "net_resolve", "query": 7, "name": "example.com", "ipv6": true})
        );
        assert_eq!(serde_json::from_value::<Event>(json).unwrap(), ev);
        let req = Request::NetResolveResult {
            query: 7,
            addrs: vec!["192.0.2.1".parse().unwrap(), "2001:db8::1".parse().unwrap()],
            error: None,
        };
        let json = serde_json::to_value(&req).unwrap();
        assert_eq!(json["op"], "net_resolve_result");
        assert_eq!(
            json["addrs"],
            serde_json::json!(["192.0.2.1", "2001:db8::1"])
        );
        assert_eq!(serde_json::from_value::<Request>(json).unwrap(), req);
        let refused: Request = serde_json::from_value(
            serde_json::json!({"op": "net_resolve_result", "query": 8, "error": "denied"}),
        )
        .unwrap();
        assert_eq!(
            refused,
            Request::NetResolveResult {
                query: 8,
                addrs: Vec::new(),
                error: Some(NetError::Denied)
            }
        );
    }
}
