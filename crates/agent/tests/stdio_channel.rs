//! The stdio channel (unit level: the agent runs on the host with a socket
//! pair as stdin and stdout, as PID 1 has in a sandbox; no gVisor).

mod common;

use common::*;
use sbx_agent_proto::{Body, ProcessState, Reply, Request};
use std::io::Write;

#[tokio::test]
async fn an_attached_session_serves_requests_beside_socket_connections() {
    let (agent, channel) = TestAgent::start_with_channel();
    let mut c = attach(&channel).await;
    assert_eq!(c.ok(Request::Ping).await.0, Reply::Pong);
    let (code, out, _) = c.exec(&["echo", "over stdio"]).await;
    assert_eq!((code, out.as_str()), (0, "over stdio\n"));
    // The agent's own stdin/stdout are not the channel any more, and the
    // channel's descriptors are close-on-exec: a child sees only its own stdio.
    let (code, fds, _) = c
        .exec(&[
            "sh",
            "-c",
            "for f in /proc/$$/fd/*; do readlink $f; done; true",
        ])
        .await;
    assert_eq!(code, 0);
    assert!(fds.contains("pipe:"), "{fds}");
    assert!(!fds.contains("socket:"), "a socket reached a child: {fds}");
    let mut s = agent.connect().await;
    assert_eq!(s.ok(Request::Ping).await.0, Reply::Pong);
    assert_eq!(c.ok(Request::Hello).await.0, s.ok(Request::Hello).await.0);
}

#[tokio::test]
async fn a_new_attach_ends_the_old_session_and_nothing_of_it_follows_the_answer() {
    let (_agent, channel) = TestAgent::start_with_channel();
    let mut old = attach(&channel).await;
    // A process that never stops writing, streamed on the old session.
    let p = old
        .start(&["sh", "-c", "while :; do echo tick; done"])
        .await;
    let stream_id = old.fresh_id();
    old.send_req(
        stream_id,
        Request::ProcessStream {
            process: p.id,
            tail_bytes: 0,
            from_offset: None,
        },
    )
    .await;
    match old.next_for(stream_id).await.header.body {
        Body::Event(_) => {}
        other => panic!("expected output events, got {other:?}"),
    }
    // A new session takes over while output is still flowing.
    let mut new = attach(&channel).await;
    for _ in 0..20 {
        assert_eq!(new.ok(Request::Ping).await.0, Reply::Pong);
    }
    assert_eq!(
        new.queued_frames(),
        0,
        "frames of the old session arrived after the attach answer"
    );
    // Sessions end; processes live on.
    match new.ok(Request::ProcessGet { process: p.id }).await.0 {
        Reply::Process { process } => assert_eq!(process.state, ProcessState::Running),
        other => panic!("{other:?}"),
    }
    new.ok(Request::ProcessSignal {
        process: p.id,
        signal: 9,
        include_children: true,
    })
    .await;
}

#[tokio::test]
async fn after_a_broken_frame_the_agent_waits_for_the_next_attach() {
    let (_agent, channel) = TestAgent::start_with_channel();
    let mut first = attach(&channel).await;
    assert_eq!(first.ok(Request::Ping).await.0, Reply::Pong);
    // A length no frame can have, then junk.
    (&channel)
        .write_all(&[0x7f, 0xff, 0xff, 0xff, 1, 2, 3, b'S', b'B', b'X'])
        .expect("write junk");
    let mut second = attach(&channel).await;
    assert_eq!(second.ok(Request::Ping).await.0, Reply::Pong);
    // A frame of a plausible length whose header is not JSON at all.
    let mut junk = 12u32.to_be_bytes().to_vec();
    junk.extend_from_slice(&4u32.to_be_bytes());
    junk.extend_from_slice(b"{{{{xxxxxxxx");
    (&channel).write_all(&junk).expect("write junk");
    let mut third = attach(&channel).await;
    assert_eq!(third.ok(Request::Ping).await.0, Reply::Pong);
}

#[tokio::test]
async fn the_agent_outlives_the_channel() {
    let (agent, channel) = TestAgent::start_with_channel();
    let mut c = attach(&channel).await;
    assert_eq!(c.ok(Request::Ping).await.0, Reply::Pong);
    drop(c);
    drop(channel);
    // sbxd gone: the socket connections (the relay's way in) still work.
    let mut s = agent.connect().await;
    assert_eq!(s.ok(Request::Ping).await.0, Reply::Pong);
    let (code, out, _) = s.exec(&["echo", "still here"]).await;
    assert_eq!((code, out.as_str()), (0, "still here\n"));
}
