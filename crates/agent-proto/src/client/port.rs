//! The daemon's end of a `port_open` stream: a TCP connection to a server
//! inside the sandbox, handed to the caller as a [`PortStream`] (tokio
//! `AsyncRead + AsyncWrite`, bridged through [`tokio::io::duplex`]) so hyper
//! can run over it.
//!
//! One pump task per stream moves bytes both ways under the credit window:
//! the guest's bytes wait in a buffer bounded by [`NET_WINDOW_BYTES`] (an
//! agent that overruns it gets the stream reset), and the caller's bytes go
//! out only while the agent has acknowledged all but a window's worth.
//! Dropping the [`PortStream`] cancels the request, which closes the socket
//! inside the sandbox.

use super::{AgentCallError, AgentConn, AgentStream, StreamItem, SHORT_CALL_TIMEOUT};
use crate::{Event, Request, NET_CHUNK_BYTES, NET_WINDOW_BYTES};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream, ReadBuf};
use tokio::sync::{oneshot, Notify, Semaphore};

/// A connection to a port inside the sandbox (see [`AgentConn::open_port`]).
pub struct PortStream {
    io: DuplexStream,
    /// Dropped with the stream: tells the pump to cancel the request.
    _gone: oneshot::Sender<()>,
}

impl AsyncRead for PortStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for PortStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[derive(Default)]
struct InboxState {
    buf: Vec<u8>,
    eof: bool,
    reset: bool,
}

/// The guest's bytes not yet written to the caller (at most a window).
#[derive(Default)]
struct Inbox {
    state: Mutex<InboxState>,
    wake: Notify,
}

enum Down {
    Data(Vec<u8>),
    Eof,
    Reset,
}

impl Inbox {
    fn lock(&self) -> std::sync::MutexGuard<'_, InboxState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn push(&self, bytes: Vec<u8>, unacked: u64) {
        {
            let mut st = self.lock();
            if unacked > NET_WINDOW_BYTES {
                st.reset = true;
            } else if !st.eof {
                st.buf.extend_from_slice(&bytes);
            }
        }
        self.wake.notify_one();
    }

    fn signal(&self, reset: bool) {
        {
            let mut st = self.lock();
            if reset {
                st.reset = true;
            } else {
                st.eof = true;
            }
        }
        self.wake.notify_one();
    }

    async fn next(&self) -> Down {
        loop {
            {
                let mut st = self.lock();
                if st.reset {
                    return Down::Reset;
                }
                if !st.buf.is_empty() {
                    return Down::Data(std::mem::take(&mut st.buf));
                }
                if st.eof {
                    return Down::Eof;
                }
            }
            self.wake.notified().await;
        }
    }
}

impl AgentConn {
    /// Opens a TCP connection to `port` on the sandbox's loopback through
    /// the agent. Nothing listening → `AgentCallError::Agent` with code
    /// `connection_refused`; no answer within [`SHORT_CALL_TIMEOUT`] → `TimedOut`.
    pub async fn open_port(&self, port: u16) -> Result<PortStream, AgentCallError> {
        let mut stream = self.stream(Request::PortOpen { port }).await?;
        match tokio::time::timeout(SHORT_CALL_TIMEOUT, stream.next()).await {
            Ok(Some(StreamItem::Event(Event::PortOpened, _))) => {}
            Ok(Some(StreamItem::Failed(e))) => return Err(AgentCallError::Agent(e)),
            Ok(Some(other)) => return Err(AgentCallError::Unexpected(format!("{other:?}"))),
            Ok(None) => return Err(AgentCallError::Closed),
            Err(_) => return Err(AgentCallError::TimedOut(SHORT_CALL_TIMEOUT)),
        }
        let (user, ours) = tokio::io::duplex(2 * NET_CHUNK_BYTES);
        let (gone_tx, gone_rx) = oneshot::channel();
        tokio::spawn(pump(self.clone(), stream, ours, gone_rx));
        Ok(PortStream {
            io: user,
            _gone: gone_tx,
        })
    }
}

/// Moves bytes between the agent stream and the caller's duplex until both
/// directions are closed, the stream fails, or the caller drops its end.
async fn pump(
    conn: AgentConn,
    mut stream: AgentStream,
    ours: DuplexStream,
    mut gone: oneshot::Receiver<()>,
) {
    let id = stream.id();
    let (mut rd, mut wr) = tokio::io::split(ours);
    let inbox = Arc::new(Inbox::default());
    let credit = Arc::new(Semaphore::new(NET_WINDOW_BYTES as usize));
    // Guest bytes received and not yet written to the caller (window check).
    let unacked = Arc::new(AtomicU64::new(0));
    // Caller → guest, under the agent's credit.
    let up = {
        let (conn, credit) = (conn.clone(), Arc::clone(&credit));
        async move {
            let mut buf = vec![0u8; NET_CHUNK_BYTES];
            loop {
                let n = match rd.read(&mut buf).await {
                    Ok(0) => {
                        let close = Request::PortClose { reset: false };
                        let _ = conn.send_on(id, close, Vec::new()).await;
                        return;
                    }
                    Ok(n) => n,
                    Err(_) => return,
                };
                let permits = u32::try_from(n).unwrap_or(u32::MAX);
                match credit.acquire_many(permits).await {
                    Ok(p) => p.forget(),
                    Err(_) => return,
                }
                if conn
                    .send_on(id, Request::PortData, buf[..n].to_vec())
                    .await
                    .is_err()
                {
                    return;
                }
            }
        }
    };
    // Guest → caller: written, then acknowledged.
    let down = {
        let (conn, inbox, unacked) = (conn.clone(), Arc::clone(&inbox), Arc::clone(&unacked));
        async move {
            loop {
                match inbox.next().await {
                    Down::Data(bytes) => {
                        let n = bytes.len() as u64;
                        if wr.write_all(&bytes).await.is_err() {
                            return false;
                        }
                        unacked.fetch_sub(n, Ordering::SeqCst);
                        let ack = Request::PortAck { bytes: n };
                        if conn.send_on(id, ack, Vec::new()).await.is_err() {
                            return false;
                        }
                    }
                    Down::Eof => {
                        let _ = wr.shutdown().await;
                        return true;
                    }
                    Down::Reset => return false,
                }
            }
        }
    };
    // Agent → inbox and credit.
    let events = {
        let (inbox, credit) = (Arc::clone(&inbox), Arc::clone(&credit));
        async move {
            loop {
                match stream.next().await {
                    Some(StreamItem::Event(Event::PortData, bytes)) => {
                        let n = bytes.len() as u64;
                        let total = unacked.fetch_add(n, Ordering::SeqCst) + n;
                        inbox.push(bytes, total);
                    }
                    Some(StreamItem::Event(Event::PortAck { bytes }, _)) => {
                        let room = NET_WINDOW_BYTES as usize
                            - credit.available_permits().min(NET_WINDOW_BYTES as usize);
                        credit.add_permits((bytes as usize).min(room));
                    }
                    Some(StreamItem::Event(Event::PortClose { reset }, _)) => inbox.signal(reset),
                    Some(StreamItem::Event(..)) => {}
                    Some(StreamItem::End(..)) => {
                        inbox.signal(false);
                        return stream;
                    }
                    Some(StreamItem::Failed(_)) | None => {
                        inbox.signal(true);
                        return stream;
                    }
                }
            }
        }
    };
    tokio::pin!(up, down, events);
    let (mut up_done, mut down_done, mut events_done) = (false, false, false);
    let mut finished: Option<AgentStream> = None;
    loop {
        tokio::select! {
            _ = &mut up, if !up_done => up_done = true,
            ok = &mut down, if !down_done => {
                down_done = true;
                if !ok { break; }
            }
            s = &mut events, if !events_done => {
                events_done = true;
                finished = Some(s);
            }
            _ = &mut gone => break,
        }
        if down_done && events_done {
            break;
        }
    }
    credit.close();
    // A stream still open here is dropped unfinished: that cancels it in
    // the agent (closing the guest socket).
    drop(finished);
}
