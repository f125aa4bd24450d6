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

mod http;
mod socks;
mod tunnel;

use crate::console;
use crate::server::{Outcome, Sink};
use http::http_client;
use sbx_agent_proto::{Event, NetError, Reply, NET_WINDOW_BYTES};
use socks::socks_client;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio::task::JoinHandle;
use tunnel::Tunnel;

/// HTTP proxy address inside the sandbox.
pub const HTTP_PROXY_ADDR: &str = "127.0.0.1:3128";
/// SOCKS5 proxy address inside the sandbox.
pub const SOCKS_PROXY_ADDR: &str = "127.0.0.1:1080";
/// Most proxied connections open at once.
const MAX_CONNS: usize = 1024;
/// How long a client waits for the daemon's dial.
const DIAL_TIMEOUT: Duration = Duration::from_secs(40);
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
