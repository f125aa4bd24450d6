//! Background process requests: start, signal, wait, output and stream.

use crate::launch::{self, Credentials, LaunchError};
use crate::server::{Outcome, Sink};
use crate::spawn::{self, SpawnError};
use crate::users::UserError;
use crate::{console, Agent};
use nix::errno::Errno;
use sbx_agent_proto::{
    AgentError, AgentErrorCode, CommandSpec, Event, ProcessInfo, ProcessOptions, ProcessState,
    Reply,
};
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

/// Errors of process requests (reported to the daemon as [`AgentError`]s).
#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    /// Signal number outside 1..=64.
    #[error("signal {0} is out of range 1..=64")]
    BadSignal(i32),
    /// `ProcessWait` ran out of time.
    #[error("process {0} still running after {1} ms")]
    WaitTimedOut(Uuid, u64),
    /// The process record disappeared while being streamed.
    #[error("process {0} is gone")]
    Gone(Uuid),
}

impl From<ProcError> for AgentError {
    fn from(e: ProcError) -> Self {
        let code = match e {
            ProcError::BadSignal(_) => AgentErrorCode::InvalidArgument,
            ProcError::WaitTimedOut(..) => AgentErrorCode::TimedOut,
            ProcError::Gone(_) => AgentErrorCode::NotFound,
        };
        AgentError::new(code, e.to_string())
    }
}

/// What the table records for a process before it runs.
fn initial_info(command: &CommandSpec, options: &ProcessOptions) -> ProcessInfo {
    ProcessInfo {
        id: Uuid::nil(),
        argv: command.argv.clone(),
        pid: None,
        state: ProcessState::Starting,
        exit_code: None,
        signal: None,
        error: None,
        started_at_ms: None,
        ended_at_ms: None,
        output_retained: true,
        env: command.env.clone(),
        cwd: command.cwd.clone(),
        tag: options.tag.clone(),
        user: options.user.clone(),
        pty: options.pty.is_some(),
        stdin_open: false,
        output_bytes: 0,
    }
}

fn invalid(e: impl ToString) -> AgentError {
    AgentError::new(AgentErrorCode::InvalidArgument, e.to_string())
}

/// `ProcessStart`: spawn in a new process group (a new session on a
/// terminal), as the requested user, and record it. A spawn failure is
/// recorded too, as a FAILED process, and returned as such; an unknown user
/// or a malformed command fails the request.
pub async fn start(agent: &Agent, command: CommandSpec, options: ProcessOptions) -> Outcome {
    let user = match &options.user {
        Some(name) => Some(agent.users.user(name).map_err(|e| match e {
            UserError::Unknown(_) => invalid(e),
            UserError::Read { .. } => AgentError::new(AgentErrorCode::Io, e.to_string()),
        })?),
        None => None,
    };
    let env = agent.env.merged_for(user.as_ref(), &command.env);
    let mut spec = command.clone();
    if let Some(u) = &user {
        if spec.cwd.as_deref().is_none_or(str::is_empty) {
            spec.cwd = Some(u.home.clone());
        }
    }
    let info = initial_info(&command, &options);
    let argv0 = command.argv.first().cloned().unwrap_or_default();
    let launch = launch::Options {
        stdin_pipe: options.stdin && options.pty.is_none(),
        pty: options.pty,
        creds: user.map(|u| Credentials {
            uid: u.uid,
            gid: u.gid,
            groups: u.groups,
        }),
    };
    let spawned = match spawn::prepare(&spec, env) {
        Ok(p) => agent
            .table
            .spawn_managed(&p, &launch, info.clone(), options.backpressure)
            .map_err(|e| match e {
                LaunchError::Cwd(io) => SpawnError::BadCwd {
                    cwd: p.cwd.to_string_lossy().into_owned(),
                    errno: Errno::from_raw(io.raw_os_error().unwrap_or(libc::EIO)),
                },
                LaunchError::Io(io) => SpawnError::from_io(&argv0, &io),
            }),
        Err(e) if e.is_invalid_request() => return Err(invalid(e)),
        Err(e) => Err(e),
    };
    let process = match spawned {
        Ok(started) => {
            console!(
                "started process {} pid {} argv={:?}",
                started.id,
                started.pid.unwrap_or(0),
                started.argv
            );
            if let Some(ms) = options.kill_after_ms {
                kill_after(agent, started.id, ms);
            }
            started
        }
        Err(e) => {
            let failed = agent.table.insert_failed(info, e.to_string());
            console!("process {} failed to start: {e}", failed.id);
            failed
        }
    };
    Ok((Reply::Process { process }, Vec::new()))
}

/// SIGKILLs the process group `ms` after now, unless it ended before
/// (the table then leaves its possibly reused pid alone).
fn kill_after(agent: &Agent, id: Uuid, ms: u64) {
    let table = Arc::clone(&agent.table);
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        let _ = table.signal(id, libc::SIGKILL, true);
    });
}

/// The answer to a `process_input` once its bytes were written (queued by
/// [`crate::table::Table::input`] in the connection's read order).
pub async fn input_written(
    process: Uuid,
    written: tokio::sync::oneshot::Receiver<std::io::Result<()>>,
) -> Outcome {
    match written.await {
        Ok(Ok(())) => Ok((Reply::Ok, Vec::new())),
        // The reader end is gone: the process closed its stdin or ended.
        Ok(Err(e)) if matches!(e.raw_os_error(), Some(libc::EPIPE) | Some(libc::EIO)) => Err(
            invalid(format!("stdin of process {process} is closed: {e}")),
        ),
        Ok(Err(e)) => Err(AgentError::new(
            AgentErrorCode::Io,
            format!("writing to process {process}: {e}"),
        )),
        Err(_) => Err(invalid(format!("stdin of process {process} is closed"))),
    }
}

/// The answer to a `process_close_stdin` once the pipe is closed.
pub async fn stdin_closed(closed: tokio::sync::oneshot::Receiver<()>) -> Outcome {
    // A writer that already ended has closed the pipe as well.
    let _ = closed.await;
    Ok((Reply::Ok, Vec::new()))
}

/// `ProcessSignal`.
pub fn signal(agent: &Agent, process: Uuid, signal: i32, include_children: bool) -> Outcome {
    if !(1..=64).contains(&signal) {
        return Err(ProcError::BadSignal(signal).into());
    }
    agent.table.signal(process, signal, include_children)?;
    Ok((Reply::Ok, Vec::new()))
}

/// `ProcessWait`: the process once terminal, or `timed_out`.
pub async fn wait(agent: &Agent, process: Uuid, timeout_ms: u64) -> Outcome {
    let mut changed = agent.table.subscribe(process)?;
    let deadline = tokio::time::Instant::now() + Duration::from_millis(timeout_ms);
    loop {
        let info = agent.table.get(process)?;
        if info.state.is_terminal() {
            return Ok((Reply::Process { process: info }, Vec::new()));
        }
        match tokio::time::timeout_at(deadline, changed.changed()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return Err(ProcError::Gone(process).into()),
            Err(_) => return Err(ProcError::WaitTimedOut(process, timeout_ms).into()),
        }
    }
}

/// `ProcessOutput`: retained chunks (a tail) with their bytes as payload.
pub fn output(agent: &Agent, process: Uuid, tail_bytes: u64) -> Outcome {
    let chunks = agent.table.output(process, tail_bytes)?;
    let mut payload = Vec::with_capacity(chunks.iter().map(|c| c.bytes.len()).sum());
    for c in &chunks {
        payload.extend_from_slice(&c.bytes);
    }
    let chunks = chunks.iter().map(|c| c.meta()).collect();
    Ok((Reply::Output { chunks }, payload))
}

/// `ProcessStream`: retained output from the tail or `from_offset`, then live
/// output, then `StreamEnd` once the process is terminal and all was sent.
///
/// A reader slower than the process may find bytes evicted from the ring; it
/// then continues at the oldest retained chunk, so the gap shows in offsets.
/// Not so for a process started with `backpressure`: the stream registers
/// its position and the output readers wait for it (see [`crate::flow`]);
/// the registration goes when this future ends or is dropped (cancel,
/// connection gone).
pub async fn stream(
    agent: &Agent,
    process: Uuid,
    tail_bytes: u64,
    from_offset: Option<u64>,
    sink: &Sink,
) -> Outcome {
    let mut changed = agent.table.subscribe(process)?;
    let mut next = agent.table.stream_start(process, tail_bytes, from_offset)?;
    let slot = agent.table.stream_open(process, next);
    loop {
        changed.borrow_and_update();
        let view = agent.table.stream_view(process, next)?;
        for chunk in view.chunks {
            next = chunk.end();
            sink.event(
                Event::Chunk {
                    chunk: chunk.meta(),
                },
                chunk.bytes,
            )
            .await?;
            if let Some(slot) = &slot {
                slot.advance(next);
            }
        }
        if view.terminal {
            return Ok((
                Reply::StreamEnd {
                    next_offset: view.next_offset.max(next),
                },
                Vec::new(),
            ));
        }
        if changed.changed().await.is_err() {
            return Err(ProcError::Gone(process).into());
        }
    }
}
