//! What sbxd asks the agent: one variant per operation.

use super::*;

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
