//! The in-sandbox egress proxies: HTTP (CONNECT and absolute-form `http://`)
//! on 127.0.0.1:3128 and SOCKS5 (CONNECT, names or addresses) on 127.0.0.1:1080.
//!
//! The agent never opens a network connection itself (the sandbox has no
//! interface but loopback). Every accepted client becomes a stream over the
//! agent channel: the agent sends [`Event::NetDial`] on the daemon's
//! long-lived `net_serve` request; the daemon resolves the name, applies the
//! sandbox's policy, dials and relays. Both directions are flow-controlled by
//! a credit window ([`NET_WINDOW_BYTES`]): a side sends data only while the
//! other has acknowledged all but a window's worth, so one fast stream can
//! neither starve the channel nor grow memory.
//!
//! Without an active `net_serve` (daemon restarting, sandbox just restored),
//! new clients are refused at once (HTTP 503, SOCKS "general failure").

use crate::console;
use crate::server::{Outcome, Sink};
use sbx_agent_proto::{Event, NetError, Reply, NET_CHUNK_BYTES, NET_WINDOW_BYTES};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio::task::JoinHandle;

/// HTTP proxy address inside the sandbox.
pub const HTTP_PROXY_ADDR: &str = "127.0.0.1:3128";
/// SOCKS5 proxy address inside the sandbox.
pub const SOCKS_PROXY_ADDR: &str = "127.0.0.1:1080";
/// Most proxied connections open at once.
const MAX_CONNS: usize = 1024;
/// How long a client waits for the daemon's dial.
const DIAL_TIMEOUT: Duration = Duration::from_secs(40);
/// Largest HTTP request head the proxy reads.
const MAX_HEAD_BYTES: usize = 64 * 1024;
/// How long a DNS query waits for the daemon's answer.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);
/// Most DNS lookups waiting for the daemon at once.
const MAX_RESOLVES: usize = 256;

/// What a lookup came to: `Ok(Some(addrs))` (possibly empty: NOERROR without
/// answers), `Ok(None)` (NXDOMAIN), `Err(())` (SERVFAIL).
pub type Resolved = Result<Option<Vec<IpAddr>>, ()>;

enum Inbound {
    Data(Vec<u8>),
    Eof,
    Reset,
}

struct Entry {
    serve: u64,
    dial: Option<oneshot::Sender<Option<NetError>>>,
    inbound: mpsc::UnboundedSender<Inbound>,
    credit: Arc<Semaphore>,
    /// Bytes received from the daemon and not yet acknowledged (window check).
    unacked: u64,
}

struct Serve {
    id: u64,
    sink: Sink,
    /// Dropped when a newer serve replaces this one.
    _replaced: oneshot::Sender<()>,
}

#[derive(Default)]
struct State {
    serve: Option<Serve>,
    conns: HashMap<u64, Entry>,
    next_conn: u64,
    next_serve: u64,
    /// DNS lookups waiting for `net_resolve_result`: serve id and waiter.
    resolves: HashMap<u64, (u64, oneshot::Sender<Resolved>)>,
    next_query: u64,
}

/// Proxy state shared by the listeners and the agent connections.
#[derive(Default)]
pub struct Net {
    state: Mutex<State>,
    listening: AtomicBool,
    /// Accept loops of the proxy and DNS listeners, so `quiesce` can close them.
    listeners: Mutex<Vec<JoinHandle<()>>>,
}

impl Net {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Installs a `net_serve` as the active one (replacing any other) and
    /// starts the listeners; synchronous, so that a command sent after the
    /// `net_serve` frame finds the proxies ready. Await the result to run it.
    pub fn register(self: &Arc<Self>, sink: &Sink) -> Serving {
        self.start_listeners();
        let (tx, rx) = oneshot::channel();
        let mut st = self.lock();
        st.next_serve += 1;
        let id = st.next_serve;
        st.serve = Some(Serve {
            id,
            sink: sink.clone(),
            _replaced: tx,
        });
        Serving {
            guard: ServeGuard {
                net: Arc::clone(self),
                id,
            },
            replaced: rx,
        }
    }

    fn start_listeners(self: &Arc<Self>) {
        if self.listening.swap(true, Ordering::SeqCst) {
            return;
        }
        let mut tasks = crate::dns::start(self);
        for (addr, socks) in [(HTTP_PROXY_ADDR, false), (SOCKS_PROXY_ADDR, true)] {
            let bound = std::net::TcpListener::bind(addr).and_then(|l| {
                l.set_nonblocking(true)?;
                TcpListener::from_std(l)
            });
            let listener = match bound {
                Ok(l) => l,
                Err(e) => {
                    console!("proxy: cannot listen on {addr}: {e}");
                    continue;
                }
            };
            let net = Arc::clone(self);
            tasks.push(tokio::spawn(async move {
                loop {
                    match listener.accept().await {
                        Ok((s, _)) => {
                            let _ = s.set_nodelay(true);
                            let net = Arc::clone(&net);
                            tokio::spawn(async move {
                                if socks {
                                    socks_client(net, s).await
                                } else {
                                    http_client(net, s).await
                                }
                            });
                        }
                        Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                    }
                }
            }));
        }
        self.listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(tasks);
    }

    /// Ends the active serve (its `net_serve` answers `ok`), resets every
    /// proxied connection, fails pending lookups and closes the listeners,
    /// returning once their sockets are closed.
    pub async fn quiesce(&self) {
        let tasks: Vec<_> = {
            let mut st = self.lock();
            st.serve = None;
            st.resolves.clear();
            for (_, e) in st.conns.drain() {
                let _ = e.inbound.send(Inbound::Reset);
                e.credit.close();
            }
            let mut listeners = self.listeners.lock().unwrap_or_else(|e| e.into_inner());
            self.listening.store(false, Ordering::SeqCst);
            listeners.drain(..).collect()
        };
        for task in tasks {
            task.abort();
            // Awaiting the aborted task means its listener has been dropped (closed).
            let _ = task.await;
        }
    }

    /// `net_dial_result` from the daemon.
    pub fn dial_result(&self, conn: u64, error: Option<NetError>) {
        let tx = self.lock().conns.get_mut(&conn).and_then(|e| e.dial.take());
        if let Some(tx) = tx {
            let _ = tx.send(error);
        }
    }

    /// `net_data` from the daemon.
    pub fn data(&self, conn: u64, bytes: Vec<u8>) {
        let mut st = self.lock();
        let Some(e) = st.conns.get_mut(&conn) else {
            return;
        };
        e.unacked += bytes.len() as u64;
        if e.unacked > NET_WINDOW_BYTES {
            // The daemon overran the window: drop the connection.
            let _ = e.inbound.send(Inbound::Reset);
            return;
        }
        let _ = e.inbound.send(Inbound::Data(bytes));
    }

    fn consumed(&self, conn: u64, bytes: u64) {
        if let Some(e) = self.lock().conns.get_mut(&conn) {
            e.unacked = e.unacked.saturating_sub(bytes);
        }
    }

    /// `net_ack` from the daemon.
    pub fn ack(&self, conn: u64, bytes: u64) {
        if let Some(e) = self.lock().conns.get(&conn) {
            let room = NET_WINDOW_BYTES as usize
                - e.credit.available_permits().min(NET_WINDOW_BYTES as usize);
            e.credit.add_permits((bytes as usize).min(room));
        }
    }

    /// `net_close` from the daemon.
    pub fn close(&self, conn: u64, reset: bool) {
        if let Some(e) = self.lock().conns.get(&conn) {
            let _ = e
                .inbound
                .send(if reset { Inbound::Reset } else { Inbound::Eof });
        }
    }

    /// `net_resolve_result` from the daemon.
    pub fn resolve_result(&self, query: u64, addrs: Vec<IpAddr>, error: Option<NetError>) {
        let Some((_, tx)) = self.lock().resolves.remove(&query) else {
            return;
        };
        let _ = tx.send(match error {
            None => Ok(Some(addrs)),
            Some(NetError::Denied | NetError::Resolve) => Ok(None),
            Some(_) => Err(()),
        });
    }

    /// Asks the daemon for `name`'s addresses the policy allows (A, or AAAA with `ipv6`).
    pub async fn resolve(&self, name: String, ipv6: bool) -> Resolved {
        let (tx, rx) = oneshot::channel();
        let (query, sink) = {
            let mut st = self.lock();
            let Some(serve) = st.serve.as_ref() else {
                return Err(());
            };
            if st.resolves.len() >= MAX_RESOLVES {
                return Err(());
            }
            let (serve_id, sink) = (serve.id, serve.sink.clone());
            st.next_query += 1;
            let query = st.next_query;
            st.resolves.insert(query, (serve_id, tx));
            (query, sink)
        };
        let sent = sink
            .event(Event::NetResolve { query, name, ipv6 }, Vec::new())
            .await;
        let out = match sent {
            Err(_) => Err(()),
            Ok(()) => match tokio::time::timeout(RESOLVE_TIMEOUT, rx).await {
                Ok(Ok(r)) => r,
                _ => Err(()),
            },
        };
        self.lock().resolves.remove(&query);
        out
    }

    fn forget(&self, conn: u64) {
        self.lock().conns.remove(&conn);
    }

    /// Asks the daemon for a connection to `host:port`.
    async fn open(self: &Arc<Self>, host: String, port: u16) -> Result<Tunnel, NetError> {
        let (dial_tx, dial_rx) = oneshot::channel();
        let (in_tx, in_rx) = mpsc::unbounded_channel();
        let credit = Arc::new(Semaphore::new(NET_WINDOW_BYTES as usize));
        let (conn, sink) = {
            let mut st = self.lock();
            let Some(serve) = st.serve.as_ref() else {
                return Err(NetError::Failed);
            };
            if st.conns.len() >= MAX_CONNS {
                return Err(NetError::Failed);
            }
            let (serve_id, sink) = (serve.id, serve.sink.clone());
            st.next_conn += 1;
            let conn = st.next_conn;
            st.conns.insert(
                conn,
                Entry {
                    serve: serve_id,
                    dial: Some(dial_tx),
                    inbound: in_tx,
                    credit: Arc::clone(&credit),
                    unacked: 0,
                },
            );
            (conn, sink)
        };
        let sent = sink
            .event(Event::NetDial { conn, host, port }, Vec::new())
            .await;
        let outcome = match sent {
            Err(_) => Err(NetError::Failed),
            Ok(()) => match tokio::time::timeout(DIAL_TIMEOUT, dial_rx).await {
                Ok(Ok(None)) => Ok(()),
                Ok(Ok(Some(e))) => Err(e),
                Ok(Err(_)) => Err(NetError::Failed),
                Err(_) => Err(NetError::TimedOut),
            },
        };
        match outcome {
            Ok(()) => Ok(Tunnel {
                net: Arc::clone(self),
                conn,
                sink,
                inbound: in_rx,
                credit,
            }),
            Err(e) => {
                self.forget(conn);
                Err(e)
            }
        }
    }
}

/// A registered `net_serve`: runs until a newer one replaces it or it is
/// cancelled (dropped), then resets the connections it carried.
pub struct Serving {
    guard: ServeGuard,
    replaced: oneshot::Receiver<()>,
}

impl Serving {
    /// Waits until replaced; answers `ok`.
    pub async fn wait(self) -> Outcome {
        let _ = self.replaced.await;
        drop(self.guard);
        Ok((Reply::Ok, Vec::new()))
    }
}

/// Ends a serve: connections carried by it are reset.
struct ServeGuard {
    net: Arc<Net>,
    id: u64,
}

impl Drop for ServeGuard {
    fn drop(&mut self) {
        let mut st = self.net.lock();
        if st.serve.as_ref().is_some_and(|s| s.id == self.id) {
            st.serve = None;
        }
        let id = self.id;
        // Dropping the waiters answers their lookups SERVFAIL at once.
        st.resolves.retain(|_, (serve, _)| *serve != id);
        st.conns.retain(|_, e| {
            if e.serve == id {
                let _ = e.inbound.send(Inbound::Reset);
                e.credit.close();
                false
            } else {
                true
            }
        });
    }
}

/// A connected proxied stream.
struct Tunnel {
    net: Arc<Net>,
    conn: u64,
    sink: Sink,
    inbound: mpsc::UnboundedReceiver<Inbound>,
    credit: Arc<Semaphore>,
}

impl Tunnel {
    /// Relays between the client socket and the daemon until both sides are done.
    async fn run(self, client: TcpStream, initial: Vec<u8>) {
        let Tunnel {
            net,
            conn,
            sink,
            mut inbound,
            credit,
        } = self;
        let (mut rd, mut wr) = client.into_split();
        let up_sink = sink.clone();
        let mut up = tokio::spawn(async move {
            let send = |bytes: Vec<u8>| {
                let sink = up_sink.clone();
                let credit = Arc::clone(&credit);
                async move {
                    let n = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
                    credit.acquire_many(n).await.map_err(|_| ())?.forget();
                    sink.event(Event::NetData { conn }, bytes)
                        .await
                        .map_err(|_| ())
                }
            };
            for chunk in initial.chunks(NET_CHUNK_BYTES) {
                if send(chunk.to_vec()).await.is_err() {
                    return false;
                }
            }
            let mut buf = vec![0u8; NET_CHUNK_BYTES];
            loop {
                match rd.read(&mut buf).await {
                    Ok(0) => {
                        let _ = up_sink
                            .event(Event::NetClose { conn, reset: false }, Vec::new())
                            .await;
                        return true;
                    }
                    Ok(n) => {
                        if send(buf[..n].to_vec()).await.is_err() {
                            return false;
                        }
                    }
                    Err(_) => {
                        let _ = up_sink
                            .event(Event::NetClose { conn, reset: true }, Vec::new())
                            .await;
                        return false;
                    }
                }
            }
        });
        let mut up_done: Option<bool> = None;
        let mut down_done = false;
        loop {
            tokio::select! {
                r = &mut up, if up_done.is_none() => {
                    let ok = r.unwrap_or(false);
                    up_done = Some(ok);
                    if !ok { break; }
                    if down_done { break; }
                }
                item = inbound.recv(), if !down_done => match item {
                    Some(Inbound::Data(bytes)) => {
                        let n = bytes.len() as u64;
                        if wr.write_all(&bytes).await.is_err() {
                            let _ = sink.event(Event::NetClose { conn, reset: true }, Vec::new()).await;
                            break;
                        }
                        net.consumed(conn, n);
                        if sink.event(Event::NetAck { conn, bytes: n }, Vec::new()).await.is_err() {
                            break;
                        }
                    }
                    Some(Inbound::Eof) => {
                        let _ = wr.shutdown().await;
                        down_done = true;
                        if up_done.is_some() { break; }
                    }
                    Some(Inbound::Reset) | None => break,
                },
            }
        }
        up.abort();
        net.forget(conn);
    }
}

async fn write_http_error(s: &mut TcpStream, code: u16, reason: &str, msg: &str) {
    let body = format!("sbx proxy: {msg}\n");
    let resp = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = s.write_all(resp.as_bytes()).await;
    let _ = s.shutdown().await;
}

async fn write_net_error(s: &mut TcpStream, e: NetError) {
    let (code, reason, msg) = match e {
        NetError::Denied => (
            403,
            "Forbidden",
            "the sandbox's network policy does not allow this destination",
        ),
        NetError::Resolve => (502, "Bad Gateway", "the host name did not resolve"),
        NetError::Refused => (502, "Bad Gateway", "connection refused"),
        NetError::Unreachable => (502, "Bad Gateway", "destination unreachable"),
        NetError::TimedOut => (504, "Gateway Timeout", "connection timed out"),
        NetError::Failed => (
            503,
            "Service Unavailable",
            "the sandbox's network service is not available",
        ),
    };
    write_http_error(s, code, reason, msg).await;
}

/// Splits `host:port` / `[v6]:port`; `default` when no port is given.
fn split_host_port(authority: &str, default: Option<u16>) -> Option<(String, u16)> {
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (h, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None if after.is_empty() => default?,
            None => return None,
        };
        (h.to_string(), port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), p.parse().ok()?),
            None => (authority.to_string(), default?),
        }
    };
    if host.is_empty() || port == 0 {
        return None;
    }
    Some((host, port))
}

async fn read_head(s: &mut TcpStream) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut buf = Vec::with_capacity(4096);
    let mut tmp = [0u8; 4096];
    loop {
        if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(pos + 4);
            return Some((buf, rest));
        }
        if buf.len() > MAX_HEAD_BYTES {
            return None;
        }
        let n = tokio::time::timeout(Duration::from_secs(30), s.read(&mut tmp))
            .await
            .ok()?
            .ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
    }
}

async fn http_client(net: Arc<Net>, mut s: TcpStream) {
    let Some((head, rest)) = read_head(&mut s).await else {
        return write_http_error(&mut s, 400, "Bad Request", "unreadable request head").await;
    };
    let Ok(head) = String::from_utf8(head) else {
        return write_http_error(&mut s, 400, "Bad Request", "request head is not UTF-8").await;
    };
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or("");
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return write_http_error(&mut s, 400, "Bad Request", "malformed request line").await;
    };
    if method.eq_ignore_ascii_case("CONNECT") {
        let Some((host, port)) = split_host_port(target, None) else {
            return write_http_error(&mut s, 400, "Bad Request", "CONNECT needs host:port").await;
        };
        match net.open(host, port).await {
            Ok(t) => {
                if s.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await
                    .is_ok()
                {
                    t.run(s, rest).await;
                } else {
                    t.net.forget(t.conn);
                }
            }
            Err(e) => write_net_error(&mut s, e).await,
        }
        return;
    }
    let Some(after) = target
        .strip_prefix("http://")
        .or_else(|| target.strip_prefix("HTTP://"))
    else {
        return write_http_error(
            &mut s,
            400,
            "Bad Request",
            "only CONNECT and absolute-form http:// requests are proxied",
        )
        .await;
    };
    let (authority, path) = match after.find(['/', '?']) {
        Some(i) => (&after[..i], &after[i..]),
        None => (after, "/"),
    };
    let authority = authority.rsplit('@').next().unwrap_or(authority);
    let Some((host, port)) = split_host_port(authority, Some(80)) else {
        return write_http_error(&mut s, 400, "Bad Request", "bad host in URL").await;
    };
    let path = if path.starts_with('?') {
        format!("/{path}")
    } else {
        path.to_string()
    };
    let mut out = format!("{method} {path} {version}\r\n");
    let mut has_host = false;
    for line in lines.filter(|l| !l.is_empty()) {
        let name = line.split(':').next().unwrap_or("").trim();
        if [
            "proxy-connection",
            "proxy-authorization",
            "connection",
            "keep-alive",
        ]
        .iter()
        .any(|h| name.eq_ignore_ascii_case(h))
        {
            continue;
        }
        has_host |= name.eq_ignore_ascii_case("host");
        out.push_str(line);
        out.push_str("\r\n");
    }
    if !has_host {
        out.push_str(&format!("Host: {authority}\r\n"));
    }
    out.push_str("Connection: close\r\n\r\n");
    let mut initial = out.into_bytes();
    initial.extend_from_slice(&rest);
    match net.open(host, port).await {
        Ok(t) => t.run(s, initial).await,
        Err(e) => write_net_error(&mut s, e).await,
    }
}

async fn read_exact_timeout<R: AsyncRead + Unpin>(s: &mut R, buf: &mut [u8]) -> Option<()> {
    tokio::time::timeout(Duration::from_secs(30), s.read_exact(buf))
        .await
        .ok()?
        .ok()
        .map(|_| ())
}

async fn socks_client(net: Arc<Net>, mut s: TcpStream) {
    let mut hdr = [0u8; 2];
    if read_exact_timeout(&mut s, &mut hdr).await.is_none() || hdr[0] != 5 {
        return;
    }
    let mut methods = vec![0u8; hdr[1] as usize];
    if read_exact_timeout(&mut s, &mut methods).await.is_none() {
        return;
    }
    if !methods.contains(&0) {
        let _ = s.write_all(&[5, 0xff]).await;
        return;
    }
    if s.write_all(&[5, 0]).await.is_err() {
        return;
    }
    let mut req = [0u8; 4];
    if read_exact_timeout(&mut s, &mut req).await.is_none() || req[0] != 5 {
        return;
    }
    let host = match req[3] {
        1 => {
            let mut a = [0u8; 4];
            if read_exact_timeout(&mut s, &mut a).await.is_none() {
                return;
            }
            std::net::Ipv4Addr::from(a).to_string()
        }
        3 => {
            let mut len = [0u8; 1];
            if read_exact_timeout(&mut s, &mut len).await.is_none() {
                return;
            }
            let mut name = vec![0u8; len[0] as usize];
            if read_exact_timeout(&mut s, &mut name).await.is_none() {
                return;
            }
            match String::from_utf8(name) {
                Ok(n) => n,
                Err(_) => return socks_reply(&mut s, 1).await,
            }
        }
        4 => {
            let mut a = [0u8; 16];
            if read_exact_timeout(&mut s, &mut a).await.is_none() {
                return;
            }
            std::net::Ipv6Addr::from(a).to_string()
        }
        _ => return socks_reply(&mut s, 8).await,
    };
    let mut port = [0u8; 2];
    if read_exact_timeout(&mut s, &mut port).await.is_none() {
        return;
    }
    let port = u16::from_be_bytes(port);
    if req[1] != 1 {
        return socks_reply(&mut s, 7).await;
    }
    match net.open(host, port).await {
        Ok(t) => {
            if s.write_all(&[5, 0, 0, 1, 0, 0, 0, 0, 0, 0]).await.is_ok() {
                t.run(s, Vec::new()).await;
            } else {
                t.net.forget(t.conn);
            }
        }
        Err(e) => {
            let code = match e {
                NetError::Denied => 2,
                NetError::Resolve | NetError::Unreachable => 4,
                NetError::Refused => 5,
                NetError::TimedOut => 6,
                NetError::Failed => 1,
            };
            socks_reply(&mut s, code).await
        }
    }
}

async fn socks_reply(s: &mut TcpStream, code: u8) {
    let _ = s.write_all(&[5, code, 0, 1, 0, 0, 0, 0, 0, 0]).await;
    let _ = s.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port_forms() {
        assert_eq!(
            split_host_port("example.com:443", None),
            Some(("example.com".into(), 443))
        );
        assert_eq!(
            split_host_port("[::1]:8080", None),
            Some(("::1".into(), 8080))
        );
        assert_eq!(
            split_host_port("example.com", Some(80)),
            Some(("example.com".into(), 80))
        );
        assert_eq!(split_host_port("example.com", None), None);
        assert_eq!(split_host_port("[::1]", Some(80)), Some(("::1".into(), 80)));
        assert_eq!(split_host_port(":80", None), None);
    }
}
