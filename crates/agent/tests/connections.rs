mod common;

use common::*;
use sbx_agent_proto::{
    read_frame, write_frame, AgentErrorCode, Body, Event, Frame, Header, ProcessState, Reply,
    Request, PROTOCOL_VERSION,
};
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use tokio::io::AsyncWriteExt;

#[tokio::test]
async fn hello_and_ping() {
    let agent = TestAgent::start();
    let mut a = agent.connect().await;
    let mut b = agent.connect().await;
    assert_eq!(a.ok(Request::Ping).await.0, Reply::Pong);
    let (ha, hb) = (a.ok(Request::Hello).await.0, b.ok(Request::Hello).await.0);
    assert_eq!(ha, hb, "boot id is per agent, not per connection");
    match ha {
        Reply::Hello { version, .. } => assert_eq!(version, PROTOCOL_VERSION),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn two_connections_share_the_process_table() {
    let agent = TestAgent::start();
    let mut a = agent.connect().await;
    let mut b = agent.connect().await;
    let p = a.start(&["sleep", "100"]).await;
    // b long-polls the process that a started, while a kills it.
    let wait_id = b.fresh_id();
    b.send_req(
        wait_id,
        Request::ProcessWait {
            process: p.id,
            timeout_ms: 20_000,
        },
    )
    .await;
    match b.ok(Request::ProcessGet { process: p.id }).await.0 {
        Reply::Process { process } => assert_eq!(process.state, ProcessState::Running),
        other => panic!("{other:?}"),
    }
    a.ok(Request::ProcessSignal {
        process: p.id,
        signal: 9,
        include_children: false,
    })
    .await;
    match b.outcome_with_events(wait_id).await.0 {
        Ok((Reply::Process { process }, _)) => assert_eq!(process.state, ProcessState::Killed),
        other => panic!("{other:?}"),
    }
    // A connection that drops with a wait in flight does not touch the process.
    let q = a.start(&["sleep", "100"]).await;
    let id = b.fresh_id();
    b.send_req(
        id,
        Request::ProcessWait {
            process: q.id,
            timeout_ms: 20_000,
        },
    )
    .await;
    drop(b);
    b = agent.connect().await;
    match b.ok(Request::ProcessGet { process: q.id }).await.0 {
        Reply::Process { process } => assert_eq!(process.state, ProcessState::Running),
        other => panic!("{other:?}"),
    }
    b.ok(Request::ProcessSignal {
        process: q.id,
        signal: 9,
        include_children: true,
    })
    .await;
    assert_eq!(a.wait(q.id).await.signal, Some(9));
}

#[tokio::test]
async fn garbage_closes_only_that_connection() {
    let agent = TestAgent::start();
    let mut good = agent.connect().await;
    // A well-framed header that is not JSON.
    let mut bad = agent.connect().await;
    bad.wr
        .write_all(&[0, 0, 0, 9, 0, 0, 0, 5, b'n', b'o', b'p', b'e', b'!'])
        .await
        .unwrap();
    assert!(
        bad.next_raw().await.is_none(),
        "connection should be closed"
    );
    // A length beyond the frame limit.
    let mut bad = agent.connect().await;
    bad.wr.write_all(b"GARBAGE GARBAGE GARBAGE").await.unwrap();
    assert!(
        bad.next_raw().await.is_none(),
        "connection should be closed"
    );
    assert_eq!(good.ok(Request::Ping).await.0, Reply::Pong);

    // Valid JSON with an id but an unknown op: a protocol error, connection stays.
    let header = br#"{"id":42,"kind":"request","msg":{"op":"explode"}}"#;
    let mut frame = Vec::new();
    frame.extend_from_slice(&((4 + header.len()) as u32).to_be_bytes());
    frame.extend_from_slice(&(header.len() as u32).to_be_bytes());
    frame.extend_from_slice(header);
    good.wr.write_all(&frame).await.unwrap();
    let e = good.outcome_with_events(42).await.0.unwrap_err();
    assert_eq!(e.code, AgentErrorCode::Protocol);
    // A reply sent to the agent is a protocol error too.
    good.send(43, Body::Reply(Reply::Pong), Vec::new()).await;
    assert_eq!(
        good.outcome_with_events(43).await.0.unwrap_err().code,
        AgentErrorCode::Protocol
    );
    assert_eq!(good.ok(Request::Ping).await.0, Reply::Pong);
    assert_eq!(agent.connect().await.ok(Request::Ping).await.0, Reply::Pong);
}

#[tokio::test]
async fn cancelled_stream_stops() {
    let agent = TestAgent::start();
    let mut c = agent.connect().await;
    let p = c
        .start(&["sh", "-c", "while true; do echo tick; sleep 0.05; done"])
        .await;
    let id = c.fresh_id();
    c.send_req(
        id,
        Request::ProcessStream {
            process: p.id,
            tail_bytes: 0,
            from_offset: None,
        },
    )
    .await;
    let f = c.next_for(id).await;
    assert!(matches!(f.header.body, Body::Event(Event::Chunk { .. })));
    c.send(id, Body::Cancel, Vec::new()).await;
    // Everything after the cancel is answered in order; the stream's frames
    // that were already queued may still arrive, but no final reply does.
    let ping = c.fresh_id();
    c.send_req(ping, Request::Ping).await;
    loop {
        let f = c.next_raw().await.expect("connection open");
        if f.header.id == ping {
            assert_eq!(f.header.body, Body::Reply(Reply::Pong));
            break;
        }
        assert_eq!(f.header.id, id);
        assert!(
            matches!(f.header.body, Body::Event(_)),
            "no final frame after cancel"
        );
    }
    c.ok(Request::ProcessSignal {
        process: p.id,
        signal: 9,
        include_children: true,
    })
    .await;
}

#[tokio::test]
async fn relay_bridges_stdio_to_the_socket() {
    let agent = TestAgent::start();
    agent.connect().await.ok(Request::Ping).await; // socket is up
    let mut relay = Command::new(agent_bin())
        .args(["relay", "--socket"])
        .arg(&agent.socket)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = relay.stdin.take().unwrap();
    let mut stdout = relay.stdout.take().unwrap();
    let payload = pseudo_random(3 << 20, 5);
    let path = agent.path("via-relay");
    // Upload 3 MiB through the relay, then read it back.
    let frames = vec![
        Frame::new(Header {
            id: 1,
            body: Body::Request(Request::FileWriteBegin {
                path: path.clone(),
                mode: 0o644,
                max_bytes: 10 << 20,
                owner: None,
                metadata: Default::default(),
            }),
        }),
        Frame::with_payload(
            Header {
                id: 1,
                body: Body::Request(Request::FileWriteData),
            },
            payload.clone(),
        ),
        Frame::new(Header {
            id: 1,
            body: Body::Request(Request::FileWriteEnd),
        }),
    ];
    let writer = std::thread::spawn(move || {
        for f in frames {
            stdin.write_all(&f.encode().unwrap()).unwrap();
        }
        stdin
    });
    let mut buf = Vec::new();
    let mut chunk = [0u8; 65536];
    let reply = loop {
        let n = stdout.read(&mut chunk).unwrap();
        assert!(n > 0, "relay closed early");
        buf.extend_from_slice(&chunk[..n]);
        if let Ok(f) = read_frame(&mut &buf[..]).await {
            break f;
        }
    };
    assert_eq!(
        reply.header.body,
        Body::Reply(Reply::FileWritten {
            bytes_written: payload.len() as u64
        })
    );
    assert_eq!(sha256(&std::fs::read(&path).unwrap()), sha256(&payload));
    // Closing stdin ends the relay.
    let mut stdin = writer.join().unwrap();
    let mut ping = Vec::new();
    write_frame(
        &mut ping,
        &Frame::new(Header {
            id: 2,
            body: Body::Request(Request::Ping),
        }),
    )
    .await
    .unwrap();
    stdin.write_all(&ping).unwrap();
    drop(stdin);
    let status = relay.wait().unwrap();
    assert!(status.success());
}
