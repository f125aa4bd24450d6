//! `backpressure`: an open stream slows the process down instead of losing output.

mod common;

use common::*;
use sbx_agent_proto::{Body, Event, ProcessInfo, ProcessOptions, ProcessState, Reply, Request};
use std::time::Duration;
use uuid::Uuid;

/// Output of the test process: this many zero bytes after `ready\n`.
const TOTAL: u64 = 4 * 1024 * 1024;
const READY: &[u8] = b"ready\n";

/// Starts `sh` that prints `ready`, waits for a line on stdin, then writes
/// [`TOTAL`] zero bytes as fast as it can.
async fn start_writer(c: &mut Client, backpressure: bool) -> ProcessInfo {
    let script = format!("echo ready; read go; head -c {TOTAL} /dev/zero");
    c.start_with(
        spec(&["sh", "-c", &script]),
        ProcessOptions {
            stdin: true,
            backpressure,
            ..Default::default()
        },
    )
    .await
}

/// Sends a `ProcessStream` request from offset 0; returns its request id.
async fn request_stream(c: &mut Client, process: Uuid) -> u64 {
    let id = c.fresh_id();
    c.send_req(
        id,
        Request::ProcessStream {
            process,
            tail_bytes: 0,
            from_offset: Some(0),
        },
    )
    .await;
    id
}

/// Opens a stream from offset 0 and waits for `ready` (so the stream is
/// registered before the flood starts); returns the stream's request id.
async fn open_stream(c: &mut Client, process: Uuid) -> u64 {
    let id = request_stream(c, process).await;
    let f = c.next_for(id).await;
    match f.header.body {
        Body::Event(Event::Chunk { chunk }) => {
            assert_eq!(chunk.offset, 0);
            assert_eq!(f.payload, READY);
        }
        other => panic!("unexpected {other:?}"),
    }
    id
}

/// What a slow reader saw.
struct Seen {
    bytes: u64,
    /// Offset of the first chunk that did not start where the previous ended.
    first_gap: Option<(u64, u64)>,
    end: Option<u64>,
}

/// Reads the stream `id` to its end, sleeping `pause` after every chunk;
/// stops early after `limit` payload bytes.
async fn read_slowly(c: &mut Client, id: u64, pause: Duration, limit: Option<u64>) -> Seen {
    let mut seen = Seen {
        bytes: READY.len() as u64,
        first_gap: None,
        end: None,
    };
    let mut expected = READY.len() as u64;
    loop {
        let f = c.next_for(id).await;
        match f.header.body {
            Body::Event(Event::Chunk { chunk }) => {
                assert_eq!(chunk.len as usize, f.payload.len());
                assert!(f.payload.iter().all(|b| *b == 0), "unexpected bytes");
                if chunk.offset != expected && seen.first_gap.is_none() {
                    seen.first_gap = Some((expected, chunk.offset));
                }
                expected = chunk.offset + chunk.len;
                seen.bytes += chunk.len;
                if limit.is_some_and(|l| seen.bytes >= l) {
                    return seen;
                }
                tokio::time::sleep(pause).await;
            }
            Body::Reply(Reply::StreamEnd { next_offset }) => {
                seen.end = Some(next_offset);
                return seen;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// Waits until the process's output count stops growing for 300 ms while it
/// is still running (its writer is blocked), and returns that count.
async fn blocked_at(c: &mut Client, process: Uuid) -> u64 {
    let mut last = c.get(process).await.output_bytes;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let info = c.get(process).await;
        assert_eq!(
            info.state,
            ProcessState::Running,
            "writer was not held back"
        );
        if info.output_bytes == last {
            return last;
        }
        last = info.output_bytes;
    }
    panic!("output never stopped growing");
}

#[tokio::test]
async fn slow_stream_gets_every_byte_with_backpressure() {
    let agent = TestAgent::start();
    let mut c = agent.connect().await;
    let p = start_writer(&mut c, true).await;
    let id = open_stream(&mut c, p.id).await;
    c.input(p.id, b"go\n").await.expect("input");
    let seen = read_slowly(&mut c, id, Duration::from_millis(3), None).await;
    assert_eq!(seen.first_gap, None, "stream has a gap");
    assert_eq!(seen.bytes, READY.len() as u64 + TOTAL);
    assert_eq!(seen.end, Some(READY.len() as u64 + TOTAL));
    let done = c.wait(p.id).await;
    assert_eq!(done.exit_code, Some(0));
    assert_eq!(done.output_bytes, READY.len() as u64 + TOTAL);
}

#[tokio::test]
async fn slow_stream_loses_bytes_without_backpressure() {
    let agent = TestAgent::start();
    let mut c = agent.connect().await;
    let p = start_writer(&mut c, false).await;
    let id = open_stream(&mut c, p.id).await;
    c.input(p.id, b"go\n").await.expect("input");
    let seen = read_slowly(&mut c, id, Duration::from_millis(3), None).await;
    let (wanted, got) = seen
        .first_gap
        .expect("a slow stream should have lost bytes");
    assert!(got > wanted);
    assert!(seen.bytes < READY.len() as u64 + TOTAL);
    assert_eq!(seen.end, Some(READY.len() as u64 + TOTAL));
}

#[tokio::test]
async fn cancelling_a_stalled_stream_unblocks_the_writer() {
    let agent = TestAgent::start();
    let mut c = agent.connect().await;
    let p = start_writer(&mut c, true).await;
    // A connection of its own, so reading other replies does not drain it.
    let mut reader = agent.connect().await;
    let id = open_stream(&mut reader, p.id).await;
    c.input(p.id, b"go\n").await.expect("input");
    // Read a little, then stop reading: the writer must stall.
    let seen = read_slowly(&mut reader, id, Duration::ZERO, Some(100_000)).await;
    assert_eq!(seen.first_gap, None);
    let held = blocked_at(&mut c, p.id).await;
    assert!(held < READY.len() as u64 + TOTAL, "held at {held}");
    reader.send(id, Body::Cancel, Vec::new()).await;
    let done = c.wait(p.id).await;
    assert_eq!(done.state, ProcessState::Exited);
    assert_eq!(done.exit_code, Some(0));
    assert_eq!(done.output_bytes, READY.len() as u64 + TOTAL);
}

#[tokio::test]
async fn closing_the_connection_unblocks_the_writer() {
    let agent = TestAgent::start();
    let mut c = agent.connect().await;
    let p = start_writer(&mut c, true).await;
    let mut reader = agent.connect().await;
    let id = open_stream(&mut reader, p.id).await;
    c.input(p.id, b"go\n").await.expect("input");
    blocked_at(&mut c, p.id).await;
    drop(reader);
    let done = c.wait(p.id).await;
    assert_eq!(done.exit_code, Some(0));
    assert_eq!(done.output_bytes, READY.len() as u64 + TOTAL);
    let _ = id;
}

#[tokio::test]
async fn a_blocked_writer_can_be_killed_and_its_output_still_ends_the_stream() {
    let agent = TestAgent::start();
    let mut c = agent.connect().await;
    let p = start_writer(&mut c, true).await;
    let mut reader = agent.connect().await;
    let id = open_stream(&mut reader, p.id).await;
    c.input(p.id, b"go\n").await.expect("input");
    let held = blocked_at(&mut c, p.id).await;
    c.ok(Request::ProcessSignal {
        process: p.id,
        signal: 9,
        include_children: true,
    })
    .await;
    // The reader resumes: everything read before the kill arrives without a
    // gap, then the stream ends.
    let seen = read_slowly(&mut reader, id, Duration::ZERO, None).await;
    assert_eq!(seen.first_gap, None, "stream has a gap");
    assert!(seen.bytes >= held);
    assert_eq!(seen.end, Some(seen.bytes));
    let done = c.wait(p.id).await;
    assert_eq!(done.state, ProcessState::Killed);
    assert_eq!(done.output_bytes, seen.bytes);
}

#[tokio::test]
async fn kill_after_ms_ends_a_blocked_writer() {
    let agent = TestAgent::start();
    let mut c = agent.connect().await;
    let script = format!("echo ready; head -c {TOTAL} /dev/zero");
    let p = c
        .start_with(
            spec(&["sh", "-c", &script]),
            ProcessOptions {
                backpressure: true,
                kill_after_ms: Some(1500),
                ..Default::default()
            },
        )
        .await;
    let mut reader = agent.connect().await;
    request_stream(&mut reader, p.id).await;
    // Nobody reads the stream: the writer stalls until the deadline kills
    // it; the stalled stream holds the end for at most EXIT_STALL_LIMIT.
    let done = c.wait(p.id).await;
    assert_eq!(done.state, ProcessState::Killed);
    assert_eq!(done.signal, Some(9));
    assert!(done.output_bytes < READY.len() as u64 + TOTAL);
}

/// Starts `head -c TOTAL /dev/zero` at once: nothing to wait for before the flood.
async fn start_flood(c: &mut Client) -> ProcessInfo {
    let script = format!("head -c {TOTAL} /dev/zero");
    c.start_with(
        spec(&["sh", "-c", &script]),
        ProcessOptions {
            backpressure: true,
            ..Default::default()
        },
    )
    .await
}

#[tokio::test]
async fn output_written_before_the_first_stream_opens_is_kept() {
    // The stream request comes after the start's reply (as sbxd sends it):
    // the process is held at the ring's size until it arrives.
    let agent = TestAgent::start();
    let mut c = agent.connect().await;
    let p = start_flood(&mut c).await;
    let held = blocked_at(&mut c, p.id).await;
    assert!(held < TOTAL, "held at {held}");
    let mut reader = agent.connect().await;
    let id = request_stream(&mut reader, p.id).await;
    let mut expected = 0;
    let end = loop {
        let f = reader.next_for(id).await;
        match f.header.body {
            Body::Event(Event::Chunk { chunk }) => {
                assert_eq!(chunk.offset, expected, "stream has a gap");
                assert!(f.payload.iter().all(|b| *b == 0), "unexpected bytes");
                expected += chunk.len;
            }
            Body::Reply(Reply::StreamEnd { next_offset }) => break next_offset,
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!((expected, end), (TOTAL, TOTAL));
    let done = c.wait(p.id).await;
    assert_eq!(done.exit_code, Some(0));
    assert_eq!(done.output_bytes, TOTAL);
}

#[tokio::test]
async fn with_no_stream_at_all_the_start_hold_lets_go() {
    // Nobody streams (the client went away after the start): after
    // START_HOLD_LIMIT the ring drops old output and the process finishes.
    let agent = TestAgent::start();
    let mut c = agent.connect().await;
    let p = start_flood(&mut c).await;
    let done = c.wait(p.id).await;
    assert_eq!(done.state, ProcessState::Exited);
    assert_eq!(done.exit_code, Some(0));
    assert_eq!(done.output_bytes, TOTAL);
    let started = done.started_at_ms.unwrap();
    let ended = done.ended_at_ms.unwrap();
    let limit = sbx_agent::flow::START_HOLD_LIMIT.as_millis() as u64;
    assert!(
        ended - started >= limit,
        "the hold did not hold: {} ms",
        ended - started
    );
}
