//! Deterministic fuzzing of the frame decoder: ~20k pseudo-random and mutated
//! valid frames go through `Frame::decode_body` and `read_frame`.
//!
//! Properties checked for every input:
//! * nothing panics (a panic is reported with the input in hex);
//! * every failure is the typed error an independent oracle predicts from the
//!   bytes (`Truncated`, `FrameTooLarge`, `HeaderTooLarge`, `Json`, `Closed`);
//! * `read_frame` agrees with `decode_body`, however the stream is chunked;
//! * valid frames round-trip, and anything that decodes re-encodes to a frame
//!   that decodes to the same value.
//!
//! The PRNG is a fixed-seed xorshift64*, so a failure reproduces exactly; set
//! `SBX_FUZZ_SEED` / `SBX_FUZZ_ITERS` to explore further.

use sbx_agent_proto::{
    read_frame, AgentError, AgentErrorCode, Body, ChunkMeta, CodecError, CommandSpec, Event,
    FileKind, FileStat, Frame, FsChangeKind, Header, ProcessInfo, ProcessOptions, ProcessState,
    PtySize, Reply, Request, StreamKind, MAX_FRAME_BYTES, MAX_HEADER_BYTES,
};
use serde_json::Value;
use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::{pin, Pin};
use std::task::{Context, Poll, Waker};
use tokio::io::{AsyncRead, ReadBuf};
use uuid::Uuid;

/// xorshift64* (Vigna): small, fast, good enough to drive a fuzzer.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform-ish in `0..n` (n > 0).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
    fn string(&mut self, max: usize) -> String {
        const ALPHABET: &[&str] = &[
            "a", "Z", "0", "/", " ", "\"", "\\", "\n", "\u{0}", "é", "☃", "𝄞", "{", "}", ":",
        ];
        let n = self.below(max + 1);
        (0..n)
            .map(|_| ALPHABET[self.below(ALPHABET.len())])
            .collect()
    }
    fn u64_edge(&mut self) -> u64 {
        match self.below(6) {
            0 => 0,
            1 => u64::MAX,
            2 => 1 << self.below(64),
            3 => (1u64 << 53) + 1,
            _ => self.next(),
        }
    }
}

fn uuid(rng: &mut Rng) -> Uuid {
    Uuid::from_u64_pair(rng.next(), rng.next())
}

fn stat(rng: &mut Rng) -> FileStat {
    FileStat {
        path: format!("/{}", rng.string(12)),
        name: rng.string(8),
        kind: [
            FileKind::File,
            FileKind::Dir,
            FileKind::Symlink,
            FileKind::Other,
        ][rng.below(4)],
        size: rng.u64_edge(),
        mode: rng.next() as u32 & 0o7777,
        mtime_ms: rng.u64_edge(),
        uid: rng.next() as u32,
        gid: rng.next() as u32,
        owner: maybe_string(rng, 8),
        group: maybe_string(rng, 8),
        symlink_target: maybe_string(rng, 12),
        target_kind: if rng.chance(2) {
            Some(FileKind::Dir)
        } else {
            None
        },
        metadata: if rng.chance(2) {
            [(rng.string(6), rng.string(10))].into_iter().collect()
        } else {
            Default::default()
        },
    }
}

fn maybe_string(rng: &mut Rng, len: usize) -> Option<String> {
    if rng.chance(2) {
        Some(rng.string(len))
    } else {
        None
    }
}

fn options(rng: &mut Rng) -> ProcessOptions {
    ProcessOptions {
        user: maybe_string(rng, 6),
        stdin: rng.chance(2),
        pty: if rng.chance(2) {
            Some(PtySize {
                cols: rng.next() as u16,
                rows: rng.next() as u16,
            })
        } else {
            None
        },
        tag: maybe_string(rng, 6),
        kill_after_ms: if rng.chance(2) {
            Some(rng.u64_edge())
        } else {
            None
        },
        backpressure: rng.chance(2),
    }
}

fn chunk(rng: &mut Rng) -> ChunkMeta {
    ChunkMeta {
        stream: [StreamKind::Stdout, StreamKind::Stderr, StreamKind::Pty][rng.below(3)],
        offset: rng.u64_edge(),
        len: rng.next() % 70_000,
        at_ms: rng.u64_edge(),
    }
}

fn command(rng: &mut Rng) -> CommandSpec {
    let argv = (0..rng.below(4)).map(|_| rng.string(10)).collect();
    let env: BTreeMap<String, String> = (0..rng.below(3))
        .map(|_| (rng.string(6), rng.string(10)))
        .collect();
    CommandSpec {
        argv,
        env,
        cwd: if rng.chance(2) {
            Some(format!("/{}", rng.string(6)))
        } else {
            None
        },
    }
}

fn process(rng: &mut Rng) -> ProcessInfo {
    let states = [
        ProcessState::Starting,
        ProcessState::Running,
        ProcessState::Exited,
        ProcessState::Killed,
        ProcessState::Failed,
        ProcessState::Lost,
    ];
    let opt = |rng: &mut Rng, v: u64| if rng.chance(2) { Some(v) } else { None };
    ProcessInfo {
        id: uuid(rng),
        argv: (0..rng.below(3)).map(|_| rng.string(8)).collect(),
        pid: if rng.chance(2) {
            Some(rng.next() as i32)
        } else {
            None
        },
        state: states[rng.below(states.len())],
        exit_code: if rng.chance(2) {
            Some(rng.next() as i32)
        } else {
            None
        },
        signal: if rng.chance(3) {
            Some(rng.below(65) as i32)
        } else {
            None
        },
        error: if rng.chance(3) {
            Some(rng.string(20))
        } else {
            None
        },
        started_at_ms: {
            let v = rng.u64_edge();
            opt(rng, v)
        },
        ended_at_ms: {
            let v = rng.u64_edge();
            opt(rng, v)
        },
        output_retained: rng.chance(2),
        output_bytes: rng.u64_edge(),
        env: (0..rng.below(3))
            .map(|_| (rng.string(6), rng.string(10)))
            .collect(),
        cwd: maybe_string(rng, 6),
        tag: maybe_string(rng, 6),
        user: maybe_string(rng, 6),
        pty: rng.chance(2),
        stdin_open: rng.chance(2),
    }
}

fn request(rng: &mut Rng) -> Request {
    let path = |rng: &mut Rng| format!("/{}", rng.string(16));
    match rng.below(26) {
        0 => Request::Ping,
        1 => Request::Hello,
        2 => Request::Configure {
            env: (0..rng.below(4))
                .map(|_| (rng.string(6), rng.string(10)))
                .collect(),
        },
        3 => Request::Exec {
            command: command(rng),
            timeout_ms: rng.u64_edge(),
            max_output_bytes: rng.u64_edge(),
        },
        4 => Request::ProcessStart {
            command: command(rng),
            options: options(rng),
        },
        5 => Request::ProcessList,
        6 => Request::ProcessGet { process: uuid(rng) },
        7 => Request::ProcessSignal {
            process: uuid(rng),
            signal: rng.next() as i32,
            include_children: rng.chance(2),
        },
        8 => Request::ProcessWait {
            process: uuid(rng),
            timeout_ms: rng.u64_edge(),
        },
        9 => Request::ProcessOutput {
            process: uuid(rng),
            tail_bytes: rng.u64_edge(),
        },
        10 => Request::ProcessStream {
            process: uuid(rng),
            tail_bytes: rng.u64_edge(),
            from_offset: if rng.chance(2) {
                Some(rng.u64_edge())
            } else {
                None
            },
        },
        11 => Request::FileWriteBegin {
            path: path(rng),
            mode: rng.next() as u32,
            max_bytes: rng.u64_edge(),
            owner: maybe_string(rng, 6),
            metadata: Default::default(),
        },
        12 => Request::FileWriteData,
        13 => Request::FileWriteEnd,
        14 => Request::FileWriteAbort,
        15 => Request::FileRead {
            path: path(rng),
            max_bytes: rng.u64_edge(),
        },
        16 => Request::Stat { path: path(rng) },
        17 => Request::ListDir {
            path: path(rng),
            depth: rng.next() as u32,
        },
        18 => Request::Mkdir {
            path: path(rng),
            owner: maybe_string(rng, 6),
        },
        19 => Request::Remove {
            path: path(rng),
            recursive: rng.chance(2),
        },
        20 => Request::Rename {
            from: path(rng),
            to: path(rng),
            parents_owner: maybe_string(rng, 6),
        },
        21 => Request::ProcessInput { process: uuid(rng) },
        22 => Request::ProcessCloseStdin { process: uuid(rng) },
        23 => Request::ProcessResize {
            process: uuid(rng),
            size: PtySize {
                cols: rng.next() as u16,
                rows: rng.next() as u16,
            },
        },
        24 => Request::Watch {
            path: path(rng),
            recursive: rng.chance(2),
        },
        _ => Request::Sync,
    }
}

fn reply(rng: &mut Rng) -> Reply {
    match rng.below(13) {
        0 => Reply::Pong,
        1 => Reply::Hello {
            version: rng.next() as u32,
            boot_id: uuid(rng),
        },
        2 => Reply::Ok,
        3 => Reply::Exec {
            exit_code: rng.next() as i32,
            stdout_len: rng.u64_edge(),
            stderr_len: rng.u64_edge(),
        },
        4 => Reply::Process {
            process: process(rng),
        },
        5 => Reply::Processes {
            processes: (0..rng.below(4)).map(|_| process(rng)).collect(),
        },
        6 => Reply::Output {
            chunks: (0..rng.below(5)).map(|_| chunk(rng)).collect(),
        },
        7 => Reply::StreamEnd {
            next_offset: rng.u64_edge(),
        },
        8 => Reply::FileWritten {
            bytes_written: rng.u64_edge(),
        },
        9 => Reply::FileRead {
            bytes: rng.u64_edge(),
        },
        10 => Reply::Stat { stat: stat(rng) },
        11 => Reply::Dir {
            entries: (0..rng.below(4)).map(|_| stat(rng)).collect(),
        },
        _ => Reply::Ok,
    }
}

fn body(rng: &mut Rng) -> Body {
    const CODES: [AgentErrorCode; 13] = [
        AgentErrorCode::InvalidArgument,
        AgentErrorCode::NotFound,
        AgentErrorCode::TimedOut,
        AgentErrorCode::OutputTooLarge,
        AgentErrorCode::TooLarge,
        AgentErrorCode::NotRegularFile,
        AgentErrorCode::OutputNotRetained,
        AgentErrorCode::NotEmpty,
        AgentErrorCode::PermissionDenied,
        AgentErrorCode::SpawnFailed,
        AgentErrorCode::NoSpace,
        AgentErrorCode::Io,
        AgentErrorCode::Protocol,
    ];
    match rng.below(5) {
        0 => Body::Request(request(rng)),
        1 => Body::Reply(reply(rng)),
        2 => Body::Error(AgentError::new(
            CODES[rng.below(CODES.len())],
            rng.string(30),
        )),
        3 => Body::Event(match rng.below(4) {
            0 => Event::Chunk { chunk: chunk(rng) },
            1 => Event::FileMeta { stat: stat(rng) },
            2 => Event::FsChange {
                name: rng.string(10),
                change: [
                    FsChangeKind::Create,
                    FsChangeKind::Write,
                    FsChangeKind::Remove,
                    FsChangeKind::Rename,
                    FsChangeKind::Chmod,
                ][rng.below(5)],
            },
            _ => Event::FileData,
        }),
        _ => Body::Cancel,
    }
}

fn valid_frame(rng: &mut Rng) -> Frame {
    let payload_len = match rng.below(8) {
        0..=3 => 0,
        4..=6 => rng.below(300),
        _ => rng.below(70_000),
    };
    Frame::with_payload(
        Header {
            id: rng.u64_edge(),
            body: body(rng),
        },
        rng.bytes(payload_len),
    )
}

/// Random JSON value, used to graft junk into otherwise valid headers.
fn junk_value(rng: &mut Rng, depth: u32) -> Value {
    match rng.below(if depth > 2 { 6 } else { 8 }) {
        0 => Value::Null,
        1 => Value::Bool(rng.chance(2)),
        2 => Value::from(rng.next() as i64),
        3 => serde_json::Number::from_f64((rng.next() as f64) / 7.0)
            .map(Value::Number)
            .unwrap_or(Value::Null),
        4 => Value::from(rng.u64_edge()),
        5 => Value::String(rng.string(12)),
        6 => Value::Array(
            (0..rng.below(3))
                .map(|_| junk_value(rng, depth + 1))
                .collect(),
        ),
        _ => Value::Object(
            (0..rng.below(3))
                .map(|_| (rng.string(5), junk_value(rng, depth + 1)))
                .collect(),
        ),
    }
}

/// Mutates a parsed header structurally: swap tags, drop/add keys, change types.
fn mutate_json(rng: &mut Rng, v: &mut Value) {
    const TAGS: &[&str] = &[
        "request",
        "reply",
        "error",
        "event",
        "cancel",
        "ping",
        "exec",
        "file_read",
        "stat",
        "chunk",
        "hello",
        "pong",
        "",
    ];
    const KEYS: &[&str] = &[
        "id",
        "kind",
        "msg",
        "op",
        "type",
        "code",
        "process",
        "path",
        "argv",
        "env",
        "timeout_ms",
    ];
    // Walk to a random object or array inside `v`.
    let mut cur = v;
    for _ in 0..rng.below(4) {
        let next_is_some = match cur {
            Value::Object(m) if !m.is_empty() => true,
            Value::Array(a) if !a.is_empty() => true,
            _ => false,
        };
        if !next_is_some {
            break;
        }
        cur = match cur {
            Value::Object(m) => {
                let k = rng.below(m.len());
                m.values_mut().nth(k).unwrap()
            }
            Value::Array(a) => {
                let k = rng.below(a.len());
                &mut a[k]
            }
            _ => unreachable!(),
        };
    }
    match cur {
        Value::Object(m) => match rng.below(4) {
            0 if !m.is_empty() => {
                let k = m.keys().nth(rng.below(m.len())).unwrap().clone();
                m.remove(&k);
            }
            1 => {
                let k = KEYS[rng.below(KEYS.len())].to_string();
                m.insert(k, junk_value(rng, 0));
            }
            2 => {
                let k = KEYS[rng.below(KEYS.len())].to_string();
                m.insert(k, Value::String(TAGS[rng.below(TAGS.len())].into()));
            }
            _ => {
                m.insert(rng.string(6), junk_value(rng, 0));
            }
        },
        other => {
            *other = if rng.chance(2) {
                junk_value(rng, 0)
            } else {
                Value::String(TAGS[rng.below(TAGS.len())].into())
            }
        }
    }
}

/// Byte-level mutations of a whole wire frame (length prefix included).
fn mutate_bytes(rng: &mut Rng, wire: &mut Vec<u8>) {
    for _ in 0..1 + rng.below(3) {
        match rng.below(9) {
            0 if !wire.is_empty() => {
                let i = rng.below(wire.len());
                wire[i] ^= 1 << rng.below(8);
            }
            1 if !wire.is_empty() => {
                let i = rng.below(wire.len());
                wire[i] = rng.next() as u8;
            }
            2 => {
                let n = rng.below(wire.len() + 1);
                wire.truncate(n);
            }
            3 => {
                let n = rng.below(16);
                let extra = rng.bytes(n);
                let at = rng.below(wire.len() + 1);
                wire.splice(at..at, extra);
            }
            4 if !wire.is_empty() => {
                let at = rng.below(wire.len());
                let n = rng.below(wire.len() - at + 1).min(16);
                wire.drain(at..at + n);
            }
            // Lie in the total length.
            5 if wire.len() >= 4 => {
                let v: u32 = match rng.below(5) {
                    0 => (MAX_FRAME_BYTES as u32) + rng.below(3) as u32,
                    1 => u32::MAX,
                    2 => rng.below(wire.len() + 8) as u32,
                    3 => (MAX_FRAME_BYTES as u32) - rng.below(2) as u32,
                    _ => rng.next() as u32,
                };
                wire[..4].copy_from_slice(&v.to_be_bytes());
            }
            // Lie in the header length.
            6 if wire.len() >= 8 => {
                let v: u32 = match rng.below(5) {
                    0 => (MAX_HEADER_BYTES as u32) + rng.below(3) as u32,
                    1 => u32::MAX,
                    2 => rng.below(wire.len()) as u32,
                    3 => (MAX_HEADER_BYTES as u32) - rng.below(2) as u32,
                    _ => rng.next() as u32,
                };
                wire[4..8].copy_from_slice(&v.to_be_bytes());
            }
            // Splice JSON punctuation into the header area.
            7 if wire.len() > 8 => {
                const TOKENS: &[&[u8]] = &[
                    b"{",
                    b"}",
                    b"\"",
                    b"\\u",
                    b"\\ud800",
                    b",",
                    b":",
                    b"[",
                    b"null",
                    b"1e999",
                    b"-0",
                    b"\xff",
                    b"\xc3",
                    b"\"id\":",
                    b"18446744073709551616",
                ];
                let at = 8 + rng.below(wire.len() - 8);
                let t = TOKENS[rng.below(TOKENS.len())];
                wire.splice(at..at, t.iter().copied());
            }
            _ => {
                // Duplicate a random slice (repeated keys, doubled frames).
                if !wire.is_empty() {
                    let a = rng.below(wire.len());
                    let b = (a + rng.below(32)).min(wire.len());
                    let piece = wire[a..b].to_vec();
                    let at = rng.below(wire.len() + 1);
                    wire.splice(at..at, piece);
                }
            }
        }
    }
}

/// What `decode_body` must answer, derived from the bytes without the codec.
#[derive(Debug, PartialEq)]
enum Expect {
    Ok,
    Truncated,
    HeaderTooLarge,
    Json,
}

fn oracle(body: &[u8]) -> Expect {
    if body.len() < 4 {
        return Expect::Truncated;
    }
    let hl = u32::from_be_bytes(body[..4].try_into().unwrap()) as usize;
    if hl > MAX_HEADER_BYTES {
        return Expect::HeaderTooLarge;
    }
    if hl > body.len() - 4 {
        return Expect::Truncated;
    }
    match serde_json::from_slice::<Header>(&body[4..4 + hl]) {
        Ok(_) => Expect::Ok,
        Err(_) => Expect::Json,
    }
}

fn classify(r: &Result<Frame, CodecError>) -> &'static str {
    match r {
        Ok(_) => "Ok",
        Err(CodecError::Closed) => "Closed",
        Err(CodecError::Truncated) => "Truncated",
        Err(CodecError::FrameTooLarge(_)) => "FrameTooLarge",
        Err(CodecError::HeaderTooLarge(_)) => "HeaderTooLarge",
        Err(CodecError::Json(_)) => "Json",
        Err(CodecError::Io(_)) => "Io",
    }
}

/// A reader that hands out its bytes in random small pieces, optionally
/// failing with an I/O error at some point (never `Pending`).
struct Chunky {
    data: Vec<u8>,
    pos: usize,
    sizes: Rng,
    fail_at: Option<usize>,
}

impl AsyncRead for Chunky {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.fail_at.is_some_and(|f| this.pos >= f) {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::BrokenPipe, "boom")));
        }
        let mut end = this.data.len();
        if let Some(f) = this.fail_at {
            end = end.min(f);
        }
        let left = end - this.pos;
        // Mostly tiny reads (they split the length prefix), sometimes big ones.
        let want = if this.sizes.chance(3) {
            1 + this.sizes.below(65_536)
        } else {
            1 + this.sizes.below(7)
        };
        let n = left.min(want).min(buf.remaining());
        buf.put_slice(&this.data[this.pos..this.pos + n]);
        this.pos += n;
        Poll::Ready(Ok(()))
    }
}

/// Drives a future whose readers never return `Pending`.
fn run_ready<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..1_000_000 {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
    panic!("read_frame returned Pending on an always-ready reader");
}

fn hex(b: &[u8]) -> String {
    let shown: String = b.iter().take(512).map(|x| format!("{x:02x}")).collect();
    if b.len() > 512 {
        format!("{shown}… ({} bytes)", b.len())
    } else {
        shown
    }
}

/// Feeds one wire buffer through every entry point and checks the properties.
fn check_wire(wire: &[u8], rng: &mut Rng, stats: &mut BTreeMap<&'static str, usize>) {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        // decode_body on the body as framed by the length prefix (or on all of it).
        let body: &[u8] = if wire.len() >= 4 {
            let total = u32::from_be_bytes(wire[..4].try_into().unwrap()) as usize;
            &wire[4..wire.len().min(4 + total)]
        } else {
            wire
        };
        let decoded = Frame::decode_body(body);
        let want = oracle(body);
        match (&want, &decoded) {
            (Expect::Ok, Ok(_))
            | (Expect::Truncated, Err(CodecError::Truncated))
            | (Expect::HeaderTooLarge, Err(CodecError::HeaderTooLarge(_)))
            | (Expect::Json, Err(CodecError::Json(_))) => {}
            _ => panic!(
                "decode_body: oracle says {want:?}, got {}",
                classify(&decoded)
            ),
        }
        if let Ok(f) = &decoded {
            // Whatever decodes re-encodes into something that decodes the same.
            if let Ok(again) = f.encode() {
                let back = Frame::decode_body(&again[4..]).expect("re-encoded frame decodes");
                assert_eq!(&back, f, "re-encode changed the frame");
            }
        }

        // read_frame over a whole slice.
        let whole = run_ready(read_frame(&mut &wire[..]));
        let expect_read = if wire.is_empty() {
            "Closed"
        } else if wire.len() < 4 {
            "Truncated"
        } else {
            let total = u32::from_be_bytes(wire[..4].try_into().unwrap()) as usize;
            if total > MAX_FRAME_BYTES {
                "FrameTooLarge"
            } else if wire.len() - 4 < total {
                "Truncated"
            } else {
                classify(&decoded)
            }
        };
        assert_eq!(classify(&whole), expect_read, "read_frame on a slice");
        if let (Ok(a), Ok(b)) = (&whole, &decoded) {
            assert_eq!(a, b, "read_frame and decode_body disagree");
        }

        // read_frame over a stream that arrives in small pieces: same answer.
        let mut chunky = Chunky {
            data: wire.to_vec(),
            pos: 0,
            sizes: Rng::new(rng.next()),
            fail_at: None,
        };
        let pieces = run_ready(read_frame(&mut chunky));
        assert_eq!(classify(&pieces), classify(&whole), "chunked read_frame");
        if let (Ok(a), Ok(b)) = (&pieces, &whole) {
            assert_eq!(a, b);
        }

        // A stream that breaks part-way never yields a frame from partial bytes.
        if !wire.is_empty() {
            let fail_at = rng.below(wire.len());
            let mut broken = Chunky {
                data: wire.to_vec(),
                pos: 0,
                sizes: Rng::new(rng.next()),
                fail_at: Some(fail_at),
            };
            let r = run_ready(read_frame(&mut broken));
            let needed = if wire.len() >= 4 {
                4 + u32::from_be_bytes(wire[..4].try_into().unwrap()) as usize
            } else {
                usize::MAX
            };
            if fail_at < needed.min(4) || (fail_at < needed && classify(&whole) != "FrameTooLarge")
            {
                assert!(
                    matches!(r, Err(CodecError::Io(_))),
                    "i/o error at byte {fail_at} became {}",
                    classify(&r)
                );
            }
        }
        classify(&whole)
    }));
    match outcome {
        Ok(kind) => *stats.entry(kind).or_default() += 1,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            panic!("{msg}\ninput: {}", hex(wire));
        }
    }
}

fn seed() -> u64 {
    std::env::var("SBX_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5b_c0de_f00d)
}

fn iters() -> usize {
    std::env::var("SBX_FUZZ_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000)
}

#[test]
fn valid_frames_round_trip_singly_and_back_to_back() {
    let mut rng = Rng::new(seed());
    for _ in 0..iters() / 10 {
        let frames: Vec<Frame> = (0..1 + rng.below(4))
            .map(|_| valid_frame(&mut rng))
            .collect();
        let mut stream = Vec::new();
        for f in &frames {
            let wire = f.encode().expect("valid frame encodes");
            assert_eq!(
                u32::from_be_bytes(wire[..4].try_into().unwrap()) as usize,
                wire.len() - 4
            );
            let back = Frame::decode_body(&wire[4..]).expect("valid frame decodes");
            assert_eq!(&back, f);
            stream.extend_from_slice(&wire);
        }
        // Back to back on one stream, read in random pieces, then a clean EOF.
        let mut r = Chunky {
            data: stream,
            pos: 0,
            sizes: Rng::new(rng.next()),
            fail_at: None,
        };
        for f in &frames {
            assert_eq!(&run_ready(read_frame(&mut r)).expect("frame"), f);
        }
        assert!(matches!(
            run_ready(read_frame(&mut r)),
            Err(CodecError::Closed)
        ));
    }
}

#[test]
fn random_and_mutated_frames_never_panic_and_fail_typed() {
    let mut rng = Rng::new(seed() ^ 0x9e37_79b9_7f4a_7c15);
    let mut stats = BTreeMap::new();
    let n = iters();
    for i in 0..n {
        let wire = match i % 4 {
            // Pure noise, sometimes with a plausible length prefix.
            0 => {
                let n = rng.below(64);
                let mut w = rng.bytes(n);
                if rng.chance(2) && w.len() >= 8 {
                    let total = (w.len() - 4) as u32;
                    w[..4].copy_from_slice(&total.to_be_bytes());
                    let hl = rng.below(w.len() - 7) as u32;
                    w[4..8].copy_from_slice(&hl.to_be_bytes());
                }
                w
            }
            // A valid frame with byte-level damage.
            1 | 2 => {
                let mut w = valid_frame(&mut rng).encode().unwrap();
                mutate_bytes(&mut rng, &mut w);
                w
            }
            // A valid frame whose JSON header was changed structurally, re-framed
            // with correct lengths so the damage reaches the JSON decoder.
            _ => {
                let f = valid_frame(&mut rng);
                let mut v = serde_json::to_value(&f.header).unwrap();
                for _ in 0..1 + rng.below(3) {
                    mutate_json(&mut rng, &mut v);
                }
                let header = serde_json::to_vec(&v).unwrap();
                let mut w = Vec::new();
                w.extend_from_slice(&((4 + header.len() + f.payload.len()) as u32).to_be_bytes());
                w.extend_from_slice(&(header.len() as u32).to_be_bytes());
                w.extend_from_slice(&header);
                w.extend_from_slice(&f.payload);
                w
            }
        };
        check_wire(&wire, &mut rng, &mut stats);
    }
    println!("decoder fuzz outcomes over {n} inputs: {stats:?}");
    // The corpus must reach every outcome, or the fuzzer tests nothing.
    for kind in ["Ok", "Truncated", "FrameTooLarge", "HeaderTooLarge", "Json"] {
        assert!(
            stats.contains_key(kind),
            "no input produced {kind}: {stats:?}"
        );
    }
}

#[test]
fn limits_at_their_edges() {
    // A frame of exactly MAX_FRAME_BYTES is accepted; one byte more is not.
    let header = Header {
        id: 1,
        body: Body::Event(Event::FileData),
    };
    let hlen = serde_json::to_vec(&header).unwrap().len();
    let fits = Frame::with_payload(header.clone(), vec![7; MAX_FRAME_BYTES - 4 - hlen]);
    let wire = fits.encode().expect("frame at the limit encodes");
    assert_eq!(wire.len(), MAX_FRAME_BYTES + 4);
    assert_eq!(run_ready(read_frame(&mut &wire[..])).unwrap(), fits);
    let over = Frame::with_payload(header, vec![7; MAX_FRAME_BYTES - 3 - hlen]);
    assert!(matches!(over.encode(), Err(CodecError::FrameTooLarge(_))));

    // A length prefix that announces too much is refused before reading a body.
    for total in [MAX_FRAME_BYTES as u32 + 1, u32::MAX] {
        let w = total.to_be_bytes();
        assert!(matches!(
            run_ready(read_frame(&mut &w[..])),
            Err(CodecError::FrameTooLarge(_))
        ));
    }
    // Header length at and over its limit.
    let mut body = (MAX_HEADER_BYTES as u32 + 1).to_be_bytes().to_vec();
    body.extend_from_slice(b"{}");
    assert!(matches!(
        Frame::decode_body(&body),
        Err(CodecError::HeaderTooLarge(_))
    ));
    let mut body = (MAX_HEADER_BYTES as u32).to_be_bytes().to_vec();
    body.extend_from_slice(b"{}");
    assert!(matches!(
        Frame::decode_body(&body),
        Err(CodecError::Truncated)
    ));
    // Deeply nested JSON is an error, not a stack overflow.
    let deep = format!(
        "{{\"id\":1,\"kind\":\"request\",\"msg\":{}{}}}",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let mut body = (deep.len() as u32).to_be_bytes().to_vec();
    body.extend_from_slice(deep.as_bytes());
    assert!(matches!(
        Frame::decode_body(&body),
        Err(CodecError::Json(_))
    ));
    // A header id beyond u64 and a negative id are JSON errors.
    for h in [
        r#"{"id":18446744073709551616,"kind":"cancel"}"#,
        r#"{"id":-1,"kind":"cancel"}"#,
        r#"{"id":1.5,"kind":"cancel"}"#,
    ] {
        let mut body = (h.len() as u32).to_be_bytes().to_vec();
        body.extend_from_slice(h.as_bytes());
        assert!(
            matches!(Frame::decode_body(&body), Err(CodecError::Json(_))),
            "{h}"
        );
    }
}
