//! The daemon's end of the protocol (feature `client`): a multiplexed connection to
//! one sandbox's agent over a byte stream (PID 1's stdio channel, or the stdio
//! of a `runsc exec ... sbx-agent relay` process).
//!
//! Many requests share the stream: each gets an id; one reader task routes
//! replies and events back to the waiting caller.
//!
//! The other end runs inside the sandbox, so it is untrusted: every call has
//! a deadline (see [`deadline_for`]), and a frame that cannot be written in
//! time closes the connection instead of leaving a half-written frame behind.

use crate::{read_frame, write_frame, AgentError, Body, CodecError, Frame, Header, Reply, Request};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot, watch};

mod doze;
mod handles;
mod kinds;
mod port;

pub use doze::Thaw;
pub use handles::{AgentStream, Upload};
use kinds::request_kind;
pub use port::PortStream;

/// Why a call to the agent failed.
#[derive(Debug, thiserror::Error)]
pub enum AgentCallError {
    /// The agent answered with an error.
    #[error("agent: {0}")]
    Agent(AgentError),
    /// The connection closed before an answer arrived.
    #[error("agent connection closed")]
    Closed,
    /// A frame could not be written.
    #[error("agent protocol: {0}")]
    Codec(#[from] CodecError),
    /// The agent answered with a message the request does not expect.
    #[error("unexpected agent reply: {0}")]
    Unexpected(String),
    /// No answer (or the frame could not be written) before the call's deadline.
    #[error("the agent did not answer within {0:?}")]
    TimedOut(Duration),
    /// A quiet call found the sandbox frozen while idle (it was not woken).
    #[error("the sandbox is asleep")]
    Asleep,
}

/// Deadline of calls that do no long work in the agent (ping, hello,
/// configure, process and file metadata).
pub const SHORT_CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Deadline of calls whose work is bounded by the guest's disk (file reads,
/// writes, removes, sync) rather than by a timeout they carry.
pub const IO_CALL_TIMEOUT: Duration = Duration::from_secs(120);
/// Added to the timeout a request carries (exec, wait): the agent answers
/// `timed_out` itself at that point, so this only catches an agent that does not.
pub const CARRIED_TIMEOUT_SLACK: Duration = Duration::from_secs(15);
/// How long one frame may take to be written before the connection is
/// considered stuck and closed (an agent that stopped reading).
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long sbxd waits for the final answer of `request`.
pub fn deadline_for(request: &Request) -> Duration {
    match request {
        Request::Exec { timeout_ms, .. } | Request::ProcessWait { timeout_ms, .. } => {
            Duration::from_millis(*timeout_ms).saturating_add(CARRIED_TIMEOUT_SLACK)
        }
        Request::FileWriteBegin { .. }
        | Request::FileWriteData
        | Request::FileWriteEnd
        | Request::FileRead { .. }
        | Request::Remove { .. }
        | Request::Rename { .. }
        | Request::Sync
        | Request::ListDir { .. } => IO_CALL_TIMEOUT,
        _ => SHORT_CALL_TIMEOUT,
    }
}

/// A final answer: the reply and its payload.
pub type Answer = (Reply, Vec<u8>);

enum Pending {
    Once(oneshot::Sender<Result<Answer, AgentError>>),
    /// A call that is not activity: it neither keeps the sandbox awake nor
    /// counts as work in flight (sbxd's own process counts).
    Quiet(oneshot::Sender<Result<Answer, AgentError>>),
    Stream(mpsc::Sender<StreamItem>),
}

/// A request to stop a connection's transport; fire `done` once it has stopped.
#[derive(Debug)]
pub struct Closing {
    /// Signalled when the transport is gone.
    pub done: oneshot::Sender<()>,
}

/// One item of a streaming request.
#[derive(Debug)]
pub enum StreamItem {
    /// An intermediate event with its payload.
    Event(crate::Event, Vec<u8>),
    /// The final reply.
    End(Reply, Vec<u8>),
    /// The final error.
    Failed(AgentError),
}

type Writer = Box<dyn AsyncWrite + Send + Unpin>;

struct Inner {
    /// Kills the transport (the relay process) when fired.
    closer: Mutex<Option<oneshot::Sender<Closing>>>,
    writer: Arc<tokio::sync::Mutex<Writer>>,
    /// The task reading the stream, stopped by [`AgentConn::shutdown`] so
    /// that a later session on the same stream is its only reader.
    reader: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The stream survives a checkpoint of the sandbox (the stdio channel).
    kept_through_checkpoint: bool,
    pending: Mutex<HashMap<u64, Pending>>,
    next_id: AtomicU64,
    closed: watch::Sender<bool>,
    /// Whether the sandbox sleeps (frozen while idle) and when it was last busy.
    doze: doze::Doze,
}

/// Cheap-to-clone handle to an agent connection.
#[derive(Clone)]
pub struct AgentConn {
    inner: Arc<Inner>,
}

/// Holds a connection's writer: nothing else is written until it is dropped.
pub struct WriterHold(#[allow(dead_code)] tokio::sync::OwnedMutexGuard<Writer>);

impl AgentConn {
    /// Wraps a stream; spawns the reader task.
    pub fn new<R, W>(reader: R, writer: W) -> Self
    where
        R: AsyncRead + Send + Unpin + 'static,
        W: AsyncWrite + Send + Unpin + 'static,
    {
        Self::build(reader, writer, false)
    }

    /// Wraps a session of PID 1's stdio channel (already attached): the
    /// stream stays usable through a checkpoint taken under [`AgentConn::quiesce_holding_writer`].
    pub fn over_stdio_channel<R, W>(reader: R, writer: W) -> Self
    where
        R: AsyncRead + Send + Unpin + 'static,
        W: AsyncWrite + Send + Unpin + 'static,
    {
        Self::build(reader, writer, true)
    }

    fn build<R, W>(reader: R, writer: W, kept_through_checkpoint: bool) -> Self
    where
        R: AsyncRead + Send + Unpin + 'static,
        W: AsyncWrite + Send + Unpin + 'static,
    {
        let (closed, _) = watch::channel(false);
        let inner = Arc::new(Inner {
            closer: Mutex::new(None),
            writer: Arc::new(tokio::sync::Mutex::new(Box::new(writer))),
            reader: Mutex::new(None),
            kept_through_checkpoint,
            pending: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            closed,
            doze: doze::Doze::new(),
        });
        let task = tokio::spawn(read_loop(reader, inner.clone()));
        *inner.reader.lock().unwrap_or_else(|p| p.into_inner()) = Some(task);
        AgentConn { inner }
    }

    /// Whether the connection survives a checkpoint of its sandbox.
    pub fn kept_through_checkpoint(&self) -> bool {
        self.inner.kept_through_checkpoint
    }

    /// Sends `request` and waits for its answer while keeping the writer:
    /// once it returns, the agent has read every frame sbxd sent, and no
    /// other frame is written until the hold is dropped. A checkpoint taken
    /// meanwhile finds the agent's reader at a frame boundary. A failure
    /// closes the connection (a frame may be half written).
    pub async fn quiesce_holding_writer(
        &self,
        request: Request,
        limit: Duration,
    ) -> Result<(Answer, WriterHold), AgentCallError> {
        if self.is_closed() {
            return Err(AgentCallError::Closed);
        }
        self.inner.doze.wake().await;
        let id = self.next_id();
        let rx = self.register_once(id);
        let frame = Frame::new(Header {
            id,
            body: Body::Request(request),
        });
        let exchange = async {
            let mut w = Arc::clone(&self.inner.writer).lock_owned().await;
            write_frame(&mut *w, &frame).await?;
            let answer = Self::await_once(rx).await?;
            Ok::<_, AgentCallError>((answer, WriterHold(w)))
        };
        match tokio::time::timeout(limit, exchange).await {
            Ok(Ok(held)) => Ok(held),
            Ok(Err(e)) => {
                self.pending().remove(&id);
                if matches!(e, AgentCallError::Codec(_)) {
                    self.abort();
                }
                Err(e)
            }
            Err(_) => {
                self.pending().remove(&id);
                self.abort();
                Err(AgentCallError::TimedOut(limit))
            }
        }
    }

    /// Wraps a stream whose transport is told to stop through the returned receiver.
    pub fn with_closer<R, W>(reader: R, writer: W) -> (Self, oneshot::Receiver<Closing>)
    where
        R: AsyncRead + Send + Unpin + 'static,
        W: AsyncWrite + Send + Unpin + 'static,
    {
        let conn = Self::new(reader, writer);
        let (tx, rx) = oneshot::channel();
        *conn.inner.closer.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx);
        (conn, rx)
    }

    /// Stops the transport: closes our end of the stream (the agent side sees
    /// EOF) and stops the relay process. Pending and later calls fail with `Closed`.
    /// Returns once the transport reports it has stopped.
    pub async fn shutdown(&self) {
        let _ = self.inner.closed.send_replace(true);
        // A writer stuck on an agent that stopped reading holds the lock for
        // up to WRITE_TIMEOUT; the transport is stopped below either way.
        if let Ok(mut w) =
            tokio::time::timeout(Duration::from_secs(1), self.inner.writer.lock()).await
        {
            *w = Box::new(tokio::io::sink());
        }
        if let Some(tx) = self.take_closer() {
            let (done, stopped) = oneshot::channel();
            if tx.send(Closing { done }).is_ok() {
                let _ = stopped.await;
            }
        }
        if let Some(task) = self.take_reader() {
            task.abort();
            let _ = task.await;
        }
        // The stopped reader no longer wakes waiters: fail them here.
        self.pending().clear();
    }

    fn take_reader(&self) -> Option<tokio::task::JoinHandle<()>> {
        self.inner
            .reader
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }

    fn take_closer(&self) -> Option<oneshot::Sender<Closing>> {
        self.inner
            .closer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }

    /// Whether the stream has closed.
    pub fn is_closed(&self) -> bool {
        *self.inner.closed.borrow()
    }

    /// Resolves once the stream has closed.
    pub async fn closed(&self) {
        let mut rx = self.inner.closed.subscribe();
        let _ = rx.wait_for(|c| *c).await;
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Pending>> {
        self.inner.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn next_id(&self) -> u64 {
        self.inner.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Writes one frame. Waiting for the writer and writing are bounded by
    /// [`WRITE_TIMEOUT`]; a write cut short leaves half a frame in the stream,
    /// so then the connection is closed (pending calls fail with `Closed`).
    async fn send(&self, id: u64, body: Body, payload: Vec<u8>) -> Result<(), AgentCallError> {
        if self.is_closed() {
            return Err(AgentCallError::Closed);
        }
        self.inner.doze.wake().await;
        self.write(id, body, payload).await
    }

    /// Writes one frame without waking the sandbox or counting as activity.
    async fn write(&self, id: u64, body: Body, payload: Vec<u8>) -> Result<(), AgentCallError> {
        let frame = Frame::with_payload(Header { id, body }, payload);
        let write = async {
            let mut w = self.inner.writer.lock().await;
            write_frame(&mut *w, &frame).await
        };
        match tokio::time::timeout(WRITE_TIMEOUT, write).await {
            Ok(result) => result.map_err(|e| match e {
                CodecError::Io(_) => AgentCallError::Closed,
                other => AgentCallError::Codec(other),
            }),
            Err(_) => {
                tracing::warn!("agent stopped reading its connection; closing it");
                self.abort();
                Err(AgentCallError::TimedOut(WRITE_TIMEOUT))
            }
        }
    }

    /// Closes the connection without waiting: marks it closed and tells the
    /// transport to stop (the relay is killed if it does not exit).
    pub fn abort(&self) {
        let _ = self.inner.closed.send_replace(true);
        if let Some(tx) = self.take_closer() {
            let (done, _) = oneshot::channel();
            let _ = tx.send(Closing { done });
        }
        if let Some(task) = self.take_reader() {
            task.abort();
        }
        self.pending().clear();
    }

    /// Sends a request and waits for its final answer, at most [`deadline_for`] it.
    pub async fn call(&self, request: Request) -> Result<Answer, AgentCallError> {
        let limit = deadline_for(&request);
        self.call_within(request, limit).await
    }

    /// Sends a request and waits at most `limit` for its final answer; on
    /// timeout the request is cancelled in the agent.
    pub async fn call_within(
        &self,
        request: Request,
        limit: Duration,
    ) -> Result<Answer, AgentCallError> {
        self.call_with_payload(request, Vec::new(), limit).await
    }

    /// Like [`AgentConn::call_within`], with bytes in the request frame's
    /// payload (the input of [`Request::ProcessInput`]).
    pub async fn call_with_payload(
        &self,
        request: Request,
        payload: Vec<u8>,
        limit: Duration,
    ) -> Result<Answer, AgentCallError> {
        let id = self.next_id();
        let rx = self.register_once(id);
        let kind = request_kind(&request);
        let started = std::time::Instant::now();
        let res = self
            .exchange(id, Body::Request(request), payload, rx, limit)
            .await;
        // An error answer is an answer: only no answer counts as a failure.
        let answered = matches!(
            res,
            Ok(_) | Err(AgentCallError::Agent(_)) | Err(AgentCallError::Unexpected(_))
        );
        sbx_metrics::global().agent_request(kind, started.elapsed(), answered);
        res
    }

    /// Sends `body` on request `id` and waits for the answer registered as
    /// `rx`, all within `limit`; on timeout the request is cancelled in the agent.
    async fn exchange(
        &self,
        id: u64,
        body: Body,
        payload: Vec<u8>,
        rx: oneshot::Receiver<Result<Answer, AgentError>>,
        limit: Duration,
    ) -> Result<Answer, AgentCallError> {
        let exchange = async {
            self.send(id, body, payload).await?;
            Self::await_once(rx).await
        };
        match tokio::time::timeout(limit, exchange).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(e)) => {
                self.pending().remove(&id);
                Err(e)
            }
            Err(_) => {
                self.pending().remove(&id);
                self.cancel_later(id);
                Err(AgentCallError::TimedOut(limit))
            }
        }
    }

    /// Sends a request that is not activity: it does not wake a sleeping
    /// sandbox (`Asleep` instead) and does not keep an idle one awake.
    pub async fn call_quietly(
        &self,
        request: Request,
        limit: Duration,
    ) -> Result<Answer, AgentCallError> {
        if self.is_closed() {
            return Err(AgentCallError::Closed);
        }
        if self.is_asleep() {
            return Err(AgentCallError::Asleep);
        }
        // Not under the sleep lock: a freeze that slips in between this
        // check and the answer costs this call its deadline (the frame is
        // answered after the next thaw, to nobody), never a request's.
        let id = self.next_id();
        let (tx, rx) = oneshot::channel();
        self.pending().insert(id, Pending::Quiet(tx));
        let exchange = async {
            self.write(id, Body::Request(request), Vec::new()).await?;
            Self::await_once(rx).await
        };
        match tokio::time::timeout(limit, exchange).await {
            Ok(res) => {
                self.pending().remove(&id);
                res
            }
            Err(_) => {
                self.pending().remove(&id);
                Err(AgentCallError::TimedOut(limit))
            }
        }
    }

    /// Time since a frame was last sent, or a call last answered.
    pub fn idle_for(&self) -> Duration {
        self.inner.doze.idle_for()
    }

    /// Whether the sandbox sleeps: frozen by [`AgentConn::sleep_if_idle`]
    /// and not woken since.
    pub fn is_asleep(&self) -> bool {
        self.inner.doze.is_asleep()
    }

    /// Runs `freeze` if the connection has been idle for `idle` with no call
    /// waiting for an answer (streams do not count: they wait for the
    /// guest, which has nothing running when sbxd puts it to sleep); the
    /// [`Thaw`] it returns runs before the next frame is written. Ok(false):
    /// not idle, nothing frozen.
    pub async fn sleep_if_idle<E>(
        &self,
        idle: Duration,
        freeze: impl std::future::Future<Output = Result<Thaw, E>>,
    ) -> Result<bool, E> {
        let busy = || {
            self.is_closed()
                || self
                    .pending()
                    .values()
                    .any(|p| matches!(p, Pending::Once(_)))
        };
        self.inner.doze.sleep(idle, busy, freeze).await
    }

    /// Thaws the sandbox if it sleeps.
    pub async fn wake(&self) {
        self.inner.doze.wake().await;
    }

    /// Tells the agent to drop request `id`, without waiting for the write.
    fn cancel_later(&self, id: u64) {
        let conn = self.clone();
        tokio::spawn(async move {
            let _ = conn.send(id, Body::Cancel, Vec::new()).await;
        });
    }

    fn register_once(&self, id: u64) -> oneshot::Receiver<Result<Answer, AgentError>> {
        let (tx, rx) = oneshot::channel();
        self.pending().insert(id, Pending::Once(tx));
        rx
    }

    async fn await_once(
        rx: oneshot::Receiver<Result<Answer, AgentError>>,
    ) -> Result<Answer, AgentCallError> {
        match rx.await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(e)) => Err(AgentCallError::Agent(e)),
            Err(_) => Err(AgentCallError::Closed),
        }
    }

    /// Starts a streaming request; events arrive on the returned stream.
    pub async fn stream(&self, request: Request) -> Result<AgentStream, AgentCallError> {
        let id = self.next_id();
        let (tx, rx) = mpsc::channel(16);
        self.pending().insert(id, Pending::Stream(tx));
        if let Err(e) = self.send(id, Body::Request(request), Vec::new()).await {
            self.pending().remove(&id);
            return Err(e);
        }
        Ok(AgentStream {
            id,
            rx,
            conn: self.clone(),
            finished: false,
        })
    }

    /// Sends a further request frame on the id of an open streaming request
    /// (the `net_*` frames of a `net_serve`); nothing answers it.
    pub async fn send_on(
        &self,
        id: u64,
        request: Request,
        payload: Vec<u8>,
    ) -> Result<(), AgentCallError> {
        self.send(id, Body::Request(request), payload).await
    }

    /// Starts an upload: returns a sender for data and a receiver for the final answer.
    pub async fn begin_upload(&self, begin: Request) -> Result<Upload, AgentCallError> {
        let id = self.next_id();
        let rx = self.register_once(id);
        if let Err(e) = self.send(id, Body::Request(begin), Vec::new()).await {
            self.pending().remove(&id);
            return Err(e);
        }
        Ok(Upload {
            id,
            conn: self.clone(),
            answer: Some(rx),
        })
    }
}

async fn read_loop<R: AsyncRead + Unpin>(mut reader: R, inner: Arc<Inner>) {
    loop {
        let frame = match read_frame(&mut reader).await {
            Ok(f) => f,
            Err(CodecError::Closed) => break,
            Err(e) => {
                tracing::warn!(error = %e, "agent stream broken");
                break;
            }
        };
        let id = frame.header.id;
        let payload = frame.payload;
        let (item, terminal) = match frame.header.body {
            Body::Reply(reply) => (Ok((reply, payload)), true),
            Body::Error(err) => (Err(err), true),
            Body::Event(event) => {
                let sender = {
                    let pending = inner.pending.lock().unwrap_or_else(|p| p.into_inner());
                    match pending.get(&id) {
                        Some(Pending::Stream(tx)) => Some(tx.clone()),
                        _ => None,
                    }
                };
                if let Some(tx) = sender {
                    // Bounded: a slow consumer slows this agent's stream instead of growing memory.
                    let _ = tx.send(StreamItem::Event(event, payload)).await;
                }
                continue;
            }
            Body::Request(_) | Body::Cancel => continue,
        };
        let waiter = if terminal {
            inner
                .pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&id)
        } else {
            None
        };
        match waiter {
            Some(Pending::Once(tx)) => {
                // The end of work counts: idleness starts when it finished.
                inner.doze.touch();
                let _ = tx.send(item);
            }
            Some(Pending::Quiet(tx)) => {
                let _ = tx.send(item);
            }
            Some(Pending::Stream(tx)) => {
                let end = match item {
                    Ok((reply, payload)) => StreamItem::End(reply, payload),
                    Err(e) => StreamItem::Failed(e),
                };
                let _ = tx.send(end).await;
            }
            None => {}
        }
    }
    let _ = inner.closed.send_replace(true);
    // Dropping the senders wakes every waiter with "closed".
    inner
        .pending
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clear();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AgentErrorCode, Event};

    /// A fake agent on the other end of a duplex pipe.
    fn fake_agent() -> (AgentConn, tokio::task::JoinHandle<()>) {
        let (client, server) = tokio::io::duplex(1 << 20);
        let (cr, cw) = tokio::io::split(client);
        let conn = AgentConn::new(cr, cw);
        let task = tokio::spawn(async move {
            let (mut sr, mut sw) = tokio::io::split(server);
            while let Ok(frame) = read_frame(&mut sr).await {
                let id = frame.header.id;
                let reply = match frame.header.body {
                    Body::Request(Request::Ping) => Body::Reply(Reply::Pong),
                    Body::Request(Request::Sync) => {
                        Body::Error(AgentError::new(AgentErrorCode::Io, "nope"))
                    }
                    Body::Request(Request::ProcessList) => {
                        for i in 0..3u8 {
                            let ev = Frame::with_payload(
                                Header {
                                    id,
                                    body: Body::Event(Event::FileData),
                                },
                                vec![i],
                            );
                            write_frame(&mut sw, &ev).await.unwrap();
                        }
                        Body::Reply(Reply::Ok)
                    }
                    _ => continue,
                };
                write_frame(&mut sw, &Frame::new(Header { id, body: reply }))
                    .await
                    .unwrap();
            }
        });
        (conn, task)
    }

    #[tokio::test]
    async fn calls_errors_and_streams_are_routed_by_id() {
        let (conn, _task) = fake_agent();
        let (a, b) = tokio::join!(conn.call(Request::Ping), conn.call(Request::Ping));
        assert_eq!(a.unwrap().0, Reply::Pong);
        assert_eq!(b.unwrap().0, Reply::Pong);
        match conn.call(Request::Sync).await {
            Err(AgentCallError::Agent(e)) => assert_eq!(e.code, AgentErrorCode::Io),
            other => panic!("unexpected {other:?}"),
        }
        let mut s = conn.stream(Request::ProcessList).await.unwrap();
        let mut got = Vec::new();
        while let Some(item) = s.next().await {
            match item {
                StreamItem::Event(_, p) => got.extend(p),
                StreamItem::End(..) => break,
                StreamItem::Failed(e) => panic!("{e}"),
            }
        }
        assert_eq!(got, vec![0, 1, 2]);
    }

    #[tokio::test]
    async fn pending_calls_fail_when_the_stream_closes() {
        let (client, server) = tokio::io::duplex(1024);
        let (cr, cw) = tokio::io::split(client);
        let conn = AgentConn::new(cr, cw);
        let call = tokio::spawn({
            let conn = conn.clone();
            async move { conn.call(Request::Hello).await }
        });
        // Wait until the request reached the "agent", then hang up.
        let (mut sr, _sw) = tokio::io::split(server);
        read_frame(&mut sr).await.unwrap();
        drop(sr);
        drop(_sw);
        assert!(matches!(call.await.unwrap(), Err(AgentCallError::Closed)));
        conn.closed().await;
        assert!(conn.is_closed());
        assert!(matches!(
            conn.call(Request::Ping).await,
            Err(AgentCallError::Closed)
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_the_agent_never_answers_times_out_and_is_cancelled() {
        let (client, server) = tokio::io::duplex(1 << 16);
        let (cr, cw) = tokio::io::split(client);
        let conn = AgentConn::new(cr, cw);
        let (mut sr, _sw) = tokio::io::split(server);
        let call = conn.call_within(Request::Ping, Duration::from_millis(50));
        match call.await {
            Err(AgentCallError::TimedOut(d)) => assert_eq!(d, Duration::from_millis(50)),
            other => panic!("unexpected {other:?}"),
        }
        // The silent agent saw the request, then its cancel.
        let first = read_frame(&mut sr).await.unwrap();
        let second = read_frame(&mut sr).await.unwrap();
        assert_eq!(first.header.body, Body::Request(Request::Ping));
        assert_eq!(second.header.id, first.header.id);
        assert_eq!(second.header.body, Body::Cancel);
        assert!(conn.pending().is_empty());
        assert!(!conn.is_closed());
    }

    #[tokio::test(start_paused = true)]
    async fn a_peer_that_stops_reading_gets_its_connection_closed() {
        // A 1 KiB pipe that nobody reads: a 64 KiB frame can never be written.
        let (client, _server) = tokio::io::duplex(1024);
        let (cr, cw) = tokio::io::split(client);
        let conn = AgentConn::new(cr, cw);
        let env = [("BIG".to_string(), "x".repeat(64 * 1024))]
            .into_iter()
            .collect();
        let call = conn.call_within(Request::Configure { env }, Duration::from_secs(3600));
        match call.await {
            Err(AgentCallError::TimedOut(d)) => assert_eq!(d, WRITE_TIMEOUT),
            other => panic!("unexpected {other:?}"),
        }
        assert!(conn.is_closed());
        assert!(matches!(
            conn.call(Request::Ping).await,
            Err(AgentCallError::Closed)
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_writer_keeps_every_other_frame_back_until_dropped() {
        let (client, server) = tokio::io::duplex(1 << 16);
        let (cr, cw) = tokio::io::split(client);
        let conn = AgentConn::over_stdio_channel(cr, cw);
        assert!(conn.kept_through_checkpoint());
        let (mut sr, mut sw) = tokio::io::split(server);
        let quiesce = tokio::spawn({
            let conn = conn.clone();
            async move {
                conn.quiesce_holding_writer(Request::Quiesce, Duration::from_secs(10))
                    .await
            }
        });
        let first = read_frame(&mut sr).await.unwrap();
        assert_eq!(first.header.body, Body::Request(Request::Quiesce));
        let ok = Frame::new(Header {
            id: first.header.id,
            body: Body::Reply(Reply::Ok),
        });
        write_frame(&mut sw, &ok).await.unwrap();
        let ((reply, _), hold) = quiesce.await.unwrap().unwrap();
        assert_eq!(reply, Reply::Ok);
        let ping = tokio::spawn({
            let conn = conn.clone();
            async move { conn.call(Request::Ping).await }
        });
        // Virtual time: the timer fires only once every task is idle, so a
        // ping written while the hold lasts would be read first.
        let early = tokio::time::timeout(Duration::from_secs(1), read_frame(&mut sr)).await;
        assert!(early.is_err(), "a frame was written during the hold");
        drop(hold);
        let f = read_frame(&mut sr).await.unwrap();
        assert_eq!(f.header.body, Body::Request(Request::Ping));
        let pong = Frame::new(Header {
            id: f.header.id,
            body: Body::Reply(Reply::Pong),
        });
        write_frame(&mut sw, &pong).await.unwrap();
        assert_eq!(ping.await.unwrap().unwrap().0, Reply::Pong);
    }

    #[test]
    fn every_request_has_a_bounded_deadline() {
        let exec = Request::Exec {
            command: Default::default(),
            timeout_ms: 30_000,
            max_output_bytes: 1,
        };
        assert_eq!(
            deadline_for(&exec),
            Duration::from_secs(30) + CARRIED_TIMEOUT_SLACK
        );
        assert_eq!(deadline_for(&Request::Hello), SHORT_CALL_TIMEOUT);
        assert_eq!(deadline_for(&Request::Sync), IO_CALL_TIMEOUT);
        // A timeout a request carries cannot overflow the deadline.
        let wait = Request::ProcessWait {
            process: uuid::Uuid::nil(),
            timeout_ms: u64::MAX,
        };
        assert!(deadline_for(&wait) >= Duration::from_millis(u64::MAX));
    }
}
