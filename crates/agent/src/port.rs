//! Inbound port streams (`port_open`): the daemon's way into a server
//! listening inside the sandbox (preview URLs). The sandbox has no network
//! interface but loopback, so the agent dials `127.0.0.1:PORT` (then
//! `[::1]:PORT`) itself and relays the connection over the request's id with
//! the same credit window as the egress proxies ([`NET_WINDOW_BYTES`] each
//! way). Cancel or connection loss aborts the task, which closes the socket.

use crate::server::{Outcome, Sink};
use sbx_agent_proto::{
    AgentError, AgentErrorCode, Event, Reply, NET_CHUNK_BYTES, NET_WINDOW_BYTES,
};
use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, Semaphore};

/// Most port streams open at once on one agent connection.
pub const MAX_PORT_STREAMS: usize = 1024;

/// What the daemon sent for a stream, in order.
enum Inbound {
    Data(Vec<u8>),
    Eof,
    Reset,
}

struct Entry {
    inbound: mpsc::UnboundedSender<Inbound>,
    credit: Arc<Semaphore>,
    /// Bytes received from the daemon and not yet written (window check).
    unacked: u64,
}

/// The open port streams of one agent connection, by request id.
#[derive(Default, Clone)]
pub struct Ports {
    streams: Arc<Mutex<HashMap<u64, Entry>>>,
}

/// A registered stream, waiting to be run; dropping it (or the task running
/// it) unregisters the id.
pub struct Registered {
    ports: Ports,
    id: u64,
    inbound: mpsc::UnboundedReceiver<Inbound>,
    credit: Arc<Semaphore>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.ports.lock().remove(&self.id);
    }
}

impl Ports {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Entry>> {
        self.streams.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers stream `id` before its task starts, so frames that follow
    /// the `port_open` find it. Fails when too many are open.
    pub fn register(&self, id: u64) -> Result<Registered, AgentError> {
        let (tx, rx) = mpsc::unbounded_channel();
        let credit = Arc::new(Semaphore::new(NET_WINDOW_BYTES as usize));
        let mut map = self.lock();
        if map.len() >= MAX_PORT_STREAMS {
            return Err(AgentError::new(
                AgentErrorCode::Io,
                "too many port streams are open",
            ));
        }
        map.insert(
            id,
            Entry {
                inbound: tx,
                credit: Arc::clone(&credit),
                unacked: 0,
            },
        );
        Ok(Registered {
            ports: self.clone(),
            id,
            inbound: rx,
            credit,
        })
    }

    /// `port_data` from the daemon; an overrun of the window resets the stream.
    pub fn data(&self, id: u64, bytes: Vec<u8>) {
        let mut map = self.lock();
        let Some(e) = map.get_mut(&id) else {
            return;
        };
        e.unacked += bytes.len() as u64;
        let _ = e.inbound.send(if e.unacked > NET_WINDOW_BYTES {
            Inbound::Reset
        } else {
            Inbound::Data(bytes)
        });
    }

    /// `port_ack` from the daemon: more credit, never past the window.
    pub fn ack(&self, id: u64, bytes: u64) {
        if let Some(e) = self.lock().get(&id) {
            let room = NET_WINDOW_BYTES as usize
                - e.credit.available_permits().min(NET_WINDOW_BYTES as usize);
            e.credit.add_permits((bytes as usize).min(room));
        }
    }

    /// `port_close` from the daemon.
    pub fn close(&self, id: u64, reset: bool) {
        if let Some(e) = self.lock().get(&id) {
            let _ = e
                .inbound
                .send(if reset { Inbound::Reset } else { Inbound::Eof });
        }
    }

    fn consumed(&self, id: u64, bytes: u64) {
        if let Some(e) = self.lock().get_mut(&id) {
            e.unacked = e.unacked.saturating_sub(bytes);
        }
    }

    /// Whether `id` is an open port stream.
    pub fn contains(&self, id: u64) -> bool {
        self.lock().contains_key(&id)
    }
}

/// Dials the guest's loopback on `port`: IPv4 first, then IPv6.
async fn dial(port: u16) -> Result<TcpStream, AgentError> {
    if port == 0 {
        return Err(AgentError::new(
            AgentErrorCode::InvalidArgument,
            "port must be 1-65535",
        ));
    }
    let v4 = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let v6 = SocketAddr::from((Ipv6Addr::LOCALHOST, port));
    let first = match TcpStream::connect(v4).await {
        Ok(s) => return Ok(s),
        Err(e) => e,
    };
    match TcpStream::connect(v6).await {
        Ok(s) => Ok(s),
        Err(_) if first.kind() == std::io::ErrorKind::ConnectionRefused => Err(AgentError::new(
            AgentErrorCode::ConnectionRefused,
            format!("nothing listens on port {port}"),
        )),
        Err(_) => Err(AgentError::new(
            AgentErrorCode::Io,
            format!("cannot connect to port {port}: {first}"),
        )),
    }
}

/// Runs a registered stream: dial, `port_opened`, then relay until both
/// directions are closed (`ok`) or one side resets (`io`).
pub async fn run(mut reg: Registered, port: u16, sink: Sink) -> Outcome {
    let socket = dial(port).await?;
    let _ = socket.set_nodelay(true);
    sink.event(Event::PortOpened, Vec::new()).await?;
    let reset = || {
        Err(AgentError::new(
            AgentErrorCode::Io,
            "the connection was reset",
        ))
    };
    let (mut rd, mut wr) = socket.into_split();
    let credit = Arc::clone(&reg.credit);
    let up_sink = sink.clone();
    // Guest server → daemon, under the daemon's credit.
    let mut up = tokio::spawn(async move {
        let mut buf = vec![0u8; NET_CHUNK_BYTES];
        loop {
            match rd.read(&mut buf).await {
                Ok(0) => {
                    let close = Event::PortClose { reset: false };
                    return up_sink.event(close, Vec::new()).await.is_ok();
                }
                Ok(n) => {
                    let permits = u32::try_from(n).unwrap_or(u32::MAX);
                    match credit.acquire_many(permits).await {
                        Ok(p) => p.forget(),
                        Err(_) => return false,
                    }
                    if up_sink
                        .event(Event::PortData, buf[..n].to_vec())
                        .await
                        .is_err()
                    {
                        return false;
                    }
                }
                Err(_) => {
                    let close = Event::PortClose { reset: true };
                    let _ = up_sink.event(close, Vec::new()).await;
                    return false;
                }
            }
        }
    });
    let (mut up_done, mut down_done) = (false, false);
    let outcome = loop {
        tokio::select! {
            r = &mut up, if !up_done => {
                if !r.unwrap_or(false) { break reset(); }
                up_done = true;
                if down_done { break Ok((Reply::Ok, Vec::new())); }
            }
            item = reg.inbound.recv(), if !down_done => match item {
                Some(Inbound::Data(bytes)) => {
                    let n = bytes.len() as u64;
                    if wr.write_all(&bytes).await.is_err() {
                        let _ = sink.event(Event::PortClose { reset: true }, Vec::new()).await;
                        break reset();
                    }
                    reg.ports.consumed(reg.id, n);
                    sink.event(Event::PortAck { bytes: n }, Vec::new()).await?;
                }
                Some(Inbound::Eof) => {
                    let _ = wr.shutdown().await;
                    down_done = true;
                    if up_done { break Ok((Reply::Ok, Vec::new())); }
                }
                Some(Inbound::Reset) | None => break reset(),
            },
        }
    };
    up.abort();
    outcome
}
