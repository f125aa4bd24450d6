//! Relaying one proxied connection: the guest's bytes wait in a bounded
//! [`Inbox`] until written to the remote end (credit-based flow control both
//! ways), and an `https-only` connection forwards nothing before a complete
//! TLS ClientHello.

use super::broker::{send, Ctx};
use super::limits::SandboxLimits;
use super::tls::{self, Hello};
use sbx_agent_proto::{Request, NET_CHUNK_BYTES, NET_WINDOW_BYTES};
use sbx_api_types::NetworkMode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinHandle;

/// What the relay of one connection takes from its [`Inbox`].
pub(super) enum Down {
    Data(Vec<u8>),
    Eof,
    Reset,
}

#[derive(Default)]
struct InboxState {
    /// Guest bytes not yet taken by the relay (all chunks, joined).
    buf: Vec<u8>,
    /// Guest bytes received and not yet written to the remote end (window check).
    unacked: u64,
    eof: bool,
    eof_taken: bool,
    reset: bool,
}

/// One connection's guest bytes and signals waiting for its relay. Bounded
/// by the credit window (the agent may not send more than that unacked) and
/// by the sandbox's buffer budget; empty chunks and repeated signals add
/// nothing, so a guest cannot make it grow by sending many frames.
pub(super) struct Inbox {
    state: Mutex<InboxState>,
    wake: Notify,
    limits: Arc<SandboxLimits>,
}

impl Inbox {
    pub(super) fn new(limits: Arc<SandboxLimits>) -> Inbox {
        Inbox {
            state: Mutex::default(),
            wake: Notify::new(),
            limits,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, InboxState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `net_data` from the agent. An overrun of the window or of the
    /// sandbox's buffer budget resets the connection.
    pub(super) fn push(&self, bytes: Vec<u8>) {
        let n = bytes.len();
        let mut st = self.lock();
        if n == 0 || st.reset || st.eof {
            return;
        }
        if st.unacked + n as u64 > NET_WINDOW_BYTES || !self.limits.reserve_buffer(n) {
            st.reset = true;
        } else {
            st.unacked += n as u64;
            if st.buf.is_empty() {
                st.buf = bytes;
            } else {
                st.buf.extend_from_slice(&bytes);
            }
        }
        drop(st);
        self.wake.notify_one();
    }

    /// `net_close` from the agent.
    pub(super) fn close(&self, reset: bool) {
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

    /// The next thing to relay. Cancel-safe: nothing is taken before the last await.
    pub(super) async fn next(&self) -> Down {
        loop {
            {
                let mut st = self.lock();
                if st.reset {
                    return Down::Reset;
                }
                if !st.buf.is_empty() {
                    return Down::Data(std::mem::take(&mut st.buf));
                }
                if st.eof && !st.eof_taken {
                    st.eof_taken = true;
                    return Down::Eof;
                }
            }
            // `notify_one` keeps a permit when nobody waits, so no wake-up is lost.
            self.wake.notified().await;
        }
    }

    /// `n` bytes taken with [`Inbox::next`] reached the remote end.
    pub(super) fn written(&self, n: usize) {
        let mut st = self.lock();
        st.unacked = st.unacked.saturating_sub(n as u64);
        self.limits.release_buffer(n);
    }
}

impl Drop for Inbox {
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        self.limits.release_buffer(st.unacked as usize);
    }
}

/// Aborts a spawned task when dropped (so aborting a connection also stops its reader).
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One proxied connection's guest bytes and flow control, shared with the stream task.
pub(super) struct Flow {
    pub(super) inbox: Arc<Inbox>,
    pub(super) credit: Arc<Semaphore>,
}

/// Why the first bytes of an `https-only` connection were not forwarded.
enum NotHello {
    /// Not a TLS ClientHello (or too large, or too slow): a policy denial.
    Refused,
    /// The client went away first.
    Closed,
}

/// Collects the client's first bytes until they form a complete TLS
/// ClientHello ([`tls::check_client_hello`]); returns them, and whatever came
/// with them, unforwarded.
async fn client_hello(inbox: &Inbox, wait: Duration) -> Result<Vec<u8>, NotHello> {
    let deadline = Instant::now() + wait;
    let mut buf: Vec<u8> = Vec::new();
    let mut need = 1;
    loop {
        match tokio::time::timeout_at(deadline.into(), inbox.next()).await {
            Err(_) => return Err(NotHello::Refused),
            Ok(Down::Data(bytes)) => buf.extend_from_slice(&bytes),
            Ok(Down::Eof | Down::Reset) => return Err(NotHello::Closed),
        }
        if buf.len() < need {
            // Undecidable before `need` bytes: no re-parse for every small chunk.
            continue;
        }
        match tls::check_client_hello(&buf) {
            Ok(Hello::Complete(_)) => return Ok(buf),
            Ok(Hello::Need(n)) if n <= tls::MAX_BUFFER_BYTES => need = n,
            Ok(Hello::Need(_)) | Err(_) => return Err(NotHello::Refused),
        }
    }
}

/// Relays one accepted connection between the agent stream and `rd`/`wr`
/// (a dialled TCP stream, or the in-process job channel) until both sides are done.
#[allow(clippy::too_many_arguments)]
pub(super) async fn relay<R, W>(
    ctx: &Ctx,
    id: u64,
    conn: u64,
    host: &str,
    port: u16,
    mut rd: R,
    mut wr: W,
    flow: Flow,
) where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin,
{
    let Flow { inbox, credit } = flow;
    let agent = &ctx.conn;
    let reset = Request::NetClose { conn, reset: true };
    if ctx.policy.current().mode == NetworkMode::HttpsOnly {
        // Nothing reaches the remote end (and nothing comes back) before a whole ClientHello.
        let hello = match client_hello(&inbox, ctx.hello_timeout).await {
            Ok(hello) => hello,
            Err(why) => {
                if matches!(why, NotHello::Refused) {
                    ctx.stats.denied(ctx.sandbox, host, port, "not-tls");
                }
                send(ctx, id, reset).await;
                return;
            }
        };
        let n = hello.len();
        if wr.write_all(&hello).await.is_err() {
            send(ctx, id, reset).await;
            return;
        }
        inbox.written(n);
        let ack = Request::NetAck {
            conn,
            bytes: n as u64,
        };
        if agent.send_on(id, ack, Vec::new()).await.is_err() {
            return;
        }
    }
    let up_agent = agent.clone();
    let up = tokio::spawn(async move {
        let mut buf = vec![0u8; NET_CHUNK_BYTES];
        loop {
            match rd.read(&mut buf).await {
                Ok(0) => {
                    let _ = up_agent
                        .send_on(id, Request::NetClose { conn, reset: false }, Vec::new())
                        .await;
                    return true;
                }
                Ok(n) => {
                    let Ok(permit) = credit.acquire_many(n as u32).await else {
                        return false;
                    };
                    permit.forget();
                    if up_agent
                        .send_on(id, Request::NetData { conn }, buf[..n].to_vec())
                        .await
                        .is_err()
                    {
                        return false;
                    }
                }
                Err(_) => {
                    let _ = up_agent
                        .send_on(id, Request::NetClose { conn, reset: true }, Vec::new())
                        .await;
                    return false;
                }
            }
        }
    });
    // Dropped (and so aborted) with this future, also when the stream task aborts it.
    let mut up = AbortOnDrop(up);
    let mut up_done: Option<bool> = None;
    let mut down_done = false;
    loop {
        tokio::select! {
            r = &mut up.0, if up_done.is_none() => {
                let ok = r.unwrap_or(false);
                up_done = Some(ok);
                if !ok || down_done { break; }
            }
            item = inbox.next(), if !down_done => match item {
                Down::Data(bytes) => {
                    let n = bytes.len();
                    if wr.write_all(&bytes).await.is_err() {
                        send(ctx, id, reset).await;
                        break;
                    }
                    inbox.written(n);
                    let ack = Request::NetAck { conn, bytes: n as u64 };
                    if agent.send_on(id, ack, Vec::new()).await.is_err() {
                        break;
                    }
                }
                Down::Eof => {
                    let _ = wr.shutdown().await;
                    down_done = true;
                    if up_done.is_some() { break; }
                }
                Down::Reset => break,
            },
        }
    }
}

#[cfg(test)]
#[path = "relay_tests.rs"]
mod tests;
