//! Unit tests (a fake agent on a duplex pipe, no sandbox) of a connection
//! whose sandbox sleeps while idle: nothing reaches a frozen agent, the next
//! call thaws first, and sbxd's own quiet calls neither wake nor keep awake.

use sbx_agent_proto::client::{AgentCallError, AgentConn, Thaw};
use sbx_agent_proto::{read_frame, write_frame, Body, Frame, Header, Reply, Request};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What the fake sandbox saw.
#[derive(Default)]
struct Sandbox {
    frozen: AtomicBool,
    freezes: AtomicUsize,
    thaws: AtomicUsize,
    /// Frames the agent read while its sandbox was frozen.
    read_while_frozen: AtomicUsize,
}

/// A fake agent answering `ping`; `quiesce` is never answered (a call in flight).
fn fake_agent(sandbox: Arc<Sandbox>) -> AgentConn {
    let (client, server) = tokio::io::duplex(1 << 20);
    let (cr, cw) = tokio::io::split(client);
    let conn = AgentConn::new(cr, cw);
    tokio::spawn(async move {
        let (mut sr, mut sw) = tokio::io::split(server);
        while let Ok(frame) = read_frame(&mut sr).await {
            if sandbox.frozen.load(Ordering::SeqCst) {
                sandbox.read_while_frozen.fetch_add(1, Ordering::SeqCst);
            }
            let id = frame.header.id;
            let reply = match frame.header.body {
                Body::Request(Request::Ping) => Body::Reply(Reply::Pong),
                _ => continue,
            };
            if write_frame(&mut sw, &Frame::new(Header { id, body: reply }))
                .await
                .is_err()
            {
                return;
            }
        }
    });
    conn
}

/// A freeze of the fake sandbox, and its thaw.
async fn freeze(sandbox: Arc<Sandbox>) -> Result<Thaw, std::io::Error> {
    sandbox.frozen.store(true, Ordering::SeqCst);
    sandbox.freezes.fetch_add(1, Ordering::SeqCst);
    Ok(Box::new(move || {
        Box::pin(async move {
            sandbox.frozen.store(false, Ordering::SeqCst);
            sandbox.thaws.fetch_add(1, Ordering::SeqCst);
        })
    }))
}

#[tokio::test]
async fn an_idle_connection_sleeps_and_its_next_call_thaws_first() {
    let sandbox = Arc::new(Sandbox::default());
    let conn = fake_agent(sandbox.clone());
    assert_eq!(conn.call(Request::Ping).await.unwrap().0, Reply::Pong);
    let slept = conn
        .sleep_if_idle(Duration::ZERO, freeze(sandbox.clone()))
        .await
        .unwrap();
    assert!(slept && conn.is_asleep());
    assert_eq!(sandbox.freezes.load(Ordering::SeqCst), 1);
    // A second attempt does nothing: it is asleep already.
    assert!(!conn
        .sleep_if_idle(Duration::ZERO, freeze(sandbox.clone()))
        .await
        .unwrap());
    assert_eq!(conn.call(Request::Ping).await.unwrap().0, Reply::Pong);
    assert_eq!(sandbox.thaws.load(Ordering::SeqCst), 1);
    assert!(!conn.is_asleep());
    assert_eq!(sandbox.read_while_frozen.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn recent_activity_or_a_call_in_flight_keeps_it_awake() {
    let sandbox = Arc::new(Sandbox::default());
    let conn = fake_agent(sandbox.clone());
    assert_eq!(conn.call(Request::Ping).await.unwrap().0, Reply::Pong);
    assert!(!conn
        .sleep_if_idle(Duration::from_secs(3600), freeze(sandbox.clone()))
        .await
        .unwrap());
    // `quiesce` is never answered: a call in flight, so no sleep however idle.
    let waiting = {
        let conn = conn.clone();
        tokio::spawn(async move {
            conn.call_within(Request::Quiesce, Duration::from_secs(30))
                .await
        })
    };
    // This test's runtime runs tasks in order: the spawned call is registered
    // (and its frame read by the agent) before the ping's answer arrives.
    assert_eq!(conn.call(Request::Ping).await.unwrap().0, Reply::Pong);
    let attempt = conn
        .sleep_if_idle(Duration::ZERO, async {
            Err::<Thaw, _>("frozen with a call in flight")
        })
        .await;
    assert_eq!(attempt, Ok(false));
    waiting.abort();
    assert_eq!(sandbox.freezes.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn quiet_calls_neither_wake_it_nor_keep_it_awake() {
    let sandbox = Arc::new(Sandbox::default());
    let conn = fake_agent(sandbox.clone());
    assert_eq!(conn.call(Request::Ping).await.unwrap().0, Reply::Pong);
    let before = conn.idle_for();
    let quiet = conn
        .call_quietly(Request::Ping, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(quiet.0, Reply::Pong);
    let after_quiet = conn.idle_for();
    assert!(after_quiet >= before, "a quiet call reset the idle clock");
    assert_eq!(conn.call(Request::Ping).await.unwrap().0, Reply::Pong);
    assert!(
        conn.idle_for() < after_quiet,
        "a call did not reset the idle clock"
    );

    assert!(conn
        .sleep_if_idle(Duration::ZERO, freeze(sandbox.clone()))
        .await
        .unwrap());
    match conn
        .call_quietly(Request::Ping, Duration::from_secs(5))
        .await
    {
        Err(AgentCallError::Asleep) => {}
        other => panic!("a quiet call to a sleeping sandbox: {other:?}"),
    }
    assert_eq!(sandbox.thaws.load(Ordering::SeqCst), 0);
    assert!(conn.is_asleep());
    assert_eq!(sandbox.read_while_frozen.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_frame_reaches_a_frozen_agent_when_calls_race_the_freezer() {
    let sandbox = Arc::new(Sandbox::default());
    let conn = fake_agent(sandbox.clone());
    let callers: Vec<_> = (0..8)
        .map(|_| {
            let conn = conn.clone();
            tokio::spawn(async move {
                for _ in 0..200 {
                    let answer = conn.call(Request::Ping).await.expect("ping");
                    assert_eq!(answer.0, Reply::Pong);
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    let freezer = {
        let conn = conn.clone();
        let sandbox = sandbox.clone();
        tokio::spawn(async move {
            let mut slept = 0;
            for _ in 0..2000 {
                if conn
                    .sleep_if_idle(Duration::ZERO, freeze(sandbox.clone()))
                    .await
                    .unwrap()
                {
                    slept += 1;
                }
                tokio::task::yield_now().await;
            }
            slept
        })
    };
    for c in callers {
        c.await.unwrap();
    }
    let slept = freezer.await.unwrap();
    assert!(
        slept > 0,
        "the race never froze the sandbox; the test proves nothing"
    );
    assert_eq!(sandbox.read_while_frozen.load(Ordering::SeqCst), 0);
}
