//! The daemon end of `net_serve`: one task per proxied connection that
//! resolves with the host resolver (so `/etc/hosts` applies), checks every
//! resolved address and the port against the policy, dials exactly the
//! checked addresses (the answer is pinned: no second lookup) and relays with
//! credit-based flow control ([`super::relay`]).
//!
//! The agent is untrusted input (the guest can replace it): a connection id
//! reused while in use is a protocol error that closes the sandbox's agent
//! channel (the service's monitor reconnects, and the new channel gets a new
//! `net_serve`), and every dial, tunnel, buffered byte and lookup counts
//! against the caps in [`super::limits`]; a dial or DNS query past them is
//! refused at once, never queued, and a dial to a name pays for its lookup
//! from the same per-sandbox DNS rate as a query.

use super::limits::{self, ConnPermits, GlobalLimits, SandboxLimits};
use super::policy::{self, Cidr, Facts};
use super::relay::{relay, Flow, Inbox};
use super::{LivePolicy, SandboxStats};
use crate::runtime::{AgentConn, AgentStream, StreamItem};
use sbx_agent_proto::{Event, NetError, Request, NET_WINDOW_BYTES};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use uuid::Uuid;

/// Name resolution budget.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);
/// Per-address connect budget.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long an `https-only` connection may take to send its whole ClientHello.
const TLS_HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// What one `net_serve` works with.
pub struct Ctx {
    /// Sandbox id (logs, counters).
    pub sandbox: Uuid,
    /// Policy in force (a network update replaces it for what comes next).
    pub policy: Arc<LivePolicy>,
    /// Ranges marked public (tests only).
    pub test_public: Vec<Cidr>,
    /// Counters.
    pub stats: Arc<SandboxStats>,
    /// The agent connection carrying the stream.
    pub conn: AgentConn,
    /// Set for a Connect job sandbox: its only destination is the job channel.
    pub job: Option<Arc<JobSlot>>,
    /// The sandbox's caps (connections, buffered bytes, DNS).
    pub limits: Arc<SandboxLimits>,
    /// The daemon-wide caps.
    pub global: Arc<GlobalLimits>,
    /// How long an `https-only` connection may take to send its ClientHello.
    pub hello_timeout: Duration,
    /// Unit tests: dial this address instead of deciding by the policy.
    #[cfg(test)]
    pub route: Option<SocketAddr>,
}

impl Ctx {
    /// The context of one `net_serve` of sandbox `sandbox`.
    pub fn new(
        sandbox: Uuid,
        policy: Arc<LivePolicy>,
        test_public: Vec<Cidr>,
        stats: Arc<SandboxStats>,
        conn: AgentConn,
        job: Option<Arc<JobSlot>>,
        global: Arc<GlobalLimits>,
    ) -> Ctx {
        Ctx {
            sandbox,
            policy,
            test_public,
            limits: Arc::clone(&stats.limits),
            stats,
            conn,
            job,
            global,
            hello_timeout: TLS_HELLO_TIMEOUT,
            #[cfg(test)]
            route: None,
        }
    }
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

/// A connection as the stream task sees it.
struct Remote {
    inbox: Arc<Inbox>,
    credit: Arc<Semaphore>,
}

/// Sends a frame on the `net_serve` stream; a failure means the agent is gone,
/// which the stream's end reports.
pub(super) async fn send(ctx: &Ctx, id: u64, request: Request) {
    let _ = ctx.conn.send_on(id, request, Vec::new()).await;
}

/// Serves one `net_serve` stream until it ends (connection lost, replaced)
/// or the agent breaks the protocol (a connection id reused while in use,
/// which closes the whole agent channel): then every connection and lookup
/// it carried is stopped.
pub async fn run(ctx: Arc<Ctx>, mut stream: AgentStream) {
    let id = stream.id();
    let mut conns: HashMap<u64, Remote> = HashMap::new();
    // Connection tasks by task id, so a finished one frees its conn id.
    let mut tasks: JoinSet<()> = JoinSet::new();
    let mut task_conn: HashMap<tokio::task::Id, u64> = HashMap::new();
    let mut capped_logged = false;
    loop {
        let item = tokio::select! {
            item = stream.next() => item,
            Some(done) = tasks.join_next_with_id(), if !tasks.is_empty() => {
                forget(&mut conns, &mut task_conn, done);
                continue;
            }
        };
        // Finished connections free their ids before the event is looked at.
        while let Some(done) = tasks.try_join_next_with_id() {
            forget(&mut conns, &mut task_conn, done);
        }
        let (event, payload) = match item {
            Some(StreamItem::Event(e, p)) => (e, p),
            Some(StreamItem::End(..)) | Some(StreamItem::Failed(_)) | None => break,
        };
        match event {
            Event::NetDial { conn, host, port } => {
                if conns.contains_key(&conn) {
                    // Reuse would orphan the first dial (nothing would bound
                    // them): a protocol error. Ending only this stream would
                    // leave the sandbox without egress until its next
                    // reconnect; closing the channel makes the monitor
                    // reconnect now (within its reconnect budget), and the
                    // new channel gets a fresh net_serve.
                    tracing::warn!(sandbox = %ctx.sandbox, conn, "agent reused a connection id in use; closing its agent channel");
                    ctx.conn.abort();
                    break;
                }
                // A dial to a name makes sbxd look it up: it pays from the
                // same rate as a DNS query, or the rate would bound nothing.
                // Taken here, in arrival order, before any permit.
                if ctx.job.is_none() && policy::normalize_host(&host).parse::<IpAddr>().is_err() {
                    if let Err(e) = ctx.limits.dns_token(Instant::now()) {
                        ctx.stats.denied(ctx.sandbox, &host, port, e.reason());
                        let error = Some(NetError::Failed);
                        send(&ctx, id, Request::NetDialResult { conn, error }).await;
                        continue;
                    }
                }
                let permits = match ctx.limits.admit(&ctx.global) {
                    Ok(p) => p,
                    Err(e) => {
                        ctx.stats.failed();
                        if !capped_logged {
                            capped_logged = true;
                            tracing::warn!(sandbox = %ctx.sandbox, reason = e.reason(), "network connection refused: limit reached");
                        }
                        let error = Some(NetError::Failed);
                        send(&ctx, id, Request::NetDialResult { conn, error }).await;
                        continue;
                    }
                };
                let inbox = Arc::new(Inbox::new(Arc::clone(&ctx.limits)));
                let credit = Arc::new(Semaphore::new(NET_WINDOW_BYTES as usize));
                let remote = Remote {
                    inbox: Arc::clone(&inbox),
                    credit: Arc::clone(&credit),
                };
                conns.insert(conn, remote);
                let ctx = Arc::clone(&ctx);
                let flow = Flow { inbox, credit };
                let task = tasks.spawn(async move {
                    connection(&ctx, id, conn, host, port, flow, permits).await;
                });
                task_conn.insert(task.id(), conn);
            }
            Event::NetData { conn } => {
                if let Some(r) = conns.get(&conn) {
                    r.inbox.push(payload);
                }
            }
            Event::NetAck { conn, bytes } => {
                if let Some(r) = conns.get(&conn) {
                    let room =
                        (NET_WINDOW_BYTES as usize).saturating_sub(r.credit.available_permits());
                    r.credit
                        .add_permits(usize::try_from(bytes).unwrap_or(usize::MAX).min(room));
                }
            }
            Event::NetClose { conn, reset } => {
                if let Some(r) = conns.get(&conn) {
                    r.inbox.close(reset);
                }
            }
            Event::NetResolve { query, name, ipv6 } => {
                let slot = match ctx.limits.dns_query(Instant::now()) {
                    Ok(slot) => slot,
                    Err(e) => {
                        // Refused without a lookup: the responder answers SERVFAIL.
                        ctx.stats.denied(ctx.sandbox, &name, 0, e.reason());
                        let error = Some(NetError::Failed);
                        let addrs = Vec::new();
                        send(
                            &ctx,
                            id,
                            Request::NetResolveResult {
                                query,
                                addrs,
                                error,
                            },
                        )
                        .await;
                        continue;
                    }
                };
                let ctx = Arc::clone(&ctx);
                tasks.spawn(async move {
                    let (addrs, error) = match resolve(&ctx, &name, ipv6, slot).await {
                        Ok(addrs) => (addrs, None),
                        Err(Ok(reason)) => {
                            // Counted as a denial on port 0 (a lookup, not a connection).
                            ctx.stats.denied(ctx.sandbox, &name, 0, reason);
                            (Vec::new(), Some(NetError::Denied))
                        }
                        Err(Err(e)) => (Vec::new(), Some(e)),
                    };
                    send(
                        &ctx,
                        id,
                        Request::NetResolveResult {
                            query,
                            addrs,
                            error,
                        },
                    )
                    .await;
                });
            }
            _ => {}
        }
    }
    // Aborting the tasks closes their sockets (a dial in flight included);
    // waiting for them means they are closed when this returns.
    tasks.abort_all();
    for r in conns.values() {
        r.credit.close();
    }
    while tasks.join_next().await.is_some() {}
}

/// Forgets the connection of a finished task.
fn forget(
    conns: &mut HashMap<u64, Remote>,
    task_conn: &mut HashMap<tokio::task::Id, u64>,
    done: Result<(tokio::task::Id, ()), tokio::task::JoinError>,
) {
    let task = match done {
        Ok((task, ())) => task,
        Err(e) => e.id(),
    };
    if let Some(conn) = task_conn.remove(&task) {
        conns.remove(&conn);
    }
}

/// Resolves `host` with the host resolver (so `/etc/hosts` applies) within the
/// sandbox's lookup slot `slot` and a daemon-wide one, which the blocking
/// `getaddrinfo` holds until it returns, even after we gave up waiting.
async fn lookup(
    ctx: &Ctx,
    host: &str,
    slot: OwnedSemaphorePermit,
    deadline: Instant,
) -> Result<Vec<IpAddr>, NetError> {
    let wait = deadline.saturating_duration_since(Instant::now());
    let Some(permits) = limits::lookup_permits(slot, &ctx.global, wait).await else {
        return Err(NetError::Failed);
    };
    let name = host.to_string();
    let task = tokio::task::spawn_blocking(move || {
        let _held = permits;
        std::net::ToSocketAddrs::to_socket_addrs(&(name.as_str(), 0))
            .map(|it| it.map(|a| a.ip()).collect::<Vec<IpAddr>>())
    });
    match tokio::time::timeout_at(deadline.into(), task).await {
        Ok(Ok(Ok(found))) => {
            let mut v: Vec<IpAddr> = Vec::new();
            for ip in found {
                if !v.contains(&ip) {
                    v.push(ip);
                }
            }
            Ok(v)
        }
        _ => Err(NetError::Resolve),
    }
}

/// Resolves and checks `host:port`; the addresses to dial, or why not.
pub async fn decide(
    ctx: &Ctx,
    host: &str,
    port: u16,
) -> Result<Vec<SocketAddr>, Result<&'static str, NetError>> {
    let current = ctx.policy.current();
    let policy = &*current;
    let host = policy::normalize_host(host);
    if port == 0 || host.is_empty() {
        return Err(Ok("bad-destination"));
    }
    policy::precheck(policy, &host, port).map_err(Ok)?;
    let addrs: Vec<IpAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![ip],
        Err(_) => {
            let deadline = Instant::now() + RESOLVE_TIMEOUT;
            // Waits for a slot: dials in flight are capped, so the queue is too.
            let slot = tokio::time::timeout_at(deadline.into(), ctx.limits.dial_lookup()).await;
            let Ok(Some(slot)) = slot else {
                return Err(Err(NetError::Resolve));
            };
            lookup(ctx, &host, slot, deadline).await.map_err(Err)?
        }
    };
    if addrs.is_empty() {
        return Err(Err(NetError::Resolve));
    }
    let facts = Facts::current(&ctx.test_public);
    // Every answer must pass: a name that resolves to any forbidden address is refused.
    for ip in &addrs {
        policy::check_resolved(policy, &facts, &host, *ip, port).map_err(Ok)?;
    }
    Ok(addrs
        .into_iter()
        .map(|ip| SocketAddr::new(ip, port))
        .collect())
}

/// A DNS lookup for the in-sandbox responder (its rate already checked and
/// a lookup slot taken): the addresses of `name` in the asked family that the
/// policy allows (each checked like a dial's, the port aside). `Ok(empty)`
/// when only the other family has allowed addresses (NOERROR without
/// answers); `Err(Ok(reason))` when the policy refuses the name or every
/// address; `Err(Err(Resolve))` when the name does not resolve.
pub async fn resolve(
    ctx: &Ctx,
    name: &str,
    ipv6: bool,
    slot: OwnedSemaphorePermit,
) -> Result<Vec<IpAddr>, Result<&'static str, NetError>> {
    let current = ctx.policy.current();
    let policy = &*current;
    let host = policy::normalize_host(name);
    if host.is_empty() {
        return Err(Err(NetError::Resolve));
    }
    policy::precheck_name(policy, &host).map_err(Ok)?;
    let found: Vec<IpAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![ip],
        Err(_) => lookup(ctx, &host, slot, Instant::now() + RESOLVE_TIMEOUT)
            .await
            .map_err(Err)?,
    };
    if found.is_empty() {
        return Err(Err(NetError::Resolve));
    }
    let facts = Facts::current(&ctx.test_public);
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

/// The addresses a dial goes to: decided by the policy (or, in unit tests
/// that set [`Ctx::route`], that one address).
async fn destination(
    ctx: &Ctx,
    host: &str,
    port: u16,
) -> Result<Vec<SocketAddr>, Result<&'static str, NetError>> {
    #[cfg(test)]
    if let Some(route) = ctx.route {
        return Ok(vec![route]);
    }
    decide(ctx, host, port).await
}

/// One connection from dial to close; `permits` are held to the end (the
/// dial slot only while dialling).
async fn connection(
    ctx: &Ctx,
    id: u64,
    conn: u64,
    host: String,
    port: u16,
    flow: Flow,
    mut permits: ConnPermits,
) {
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
            send(ctx, id, result(Some(NetError::Denied))).await;
            return;
        };
        let (ours, theirs) = tokio::io::duplex(JOB_PIPE_BYTES);
        if sender.send(theirs).is_err() {
            // Nobody waits for the channel any more (the job gave up).
            ctx.stats.failed();
            send(ctx, id, result(Some(NetError::Failed))).await;
            return;
        }
        permits.dial = None;
        ctx.stats.allowed();
        if ctx
            .conn
            .send_on(id, result(None), Vec::new())
            .await
            .is_err()
        {
            return;
        }
        let (rd, wr) = tokio::io::split(ours);
        relay(ctx, id, conn, &host, port, rd, wr, flow).await;
        return;
    }
    let addrs = match destination(ctx, &host, port).await {
        Ok(a) => a,
        Err(Ok(reason)) => {
            ctx.stats.denied(ctx.sandbox, &host, port, reason);
            send(ctx, id, result(Some(NetError::Denied))).await;
            return;
        }
        Err(Err(e)) => {
            ctx.stats.failed();
            send(ctx, id, result(Some(e))).await;
            return;
        }
    };
    let stream = match dial(&addrs).await {
        Ok(s) => s,
        Err(e) => {
            ctx.stats.failed();
            send(ctx, id, result(Some(e))).await;
            return;
        }
    };
    permits.dial = None;
    ctx.stats.allowed();
    let _ = stream.set_nodelay(true);
    if ctx
        .conn
        .send_on(id, result(None), Vec::new())
        .await
        .is_err()
    {
        return;
    }
    let (rd, wr) = stream.into_split();
    relay(ctx, id, conn, &host, port, rd, wr, flow).await;
}

#[cfg(test)]
#[path = "broker_tests.rs"]
mod tests;
