//! The console's terminal: a login shell on a pseudo-terminal in a sandbox,
//! started as a managed process of the agent, so that it outlives the
//! connection that drives it. A later connection reattaches to it by its
//! guest pid and first gets the tail of the output the agent retained
//! (what the shell printed while nobody watched included), then live output.

use super::{agent_error, agent_error_unsafe, Result, Service, ServiceError};
use crate::runtime::{AgentConn, AgentStream, StreamItem};
use sbx_agent_proto::{
    CommandSpec, Event, ProcessInfo, ProcessOptions, ProcessState, PtySize, Reply, Request,
};
use sbx_api_types::validate::ValidationError;
use std::collections::BTreeMap;
use std::sync::Arc;
use uuid::Uuid;

/// The tag of terminal shells: only these can be reattached.
pub const TERMINAL_TAG: &str = "sbx-terminal";
/// How much retained output a reattached terminal replays (enough for a
/// full screen and some scrollback; the agent's ring may hold less).
pub const REPLAY_BYTES: u64 = 64 << 10;
/// Largest terminal side accepted, in cells.
pub const MAX_CELLS: u16 = 1000;

/// Runs bash as a login shell where the image has it, else sh.
const SHELL: &str = "if command -v bash >/dev/null 2>&1; then exec bash -l; else exec sh -l; fi";

/// What a terminal connection asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TerminalRequest {
    /// Reattach to this running terminal shell (guest pid) instead of starting one.
    pub pid: Option<u32>,
    /// Terminal size.
    pub size: PtySize,
}

/// A connection to a terminal shell: its input, size and output.
pub struct Terminal {
    conn: AgentConn,
    process: Uuid,
    /// The shell's guest pid (what a reconnect names).
    pub pid: u32,
    output: AgentStream,
}

/// One item of a terminal's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TerminalOutput {
    /// Bytes the terminal printed.
    Data(Vec<u8>),
    /// The shell ended (its exit code, when it exited).
    Exited(Option<i32>),
}

/// A terminal size, validated.
pub fn terminal_size(cols: u16, rows: u16) -> Result<PtySize> {
    for (field, n) in [("cols", cols), ("rows", rows)] {
        if n == 0 || n > MAX_CELLS {
            return Err(ValidationError::Format {
                field,
                reason: format!("must be from 1 to {MAX_CELLS}"),
            }
            .into());
        }
    }
    Ok(PtySize { cols, rows })
}

impl Service {
    /// `GET /v1/sandboxes/{id}/terminal`: starts a login shell on a terminal
    /// of the requested size (or reattaches to the running one `pid` names,
    /// resized), and opens its output.
    pub async fn terminal_open(
        self: &Arc<Self>,
        workspace: &str,
        id: Uuid,
        req: TerminalRequest,
    ) -> Result<Terminal> {
        let size = terminal_size(req.size.cols, req.size.rows)?;
        let conn = self.agent(workspace, id).await?;
        let (info, tail_bytes, from_offset) = match req.pid {
            Some(pid) => {
                let info = find_shell(&conn, pid).await?;
                resize(&conn, info.id, size).await?;
                (info, REPLAY_BYTES, None)
            }
            None => (start_shell(&conn, size).await?, 0, Some(0)),
        };
        let output = conn
            .stream(Request::ProcessStream {
                process: info.id,
                tail_bytes,
                from_offset,
            })
            .await
            .map_err(agent_error)?;
        Ok(Terminal {
            conn,
            process: info.id,
            pid: info.pid.unwrap_or_default().max(0) as u32,
            output,
        })
    }
}

impl Terminal {
    /// Types `bytes` into the terminal.
    pub async fn input(&self, bytes: Vec<u8>) -> Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        let request = Request::ProcessInput {
            process: self.process,
        };
        let limit = sbx_agent_proto::client::IO_CALL_TIMEOUT;
        self.conn
            .call_with_payload(request, bytes, limit)
            .await
            .map(|_| ())
            .map_err(|e| agent_error_unsafe(e, "terminal input"))
    }

    /// Gives the terminal a new size (the shell gets SIGWINCH).
    pub async fn resize(&self, cols: u16, rows: u16) -> Result<()> {
        resize(&self.conn, self.process, terminal_size(cols, rows)?).await
    }

    /// The next output; `None` once the output has ended and been reported.
    pub async fn next(&mut self) -> Option<Result<TerminalOutput>> {
        loop {
            match self.output.next().await? {
                StreamItem::Event(Event::Chunk { .. }, bytes) => {
                    return Some(Ok(TerminalOutput::Data(bytes)))
                }
                StreamItem::Event(..) => {}
                StreamItem::End(..) => {
                    let code = match self
                        .conn
                        .call(Request::ProcessGet {
                            process: self.process,
                        })
                        .await
                    {
                        Ok((Reply::Process { process }, _)) => process.exit_code,
                        _ => None,
                    };
                    return Some(Ok(TerminalOutput::Exited(code)));
                }
                StreamItem::Failed(e) => {
                    return Some(Err(agent_error(crate::runtime::AgentCallError::Agent(e))))
                }
            }
        }
    }
}

async fn start_shell(conn: &AgentConn, size: PtySize) -> Result<ProcessInfo> {
    let env = BTreeMap::from([("TERM".to_string(), "xterm-256color".to_string())]);
    let request = Request::ProcessStart {
        command: CommandSpec {
            argv: vec!["/bin/sh".into(), "-c".into(), SHELL.into()],
            env,
            cwd: None,
        },
        options: ProcessOptions {
            // The sandbox's default user: the one exec and processes run as.
            user: None,
            stdin: false,
            pty: Some(size),
            tag: Some(TERMINAL_TAG.into()),
            kill_after_ms: None,
            // While a browser watches, no output is lost; while none does,
            // the shell never blocks (old output leaves the ring).
            backpressure: true,
        },
    };
    match conn.call(request).await {
        Ok((Reply::Process { process }, _)) if process.state == ProcessState::Failed => {
            let why = process.error.unwrap_or_default();
            // A custom image without /bin/sh can never have a terminal: not
            // a passing condition to retry.
            if why.contains("No such file or directory") {
                Err(ServiceError::Conflict(format!(
                    "the sandbox's image has no /bin/sh, so it has no terminal: {why}"
                )))
            } else {
                Err(ServiceError::Unavailable(format!(
                    "the terminal's shell could not start: {why}"
                )))
            }
        }
        Ok((Reply::Process { process }, _)) => Ok(process),
        Ok((other, _)) => Err(ServiceError::Internal(format!(
            "unexpected agent reply {other:?}"
        ))),
        Err(e) => Err(agent_error_unsafe(e, "terminal start")),
    }
}

/// The running terminal shell with guest pid `pid`; any other process (not
/// started as a terminal) is not found, so the route cannot drive it.
async fn find_shell(conn: &AgentConn, pid: u32) -> Result<ProcessInfo> {
    let processes = match conn.call(Request::ProcessList).await.map_err(agent_error)? {
        (Reply::Processes { processes }, _) => processes,
        (other, _) => {
            return Err(ServiceError::Internal(format!(
                "unexpected agent reply {other:?}"
            )))
        }
    };
    processes
        .into_iter()
        .find(|p| {
            !p.state.is_terminal()
                && p.pty
                && p.pid == i32::try_from(pid).ok()
                && p.tag.as_deref() == Some(TERMINAL_TAG)
        })
        .ok_or(ServiceError::ProcessNotFound)
}

async fn resize(conn: &AgentConn, process: Uuid, size: PtySize) -> Result<()> {
    conn.call(Request::ProcessResize { process, size })
        .await
        .map(|_| ())
        .map_err(agent_error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_bounded() {
        assert_eq!(
            terminal_size(80, 24).ok(),
            Some(PtySize { cols: 80, rows: 24 })
        );
        for (cols, rows) in [(0, 24), (80, 0), (MAX_CELLS + 1, 24), (80, MAX_CELLS + 1)] {
            assert!(terminal_size(cols, rows).is_err(), "{cols}x{rows}");
        }
    }
}
