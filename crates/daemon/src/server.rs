//! The HTTP server: an accept loop in front of the API router that caps open
//! connections (in total and per source address), closes connections whose
//! request head is slow or that sit idle between requests, aborts request
//! bodies that stop making progress, gives memory back to the OS after a flood
//! of connections, and shuts down gracefully.
//!
//! `axum::serve` does none of this: 20,000 idle connections made `/healthz`
//! time out, and slow headers or bodies stayed open indefinitely (issue #23).
//!
//! Deadlines of a connection (none while a request is in progress, whatever
//! its response streams or waits for):
//! * a new connection must complete a request head within the header timeout;
//! * a kept-alive connection must start its next request within the idle
//!   timeout of the last response, and complete the head within the header
//!   timeout of its first byte;
//! * a request body being read must deliver a byte within the body timeout.

use crate::config::HttpConfig;
use axum::body::{Body, Bytes};
use axum::http::Request;
use axum::Router;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, Ipv6Addr};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify};
use tokio::time::{Instant, Sleep};
use tower::ServiceExt;

/// Errors the server hands to request handlers.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The client stopped sending its request body.
    #[error("the request body sent no data for {0:?}; the request was aborted")]
    BodyStalled(Duration),
}

/// How long open connections may take to finish after a shutdown signal.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);
/// Pause after an accept error such as EMFILE, so the loop does not spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);
/// At most one log line per this long for refused connections and accept errors.
const LOG_EVERY: Duration = Duration::from_secs(10);
/// How often the memory trimmer looks at the number of closed connections.
const TRIM_CHECK_EVERY: Duration = Duration::from_secs(2);
/// Connections closed since the last trim that make the next check trim.
const TRIM_AFTER_CLOSED: usize = 1024;

/// Serves `router` on `listener` until `shutdown` completes, then lets open
/// connections finish their requests (at most [`SHUTDOWN_GRACE`]).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    config: &HttpConfig,
    shutdown: impl Future<Output = ()>,
) {
    serve_maybe_tls(listener, None, router, config, shutdown).await
}

/// [`serve`], with TLS on every connection when `tls` is given (the
/// handshake must finish within the header timeout).
pub async fn serve_maybe_tls(
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    router: Router,
    config: &HttpConfig,
    shutdown: impl Future<Output = ()>,
) {
    warn_if_descriptors_are_short(config.max_connections);
    let limiter = Arc::new(Limiter::new(
        config.max_connections,
        config.max_connections_per_ip,
    ));
    let timeouts = Arc::new(Timeouts {
        header: config.header_timeout,
        idle: config.idle_timeout,
        body: config.body_timeout,
    });
    let (stop_tx, stop_rx) = watch::channel(false);
    let trimmer = tokio::spawn(trim_after_floods(limiter.clone()));
    let mut refused = Throttled::default();
    let mut accept_errors = Throttled::default();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => match limiter.try_open(peer.ip()) {
                    Ok(permit) => {
                        tokio::spawn(accept_connection(
                            stream,
                            peer,
                            tls.clone(),
                            permit,
                            router.clone(),
                            timeouts.clone(),
                            stop_rx.clone(),
                        ));
                    }
                    Err(why) => {
                        // Closed at once: a refused connection holds no
                        // descriptor and does not sit in the listen queue.
                        drop(stream);
                        if let Some(count) = refused.tick() {
                            tracing::warn!(%peer, reason = why.as_str(), refused = count, open = limiter.open(), "HTTP connections refused");
                        }
                    }
                },
                Err(e) if is_per_connection_error(&e) => {}
                Err(e) => {
                    if let Some(count) = accept_errors.tick() {
                        tracing::warn!(error = %e, errors = count, "accept failed");
                    }
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                }
            },
        }
    }
    drop(listener);
    let _ = stop_tx.send(true);
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, limiter.all_closed()).await;
    if drained.is_err() {
        tracing::warn!(
            open = limiter.open(),
            "shutting down with HTTP connections still open"
        );
    }
    trimmer.abort();
}

/// Errors of one failed handshake (the peer went away first): not the listener's.
fn is_per_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind as K;
    matches!(
        e.kind(),
        K::ConnectionRefused | K::ConnectionAborted | K::ConnectionReset
    )
}

/// Completes the TLS handshake, if any, then serves the connection.
async fn accept_connection(
    stream: TcpStream,
    peer: std::net::SocketAddr,
    tls: Option<tokio_rustls::TlsAcceptor>,
    permit: Permit,
    router: Router,
    timeouts: Arc<Timeouts>,
    stop: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    match tls {
        None => {
            let client = ClientConn { peer, tls: false };
            serve_connection(stream, client, permit, router, timeouts, stop).await
        }
        Some(acceptor) => {
            // A client that never finishes its handshake holds a connection
            // slot no longer than one that never sends its request head.
            match tokio::time::timeout(timeouts.header, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => {
                    let client = ClientConn { peer, tls: true };
                    serve_connection(tls, client, permit, router, timeouts, stop).await
                }
                Ok(Err(e)) => tracing::debug!(error = %e, "TLS handshake failed"),
                Err(_) => tracing::debug!("TLS handshake too slow"),
            }
        }
    }
}

/// Serves one connection until it ends, times out or is drained at shutdown.
async fn serve_connection<S>(
    stream: S,
    client: ClientConn,
    permit: Permit,
    router: Router,
    timeouts: Arc<Timeouts>,
    mut stop: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    // Released when this task ends, however it ends.
    let _permit = permit;
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Tracked {
        stream,
        activity: activity.clone(),
    });
    let body_timeout = timeouts.body;
    let requests = activity.clone();
    let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
        let in_flight = requests.begin();
        req.extensions_mut().insert(client);
        let req = req.map(|body| ProgressBody::new(body, body_timeout));
        let call = router.clone().oneshot(req);
        async move {
            let resp = call.await?;
            // The request counts as in progress until its response body is
            // dropped: NDJSON streams and long waits are never idle.
            Ok::<_, Infallible>(resp.map(|inner| TrackedBody {
                inner,
                _in_flight: in_flight,
            }))
        }
    });
    // hyper's own header timer also runs between requests, which would make
    // the idle timeout the header timeout: the deadlines are kept here instead.
    // With upgrades: preview URLs hand a WebSocket's connection to the guest server.
    let conn = http1::Builder::new()
        .header_read_timeout(None)
        .serve_connection(io, service)
        .with_upgrades();
    let mut conn = std::pin::pin!(conn);
    let mut draining = false;
    loop {
        let wake = activity
            .deadline(&timeouts)
            .unwrap_or_else(|| Instant::now() + timeouts.recheck());
        tokio::select! {
            ended = conn.as_mut() => {
                if let Err(e) = ended {
                    tracing::debug!(error = %e, "HTTP connection ended with an error");
                }
                return;
            }
            _ = stop.changed(), if !draining => {
                // Idle connections close now; requests in progress finish first.
                draining = true;
                conn.as_mut().graceful_shutdown();
            }
            _ = tokio::time::sleep_until(wake) => {
                if activity.deadline(&timeouts).is_some_and(|d| d <= Instant::now()) {
                    // No request is in progress: dropping the connection
                    // closes the socket without cutting a response.
                    tracing::debug!("closing an HTTP connection: request head too slow or idle too long");
                    return;
                }
            }
        }
    }
}

/// The connection a request came in on (a request extension): where from,
/// and whether sbxd terminated TLS on it.
#[derive(Debug, Clone, Copy)]
pub struct ClientConn {
    /// The client's address.
    pub peer: std::net::SocketAddr,
    /// Whether the connection is TLS (sbxd's own `--tls-cert`).
    pub tls: bool,
}

/// The connection deadlines.
struct Timeouts {
    header: Duration,
    idle: Duration,
    body: Duration,
}

impl Timeouts {
    /// How often a connection with a request in progress looks again: no
    /// deadline can fall sooner than this after that request ends.
    fn recheck(&self) -> Duration {
        self.header.min(self.idle)
    }
}

/// What a connection is doing, for its header and idle deadlines.
struct Activity {
    state: Mutex<ActivityState>,
}

struct ActivityState {
    /// Requests whose response has not been dropped yet.
    in_flight: usize,
    /// Requests answered on this connection.
    served: u64,
    /// When the connection was accepted or its last response ended.
    idle_since: Instant,
    /// The first byte read while no request was in progress: a request head
    /// has started.
    first_byte: Option<Instant>,
}

impl Activity {
    fn new() -> Self {
        Activity {
            state: Mutex::new(ActivityState {
                in_flight: 0,
                served: 0,
                idle_since: Instant::now(),
                first_byte: None,
            }),
        }
    }

    /// Bytes arrived from the client.
    fn on_read(&self) {
        let mut s = lock(&self.state);
        if s.in_flight == 0 && s.first_byte.is_none() {
            s.first_byte = Some(Instant::now());
        }
    }

    /// A request head was parsed; the returned guard ends the request when dropped.
    fn begin(self: &Arc<Self>) -> InFlight {
        let mut s = lock(&self.state);
        s.in_flight += 1;
        s.first_byte = None;
        InFlight(self.clone())
    }

    /// When the connection must be closed, if nothing happens before; none
    /// while a request is in progress.
    fn deadline(&self, t: &Timeouts) -> Option<Instant> {
        let s = lock(&self.state);
        if s.in_flight > 0 {
            return None;
        }
        Some(match s.first_byte {
            Some(at) => at + t.header,
            None if s.served == 0 => s.idle_since + t.header,
            None => s.idle_since + t.idle,
        })
    }
}

/// A request in progress on a connection.
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut s = lock(&self.0.state);
        s.in_flight = s.in_flight.saturating_sub(1);
        s.served += 1;
        if s.in_flight == 0 {
            s.idle_since = Instant::now();
            s.first_byte = None;
        }
    }
}

/// The socket, telling the connection's [`Activity`] when bytes arrive.
struct Tracked<S> {
    stream: S,
    activity: Arc<Activity>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Tracked<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.on_read();
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tracked<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// A request body that fails with [`ServerError::BodyStalled`] when it is
/// being read and no frame arrives within the timeout. The timer runs only
/// while the handler waits for the body, so a slow handler is not blamed on
/// the client, and it restarts with every frame, so a large upload at any
/// steady speed is fine.
struct ProgressBody {
    inner: Incoming,
    timeout: Duration,
    timer: Option<Pin<Box<Sleep>>>,
    armed: bool,
}

impl ProgressBody {
    fn new(inner: Incoming, timeout: Duration) -> Self {
        ProgressBody {
            inner,
            timeout,
            timer: None,
            armed: false,
        }
    }
}

impl hyper::body::Body for ProgressBody {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            this.armed = false;
            return Poll::Ready(frame.map(|f| f.map_err(axum::BoxError::from)));
        }
        let deadline = Instant::now() + this.timeout;
        let timer = this
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if !this.armed {
            timer.as_mut().reset(deadline);
            this.armed = true;
        }
        if timer.as_mut().poll(cx).is_ready() {
            this.armed = false;
            return Poll::Ready(Some(Err(Box::new(ServerError::BodyStalled(this.timeout)))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A response body that keeps its request in progress until hyper drops it.
struct TrackedBody {
    inner: Body,
    _in_flight: InFlight,
}

impl hyper::body::Body for TrackedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    /// `--http-max-connections` are open.
    Total,
    /// `--http-max-connections-per-ip` are open from this source.
    PerSource,
}

impl Refusal {
    fn as_str(self) -> &'static str {
        match self {
            Refusal::Total => "too many connections",
            Refusal::PerSource => "too many connections from this address",
        }
    }
}

/// Counts open connections, in total and per source, against the caps.
struct Limiter {
    max_total: usize,
    max_per_source: usize,
    counts: Mutex<Counts>,
    /// Woken when the last connection closes (graceful shutdown waits for it).
    none_open: Notify,
}

#[derive(Default)]
struct Counts {
    total: usize,
    per_source: HashMap<IpAddr, usize>,
    closed_since_trim: usize,
}

impl Limiter {
    fn new(max_total: usize, max_per_source: usize) -> Self {
        Limiter {
            max_total,
            max_per_source,
            counts: Mutex::new(Counts::default()),
            none_open: Notify::new(),
        }
    }

    /// Counts a new connection from `ip`, or says which cap it would pass.
    fn try_open(self: &Arc<Self>, ip: IpAddr) -> Result<Permit, Refusal> {
        let source = source_of(ip);
        let mut c = lock(&self.counts);
        if c.total >= self.max_total {
            return Err(Refusal::Total);
        }
        let from_source = c.per_source.entry(source).or_insert(0);
        if *from_source >= self.max_per_source {
            return Err(Refusal::PerSource);
        }
        *from_source += 1;
        c.total += 1;
        Ok(Permit {
            limiter: self.clone(),
            source,
        })
    }

    fn open(&self) -> usize {
        lock(&self.counts).total
    }

    /// Resolves once no connection is open.
    async fn all_closed(&self) {
        loop {
            // Created before the check, so a close in between still wakes it.
            let closed = self.none_open.notified();
            if self.open() == 0 {
                return;
            }
            closed.await;
        }
    }

    /// Whether enough connections closed since the last call that said yes.
    fn take_trim_due(&self) -> bool {
        let mut c = lock(&self.counts);
        if c.closed_since_trim >= TRIM_AFTER_CLOSED {
            c.closed_since_trim = 0;
            return true;
        }
        false
    }
}

/// One open connection, counted until dropped.
struct Permit {
    limiter: Arc<Limiter>,
    source: IpAddr,
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut c = lock(&self.limiter.counts);
        c.total = c.total.saturating_sub(1);
        c.closed_since_trim += 1;
        if let Some(n) = c.per_source.get_mut(&self.source) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                c.per_source.remove(&self.source);
            }
        }
        if c.total == 0 {
            self.limiter.none_open.notify_waiters();
        }
    }
}

/// The source a per-address cap counts: the IPv4 address (mapped IPv6 included),
/// or the /64 of an IPv6 address, since anyone with IPv6 has a whole /64.
fn source_of(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let s = v6.segments();
            IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
        }
        v4 => v4,
    }
}

/// After a flood of connections the allocator keeps the freed buffers
/// (~40 KB per connection, measured): glibc does not return fragmented arena
/// memory by itself, so trim it once many connections have closed.
async fn trim_after_floods(limiter: Arc<Limiter>) {
    let mut tick = tokio::time::interval(TRIM_CHECK_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if limiter.take_trim_due() {
            let _ = tokio::task::spawn_blocking(release_free_memory).await;
        }
    }
}

/// Gives free heap memory back to the kernel.
fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes no pointers; it only releases free pages,
    // under glibc's own arena locks.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Warns when the descriptor limit leaves little room beside the connection cap
/// (sandboxes, their relays and the database need descriptors too).
fn warn_if_descriptors_are_short(max_connections: usize) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return;
    }
    let wanted = (max_connections as u64).saturating_mul(2);
    if limit.rlim_cur < wanted {
        tracing::warn!(
            nofile = limit.rlim_cur,
            max_connections,
            "RLIMIT_NOFILE is less than twice --http-max-connections: raise it (e.g. LimitNOFILE=) or lower the cap"
        );
    }
}

/// A log line at most every [`LOG_EVERY`], with the count of events since the last one.
#[derive(Default)]
struct Throttled {
    last: Option<Instant>,
    count: u64,
}

impl Throttled {
    /// Counts an event; returns the count to log when a line is due.
    fn tick(&mut self) -> Option<u64> {
        self.count += 1;
        let now = Instant::now();
        if self.last.is_some_and(|at| now < at + LOG_EVERY) {
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.count))
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Counters stay meaningful after a panic elsewhere: keep serving.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_count_per_source_and_in_total() {
        let limiter = Arc::new(Limiter::new(3, 2));
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let a1 = limiter.try_open(a).unwrap();
        let _a2 = limiter.try_open(a).unwrap();
        assert_eq!(limiter.try_open(a).err(), Some(Refusal::PerSource));
        let _b1 = limiter.try_open(b).unwrap();
        assert_eq!(limiter.try_open(b).err(), Some(Refusal::Total));
        drop(a1);
        assert_eq!(limiter.open(), 2);
        let _a3 = limiter.try_open(a).unwrap();
    }

    #[test]
    fn sources_are_ipv4_or_ipv6_slash_64() {
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(source_of(mapped), "10.0.0.1".parse::<IpAddr>().unwrap());
        let v6: IpAddr = "2001:db8:1:2:aaaa:bbbb:cccc:dddd".parse().unwrap();
        assert_eq!(source_of(v6), "2001:db8:1:2::".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn deadlines_follow_the_connection() {
        let t = Timeouts {
            header: Duration::from_secs(10),
            idle: Duration::from_secs(60),
            body: Duration::from_secs(30),
        };
        // Deadlines are measured from "now" give or take this (no sleeping).
        let near = |deadline: Option<Instant>, from_now: Duration| {
            let d = deadline.expect("a deadline");
            let want = Instant::now() + from_now;
            d <= want && d + Duration::from_secs(1) > want
        };
        let activity = Arc::new(Activity::new());
        assert!(near(activity.deadline(&t), t.header), "new: header timeout");
        let request = activity.begin();
        assert_eq!(activity.deadline(&t), None, "no deadline while in progress");
        drop(request);
        assert!(
            near(activity.deadline(&t), t.idle),
            "kept alive: idle timeout"
        );
        activity.on_read();
        assert!(
            near(activity.deadline(&t), t.header),
            "head started: header timeout"
        );
        let request = activity.begin();
        activity.on_read();
        assert_eq!(activity.deadline(&t), None, "body bytes are not a new head");
        drop(request);
        assert!(near(activity.deadline(&t), t.idle));
    }

    #[test]
    fn throttled_logs_the_first_event_then_counts() {
        let mut log = Throttled::default();
        assert_eq!(log.tick(), Some(1));
        assert_eq!(log.tick(), None);
        assert_eq!(log.tick(), None);
        assert_eq!(log.count, 2);
    }
}
