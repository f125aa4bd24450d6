//! A fake agent for broker tests: the other end of an in-process pipe,
//! sending whatever `net_*` events a hostile guest's agent might.

use super::broker::{run, Ctx};
use super::limits::GlobalLimits;
use super::SandboxStats;
use crate::runtime::AgentConn;
use sbx_agent_proto::{read_frame, write_frame, Body, Event, Frame, Header, NetError, Request};
use sbx_api_types::{NetworkMode, NetworkPolicy};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, DuplexStream, ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use uuid::Uuid;

/// Serialises the tests that count this process's descriptors.
pub static FD_TESTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A bound for waits that should take milliseconds (a failure, not a sync point).
pub const BOUND: Duration = Duration::from_secs(20);

pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

/// The agent end of a `net_serve` stream.
pub struct FakeAgent {
    pub rd: ReadHalf<DuplexStream>,
    pub wr: WriteHalf<DuplexStream>,
    pub serve: u64,
    pub ctx: Arc<Ctx>,
    pub broker: tokio::task::JoinHandle<()>,
}

impl FakeAgent {
    /// Starts a broker for `mode` whose dials go to `route`; `tune` adjusts its context.
    pub async fn start(
        mode: NetworkMode,
        route: Option<SocketAddr>,
        tune: impl FnOnce(&mut Ctx),
    ) -> FakeAgent {
        let (client, server) = tokio::io::duplex(1 << 20);
        let (cr, cw) = tokio::io::split(client);
        let conn = AgentConn::new(cr, cw);
        let (mut rd, wr) = tokio::io::split(server);
        let stream = conn
            .stream(Request::NetServe)
            .await
            .expect("net_serve sent");
        let first = read_frame(&mut rd).await.expect("net_serve frame");
        assert!(matches!(
            first.header.body,
            Body::Request(Request::NetServe)
        ));
        let mut ctx = Ctx::new(
            Uuid::new_v4(),
            super::LivePolicy::new(NetworkPolicy::mode(mode)),
            Vec::new(),
            Arc::new(SandboxStats::default()),
            conn,
            None,
            Arc::new(GlobalLimits::default()),
        );
        ctx.route = route;
        tune(&mut ctx);
        let ctx = Arc::new(ctx);
        let broker = tokio::spawn(run(Arc::clone(&ctx), stream));
        FakeAgent {
            rd,
            wr,
            serve: first.header.id,
            ctx,
            broker,
        }
    }

    pub async fn event(&mut self, event: Event, payload: Vec<u8>) {
        let header = Header {
            id: self.serve,
            body: Body::Event(event),
        };
        write_frame(&mut self.wr, &Frame::with_payload(header, payload))
            .await
            .expect("the broker reads its pipe");
    }

    /// A dial to an address literal (no lookup, so no DNS token).
    pub async fn dial(&mut self, conn: u64) {
        self.dial_to(conn, "198.51.100.7").await;
    }

    /// A dial to `host` port 443.
    pub async fn dial_to(&mut self, conn: u64, host: &str) {
        let (host, port) = (host.to_string(), 443);
        self.event(Event::NetDial { conn, host, port }, Vec::new())
            .await;
    }

    /// The next frame from the broker (`None`: the pipe closed).
    pub async fn frame(&mut self) -> Option<(Body, Vec<u8>)> {
        let f = tokio::time::timeout(BOUND, read_frame(&mut self.rd))
            .await
            .expect("the broker answers in time")
            .ok()?;
        assert_eq!(f.header.id, self.serve);
        Some((f.header.body, f.payload))
    }

    /// The next dial result, skipping other frames.
    pub async fn dial_result(&mut self) -> (u64, Option<NetError>) {
        loop {
            match self.frame().await {
                Some((Body::Request(Request::NetDialResult { conn, error }), _)) => {
                    return (conn, error)
                }
                Some(_) => continue,
                None => panic!("pipe closed before a dial result"),
            }
        }
    }
}

/// A loopback listener whose accept queue is full: connects to it hang (SYNs
/// are dropped), like a destination that drops SYNs. The fillers keep it full.
pub async fn black_hole() -> (TcpListener, Vec<TcpStream>, SocketAddr) {
    let sock = TcpSocket::new_v4().unwrap();
    sock.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = sock.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut fillers = Vec::new();
    // Probes: each completes at once until the queue is full, then one hangs.
    for _ in 0..8 {
        match tokio::time::timeout(Duration::from_millis(300), TcpStream::connect(addr)).await {
            Ok(Ok(s)) => fillers.push(s),
            _ => break,
        }
    }
    assert!(fillers.len() < 8, "the accept queue never filled");
    (listener, fillers, addr)
}

/// A loopback server that accepts everything and reports each connection's bytes.
pub async fn recorder() -> (SocketAddr, tokio::sync::mpsc::Receiver<Vec<u8>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                let _ = s.read_to_end(&mut got).await;
                let _ = tx.send(got).await;
            });
        }
    });
    (addr, rx)
}
