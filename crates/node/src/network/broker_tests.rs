//! The broker against a hostile agent: conn ids, caps, DNS rate.

use super::*;
use crate::network::limits::{SandboxLimits, DNS_BURST, MAX_DIALS};
use crate::network::test_agent::{black_hole, open_fds, recorder, FakeAgent, BOUND, FD_TESTS};
use sbx_agent_proto::{read_frame, Body};
use sbx_api_types::NetworkMode;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[test]
fn the_job_channel_is_handed_over_once() {
    let (slot, _rx) = JobSlot::new();
    assert!(slot.take().is_some());
    assert!(slot.take().is_none());
}

#[tokio::test]
async fn a_conn_id_reused_while_in_use_closes_the_agent_channel() {
    let _fds = FD_TESTS.lock().await;
    let (_l, _fillers, addr) = black_hole().await;
    let before = open_fds();
    let mut agent = FakeAgent::start(NetworkMode::Public, Some(addr), |_| {}).await;
    assert!(!agent.ctx.conn.is_closed());
    // A hostile agent: 2,000 dials with one id, all to a destination that never answers.
    for _ in 0..2000 {
        agent.dial(7).await;
    }
    // The broker stopped serving at the first reuse...
    tokio::time::timeout(BOUND, &mut agent.broker)
        .await
        .expect("the broker's stream task ended")
        .unwrap();
    // ...by closing the whole agent channel (the service's monitor then
    // reconnects, and the new channel gets a new net_serve): calls on it fail.
    assert!(
        agent.ctx.conn.is_closed(),
        "the agent channel is still open"
    );
    assert!(matches!(
        agent.ctx.conn.call(Request::Ping).await,
        Err(crate::runtime::AgentCallError::Closed)
    ));
    // The dial in flight was closed: no descriptor is left behind.
    let after = open_fds();
    eprintln!("conn-id reuse flood: fds before {before}, after {after}");
    assert!(after <= before + 4, "fds {before} -> {after}");
    // No dial was answered, and later events are ignored: nothing answers them.
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
    while let Ok(Ok(frame)) =
        tokio::time::timeout(Duration::from_millis(200), read_frame(&mut agent.rd)).await
    {
        if let Body::Request(Request::NetDialResult { conn, error }) = frame.header.body {
            panic!("no dial should be answered: {conn} {error:?}");
        }
    }
}

#[tokio::test]
async fn dials_to_names_pay_from_the_dns_rate() {
    let _fds = FD_TESTS.lock().await;
    let (addr, _rx) = recorder().await;
    // Caps far above the flood, so only the DNS rate can refuse a dial.
    let mut agent = FakeAgent::start(NetworkMode::Public, Some(addr), |ctx| {
        ctx.limits = Arc::new(SandboxLimits::with_caps(1000, 1000, 1 << 20));
    })
    .await;
    // DNS queries empty the sandbox's bucket first: dials must find it empty.
    let started = Instant::now();
    let mut queries = 0u64;
    while agent.ctx.limits.dns_query(Instant::now()).is_ok() {
        queries += 1;
    }
    assert!(queries >= u64::from(DNS_BURST), "{queries}");
    const DIALS: u64 = 300;
    for conn in 1..=DIALS {
        agent.dial_to(conn, "dest.test").await;
    }
    let (mut connected, mut refused) = (0u64, 0u64);
    while connected + refused < DIALS {
        match agent.dial_result().await {
            (_, None) => connected += 1,
            (_, Some(NetError::Failed)) => refused += 1,
            other => panic!("{other:?}"),
        }
    }
    // At most what the bucket refilled since it was emptied (by time, never
    // by the flood): a load-independent bound.
    let elapsed = started.elapsed().as_secs_f64();
    let refilled = (elapsed * f64::from(limits::DNS_RATE_PER_SEC)) as u64 + 1;
    eprintln!("{DIALS} dials to a name in {elapsed:.3} s after {queries} queries: {connected} connected, {refused} refused");
    assert!(
        connected <= refilled,
        "{connected} dials got a token in {elapsed} s"
    );
    let stats = &agent.ctx.stats;
    assert_eq!(
        stats.denied.load(std::sync::atomic::Ordering::Relaxed),
        refused
    );
    let last = stats.recent.lock().unwrap().back().cloned().unwrap();
    assert_eq!(
        (last.host.as_str(), last.reason.as_str()),
        ("dest.test", "dns-rate-limit")
    );
    // Dials to address literals need no lookup and are not charged.
    agent.dial(DIALS + 1).await;
    assert_eq!(agent.dial_result().await, (DIALS + 1, None));
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
async fn a_job_sandbox_gets_its_channel_once_and_nothing_else() {
    let (slot, channel) = JobSlot::new();
    let mut agent = FakeAgent::start(NetworkMode::None, None, |ctx| ctx.job = Some(slot)).await;
    let host = JOB_CHANNEL_HOST.to_string();
    agent
        .event(
            Event::NetDial {
                conn: 1,
                host: host.clone(),
                port: JOB_CHANNEL_PORT,
            },
            Vec::new(),
        )
        .await;
    assert_eq!(agent.dial_result().await, (1, None));
    let mut ours = channel.await.expect("the channel is handed over");
    agent
        .event(Event::NetData { conn: 1 }, b"job".to_vec())
        .await;
    let mut got = [0u8; 3];
    ours.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"job");
    ours.write_all(b"ok").await.unwrap();
    let mut down = Vec::new();
    while down.len() < 2 {
        match agent.frame().await.unwrap() {
            (Body::Request(Request::NetData { conn: 1 }), p) => down.extend(p),
            (Body::Request(Request::NetAck { conn: 1, .. }), _) => {}
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(down, b"ok");
    // A second channel, or any other destination: denied.
    agent
        .event(
            Event::NetDial {
                conn: 2,
                host,
                port: JOB_CHANNEL_PORT,
            },
            Vec::new(),
        )
        .await;
    assert_eq!(agent.dial_result().await, (2, Some(NetError::Denied)));
    agent.dial(3).await;
    assert_eq!(agent.dial_result().await, (3, Some(NetError::Denied)));
}

#[tokio::test]
async fn a_network_update_decides_the_next_lookup() {
    let mut agent = FakeAgent::start(NetworkMode::Public, None, |_| {}).await;
    let mut answers = Vec::new();
    for (step, policy) in [
        (1, None),
        (2, Some(NetworkMode::None)),
        (3, Some(NetworkMode::Public)),
    ] {
        if let Some(mode) = policy {
            agent
                .ctx
                .policy
                .set(sbx_api_types::NetworkPolicy::mode(mode));
        }
        let name = "198.51.100.7".to_string();
        let query = step;
        let event = Event::NetResolve {
            query,
            name,
            ipv6: false,
        };
        agent.event(event, Vec::new()).await;
        match agent.frame().await.unwrap().0 {
            Body::Request(Request::NetResolveResult {
                query: got, error, ..
            }) => {
                assert_eq!(got, query);
                answers.push(error);
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(answers, vec![None, Some(NetError::Denied), None]);
}
