//! What the agent answers: final replies and the events before them.

use super::*;

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
