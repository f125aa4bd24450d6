//! The daemon end of `net_serve`: one task per proxied connection that
//! resolves with the host resolver (so `/etc/hosts` applies), checks every
//! resolved address and the port against the policy, dials exactly the
//! checked addresses (the answer is pinned: no second lookup) and relays with
//! credit-based flow control.

use super::policy::{self, Cidr, Facts};
use super::SandboxStats;
use crate::runtime::{AgentConn, AgentStream, StreamItem};
use sbx_agent_proto::{Event, NetError, Request, NET_CHUNK_BYTES, NET_WINDOW_BYTES};
use sbx_api_types::{NetworkMode, NetworkPolicy};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, Semaphore};
use uuid::Uuid;

/// Name resolution budget.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);
/// Per-address connect budget.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Most connections one sandbox may have open through the broker.
const MAX_CONNS: usize = 512;

/// What one `net_serve` works with.
pub struct Ctx {
    /// Sandbox id (logs, counters).
    pub sandbox: Uuid,
    /// Policy in force.
    pub policy: NetworkPolicy,
    /// Ranges marked public (tests only).
    pub test_public: Vec<Cidr>,
    /// Counters.
    pub stats: Arc<SandboxStats>,
    /// The agent connection carrying the stream.
    pub conn: AgentConn,
    /// Set for a Connect job sandbox: its only destination is the job channel.
    pub job: Option<Arc<JobSlot>>,
}

/// Host name of the job channel (`CONNECT sbx-job.internal:1`).
pub const JOB_CHANNEL_HOST: &str = "sbx-job.internal";
/// Port of the job channel.
pub const JOB_CHANNEL_PORT: u16 = 1;
/// Buffer of the in-process pipe that carries the job channel.
const JOB_PIPE_BYTES: usize = 256 * 1024;

/// The host end of a job sandbox's channel, handed over on the runner's first
/// `CONNECT sbx-job.internal:1`; later connections are refused.
pub struct JobSlot {
    waiting: Mutex<Option<tokio::sync::oneshot::Sender<tokio::io::DuplexStream>>>,
}

impl JobSlot {
    /// A slot and the receiver that gets the channel's host end.
    pub fn new() -> (
        Arc<JobSlot>,
        tokio::sync::oneshot::Receiver<tokio::io::DuplexStream>,
    ) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let slot = JobSlot {
            waiting: Mutex::new(Some(tx)),
        };
        (Arc::new(slot), rx)
    }

    /// The sender for the first connection; `None` afterwards.
    fn take(&self) -> Option<tokio::sync::oneshot::Sender<tokio::io::DuplexStream>> {
        self.waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }
}

enum Down {
    Data(Vec<u8>),
    Eof,
    Reset,
}

struct Remote {
    tx: mpsc::UnboundedSender<Down>,
    credit: Arc<Semaphore>,
    unacked: Arc<AtomicU64>,
}

type Conns = Arc<Mutex<HashMap<u64, Remote>>>;

fn lock(c: &Conns) -> std::sync::MutexGuard<'_, HashMap<u64, Remote>> {
    c.lock().unwrap_or_else(|p| p.into_inner())
}

/// Serves one `net_serve` stream until it ends (connection lost, replaced).
pub async fn run(ctx: Arc<Ctx>, mut stream: AgentStream) {
    let id = stream.id();
    let conns: Conns = Arc::default();
    while let Some(item) = stream.next().await {
        let (event, payload) = match item {
            StreamItem::Event(e, p) => (e, p),
            StreamItem::End(..) | StreamItem::Failed(_) => break,
        };
        match event {
            Event::NetDial { conn, host, port } => {
                let (tx, rx) = mpsc::unbounded_channel();
                let credit = Arc::new(Semaphore::new(NET_WINDOW_BYTES as usize));
                let unacked = Arc::new(AtomicU64::new(0));
                let remote = Remote {
                    tx,
                    credit: Arc::clone(&credit),
                    unacked: Arc::clone(&unacked),
                };
                let full = {
                    let mut map = lock(&conns);
                    let full = map.len() >= MAX_CONNS;
                    if !full {
                        map.insert(conn, remote);
                    }
                    full
                };
                if full {
                    ctx.stats.failed();
                    let _ = ctx
                        .conn
                        .send_on(
                            id,
                            Request::NetDialResult {
                                conn,
                                error: Some(NetError::Failed),
                            },
                            Vec::new(),
                        )
                        .await;
                    continue;
                }
                let ctx = Arc::clone(&ctx);
                let conns = Arc::clone(&conns);
                tokio::spawn(async move {
                    connection(&ctx, id, conn, host, port, rx, credit, unacked).await;
                    lock(&conns).remove(&conn);
                });
            }
            Event::NetData { conn } => {
                let map = lock(&conns);
                if let Some(r) = map.get(&conn) {
                    let n = r.unacked.fetch_add(payload.len() as u64, Ordering::Relaxed);
                    if n + payload.len() as u64 > NET_WINDOW_BYTES {
                        // The agent overran its window.
                        let _ = r.tx.send(Down::Reset);
                    } else {
                        let _ = r.tx.send(Down::Data(payload));
                    }
                }
            }
            Event::NetAck { conn, bytes } => {
                if let Some(r) = lock(&conns).get(&conn) {
                    let room =
                        (NET_WINDOW_BYTES as usize).saturating_sub(r.credit.available_permits());
                    r.credit.add_permits((bytes as usize).min(room));
                }
            }
            Event::NetClose { conn, reset } => {
                if let Some(r) = lock(&conns).get(&conn) {
                    let _ = r.tx.send(if reset { Down::Reset } else { Down::Eof });
                }
            }
            Event::NetResolve { query, name, ipv6 } => {
                let ctx = Arc::clone(&ctx);
                tokio::spawn(async move {
                    let (addrs, error) =
                        match resolve(&ctx.policy, &ctx.test_public, &name, ipv6).await {
                            Ok(addrs) => (addrs, None),
                            Err(Ok(reason)) => {
                                // Counted as a denial on port 0 (a lookup, not a connection).
                                ctx.stats.denied(ctx.sandbox, &name, 0, reason);
                                (Vec::new(), Some(NetError::Denied))
                            }
                            Err(Err(e)) => (Vec::new(), Some(e)),
                        };
                    let _ = ctx
                        .conn
                        .send_on(
                            id,
                            Request::NetResolveResult {
                                query,
                                addrs,
                                error,
                            },
                            Vec::new(),
                        )
                        .await;
                });
            }
            _ => {}
        }
    }
    // Dropping the senders ends every relay of this stream.
    for (_, r) in lock(&conns).drain() {
        r.credit.close();
    }
}

/// Resolves and checks `host:port`; the addresses to dial, or why not.
pub async fn decide(
    policy: &NetworkPolicy,
    test_public: &[Cidr],
    host: &str,
    port: u16,
) -> Result<Vec<SocketAddr>, Result<&'static str, NetError>> {
    let host = policy::normalize_host(host);
    if port == 0 || host.is_empty() {
        return Err(Ok("bad-destination"));
    }
    policy::precheck(policy, &host, port).map_err(Ok)?;
    let addrs: Vec<IpAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![ip],
        Err(_) => {
            let lookup = tokio::net::lookup_host((host.as_str(), port));
            match tokio::time::timeout(RESOLVE_TIMEOUT, lookup).await {
                Ok(Ok(it)) => {
                    let mut v: Vec<IpAddr> = Vec::new();
                    for a in it {
                        if !v.contains(&a.ip()) {
                            v.push(a.ip());
                        }
                    }
                    v
                }
                _ => return Err(Err(NetError::Resolve)),
            }
        }
    };
    if addrs.is_empty() {
        return Err(Err(NetError::Resolve));
    }
    let facts = Facts::current(test_public);
    // Every answer must pass: a name that resolves to any forbidden address is refused.
    for ip in &addrs {
        policy::check_resolved(policy, &facts, &host, *ip, port).map_err(Ok)?;
    }
    Ok(addrs
        .into_iter()
        .map(|ip| SocketAddr::new(ip, port))
        .collect())
}

/// A DNS lookup for the in-sandbox responder: the addresses of `name` in
/// the asked family that the policy allows (each checked like a dial's, the
/// port aside). `Ok(empty)` when only the other family has allowed addresses
/// (NOERROR without answers); `Err(Ok(reason))` when the policy refuses the
/// name or every address; `Err(Err(Resolve))` when the name does not resolve.
pub async fn resolve(
    policy: &NetworkPolicy,
    test_public: &[Cidr],
    name: &str,
    ipv6: bool,
) -> Result<Vec<IpAddr>, Result<&'static str, NetError>> {
    let host = policy::normalize_host(name);
    if host.is_empty() {
        return Err(Err(NetError::Resolve));
    }
    policy::precheck_name(policy, &host).map_err(Ok)?;
    let found: Vec<IpAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![ip],
        Err(_) => {
            let lookup = tokio::net::lookup_host((host.as_str(), 0));
            match tokio::time::timeout(RESOLVE_TIMEOUT, lookup).await {
                Ok(Ok(it)) => {
                    let mut v: Vec<IpAddr> = Vec::new();
                    for a in it {
                        if !v.contains(&a.ip()) {
                            v.push(a.ip());
                        }
                    }
                    v
                }
                _ => return Err(Err(NetError::Resolve)),
            }
        }
    };
    if found.is_empty() {
        return Err(Err(NetError::Resolve));
    }
    let facts = Facts::current(test_public);
    let mut reason = "";
    let allowed: Vec<IpAddr> = found
        .into_iter()
        .filter(
            |ip| match policy::check_resolved_name(policy, &facts, &host, *ip) {
                Ok(()) => true,
                Err(r) => {
                    reason = r;
                    false
                }
            },
        )
        .collect();
    if allowed.is_empty() {
        return Err(Ok(reason));
    }
    Ok(allowed
        .into_iter()
        .filter(|ip| ip.is_ipv6() == ipv6)
        .collect())
}

async fn dial(addrs: &[SocketAddr]) -> Result<TcpStream, NetError> {
    let mut last = NetError::Failed;
    for a in addrs {
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(a)).await {
            Ok(Ok(s)) => return Ok(s),
            Ok(Err(e)) => {
                last = match e.kind() {
                    std::io::ErrorKind::ConnectionRefused => NetError::Refused,
                    std::io::ErrorKind::TimedOut => NetError::TimedOut,
                    _ if matches!(
                        e.raw_os_error(),
                        Some(libc::ENETUNREACH) | Some(libc::EHOSTUNREACH)
                    ) =>
                    {
                        NetError::Unreachable
                    }
                    _ => NetError::Failed,
                }
            }
            Err(_) => last = NetError::TimedOut,
        }
    }
    Err(last)
}

/// One proxied connection's byte counters and flow control, shared with the stream task.
struct Flow {
    down: mpsc::UnboundedReceiver<Down>,
    credit: Arc<Semaphore>,
    unacked: Arc<AtomicU64>,
}

#[allow(clippy::too_many_arguments)]
async fn connection(
    ctx: &Ctx,
    id: u64,
    conn: u64,
    host: String,
    port: u16,
    down: mpsc::UnboundedReceiver<Down>,
    credit: Arc<Semaphore>,
    unacked: Arc<AtomicU64>,
) {
    let flow = Flow {
        down,
        credit,
        unacked,
    };
    let agent = &ctx.conn;
    let result = |error| Request::NetDialResult { conn, error };
    if let Some(slot) = &ctx.job {
        // A job sandbox: the channel once, nothing else.
        let is_channel =
            policy::normalize_host(&host) == JOB_CHANNEL_HOST && port == JOB_CHANNEL_PORT;
        let sender = if is_channel { slot.take() } else { None };
        let Some(sender) = sender else {
            let reason = if is_channel {
                "job-channel-taken"
            } else {
                "job-sandbox"
            };
            ctx.stats.denied(ctx.sandbox, &host, port, reason);
            let _ = agent
                .send_on(id, result(Some(NetError::Denied)), Vec::new())
                .await;
            return;
        };
        let (ours, theirs) = tokio::io::duplex(JOB_PIPE_BYTES);
        if sender.send(theirs).is_err() {
            // Nobody waits for the channel any more (the job gave up).
            ctx.stats.failed();
            let _ = agent
                .send_on(id, result(Some(NetError::Failed)), Vec::new())
                .await;
            return;
        }
        ctx.stats.allowed();
        if agent.send_on(id, result(None), Vec::new()).await.is_err() {
            return;
        }
        let (rd, wr) = tokio::io::split(ours);
        relay(ctx, id, conn, &host, port, rd, wr, flow).await;
        return;
    }
    let addrs = match decide(&ctx.policy, &ctx.test_public, &host, port).await {
        Ok(a) => a,
        Err(Ok(reason)) => {
            ctx.stats.denied(ctx.sandbox, &host, port, reason);
            let _ = agent
                .send_on(id, result(Some(NetError::Denied)), Vec::new())
                .await;
            return;
        }
        Err(Err(e)) => {
            ctx.stats.failed();
            let _ = agent.send_on(id, result(Some(e)), Vec::new()).await;
            return;
        }
    };
    let stream = match dial(&addrs).await {
        Ok(s) => s,
        Err(e) => {
            ctx.stats.failed();
            let _ = agent.send_on(id, result(Some(e)), Vec::new()).await;
            return;
        }
    };
    ctx.stats.allowed();
    let _ = stream.set_nodelay(true);
    if agent.send_on(id, result(None), Vec::new()).await.is_err() {
        return;
    }
    let (rd, wr) = stream.into_split();
    relay(ctx, id, conn, &host, port, rd, wr, flow).await;
}

/// Relays one accepted connection between the agent stream and `rd`/`wr`
/// (a dialled TCP stream, or the in-process job channel) until both sides are done.
#[allow(clippy::too_many_arguments)]
async fn relay<R, W>(
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
    let Flow {
        mut down,
        credit,
        unacked,
    } = flow;
    let agent = &ctx.conn;
    let up_agent = agent.clone();
    let mut up = tokio::spawn(async move {
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
    let mut need_tls = ctx.policy.mode == NetworkMode::HttpsOnly;
    let mut up_done: Option<bool> = None;
    let mut down_done = false;
    loop {
        tokio::select! {
            r = &mut up, if up_done.is_none() => {
                let ok = r.unwrap_or(false);
                up_done = Some(ok);
                if !ok || down_done { break; }
            }
            item = down.recv(), if !down_done => match item {
                Some(Down::Data(bytes)) => {
                    if need_tls && !bytes.is_empty() {
                        need_tls = false;
                        // A TLS handshake record starts with 0x16; anything else is not HTTPS.
                        if bytes[0] != 0x16 {
                            ctx.stats.denied(ctx.sandbox, host, port, "not-tls");
                            let _ = agent.send_on(id, Request::NetClose { conn, reset: true }, Vec::new()).await;
                            break;
                        }
                    }
                    let n = bytes.len() as u64;
                    if wr.write_all(&bytes).await.is_err() {
                        let _ = agent.send_on(id, Request::NetClose { conn, reset: true }, Vec::new()).await;
                        break;
                    }
                    let _ = unacked.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| Some(v.saturating_sub(n)));
                    if agent.send_on(id, Request::NetAck { conn, bytes: n }, Vec::new()).await.is_err() {
                        break;
                    }
                }
                Some(Down::Eof) => {
                    let _ = wr.shutdown().await;
                    down_done = true;
                    if up_done.is_some() { break; }
                }
                Some(Down::Reset) | None => break,
            },
        }
    }
    up.abort();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_job_channel_is_handed_over_once() {
        let (slot, _rx) = JobSlot::new();
        assert!(slot.take().is_some());
        assert!(slot.take().is_none());
    }
}
