//! Test harness: runs `sbx-agent serve` in a temp dir and talks frames to it.
#![allow(dead_code)]

use sbx_agent_proto::{
    read_frame, write_frame, AgentError, Body, CommandSpec, Event, Frame, Header, ProcessInfo,
    ProcessOptions, Reply, Request,
};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio::io::BufReader;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;
use uuid::Uuid;

/// The agent binary under test: `SBX_AGENT_TEST_BIN` (e.g. the static
/// release build) or the one Cargo built for this test run.
pub fn agent_bin() -> PathBuf {
    std::env::var_os("SBX_AGENT_TEST_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_sbx-agent")))
}

/// A running agent in `serve` mode.
pub struct TestAgent {
    child: Child,
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
}

impl TestAgent {
    pub fn start() -> TestAgent {
        Self::start_with_env(&[])
    }

    pub fn start_with_env(env: &[(&str, &str)]) -> TestAgent {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("a.sock");
        let mut cmd = Command::new(agent_bin());
        cmd.arg("serve")
            .arg("--socket")
            .arg(&socket)
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("spawn agent");
        TestAgent { child, dir, socket }
    }

    /// An agent whose stdin and stdout are one end of a socket pair, as
    /// PID 1's are in a sandbox (the stdio channel); returns sbxd's end.
    pub fn start_with_channel() -> (TestAgent, std::os::unix::net::UnixStream) {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().expect("socket pair");
        let theirs_out = theirs.try_clone().expect("dup");
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("a.sock");
        let child = Command::new(agent_bin())
            .arg("serve")
            .arg("--socket")
            .arg(&socket)
            .stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
            .stdout(Stdio::from(std::os::fd::OwnedFd::from(theirs_out)))
            .spawn()
            .expect("spawn agent");
        (TestAgent { child, dir, socket }, ours)
    }

    /// The agent's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A path inside the agent's temp dir (as a string for requests).
    pub fn path(&self, rel: &str) -> String {
        self.dir.path().join(rel).to_string_lossy().into_owned()
    }

    pub async fn connect(&self) -> Client {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match UnixStream::connect(&self.socket).await {
                Ok(s) => return Client::new(s),
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Err(e) => panic!("cannot connect to agent: {e}"),
            }
        }
    }
}

impl Drop for TestAgent {
    fn drop(&mut self) {
        // SIGTERM makes the agent kill every process group it started.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Attaches a new session to the stdio channel `channel` (sbxd's end), as
/// sbxd does: the marker with a fresh nonce, then everything up to the
/// agent's answer is skipped. Nothing may follow the answer unasked.
pub async fn attach(channel: &std::os::unix::net::UnixStream) -> Client {
    use tokio::io::AsyncWriteExt;
    let dup = channel.try_clone().expect("dup");
    dup.set_nonblocking(true).expect("nonblocking");
    let mut stream = UnixStream::from_std(dup).expect("tokio stream");
    let nonce = *Uuid::new_v4().as_bytes();
    stream
        .write_all(&sbx_agent_proto::attach::attach_bytes(&nonce))
        .await
        .expect("write attach");
    let rest = tokio::time::timeout(
        Duration::from_secs(10),
        sbx_agent_proto::attach::skip_past(
            &mut stream,
            sbx_agent_proto::attach::attached_bytes(&nonce),
            64 << 20,
        ),
    )
    .await
    .expect("the agent answers the attach within 10 s")
    .expect("attach answer");
    assert!(
        rest.is_empty(),
        "bytes followed the attach answer: {rest:?}"
    );
    Client::new(stream)
}

/// A protocol client over one connection; frames for other ids are queued.
pub struct Client {
    rd: BufReader<OwnedReadHalf>,
    pub wr: OwnedWriteHalf,
    next_id: u64,
    queued: HashMap<u64, VecDeque<Frame>>,
}

pub type Outcome = Result<(Reply, Vec<u8>), AgentError>;

impl Client {
    pub fn new(s: UnixStream) -> Client {
        let (rd, wr) = s.into_split();
        Client {
            rd: BufReader::new(rd),
            wr,
            next_id: 1,
            queued: HashMap::new(),
        }
    }

    /// How many frames arrived for ids nobody asked for yet.
    pub fn queued_frames(&self) -> usize {
        self.queued.values().map(VecDeque::len).sum()
    }

    pub fn fresh_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    pub async fn send(&mut self, id: u64, body: Body, payload: Vec<u8>) {
        write_frame(
            &mut self.wr,
            &Frame::with_payload(Header { id, body }, payload),
        )
        .await
        .expect("write frame");
    }

    pub async fn send_req(&mut self, id: u64, req: Request) {
        self.send(id, Body::Request(req), Vec::new()).await
    }

    /// Next frame for `id` (10 s deadline).
    pub async fn next_for(&mut self, id: u64) -> Frame {
        if let Some(f) = self.queued.get_mut(&id).and_then(|q| q.pop_front()) {
            return f;
        }
        loop {
            let f = tokio::time::timeout(Duration::from_secs(20), read_frame(&mut self.rd))
                .await
                .expect("timed out waiting for a frame")
                .expect("read frame");
            if f.header.id == id {
                return f;
            }
            self.queued.entry(f.header.id).or_default().push_back(f);
        }
    }

    /// Reads the next raw frame from the wire (None on close or error).
    pub async fn next_raw(&mut self) -> Option<Frame> {
        tokio::time::timeout(Duration::from_secs(20), read_frame(&mut self.rd))
            .await
            .expect("timed out")
            .ok()
    }

    /// Final outcome of `id`, collecting events on the way.
    pub async fn outcome_with_events(&mut self, id: u64) -> (Outcome, Vec<(Event, Vec<u8>)>) {
        let mut events = Vec::new();
        loop {
            let f = self.next_for(id).await;
            match f.header.body {
                Body::Event(e) => events.push((e, f.payload)),
                Body::Reply(r) => return (Ok((r, f.payload)), events),
                Body::Error(e) => return (Err(e), events),
                other => panic!("unexpected frame {other:?}"),
            }
        }
    }

    pub async fn call(&mut self, req: Request) -> Outcome {
        let id = self.fresh_id();
        self.send_req(id, req).await;
        self.outcome_with_events(id).await.0
    }

    pub async fn ok(&mut self, req: Request) -> (Reply, Vec<u8>) {
        let desc = format!("{req:?}");
        self.call(req)
            .await
            .unwrap_or_else(|e| panic!("{desc} failed: {e}"))
    }

    pub async fn exec_full(&mut self, spec: CommandSpec, timeout_ms: u64, max: u64) -> Outcome {
        self.call(Request::Exec {
            command: spec,
            timeout_ms,
            max_output_bytes: max,
        })
        .await
    }

    /// Runs argv and returns (exit code, stdout, stderr).
    pub async fn exec(&mut self, argv: &[&str]) -> (i32, String, String) {
        self.exec_spec(spec(argv)).await
    }

    pub async fn exec_spec(&mut self, spec: CommandSpec) -> (i32, String, String) {
        match self.exec_full(spec, 20_000, 1 << 20).await {
            Ok((
                Reply::Exec {
                    exit_code,
                    stdout_len,
                    stderr_len,
                },
                payload,
            )) => {
                assert_eq!(payload.len() as u64, stdout_len + stderr_len);
                let (o, e) = payload.split_at(stdout_len as usize);
                (
                    exit_code,
                    String::from_utf8_lossy(o).into_owned(),
                    String::from_utf8_lossy(e).into_owned(),
                )
            }
            other => panic!("exec failed: {other:?}"),
        }
    }

    pub async fn start(&mut self, argv: &[&str]) -> ProcessInfo {
        match self
            .ok(Request::ProcessStart {
                command: spec(argv),
                options: Default::default(),
            })
            .await
        {
            (Reply::Process { process }, _) => process,
            other => panic!("unexpected {other:?}"),
        }
    }

    /// `process_start` with options; the start must be answered with a process.
    pub async fn start_with(
        &mut self,
        command: CommandSpec,
        options: ProcessOptions,
    ) -> ProcessInfo {
        match self.ok(Request::ProcessStart { command, options }).await {
            (Reply::Process { process }, _) => process,
            other => panic!("unexpected {other:?}"),
        }
    }

    pub async fn get(&mut self, process: Uuid) -> ProcessInfo {
        match self.ok(Request::ProcessGet { process }).await {
            (Reply::Process { process }, _) => process,
            other => panic!("unexpected {other:?}"),
        }
    }

    /// Sends `bytes` as input to `process`.
    pub async fn input(&mut self, process: Uuid, bytes: &[u8]) -> Outcome {
        let id = self.fresh_id();
        self.send(
            id,
            Body::Request(Request::ProcessInput { process }),
            bytes.to_vec(),
        )
        .await;
        self.outcome_with_events(id).await.0
    }

    /// Streams `process`'s output from `from` until it contains `needle`
    /// (then cancels the stream); returns the text and the offset reached.
    /// Fails on the 20 s frame deadline or if the process ends first.
    pub async fn output_until(&mut self, process: Uuid, from: u64, needle: &str) -> (String, u64) {
        let id = self.fresh_id();
        self.send_req(
            id,
            Request::ProcessStream {
                process,
                tail_bytes: 0,
                from_offset: Some(from),
            },
        )
        .await;
        let mut text = Vec::new();
        loop {
            let f = self.next_for(id).await;
            match f.header.body {
                Body::Event(Event::Chunk { chunk }) => {
                    text.extend_from_slice(&f.payload);
                    if String::from_utf8_lossy(&text).contains(needle) {
                        self.send(id, Body::Cancel, Vec::new()).await;
                        let next = chunk.offset + chunk.len;
                        return (String::from_utf8_lossy(&text).into_owned(), next);
                    }
                }
                other => panic!(
                    "stream ended before {needle:?} in {:?}: {other:?}",
                    String::from_utf8_lossy(&text)
                ),
            }
        }
    }

    /// Everything `process` printed (retained output).
    pub async fn output_text(&mut self, process: Uuid) -> String {
        match self
            .ok(Request::ProcessOutput {
                process,
                tail_bytes: 0,
            })
            .await
        {
            (Reply::Output { .. }, payload) => String::from_utf8_lossy(&payload).into_owned(),
            other => panic!("unexpected {other:?}"),
        }
    }

    pub async fn wait(&mut self, process: Uuid) -> ProcessInfo {
        match self
            .ok(Request::ProcessWait {
                process,
                timeout_ms: 20_000,
            })
            .await
        {
            (Reply::Process { process }, _) => process,
            other => panic!("unexpected {other:?}"),
        }
    }
}

pub fn spec(argv: &[&str]) -> CommandSpec {
    CommandSpec {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        env: BTreeMap::new(),
        cwd: None,
    }
}

/// Polls `cond` until true or the deadline passes.
pub async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Whether `pid` still exists (zombies count as gone).
pub fn pid_alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => !s
            .rsplit_once(')')
            .map(|(_, rest)| rest.trim_start().starts_with('Z'))
            .unwrap_or(false),
        Err(_) => false,
    }
}

/// Reads a pid written by a test command, waiting for the file to appear.
pub async fn read_pid_file(path: &Path) -> i32 {
    let mut pid = None;
    eventually("pid file", || {
        pid = std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse().ok());
        pid.is_some()
    })
    .await;
    pid.unwrap_or_default()
}

pub fn sha256(data: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(data))
}

/// Deterministic pseudo-random bytes.
pub fn pseudo_random(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}
