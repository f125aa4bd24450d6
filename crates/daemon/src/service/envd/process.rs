//! envd's `process.Process` service (contract §3.4): processes started as a
//! guest user, optionally on a pseudo-terminal, their output as events, stdin,
//! signals and resizes. E2B names processes by guest pid (or tag); the agent
//! by id, so every call first finds the running process with that pid.

use super::errors::from_agent;
use super::{Caller, Envd, EnvdError, Result};
use crate::runtime::{AgentConn, StreamItem};
use sbx_agent_proto::{
    CommandSpec, Event, ProcessInfo, ProcessOptions, ProcessState, PtySize, Reply, Request,
    StreamKind,
};
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;
use uuid::Uuid;

/// Largest stdin or terminal input accepted in one call.
pub const MAX_INPUT_BYTES: usize = 4 << 20;
/// How close to its deadline a killed process counts as killed by it.
const DEADLINE_SLACK: Duration = Duration::from_millis(500);
/// Events buffered between the agent and a slow client.
const EVENT_BUFFER: usize = 16;

/// What to start.
#[derive(Debug, Clone, Default)]
pub struct StartSpec {
    /// The executable.
    pub cmd: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Variables over the sandbox's environment.
    pub envs: BTreeMap<String, String>,
    /// Working directory as sent (resolved against the user's home).
    pub cwd: Option<String>,
    /// Run on a pseudo-terminal of this size.
    pub pty: Option<PtySize>,
    /// Caller's label.
    pub tag: Option<String>,
    /// Keep a stdin pipe open.
    pub stdin: bool,
    /// `Connect-Timeout-Ms`: the process is killed, and the stream ends, then.
    pub deadline: Option<Duration>,
}

/// How a caller names a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// By guest pid.
    Pid(u32),
    /// By the tag it was started with.
    Tag(String),
}

/// Which stream output bytes came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
    /// The pseudo-terminal.
    Pty,
}

/// How a process ended, as Go's `os.ProcessState` words it (what the SDKs show).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessEnd {
    /// Exit code, -1 when ended by a signal.
    pub exit_code: i32,
    /// Whether it exited (rather than being killed).
    pub exited: bool,
    /// `exit status N` or `signal: killed`.
    pub status: String,
    /// Set when it did not exit 0.
    pub error: Option<String>,
}

/// One item of a process stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessEvent {
    /// First: the process runs with this pid.
    Start {
        /// Guest pid.
        pid: u32,
    },
    /// Output bytes.
    Data(Output, Vec<u8>),
    /// Last: it ended.
    End(ProcessEnd),
}

/// The events of a started or attached process; an `Err` ends the stream.
pub type ProcessEvents = mpsc::Receiver<Result<ProcessEvent>>;

/// Input for a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    /// To its stdin pipe.
    Stdin,
    /// To its terminal.
    Pty,
}

impl Envd {
    /// `Start`: runs the command as the caller's user and streams its events.
    pub async fn start(&self, caller: &Caller, spec: StartSpec) -> Result<ProcessEvents> {
        if spec.cmd.is_empty() {
            return Err(EnvdError::InvalidArgument("process.cmd is empty".into()));
        }
        let cwd = match spec.cwd.as_deref() {
            None | Some("") => None,
            Some(cwd) => Some(caller.user.resolve(cwd)?),
        };
        let conn = self.conn(caller).await?;
        let mut argv = vec![spec.cmd];
        argv.extend(spec.args);
        let request = Request::ProcessStart {
            command: CommandSpec {
                argv,
                env: spec.envs,
                cwd: cwd.clone(),
            },
            options: ProcessOptions {
                user: Some(caller.user.name().to_string()),
                stdin: spec.stdin,
                pty: spec.pty,
                tag: spec.tag,
                kill_after_ms: spec.deadline.map(|d| d.as_millis() as u64),
                // E2B streams are pipes: a slow reader slows the writer, never loses output.
                backpressure: true,
            },
        };
        let info = match conn.call(request).await {
            Ok((Reply::Process { process }, _)) => process,
            Ok((other, _)) => {
                return Err(EnvdError::Internal(format!(
                    "unexpected agent reply {other:?}"
                )))
            }
            Err(e) => return Err(from_agent(e, "starting the process")),
        };
        if info.state == ProcessState::Failed {
            let why = info.error.unwrap_or_default();
            return Err(match cwd {
                Some(cwd) if why.contains("cd:") => {
                    EnvdError::InvalidArgument(format!("cwd '{cwd}' does not exist"))
                }
                _ => EnvdError::InvalidArgument(why),
            });
        }
        let deadline = spec.deadline.map(|d| Instant::now() + d);
        Ok(pump(conn, info, 0, deadline))
    }

    /// `Connect`: the events of a running process from now on.
    pub async fn attach(
        &self,
        caller: &Caller,
        selector: &Selector,
        deadline: Option<Duration>,
    ) -> Result<ProcessEvents> {
        let conn = self.conn(caller).await?;
        let info = find(&conn, selector).await?;
        let from = info.output_bytes;
        Ok(pump(conn, info, from, deadline.map(|d| Instant::now() + d)))
    }

    /// `List`: the running processes.
    pub async fn list(&self, caller: &Caller) -> Result<Vec<ProcessInfo>> {
        let conn = self.conn(caller).await?;
        running(&conn).await
    }

    /// `SendInput` / `StreamInput`: bytes to a process's stdin or terminal.
    pub async fn send_input(
        &self,
        caller: &Caller,
        selector: &Selector,
        kind: InputKind,
        bytes: Vec<u8>,
    ) -> Result<()> {
        if bytes.len() > MAX_INPUT_BYTES {
            return Err(EnvdError::ResourceExhausted(format!(
                "input over {MAX_INPUT_BYTES} bytes in one message"
            )));
        }
        let conn = self.conn(caller).await?;
        let info = find(&conn, selector).await?;
        match (kind, info.pty) {
            (InputKind::Pty, false) => {
                return Err(EnvdError::InvalidArgument(
                    "the process has no terminal; send stdin".into(),
                ))
            }
            (InputKind::Stdin, true) => {
                return Err(EnvdError::InvalidArgument(
                    "the process runs on a terminal; send pty input".into(),
                ))
            }
            _ => {}
        }
        let request = Request::ProcessInput { process: info.id };
        let limit = sbx_agent_proto::client::IO_CALL_TIMEOUT;
        conn.call_with_payload(request, bytes, limit)
            .await
            .map(|_| ())
            .map_err(|e| input_error(e, selector))
    }

    /// `CloseStdin`: EOF on the process's stdin.
    pub async fn close_stdin(&self, caller: &Caller, selector: &Selector) -> Result<()> {
        let conn = self.conn(caller).await?;
        let info = find(&conn, selector).await?;
        conn.call(Request::ProcessCloseStdin { process: info.id })
            .await
            .map(|_| ())
            .map_err(|e| input_error(e, selector))
    }

    /// `SendSignal`: SIGKILL or SIGTERM to the process and its group.
    pub async fn signal(&self, caller: &Caller, selector: &Selector, signal: i32) -> Result<()> {
        let conn = self.conn(caller).await?;
        let info = find(&conn, selector).await?;
        conn.call(Request::ProcessSignal {
            process: info.id,
            signal,
            include_children: true,
        })
        .await
        .map(|_| ())
        .map_err(|e| from_agent(e, &describe(selector)))
    }

    /// `Update`: a new terminal size.
    pub async fn resize(&self, caller: &Caller, selector: &Selector, size: PtySize) -> Result<()> {
        let conn = self.conn(caller).await?;
        let info = find(&conn, selector).await?;
        conn.call(Request::ProcessResize {
            process: info.id,
            size,
        })
        .await
        .map(|_| ())
        .map_err(|e| from_agent(e, &describe(selector)))
    }
}

fn describe(selector: &Selector) -> String {
    match selector {
        Selector::Pid(pid) => format!("process with pid {pid}"),
        Selector::Tag(tag) => format!("process with tag {tag}"),
    }
}

/// Input to a process whose stdin is closed (or was never open) is the
/// caller's mistake: `invalid_argument` with the agent's reason.
fn input_error(e: crate::runtime::AgentCallError, selector: &Selector) -> EnvdError {
    from_agent(e, &describe(selector))
}

async fn running(conn: &AgentConn) -> Result<Vec<ProcessInfo>> {
    match conn.call(Request::ProcessList).await {
        Ok((Reply::Processes { processes }, _)) => Ok(processes
            .into_iter()
            .filter(|p| !p.state.is_terminal() && p.pid.is_some())
            .collect()),
        Ok((other, _)) => Err(EnvdError::Internal(format!(
            "unexpected agent reply {other:?}"
        ))),
        Err(e) => Err(from_agent(e, "listing processes")),
    }
}

/// The running process a selector names.
async fn find(conn: &AgentConn, selector: &Selector) -> Result<ProcessInfo> {
    running(conn)
        .await?
        .into_iter()
        .find(|p| match selector {
            Selector::Pid(pid) => p.pid == Some(*pid as i32),
            Selector::Tag(tag) => p.tag.as_deref() == Some(tag.as_str()),
        })
        .ok_or_else(|| EnvdError::NotFound(format!("{} not found", describe(selector))))
}

/// Streams a process's output from `from` (a byte offset), then its end,
/// as events; the agent stream is cancelled (the process keeps running)
/// when the receiver is dropped.
pub(crate) fn pump(
    conn: AgentConn,
    info: ProcessInfo,
    from: u64,
    deadline: Option<Instant>,
) -> ProcessEvents {
    let (tx, rx) = mpsc::channel(EVENT_BUFFER);
    tokio::spawn(async move {
        let pid = info.pid.unwrap_or_default().max(0) as u32;
        if tx.send(Ok(ProcessEvent::Start { pid })).await.is_err() {
            return;
        }
        let ended = stream_output(&conn, info.id, from, deadline, &tx).await;
        let last = match ended {
            Ok(()) => match end_of(&conn, info.id).await {
                // The agent's kill at the deadline can end the stream a
                // moment before the deadline is seen here: a process killed
                // then ran out of time, as upstream envd reports it.
                Ok(end)
                    if !end.exited
                        && deadline.is_some_and(|d| Instant::now() + DEADLINE_SLACK >= d) =>
                {
                    Err(EnvdError::DeadlineExceeded(
                        "the process's deadline (Connect-Timeout-Ms) passed".into(),
                    ))
                }
                other => other.map(ProcessEvent::End),
            },
            Err(e) => Err(e),
        };
        let _ = tx.send(last).await;
    });
    rx
}

/// Forwards output chunks until the process's stream ends.
async fn stream_output(
    conn: &AgentConn,
    process: Uuid,
    from: u64,
    deadline: Option<Instant>,
    tx: &mpsc::Sender<Result<ProcessEvent>>,
) -> Result<()> {
    let mut stream = conn
        .stream(Request::ProcessStream {
            process,
            tail_bytes: 0,
            from_offset: Some(from),
        })
        .await
        .map_err(|e| from_agent(e, "reading the process's output"))?;
    loop {
        let next = match deadline {
            Some(at) => match tokio::time::timeout_at(at, stream.next()).await {
                Ok(item) => item,
                Err(_) => {
                    return Err(EnvdError::DeadlineExceeded(
                        "the process's deadline (Connect-Timeout-Ms) passed".into(),
                    ))
                }
            },
            None => stream.next().await,
        };
        match next {
            Some(StreamItem::Event(Event::Chunk { chunk }, bytes)) => {
                let kind = match chunk.stream {
                    StreamKind::Stdout => Output::Stdout,
                    StreamKind::Stderr => Output::Stderr,
                    StreamKind::Pty => Output::Pty,
                };
                if tx.send(Ok(ProcessEvent::Data(kind, bytes))).await.is_err() {
                    // The client left: dropping the stream cancels it in the
                    // agent; the process keeps running.
                    return Ok(());
                }
            }
            Some(StreamItem::Event(..)) => {}
            Some(StreamItem::End(..)) => return Ok(()),
            Some(StreamItem::Failed(e)) => {
                return Err(from_agent(
                    crate::runtime::AgentCallError::Agent(e),
                    "reading the process's output",
                ))
            }
            None => {
                return Err(EnvdError::Unavailable(
                    "the sandbox's agent connection closed".into(),
                ))
            }
        }
    }
}

/// The end event of a finished process.
async fn end_of(conn: &AgentConn, process: Uuid) -> Result<ProcessEnd> {
    match conn.call(Request::ProcessGet { process }).await {
        Ok((Reply::Process { process }, _)) => Ok(process_end(&process)),
        Ok((other, _)) => Err(EnvdError::Internal(format!(
            "unexpected agent reply {other:?}"
        ))),
        Err(e) => Err(from_agent(e, "reading the process's exit")),
    }
}

/// How Go's `os.ProcessState` words an exit (what upstream envd sends).
pub fn process_end(info: &ProcessInfo) -> ProcessEnd {
    match (info.state, info.exit_code, info.signal) {
        (ProcessState::Exited, Some(code), _) => {
            let status = format!("exit status {code}");
            ProcessEnd {
                exit_code: code,
                exited: true,
                error: (code != 0).then(|| status.clone()),
                status,
            }
        }
        (ProcessState::Killed, _, Some(signal)) => {
            let status = format!("signal: {}", signal_name(signal));
            ProcessEnd {
                exit_code: -1,
                exited: false,
                error: Some(status.clone()),
                status,
            }
        }
        _ => {
            let status = info
                .error
                .clone()
                .unwrap_or_else(|| format!("process {:?}", info.state));
            ProcessEnd {
                exit_code: -1,
                exited: false,
                error: Some(status.clone()),
                status,
            }
        }
    }
}

/// Go's names of the common signals (`syscall.Signal.String`).
fn signal_name(signal: i32) -> String {
    match signal {
        1 => "hangup".into(),
        2 => "interrupt".into(),
        3 => "quit".into(),
        6 => "aborted".into(),
        9 => "killed".into(),
        11 => "segmentation fault".into(),
        13 => "broken pipe".into(),
        14 => "alarm clock".into(),
        15 => "terminated".into(),
        n => format!("signal {n}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(state: ProcessState, exit_code: Option<i32>, signal: Option<i32>) -> ProcessInfo {
        ProcessInfo {
            id: Uuid::nil(),
            argv: vec![],
            pid: Some(7),
            state,
            exit_code,
            signal,
            error: None,
            started_at_ms: None,
            ended_at_ms: None,
            output_retained: true,
            output_bytes: 0,
            env: BTreeMap::new(),
            cwd: None,
            tag: None,
            user: None,
            pty: false,
            stdin_open: false,
        }
    }

    #[test]
    fn ends_are_worded_as_upstream_envd_does() {
        let ok = process_end(&info(ProcessState::Exited, Some(0), None));
        assert_eq!(
            (ok.exit_code, ok.exited, ok.status.as_str()),
            (0, true, "exit status 0")
        );
        assert_eq!(ok.error, None);
        let three = process_end(&info(ProcessState::Exited, Some(3), None));
        assert_eq!(three.error.as_deref(), Some("exit status 3"));
        let killed = process_end(&info(ProcessState::Killed, None, Some(9)));
        assert_eq!(
            (killed.exit_code, killed.exited, killed.status.as_str()),
            (-1, false, "signal: killed")
        );
        let lost = process_end(&info(ProcessState::Lost, None, None));
        assert_eq!((lost.exit_code, lost.exited), (-1, false));
    }
}
