//! The relay against a hostile agent: https-only, bounded buffers, a whole connection.

use crate::network::limits::SandboxLimits;
use crate::network::test_agent::{black_hole, recorder, FakeAgent, BOUND, FD_TESTS};
use sbx_agent_proto::{Body, Event, Request};
use sbx_api_types::NetworkMode;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

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
