//! Background process requests: start, signal, wait, output and stream.

use crate::server::{Outcome, Sink};
use crate::spawn::{self, SpawnError};
use crate::{console, Agent};
use sbx_agent_proto::{AgentError, AgentErrorCode, CommandSpec, Event, Reply};
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

/// `ProcessStart`: spawn in a new session and record it. A spawn failure is
/// recorded too, as a FAILED process, and returned as such.
pub async fn start(agent: &Agent, command: CommandSpec) -> Outcome {
    let env = agent.env.merged(&command.env);
    let argv = command.argv.clone();
    let spawned = match spawn::prepare(&command, env) {
        Ok(p) => agent.table.spawn_managed(&p, argv.clone()).map_err(|e| {
            SpawnError::from_io(argv.first().map(String::as_str).unwrap_or_default(), &e)
        }),
        Err(e) if e.is_invalid_request() => {
            return Err(AgentError::new(
                AgentErrorCode::InvalidArgument,
                e.to_string(),
            ))
        }
        Err(e) => Err(e),
    };
    let process = match spawned {
        Ok(info) => {
            console!(
                "started process {} pid {} argv={:?}",
                info.id,
                info.pid.unwrap_or(0),
                info.argv
            );
            info
        }
        Err(e) => {
            let info = agent.table.insert_failed(argv, e.to_string());
            console!("process {} failed to start: {e}", info.id);
            info
        }
    };
    Ok((Reply::Process { process }, Vec::new()))
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
pub async fn stream(
    agent: &Agent,
    process: Uuid,
    tail_bytes: u64,
    from_offset: Option<u64>,
    sink: &Sink,
) -> Outcome {
    let mut changed = agent.table.subscribe(process)?;
    let mut next = agent.table.stream_start(process, tail_bytes, from_offset)?;
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
