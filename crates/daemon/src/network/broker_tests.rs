//! The broker against a hostile agent: a fake agent on the other end of an
//! in-process pipe sends whatever `net_*` events it likes.

use super::*;
use crate::network::limits::{GlobalLimits, SandboxLimits, DNS_BURST, MAX_DIALS};
use sbx_agent_proto::{read_frame, write_frame, Body, Frame, Header};
use sbx_api_types::NetworkMode;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream, ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpSocket};

/// Serialises the tests that count this process's descriptors.
static FD_TESTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A bound for waits that should take milliseconds (a failure, not a sync point).
const BOUND: Duration = Duration::from_secs(20);

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

#[test]
fn the_job_channel_is_handed_over_once() {
    let (slot, _rx) = JobSlot::new();
    assert!(slot.take().is_some());
    assert!(slot.take().is_none());
}

/// The agent end of a `net_serve` stream.
struct FakeAgent {
    rd: ReadHalf<DuplexStream>,
    wr: WriteHalf<DuplexStream>,
    serve: u64,
    ctx: Arc<Ctx>,
    broker: tokio::task::JoinHandle<()>,
}

impl FakeAgent {
    /// Starts a broker for `mode` whose dials go to `route`; `tune` adjusts its context.
    async fn start(
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
            NetworkPolicy::mode(mode),
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

    async fn event(&mut self, event: Event, payload: Vec<u8>) {
        let header = Header {
            id: self.serve,
            body: Body::Event(event),
        };
        write_frame(&mut self.wr, &Frame::with_payload(header, payload))
            .await
            .expect("the broker reads its pipe");
    }

    async fn dial(&mut self, conn: u64) {
        let (host, port) = ("dest.test".to_string(), 443);
        self.event(Event::NetDial { conn, host, port }, Vec::new())
            .await;
    }

    /// The next frame from the broker (`None`: the pipe closed).
    async fn frame(&mut self) -> Option<(Body, Vec<u8>)> {
        let f = tokio::time::timeout(BOUND, read_frame(&mut self.rd))
            .await
            .expect("the broker answers in time")
            .ok()?;
        assert_eq!(f.header.id, self.serve);
        Some((f.header.body, f.payload))
    }

    /// The next dial result, skipping other frames.
    async fn dial_result(&mut self) -> (u64, Option<NetError>) {
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
async fn black_hole() -> (TcpListener, Vec<TcpStream>, SocketAddr) {
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

#[tokio::test]
async fn a_conn_id_reused_while_in_use_ends_the_stream() {
    let _fds = FD_TESTS.lock().await;
    let (_l, _fillers, addr) = black_hole().await;
    let before = open_fds();
    let mut agent = FakeAgent::start(NetworkMode::Public, Some(addr), |_| {}).await;
    // A hostile agent: 2,000 dials with one id, all to a destination that never answers.
    for _ in 0..2000 {
        agent.dial(7).await;
    }
    // The broker stopped serving at the first reuse: it cancels the stream...
    let mut cancelled = false;
    while let Some((body, _)) = agent.frame().await {
        match body {
            Body::Cancel => {
                cancelled = true;
                break;
            }
            Body::Request(Request::NetDialResult { conn, error }) => {
                panic!("no dial should be answered: {conn} {error:?}")
            }
            _ => {}
        }
    }
    assert!(cancelled, "the broker never cancelled the net_serve");
    tokio::time::timeout(BOUND, &mut agent.broker)
        .await
        .expect("the broker's stream task ended")
        .unwrap();
    // ...and closed the dial in flight: no descriptor is left behind.
    let after = open_fds();
    eprintln!("conn-id reuse flood: fds before {before}, after {after}");
    assert!(after <= before + 4, "fds {before} -> {after}");
    // Later events on the stream are ignored: nothing answers them.
    agent.dial(8).await;
    agent
        .event(
            Event::NetResolve {
                query: 1,
                name: "198.51.100.7".into(),
                ipv6: false,
            },
            Vec::new(),
        )
        .await;
    assert!(
        tokio::time::timeout(Duration::from_millis(200), read_frame(&mut agent.rd))
            .await
            .is_err()
    );
}

#[tokio::test]
async fn dials_past_the_cap_are_refused_and_descriptors_stay_bounded() {
    let _fds = FD_TESTS.lock().await;
    let (_l, _fillers, addr) = black_hole().await;
    let before = open_fds();
    let mut agent = FakeAgent::start(NetworkMode::Public, Some(addr), |_| {}).await;
    const DIALS: u64 = 2000;
    for conn in 1..=DIALS {
        agent.dial(conn).await;
    }
    // Every dial past the cap is refused at once; those in flight stay unanswered.
    let refused = DIALS as usize - MAX_DIALS;
    let mut got = Vec::new();
    while got.len() < refused {
        got.push(agent.dial_result().await);
    }
    let peak = open_fds();
    eprintln!("{DIALS} dials in flight: fds before {before}, during {peak} (cap {MAX_DIALS})");
    assert!(
        got.iter().all(|(_, e)| *e == Some(NetError::Failed)),
        "{got:?}"
    );
    assert!(
        got.iter().all(|(c, _)| *c > MAX_DIALS as u64),
        "the first dials were admitted"
    );
    assert!(
        peak <= before + MAX_DIALS + 16,
        "descriptors grew past the cap: {before} -> {peak}"
    );
    assert_eq!(
        agent
            .ctx
            .stats
            .failed
            .load(std::sync::atomic::Ordering::Relaxed),
        refused as u64
    );
    // The agent goes away: every dial in flight is closed.
    drop(agent.wr);
    drop(agent.rd);
    tokio::time::timeout(BOUND, agent.broker)
        .await
        .expect("broker ended")
        .unwrap();
    let after = open_fds();
    assert!(after <= before + 4, "fds {before} -> {after}");
}

/// A loopback server that accepts everything and reports each connection's bytes.
async fn recorder() -> (SocketAddr, tokio::sync::mpsc::Receiver<Vec<u8>>) {
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

#[tokio::test]
async fn open_tunnels_are_capped_and_a_closed_one_frees_its_slot() {
    let _fds = FD_TESTS.lock().await;
    let (addr, _rx) = recorder().await;
    let mut agent = FakeAgent::start(NetworkMode::Public, Some(addr), |ctx| {
        ctx.limits = Arc::new(SandboxLimits::with_caps(2, 3, 1 << 20));
    })
    .await;
    for conn in 1..=3 {
        agent.dial(conn).await;
        assert_eq!(agent.dial_result().await, (conn, None));
    }
    agent.dial(4).await;
    assert_eq!(agent.dial_result().await, (4, Some(NetError::Failed)));
    // Closing a tunnel gives its slot back once its task has ended.
    agent
        .event(
            Event::NetClose {
                conn: 1,
                reset: true,
            },
            Vec::new(),
        )
        .await;
    let mut conn = 5;
    loop {
        agent.dial(conn).await;
        match agent.dial_result().await {
            (c, None) if c == conn => break,
            (c, Some(NetError::Failed)) if c == conn && conn < 5000 => conn += 1,
            other => panic!("{other:?}"),
        }
    }
    agent.dial(conn + 1).await;
    assert_eq!(
        agent.dial_result().await,
        (conn + 1, Some(NetError::Failed))
    );
    // An id is free again once its connection ended (the agent never reuses them, but may).
    agent.dial(1).await;
    assert_eq!(
        agent.dial_result().await,
        (1, Some(NetError::Failed)),
        "refused by the cap, not a protocol error"
    );
}

#[tokio::test]
async fn https_only_forwards_nothing_before_a_whole_client_hello() {
    const HELLO: &[u8] = include_bytes!("testdata/client_hello_openssl.bin");
    let (addr, mut rx) = recorder().await;
    let mut agent = FakeAgent::start(NetworkMode::HttpsOnly, Some(addr), |ctx| {
        ctx.hello_timeout = Duration::from_millis(300);
    })
    .await;
    let denied = |a: &FakeAgent| {
        a.ctx
            .stats
            .denied
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    // The smuggled first byte: reset, and the server got not one byte.
    agent.dial(1).await;
    assert_eq!(agent.dial_result().await, (1, None));
    agent
        .event(
            Event::NetData { conn: 1 },
            b"\x16GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        )
        .await;
    let closed = agent.frame().await.unwrap().0;
    assert!(
        matches!(
            closed,
            Body::Request(Request::NetClose {
                conn: 1,
                reset: true
            })
        ),
        "{closed:?}"
    );
    assert_eq!(
        tokio::time::timeout(BOUND, rx.recv())
            .await
            .unwrap()
            .unwrap(),
        b""
    );
    assert_eq!(denied(&agent), 1);
    // A truncated hello is cut when its time is up, still with nothing forwarded.
    agent.dial(2).await;
    assert_eq!(agent.dial_result().await, (2, None));
    agent
        .event(Event::NetData { conn: 2 }, HELLO[..100].to_vec())
        .await;
    let closed = agent.frame().await.unwrap().0;
    assert!(
        matches!(
            closed,
            Body::Request(Request::NetClose {
                conn: 2,
                reset: true
            })
        ),
        "{closed:?}"
    );
    assert_eq!(
        tokio::time::timeout(BOUND, rx.recv())
            .await
            .unwrap()
            .unwrap(),
        b""
    );
    assert_eq!(denied(&agent), 2);
    // An oversize "hello" is cut as soon as its header says so.
    agent.dial(3).await;
    assert_eq!(agent.dial_result().await, (3, None));
    agent
        .event(
            Event::NetData { conn: 3 },
            b"\x16\x03\x01\x40\x00\x01\x01\x00\x00".to_vec(),
        )
        .await;
    assert!(matches!(
        agent.frame().await.unwrap().0,
        Body::Request(Request::NetClose {
            conn: 3,
            reset: true
        })
    ));
    assert_eq!(
        tokio::time::timeout(BOUND, rx.recv())
            .await
            .unwrap()
            .unwrap(),
        b""
    );
    // A real hello split over three chunks, then application bytes: all of it arrives.
    agent.dial(4).await;
    assert_eq!(agent.dial_result().await, (4, None));
    for part in [&HELLO[..3], &HELLO[3..200], &HELLO[200..]] {
        agent.event(Event::NetData { conn: 4 }, part.to_vec()).await;
    }
    agent
        .event(
            Event::NetData { conn: 4 },
            b"\x17\x03\x03\x00\x01z".to_vec(),
        )
        .await;
    agent
        .event(
            Event::NetClose {
                conn: 4,
                reset: false,
            },
            Vec::new(),
        )
        .await;
    let mut acked = 0;
    while acked < HELLO.len() + 6 {
        match agent.frame().await.unwrap().0 {
            Body::Request(Request::NetAck { conn: 4, bytes }) => acked += bytes as usize,
            other => panic!("{other:?}"),
        }
    }
    let mut want = HELLO.to_vec();
    want.extend_from_slice(b"\x17\x03\x03\x00\x01z");
    assert_eq!(
        tokio::time::timeout(BOUND, rx.recv())
            .await
            .unwrap()
            .unwrap(),
        want
    );
    assert_eq!(denied(&agent), 3);
}

#[tokio::test]
async fn dns_queries_past_the_rate_are_refused_and_counted() {
    let mut agent = FakeAgent::start(NetworkMode::Public, None, |_| {}).await;
    const QUERIES: u64 = 400;
    let started = Instant::now();
    for query in 1..=QUERIES {
        // A literal address: no host lookup, only the rate limit and the policy.
        let name = "198.51.100.7".to_string();
        agent
            .event(
                Event::NetResolve {
                    query,
                    name,
                    ipv6: false,
                },
                Vec::new(),
            )
            .await;
    }
    let (mut answered, mut refused) = (0u64, 0u64);
    while answered + refused < QUERIES {
        match agent.frame().await.unwrap().0 {
            Body::Request(Request::NetResolveResult {
                error: None, addrs, ..
            }) => {
                assert_eq!(addrs, vec!["198.51.100.7".parse::<IpAddr>().unwrap()]);
                answered += 1;
            }
            Body::Request(Request::NetResolveResult {
                error: Some(NetError::Failed),
                ..
            }) => refused += 1,
            other => panic!("{other:?}"),
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    eprintln!("{QUERIES} queries in {elapsed:.3} s: {answered} answered, {refused} refused");
    let allowed = f64::from(DNS_BURST) + elapsed * f64::from(limits::DNS_RATE_PER_SEC) + 1.0;
    assert!(
        answered as f64 <= allowed,
        "{answered} answered in {elapsed} s"
    );
    assert!(
        answered >= u64::from(DNS_BURST),
        "the burst is answered: {answered}"
    );
    assert!(refused > 0);
    let status = agent
        .ctx
        .stats
        .recent
        .lock()
        .unwrap()
        .back()
        .cloned()
        .unwrap();
    assert_eq!(status.reason, "dns-rate-limit");
    assert_eq!(
        agent
            .ctx
            .stats
            .denied
            .load(std::sync::atomic::Ordering::Relaxed),
        refused
    );
}

#[tokio::test]
async fn guest_data_held_for_a_dial_in_flight_is_bounded() {
    let _fds = FD_TESTS.lock().await;
    let (_l, _fillers, addr) = black_hole().await;
    let mut agent = FakeAgent::start(NetworkMode::Public, Some(addr), |ctx| {
        ctx.limits = Arc::new(SandboxLimits::with_caps(8, 8, 768 * 1024));
    })
    .await;
    agent.dial(1).await;
    agent.dial(2).await;
    // Many empty frames hold nothing.
    for _ in 0..20_000 {
        agent.event(Event::NetData { conn: 1 }, Vec::new()).await;
        agent
            .event(
                Event::NetClose {
                    conn: 1,
                    reset: false,
                },
                Vec::new(),
            )
            .await;
    }
    // A window's worth on conn 2 is held; more than that resets it.
    let chunk = vec![7u8; 64 * 1024];
    for _ in 0..12 {
        agent.event(Event::NetData { conn: 2 }, chunk.clone()).await;
    }
    // The budget: conn 3's first chunks fit under 768 KiB with conn 2's, the rest reset it.
    agent.dial(3).await;
    for _ in 0..8 {
        agent.event(Event::NetData { conn: 3 }, chunk.clone()).await;
    }
    // Events are handled in order: once this answer is back, all of the above was.
    let name = "198.51.100.7".to_string();
    agent
        .event(
            Event::NetResolve {
                query: 1,
                name,
                ipv6: false,
            },
            Vec::new(),
        )
        .await;
    loop {
        if let Some((Body::Request(Request::NetResolveResult { .. }), _)) = agent.frame().await {
            break;
        }
    }
    let held = agent.ctx.limits.buffered();
    eprintln!("held for dials in flight: {held} bytes");
    assert_eq!(
        held,
        768 * 1024,
        "window of conn 2 plus conn 3 up to the budget"
    );
    drop(agent.wr);
    drop(agent.rd);
    tokio::time::timeout(BOUND, agent.broker)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        agent.ctx.limits.buffered(),
        0,
        "given back when the connections end"
    );
}

#[tokio::test]
async fn a_whole_connection_relays_both_ways() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut got = vec![0u8; 5];
        s.read_exact(&mut got).await.unwrap();
        s.write_all(b"pong").await.unwrap();
        s.shutdown().await.unwrap();
        got
    });
    let mut agent = FakeAgent::start(NetworkMode::Public, Some(addr), |_| {}).await;
    agent.dial(1).await;
    assert_eq!(agent.dial_result().await, (1, None));
    agent
        .event(Event::NetData { conn: 1 }, b"pi".to_vec())
        .await;
    agent
        .event(Event::NetData { conn: 1 }, b"ng!".to_vec())
        .await;
    let mut down = Vec::new();
    let mut eof = false;
    while !eof {
        match agent.frame().await.unwrap() {
            (Body::Request(Request::NetData { conn: 1 }), p) => down.extend(p),
            (
                Body::Request(Request::NetClose {
                    conn: 1,
                    reset: false,
                }),
                _,
            ) => eof = true,
            (Body::Request(Request::NetAck { conn: 1, .. }), _) => {}
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(down, b"pong");
    assert_eq!(server.await.unwrap(), b"ping!");
}
