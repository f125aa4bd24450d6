//! `Exec`: run a command to completion and capture stdout and stderr.
//!
//! The child runs in its own session; timeouts and output overflow kill the
//! whole process group. The reply is sent once the process exited and both
//! pipes reached EOF, or once they stayed quiet after the exit when a
//! grandchild keeps a pipe open (the rules of [`crate::drain`]). If the request is cancelled (or its connection drops)
//! while the command runs, the process group is killed.

use crate::drain::{self, EXIT_DRAIN_LIMIT};
use crate::server::Outcome;
use crate::spawn::{self, SpawnError};
use crate::table::{Exit, Table, PIPE_READ_BYTES};
use crate::{console, Agent};
use sbx_agent_proto::{AgentError, AgentErrorCode, CommandSpec, Reply, MAX_FRAME_BYTES};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::time::{sleep, Instant};

/// Largest exec output that fits in one reply frame (room left for the header).
pub const MAX_EXEC_OUTPUT_BYTES: u64 = (MAX_FRAME_BYTES - 64 * 1024) as u64;

/// Errors local to exec (all reported to the daemon as [`AgentError`]s).
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// Killed after `timeout_ms`.
    #[error("command timed out after {0} ms")]
    TimedOut(u64),
    /// More output than allowed.
    #[error("command output exceeded {0} bytes")]
    OutputTooLarge(u64),
    /// The reaper dropped the status channel (should not happen).
    #[error("exit status of pid {0} was lost")]
    StatusLost(i32),
}

impl From<ExecError> for AgentError {
    fn from(e: ExecError) -> Self {
        let code = match e {
            ExecError::TimedOut(_) => AgentErrorCode::TimedOut,
            ExecError::OutputTooLarge(_) => AgentErrorCode::OutputTooLarge,
            ExecError::StatusLost(_) => AgentErrorCode::Io,
        };
        AgentError::new(code, e.to_string())
    }
}

/// The reply of a command that could not be started: like a shell, exit
/// code 127/126 with an `sbx: ...` message on stderr.
pub fn spawn_failure_reply(err: &SpawnError) -> Outcome {
    let mut msg = err.to_string().into_bytes();
    msg.push(b'\n');
    Ok((
        Reply::Exec {
            exit_code: err.exit_code(),
            stdout_len: 0,
            stderr_len: msg.len() as u64,
        },
        msg,
    ))
}

/// Kills the exec's process group when dropped while still armed.
struct KillOnDrop {
    table: Arc<Table>,
    pid: i32,
    armed: bool,
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if self.armed {
            self.table.kill_exec_group(self.pid);
        }
    }
}

/// Runs `spec` and captures its output.
pub async fn exec(
    agent: &Agent,
    spec: CommandSpec,
    timeout_ms: u64,
    max_output_bytes: u64,
) -> Outcome {
    let env = agent.env.merged(&spec.env);
    let prepared = match spawn::prepare(&spec, env) {
        Ok(p) => p,
        Err(e) if e.is_invalid_request() => {
            return Err(AgentError::new(
                AgentErrorCode::InvalidArgument,
                e.to_string(),
            ))
        }
        Err(e) => return spawn_failure_reply(&e),
    };
    let max_output = max_output_bytes.min(MAX_EXEC_OUTPUT_BYTES);
    let mut child = match agent.table.spawn_exec(&prepared) {
        Ok(c) => c,
        Err(e) => {
            let argv0 = spec.argv.first().map(String::as_str).unwrap_or_default();
            return spawn_failure_reply(&SpawnError::from_io(argv0, &e));
        }
    };
    let pid = child.pid;
    console!("exec pid {pid} argv={:?}", spec.argv);
    let mut guard = KillOnDrop {
        table: Arc::clone(&agent.table),
        pid,
        armed: true,
    };
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    let mut out_buf = vec![0u8; PIPE_READ_BYTES];
    let mut err_buf = vec![0u8; PIPE_READ_BYTES];
    let (mut out_open, mut err_open) = (true, true);
    let mut status: Option<Exit> = None;
    let timeout = sleep(Duration::from_millis(timeout_ms));
    tokio::pin!(timeout);
    // After the exit: ends when the pipes stayed quiet this long...
    let mut quiet_grace = Duration::ZERO;
    // ...or at this instant, whatever a grandchild still writes.
    let mut drain_until = Instant::now();
    let grace = sleep(Duration::from_secs(0));
    tokio::pin!(grace);

    while status.is_none() || out_open || err_open {
        let mut got_output = false;
        tokio::select! {
            // In this order: after a stall (a loaded machine) several can be
            // ready at once; an exit beats its timeout, and bytes beat the grace.
            biased;
            s = &mut child.status, if status.is_none() => match s {
                Ok(exit) => {
                    guard.armed = false;
                    status = Some(exit);
                    quiet_grace = drain::quiet_grace(pid);
                    drain_until = Instant::now() + EXIT_DRAIN_LIMIT;
                    grace.as_mut().reset(Instant::now() + quiet_grace);
                }
                Err(_) => return Err(ExecError::StatusLost(pid).into()),
            },
            _ = &mut timeout, if status.is_none() => {
                agent.table.kill_exec_group(pid);
                guard.armed = false;
                console!("exec pid {pid} timed out after {timeout_ms} ms; killed");
                return Err(ExecError::TimedOut(timeout_ms).into());
            },
            r = child.stdout.read(&mut out_buf), if out_open => match r {
                Ok(n) if n > 0 => {
                    stdout.extend_from_slice(&out_buf[..n]);
                    got_output = true;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                _ => out_open = false,
            },
            r = child.stderr.read(&mut err_buf), if err_open => match r {
                Ok(n) if n > 0 => {
                    stderr.extend_from_slice(&err_buf[..n]);
                    got_output = true;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                _ => err_open = false,
            },
            _ = &mut grace, if status.is_some() => break,
        }
        if got_output && status.is_some() {
            grace
                .as_mut()
                .reset((Instant::now() + quiet_grace).min(drain_until));
        }
        if (stdout.len() + stderr.len()) as u64 > max_output {
            agent.table.kill_exec_group(pid);
            guard.armed = false;
            console!("exec pid {pid} output over {max_output} bytes; killed");
            return Err(ExecError::OutputTooLarge(max_output).into());
        }
    }
    let exit = status.ok_or(ExecError::StatusLost(pid))?;
    console!("exec pid {pid} exited code {}", exit.exit_code());
    let (stdout_len, stderr_len) = (stdout.len() as u64, stderr.len() as u64);
    stdout.extend_from_slice(&stderr);
    Ok((
        Reply::Exec {
            exit_code: exit.exit_code(),
            stdout_len,
            stderr_len,
        },
        stdout,
    ))
}
