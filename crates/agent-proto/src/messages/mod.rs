//! Typed messages carried in frame headers.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use uuid::Uuid;

mod answers;
mod request;

pub use answers::{Event, Reply};
pub use request::Request;

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
