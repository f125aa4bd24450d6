//! The listening socket, one session per connection, and request dispatch.
//!
//! Each connection has a reader loop (this module), a writer task fed by a
//! bounded channel, one task per in-flight request (registered by id so that
//! [`Body::Cancel`] and connection loss can abort it), and one task per
//! upload. When a connection drops, only its own requests are cancelled;
//! processes, their output and the process table live on.

use crate::upload::Upload;
use crate::{console, exec, files, guest_procs, listing, port, procs, watch, Agent};
use sbx_agent_proto::{
    AgentError, AgentErrorCode, Body, CodecError, Event, Frame, Header, Reply, Request,
    MAX_FRAME_BYTES, PROTOCOL_VERSION,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::unix::OwnedWriteHalf;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

/// Frames queued per connection before request tasks wait for the writer
/// (bounds memory: downloads queue at most this many 1 MiB frames).
const OUTBOUND_QUEUE: usize = 8;
/// Socket buffer sizes for the reader and writer.
const IO_BUFFER_BYTES: usize = 256 * 1024;

/// Final outcome of a request: a reply with its payload, or an error.
pub type Outcome = Result<(Reply, Vec<u8>), AgentError>;

/// Failures of the server and of reading frames.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Binding or preparing the socket failed.
    #[error("cannot listen on {path}: {source}")]
    Listen {
        /// Socket path.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// A frame could not be read; the connection is closed.
    #[error("bad frame: {0}")]
    Frame(#[from] CodecError),
    /// A well-framed message whose header names an id but is not understood.
    #[error("request {id}: {message}")]
    BadMessage {
        /// The id found in the header.
        id: u64,
        /// Parser detail.
        message: String,
    },
}

/// Sends the frames of one request back on its connection.
#[derive(Clone)]
pub struct Sink {
    id: u64,
    tx: mpsc::Sender<Frame>,
}

impl Sink {
    /// A sink for request `id`.
    pub fn new(id: u64, tx: mpsc::Sender<Frame>) -> Self {
        Sink { id, tx }
    }

    /// Sends an intermediate event; fails once the connection is gone.
    pub async fn event(&self, event: Event, payload: Vec<u8>) -> Result<(), AgentError> {
        let frame = Frame::with_payload(
            Header {
                id: self.id,
                body: Body::Event(event),
            },
            payload,
        );
        self.tx
            .send(frame)
            .await
            .map_err(|_| AgentError::new(AgentErrorCode::Io, "connection closed"))
    }

    /// Sends the final reply or error (ignored if the connection is gone).
    pub async fn finish(&self, outcome: Outcome) {
        let frame = match outcome {
            Ok((reply, payload)) => Frame::with_payload(
                Header {
                    id: self.id,
                    body: Body::Reply(reply),
                },
                payload,
            ),
            Err(e) => Frame::new(Header {
                id: self.id,
                body: Body::Error(e),
            }),
        };
        let _ = self.tx.send(frame).await;
    }
}

/// Where the agent listens.
#[derive(Debug, Clone)]
pub enum ListenAddr {
    /// A socket file (tests, `serve` mode); a stale file is replaced.
    Path(std::path::PathBuf),
    /// A name in the abstract namespace (`init`): nothing on the filesystem
    /// for the guest to unlink or shadow.
    Abstract(String),
}

impl std::fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ListenAddr::Path(p) => write!(f, "{}", p.display()),
            ListenAddr::Abstract(name) => write!(f, "@{name}"),
        }
    }
}

fn bind(addr: &ListenAddr) -> std::io::Result<UnixListener> {
    match addr {
        ListenAddr::Path(path) => {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            match std::fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
            UnixListener::bind(path)
        }
        ListenAddr::Abstract(name) => {
            use std::os::linux::net::SocketAddrExt;
            let sa = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
            let std_listener = std::os::unix::net::UnixListener::bind_addr(&sa)?;
            std_listener.set_nonblocking(true)?;
            UnixListener::from_std(std_listener)
        }
    }
}

/// Binds `addr` and serves connections forever.
pub async fn serve(agent: Arc<Agent>, addr: &ListenAddr) -> Result<(), ServerError> {
    let listener = bind(addr).map_err(|source| ServerError::Listen {
        path: addr.to_string(),
        source,
    })?;
    console!("listening on {addr}");
    let mut conn_no: u64 = 0;
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                conn_no += 1;
                let agent = Arc::clone(&agent);
                tokio::spawn(serve_connection(agent, stream, conn_no));
            }
            Err(e) => {
                console!("accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}

/// Reads one frame. A header that is valid JSON with an `id` but an unknown
/// message yields [`ServerError::BadMessage`]; anything worse is fatal.
pub async fn read_frame_lenient<R: AsyncRead + Unpin>(
    reader: &mut R,
) -> Result<Frame, ServerError> {
    let mut len = [0u8; 4];
    let mut filled = 0;
    while filled < 4 {
        let n = reader
            .read(&mut len[filled..])
            .await
            .map_err(CodecError::Io)?;
        if n == 0 {
            return Err(if filled == 0 {
                CodecError::Closed
            } else {
                CodecError::Truncated
            }
            .into());
        }
        filled += n;
    }
    let total = u32::from_be_bytes(len) as usize;
    if total > MAX_FRAME_BYTES {
        return Err(CodecError::FrameTooLarge(total).into());
    }
    let mut body = vec![0u8; total];
    reader.read_exact(&mut body).await.map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            CodecError::Truncated
        } else {
            CodecError::Io(e)
        }
    })?;
    decode_lenient(&body)
}

/// Decodes one frame body; a header that is valid JSON with an `id` but an
/// unknown message yields [`ServerError::BadMessage`].
pub fn decode_lenient(body: &[u8]) -> Result<Frame, ServerError> {
    match Frame::decode_body(body) {
        Ok(frame) => Ok(frame),
        Err(CodecError::Json(err)) => {
            #[derive(serde::Deserialize)]
            struct IdOnly {
                id: u64,
            }
            let header = body
                .get(..4)
                .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
                .and_then(|len| body.get(4..4usize.saturating_add(len)))
                .unwrap_or_default();
            match serde_json::from_slice::<IdOnly>(header) {
                Ok(IdOnly { id }) => Err(ServerError::BadMessage {
                    id,
                    message: err.to_string(),
                }),
                Err(_) => Err(CodecError::Json(err).into()),
            }
        }
        Err(e) => Err(e.into()),
    }
}

/// A frame's wire bytes; a reply that cannot be encoded becomes an error
/// frame for its request (`None` if even that fails).
pub fn encode_or_error(frame: &Frame) -> Option<Vec<u8>> {
    match frame.encode() {
        Ok(b) => Some(b),
        Err(e) => {
            let id = frame.header.id;
            console!("request {id}: reply cannot be encoded: {e}");
            let fallback = Frame::new(Header {
                id,
                body: Body::Error(AgentError::new(
                    AgentErrorCode::Io,
                    format!("reply cannot be encoded: {e}"),
                )),
            });
            fallback.encode().ok()
        }
    }
}

async fn write_loop(writer: OwnedWriteHalf, mut rx: mpsc::Receiver<Frame>) {
    let mut out = BufWriter::with_capacity(IO_BUFFER_BYTES, writer);
    while let Some(frame) = rx.recv().await {
        let Some(bytes) = encode_or_error(&frame) else {
            continue;
        };
        if out.write_all(&bytes).await.is_err() {
            return;
        }
        if rx.is_empty() && out.flush().await.is_err() {
            return;
        }
    }
    let _ = out.flush().await;
}

/// In-flight request tasks of one connection, by request id.
type Tasks = Arc<Mutex<HashMap<u64, (u64, AbortHandle)>>>;

/// One session: the requests of one connection (or of one attach on the stdio channel).
pub struct Connection {
    agent: Arc<Agent>,
    tx: mpsc::Sender<Frame>,
    tasks: Tasks,
    uploads: HashMap<u64, Upload>,
    /// Open `port_open` streams (their frames are routed by id).
    ports: port::Ports,
    next_seq: u64,
}

async fn serve_connection(agent: Arc<Agent>, stream: UnixStream, conn_no: u64) {
    let (rd, wr) = stream.into_split();
    let (tx, rx) = mpsc::channel(OUTBOUND_QUEUE);
    tokio::spawn(write_loop(wr, rx));
    let mut reader = BufReader::with_capacity(IO_BUFFER_BYTES, rd);
    let mut conn = Connection::new(agent, tx);
    let why = loop {
        match read_frame_lenient(&mut reader).await {
            Ok(frame) => conn.handle(frame).await,
            Err(ServerError::BadMessage { id, message }) => conn.unknown_message(id, message).await,
            Err(ServerError::Frame(CodecError::Closed)) => break None,
            Err(e) => break Some(e),
        }
    };
    if let Some(e) = why {
        console!("connection {conn_no} closed: {e}");
    }
    conn.close();
}

impl Connection {
    /// A session whose frames go out through `tx`.
    pub fn new(agent: Arc<Agent>, tx: mpsc::Sender<Frame>) -> Self {
        Connection {
            agent,
            tx,
            tasks: Arc::default(),
            uploads: HashMap::new(),
            ports: port::Ports::default(),
            next_seq: 0,
        }
    }

    /// Ends the session: its requests are cancelled; processes live on.
    pub fn close(mut self) {
        let tasks: Vec<_> = {
            let mut t = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
            t.drain().map(|(_, (_, h))| h).collect()
        };
        for h in tasks {
            h.abort();
        }
        // Dropping the upload handles makes each upload task remove its temp file.
        self.uploads.clear();
    }

    /// Answers a frame whose message is not understood.
    pub async fn unknown_message(&self, id: u64, message: String) {
        self.error(
            id,
            AgentErrorCode::Protocol,
            format!("unknown message: {message}"),
        )
        .await
    }

    async fn error(&self, id: u64, code: AgentErrorCode, message: String) {
        Sink::new(id, self.tx.clone())
            .finish(Err(AgentError::new(code, message)))
            .await;
    }

    fn busy(&self, id: u64) -> bool {
        self.uploads.contains_key(&id)
            || self
                .tasks
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains_key(&id)
    }

    /// Handles one frame of the session.
    pub async fn handle(&mut self, frame: Frame) {
        let id = frame.header.id;
        match frame.header.body {
            Body::Request(req) => self.request(id, req, frame.payload).await,
            Body::Cancel => {
                let task = self
                    .tasks
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&id);
                if let Some((_, h)) = task {
                    h.abort();
                } else if let Some(up) = self.uploads.remove(&id) {
                    up.cancel().await;
                }
            }
            _ => {
                self.error(
                    id,
                    AgentErrorCode::Protocol,
                    "only requests and cancels are accepted".into(),
                )
                .await
            }
        }
    }

    async fn request(&mut self, id: u64, req: Request, payload: Vec<u8>) {
        match req {
            Request::FileWriteData => match self.uploads.get(&id) {
                Some(up) => up.data(payload).await,
                None => {
                    self.error(
                        id,
                        AgentErrorCode::Protocol,
                        "no upload with this id".into(),
                    )
                    .await
                }
            },
            Request::FileWriteEnd => match self.uploads.remove(&id) {
                Some(up) => up.end().await,
                None => {
                    self.error(
                        id,
                        AgentErrorCode::Protocol,
                        "no upload with this id".into(),
                    )
                    .await
                }
            },
            Request::FileWriteAbort => match self.uploads.remove(&id) {
                Some(up) => up.abort().await,
                None => {
                    self.error(
                        id,
                        AgentErrorCode::Protocol,
                        "no upload with this id".into(),
                    )
                    .await
                }
            },
            Request::NetDialResult { conn, error } => self.agent.net.dial_result(conn, error),
            Request::NetData { conn } => self.agent.net.data(conn, payload),
            Request::NetAck { conn, bytes } => self.agent.net.ack(conn, bytes),
            Request::NetClose { conn, reset } => self.agent.net.close(conn, reset),
            Request::NetResolveResult {
                query,
                addrs,
                error,
            } => self.agent.net.resolve_result(query, addrs, error),
            Request::PortData => self.ports.data(id, payload),
            Request::PortAck { bytes } => self.ports.ack(id, bytes),
            Request::PortClose { reset } => self.ports.close(id, reset),
            _ if self.busy(id) => {
                self.error(
                    id,
                    AgentErrorCode::Protocol,
                    "request id already in flight".into(),
                )
                .await
            }
            Request::FileWriteBegin {
                path,
                mode,
                max_bytes,
                owner,
                metadata,
            } => {
                let sink = Sink::new(id, self.tx.clone());
                let upload = Upload::begin(path, mode, max_bytes, (owner, metadata), sink);
                self.uploads.insert(id, upload);
            }
            // Registered before the next frame is read: the stream's data
            // frames (sent after `port_opened`) always find it.
            Request::PortOpen { port } => match self.ports.register(id) {
                Ok(reg) => self.spawn_task(id, move |sink| port::run(reg, port, sink)),
                Err(e) => Sink::new(id, self.tx.clone()).finish(Err(e)).await,
            },
            Request::NetServe => {
                let serving = self.agent.net.register(&Sink::new(id, self.tx.clone()));
                self.spawn_serving(id, serving);
            }
            // Queued here, in the order the frames arrive, so that input is
            // never reordered; the answer waits (in its own task) for the write.
            Request::ProcessInput { process } => match self.agent.table.input(process, payload) {
                Ok(written) => self.spawn_task(id, move |_| procs::input_written(process, written)),
                Err(e) => Sink::new(id, self.tx.clone()).finish(Err(e)).await,
            },
            // The watches are in place before the next frame is read: a
            // request sent after this one sees them.
            Request::Watch { path, recursive } => {
                let opened =
                    tokio::task::spawn_blocking(move || watch::Watcher::open(&path, recursive))
                        .await
                        .unwrap_or_else(|e| {
                            Err(AgentError::new(
                                AgentErrorCode::Io,
                                format!("worker failed: {e}"),
                            ))
                        });
                match opened {
                    Ok(w) => self.spawn_task(id, move |sink| async move { w.run(&sink).await }),
                    Err(e) => Sink::new(id, self.tx.clone()).finish(Err(e)).await,
                }
            }
            Request::ProcessCloseStdin { process } => match self.agent.table.close_stdin(process) {
                Ok(closed) => self.spawn_task(id, move |_| procs::stdin_closed(closed)),
                Err(e) => Sink::new(id, self.tx.clone()).finish(Err(e)).await,
            },
            req => self.spawn_request(id, req),
        }
    }

    /// Like `spawn_request` for an already registered `net_serve`.
    fn spawn_serving(&mut self, id: u64, serving: crate::proxy::Serving) {
        self.spawn_task(id, move |_| serving.wait());
    }

    fn spawn_request(&mut self, id: u64, req: Request) {
        let agent = Arc::clone(&self.agent);
        self.spawn_task(
            id,
            move |sink| async move { dispatch(&agent, req, &sink).await },
        );
    }

    /// Runs `work` as request `id`'s task: registered so that a cancel or
    /// the connection's end aborts it, and its outcome is the final frame.
    fn spawn_task<F, Fut>(&mut self, id: u64, work: F)
    where
        F: FnOnce(Sink) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Outcome> + Send + 'static,
    {
        self.next_seq += 1;
        let seq = self.next_seq;
        let sink = Sink::new(id, self.tx.clone());
        let tasks = Arc::clone(&self.tasks);
        // Hold the map lock across spawn + insert so a fast task cannot try
        // to deregister before it is registered.
        let mut map = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        let task = tokio::spawn(async move {
            let outcome = work(sink.clone()).await;
            {
                let mut map = tasks.lock().unwrap_or_else(|e| e.into_inner());
                if map.get(&id).is_some_and(|(s, _)| *s == seq) {
                    map.remove(&id);
                }
            }
            sink.finish(outcome).await;
        });
        map.insert(id, (seq, task.abort_handle()));
    }
}

fn reply(r: Reply) -> Outcome {
    Ok((r, Vec::new()))
}

/// Runs one (non-upload) request to its final outcome, sending events on `sink`.
pub async fn dispatch(agent: &Arc<Agent>, req: Request, sink: &Sink) -> Outcome {
    match req {
        Request::Ping => reply(Reply::Pong),
        Request::Hello => reply(Reply::Hello {
            version: PROTOCOL_VERSION,
            boot_id: agent.boot_id,
        }),
        Request::Configure { env } => {
            agent.env.configure(env);
            reply(Reply::Ok)
        }
        Request::Exec {
            command,
            timeout_ms,
            max_output_bytes,
        } => exec::exec(agent, command, timeout_ms, max_output_bytes).await,
        Request::ProcessStart { command, options } => procs::start(agent, command, options).await,
        Request::ProcessResize { process, size } => {
            agent.table.resize(process, size)?;
            reply(Reply::Ok)
        }
        Request::ProcessList => reply(Reply::Processes {
            processes: agent.table.list(),
        }),
        Request::ProcessGet { process } => reply(Reply::Process {
            process: agent.table.get(process)?,
        }),
        Request::ProcessSignal {
            process,
            signal,
            include_children,
        } => procs::signal(agent, process, signal, include_children),
        Request::ProcessWait {
            process,
            timeout_ms,
        } => procs::wait(agent, process, timeout_ms).await,
        Request::ProcessOutput {
            process,
            tail_bytes,
        } => procs::output(agent, process, tail_bytes),
        Request::ProcessStream {
            process,
            tail_bytes,
            from_offset,
        } => procs::stream(agent, process, tail_bytes, from_offset, sink).await,
        Request::FileRead { path, max_bytes } => files::read(path, max_bytes, sink).await,
        Request::Stat { path } => files::blocking(move || files::stat(&path)).await,
        Request::ListDir { path, depth } => {
            files::blocking(move || listing::list_dir(&path, depth)).await
        }
        Request::Mkdir { path, owner } => {
            files::blocking(move || files::mkdir(&path, owner.as_deref())).await
        }
        Request::Remove { path, recursive } => {
            files::blocking(move || files::remove(&path, recursive)).await
        }
        Request::Rename {
            from,
            to,
            parents_owner,
        } => files::blocking(move || files::rename(&from, &to, parents_owner.as_deref())).await,
        Request::Sync => files::blocking(files::sync).await,
        Request::GuestProcesses => files::blocking(|| Ok(guest_procs::guest_processes())).await,
        Request::ProcessInput { .. }
        | Request::ProcessCloseStdin { .. }
        | Request::Watch { .. } => Err(AgentError::new(
            AgentErrorCode::Protocol,
            "input, close-stdin and watch requests are handled by the connection",
        )),
        Request::Quiesce => {
            agent.net.quiesce().await;
            reply(Reply::Ok)
        }
        Request::NetServe
        | Request::NetDialResult { .. }
        | Request::NetData { .. }
        | Request::NetAck { .. }
        | Request::NetClose { .. }
        | Request::NetResolveResult { .. }
        | Request::PortOpen { .. }
        | Request::PortData
        | Request::PortAck { .. }
        | Request::PortClose { .. } => Err(AgentError::new(
            AgentErrorCode::Protocol,
            "net and port frames are handled by the connection",
        )),
        Request::FileWriteBegin { .. }
        | Request::FileWriteData
        | Request::FileWriteEnd
        | Request::FileWriteAbort => Err(AgentError::new(
            AgentErrorCode::Protocol,
            "upload frames are handled by the connection",
        )),
    }
}
