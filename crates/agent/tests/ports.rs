//! `port_open`: the daemon's client end (`AgentConn::open_port`) against a
//! real agent process, dialling TCP servers the test runs on loopback.

mod common;

use common::*;
use sbx_agent_proto::client::{AgentCallError, AgentConn};
use sbx_agent_proto::{AgentErrorCode, Reply, Request};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UnixStream};

async fn conn(agent: &TestAgent) -> AgentConn {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let s = loop {
        match UnixStream::connect(&agent.socket).await {
            Ok(s) => break s,
            Err(e) if std::time::Instant::now() < deadline => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => panic!("cannot connect to agent: {e}"),
        }
    };
    let (r, w) = s.into_split();
    AgentConn::new(r, w)
}

/// An echo server on loopback: echoes until EOF, then half-closes.
async fn echo_server() -> (u16, tokio::task::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
                let _ = w.shutdown().await;
            });
        }
    });
    (port, task)
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

#[tokio::test]
async fn bytes_flow_both_ways_with_half_close_and_flow_control() {
    let agent = TestAgent::start();
    let conn = conn(&agent).await;
    let (port, _srv) = echo_server().await;
    let mut s = conn.open_port(port).await.expect("open");
    // 8 MiB: many windows' worth, written while reading concurrently.
    let data: Vec<u8> = (0..8 * 1024 * 1024u32)
        .map(|i| (i * 7 % 251) as u8)
        .collect();
    let (mut rd, mut wr) = tokio::io::split(&mut s);
    let sent = data.clone();
    let writer = async move {
        wr.write_all(&sent).await.unwrap();
        // Half-close: the server sees EOF, echoes the rest and closes.
        wr.shutdown().await.unwrap();
    };
    let reader = async move {
        let mut got = Vec::new();
        rd.read_to_end(&mut got).await.unwrap();
        got
    };
    let ((), got) = tokio::time::timeout(Duration::from_secs(60), async {
        tokio::join!(writer, reader)
    })
    .await
    .expect("echo finished");
    assert_eq!(got.len(), data.len());
    assert!(got == data, "echoed bytes differ");
}

#[tokio::test]
async fn refused_and_invalid_ports_are_clear_errors() {
    let agent = TestAgent::start();
    let conn = conn(&agent).await;
    // A port nobody listens on: bind, note it, close.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    match conn.open_port(port).await {
        Err(AgentCallError::Agent(e)) => {
            assert_eq!(e.code, AgentErrorCode::ConnectionRefused);
            assert!(e.message.contains(&port.to_string()), "{}", e.message);
        }
        Err(other) => panic!("unexpected {other}"),
        Ok(_) => panic!("opened a closed port"),
    }
    match conn.open_port(0).await {
        Err(AgentCallError::Agent(e)) => assert_eq!(e.code, AgentErrorCode::InvalidArgument),
        Err(other) => panic!("unexpected {other}"),
        Ok(_) => panic!("opened port 0"),
    }
    // The connection is still fine.
    assert_eq!(conn.call(Request::Ping).await.unwrap().0, Reply::Pong);
}

#[tokio::test]
async fn dropped_streams_leave_no_sockets_behind() {
    let agent = TestAgent::start();
    let conn = conn(&agent).await;
    let (port, _srv) = echo_server().await;
    // Warm up (runtime threads, the first stream), then measure.
    for _ in 0..3 {
        let mut s = conn.open_port(port).await.unwrap();
        s.write_all(b"x").await.unwrap();
        let mut b = [0u8; 1];
        s.read_exact(&mut b).await.unwrap();
    }
    let before = open_fds(agent.pid());
    for i in 0..300 {
        let mut s = conn.open_port(port).await.expect("open");
        if i % 2 == 0 {
            // Half of them mid-conversation, the rest right after opening.
            s.write_all(b"hello").await.unwrap();
            let mut b = [0u8; 5];
            s.read_exact(&mut b).await.unwrap();
            assert_eq!(&b, b"hello");
        }
        drop(s);
    }
    // The cancels are asynchronous: a ping on the same connection is
    // answered after every earlier frame (the cancels) was read.
    conn.call(Request::Ping).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let after = loop {
        let n = open_fds(agent.pid());
        if n <= before + 4 || std::time::Instant::now() > deadline {
            break n;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        after <= before + 4,
        "agent fds grew from {before} to {after} after 300 dropped streams"
    );
}
