//! Captured commands (exec) and managed processes.

use super::{agent_error, agent_error_unsafe, Result, Service, ServiceError};
use crate::runtime::{AgentCallError, AgentStream};
use sbx_agent_proto::{
    AgentErrorCode, ChunkMeta, CommandSpec, ProcessInfo, ProcessState, Reply, Request,
};
use sbx_api_types::validate::{self, ValidationError};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

/// Default exec and wait timeout (ms).
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;

/// How long past its timeout sbxd waits for the agent's answer to a process wait. A paused
/// (frozen) sandbox never answers, and the SDK sets no client timeout of its own, so sbxd
/// answers the timeout itself; waiting changes nothing, so that answer is always safe.
const WAIT_ANSWER_MARGIN: Duration = Duration::from_millis(500);

/// The result of a finished exec.
#[derive(Debug)]
pub struct ExecOutcome {
    /// Exit code.
    pub exit_code: i32,
    /// stdout bytes.
    pub stdout: Vec<u8>,
    /// stderr bytes.
    pub stderr: Vec<u8>,
}

/// Retained output chunks with their bytes.
#[derive(Debug)]
pub struct OutputSelection {
    /// Chunks, oldest first, each with its bytes.
    pub chunks: Vec<(ChunkMeta, Vec<u8>)>,
}

/// A validated command.
fn command_spec(
    command: Option<Vec<String>>,
    environment: Option<BTreeMap<String, String>>,
    cwd: Option<String>,
) -> Result<CommandSpec> {
    let argv = command.ok_or(ValidationError::Missing("command"))?;
    validate::command("command", &argv)?;
    let env = environment.unwrap_or_default();
    validate::environment("environment", &env, &[])?;
    let cwd = match cwd {
        Some(c) => validate::cwd(&c)?,
        None => None,
    };
    Ok(CommandSpec { argv, env, cwd })
}

impl Service {
    /// `POST /v2/sandboxes/{id}/exec`.
    pub async fn exec(
        self: &Arc<Self>,
        workspace: &str,
        id: Uuid,
        req: sbx_api_types::ExecRequest,
    ) -> Result<ExecOutcome> {
        let mut command = command_spec(req.command, req.environment, req.cwd)?;
        if command.cwd.is_none() {
            command.cwd = self.image_workdir(id).await;
        }
        // The agent's exec runs as root: an image's USER goes through
        // util-linux `runuser` (keeps the environment, sets HOME and USER).
        if let Some(user) = self.image_user(id).await {
            let mut argv = vec!["runuser".to_string(), "-u".into(), user, "--".into()];
            argv.append(&mut command.argv);
            command.argv = argv;
        }
        let timeout_ms = match req.timeout.as_deref() {
            Some(t) => validate::timeout_ms("timeout", t)?,
            None => DEFAULT_TIMEOUT_MS,
        };
        let conn = self.agent(workspace, id).await?;
        let max_output = self.config.limits.exec_output_bytes;
        let call = conn.call(Request::Exec {
            command,
            timeout_ms,
            max_output_bytes: max_output,
        });
        // The agent enforces the timeout; this only guards against a stuck sandbox.
        let answer = tokio::time::timeout(Duration::from_millis(timeout_ms + 10_000), call)
            .await
            .map_err(|_| {
                ServiceError::Ambiguous(
                    "the sandbox did not answer in time; the command may have run".into(),
                )
            })?;
        match answer {
            Ok((
                Reply::Exec {
                    exit_code,
                    stdout_len,
                    ..
                },
                mut payload,
            )) => {
                let split = (stdout_len as usize).min(payload.len());
                let stderr = payload.split_off(split);
                Ok(ExecOutcome {
                    exit_code,
                    stdout: payload,
                    stderr,
                })
            }
            Ok((other, _)) => Err(ServiceError::Internal(format!(
                "unexpected agent reply {other:?}"
            ))),
            Err(AgentCallError::Agent(e)) if e.code == AgentErrorCode::TimedOut => {
                Err(ServiceError::ExecTimedOut(timeout_ms))
            }
            Err(AgentCallError::Agent(e)) if e.code == AgentErrorCode::OutputTooLarge => {
                Err(ServiceError::ExecOutputTooLarge(max_output))
            }
            Err(e) => Err(agent_error_unsafe(e, "exec")),
        }
    }

    /// `POST /v2/sandboxes/{id}/processes`.
    pub async fn process_start(
        self: &Arc<Self>,
        workspace: &str,
        id: Uuid,
        req: sbx_api_types::ProcessStartRequest,
    ) -> Result<ProcessInfo> {
        let mut command = command_spec(req.command, req.environment, req.cwd)?;
        if command.cwd.is_none() {
            command.cwd = self.image_workdir(id).await;
        }
        let user = self.image_user(id).await;
        let conn = self.agent(workspace, id).await?;
        match conn
            .call(Request::ProcessStart {
                command,
                options: sbx_agent_proto::ProcessOptions {
                    user,
                    ..Default::default()
                },
            })
            .await
        {
            Ok((Reply::Process { process }, _)) if process.state == ProcessState::Failed => {
                Err(ServiceError::Invalid(ValidationError::Format {
                    field: "command",
                    reason: format!(
                        "could not start (process {} is FAILED): {}",
                        process.id,
                        process.error.unwrap_or_default()
                    ),
                }))
            }
            Ok((Reply::Process { process }, _)) => Ok(process),
            Ok((other, _)) => Err(ServiceError::Internal(format!(
                "unexpected agent reply {other:?}"
            ))),
            Err(e) => Err(agent_error_unsafe(e, "process start")),
        }
    }

    /// `GET /v2/sandboxes/{id}/processes`: processes sorted by id, paginated by id.
    pub async fn process_list(
        self: &Arc<Self>,
        workspace: &str,
        id: Uuid,
        limit: u32,
        cursor: Option<&str>,
    ) -> Result<(Vec<ProcessInfo>, Option<String>)> {
        let after = cursor
            .map(|c| {
                Uuid::parse_str(c).map_err(|_| ValidationError::Format {
                    field: "cursor",
                    reason: "not a cursor this server issued".into(),
                })
            })
            .transpose()?;
        let conn = self.agent(workspace, id).await?;
        let mut processes = match conn.call(Request::ProcessList).await.map_err(agent_error)? {
            (Reply::Processes { processes }, _) => processes,
            (other, _) => {
                return Err(ServiceError::Internal(format!(
                    "unexpected agent reply {other:?}"
                )))
            }
        };
        processes.sort_by_key(|p| p.id);
        let mut page: Vec<ProcessInfo> = processes
            .into_iter()
            .filter(|p| after.is_none_or(|a| p.id > a))
            .take(limit as usize + 1)
            .collect();
        let more = page.len() > limit as usize;
        page.truncate(limit as usize);
        let next = if more {
            page.last().map(|p| p.id.to_string())
        } else {
            None
        };
        Ok((page, next))
    }

    /// `GET /v2/sandboxes/{id}/processes/{pid}`.
    pub async fn process_get(
        self: &Arc<Self>,
        workspace: &str,
        id: Uuid,
        process: Uuid,
    ) -> Result<ProcessInfo> {
        let conn = self.agent(workspace, id).await?;
        match conn.call(Request::ProcessGet { process }).await {
            Ok((Reply::Process { process }, _)) => Ok(process),
            Ok((other, _)) => Err(ServiceError::Internal(format!(
                "unexpected agent reply {other:?}"
            ))),
            Err(e) => Err(process_error(e)),
        }
    }

    /// `POST .../processes/{pid}/signals`.
    pub async fn process_signal(
        self: &Arc<Self>,
        workspace: &str,
        id: Uuid,
        process: Uuid,
        req: sbx_api_types::SignalRequest,
    ) -> Result<()> {
        let signal = req.signal.ok_or(ValidationError::Missing("signal"))?;
        if !(1..=64).contains(&signal) {
            return Err(ValidationError::Format {
                field: "signal",
                reason: "must be an integer from 1 to 64".into(),
            }
            .into());
        }
        let conn = self.agent(workspace, id).await?;
        let request = Request::ProcessSignal {
            process,
            signal: signal as i32,
            include_children: req.include_children.unwrap_or(true),
        };
        match conn.call(request).await {
            Ok(_) => Ok(()),
            Err(AgentCallError::Agent(e)) if e.code == AgentErrorCode::NotFound => {
                Err(ServiceError::ProcessNotFound)
            }
            Err(e) => Err(agent_error_unsafe(e, "signal")),
        }
    }

    /// `POST .../processes/{pid}/wait`: long poll.
    pub async fn process_wait(
        self: &Arc<Self>,
        workspace: &str,
        id: Uuid,
        process: Uuid,
        timeout: Option<&str>,
    ) -> Result<ProcessInfo> {
        let timeout_ms = match timeout {
            Some(t) => validate::timeout_ms("timeout", t)?,
            None => DEFAULT_TIMEOUT_MS,
        };
        let conn = self.agent(workspace, id).await?;
        let call = conn.call(Request::ProcessWait {
            process,
            timeout_ms,
        });
        let deadline = Duration::from_millis(timeout_ms) + WAIT_ANSWER_MARGIN;
        let Ok(answer) = tokio::time::timeout(deadline, call).await else {
            return Err(ServiceError::WaitTimedOut(timeout_ms));
        };
        match answer {
            Ok((Reply::Process { process }, _)) => Ok(process),
            Ok((other, _)) => Err(ServiceError::Internal(format!(
                "unexpected agent reply {other:?}"
            ))),
            Err(AgentCallError::Agent(e)) if e.code == AgentErrorCode::TimedOut => {
                Err(ServiceError::WaitTimedOut(timeout_ms))
            }
            Err(e) => Err(process_error(e)),
        }
    }

    /// `GET .../processes/{pid}/output`.
    pub async fn process_output(
        self: &Arc<Self>,
        workspace: &str,
        id: Uuid,
        process: Uuid,
        tail_bytes: u64,
    ) -> Result<OutputSelection> {
        let conn = self.agent(workspace, id).await?;
        match conn
            .call(Request::ProcessOutput {
                process,
                tail_bytes,
            })
            .await
        {
            Ok((Reply::Output { chunks }, payload)) => Ok(OutputSelection {
                chunks: split_chunks(chunks, &payload),
            }),
            Ok((other, _)) => Err(ServiceError::Internal(format!(
                "unexpected agent reply {other:?}"
            ))),
            Err(e) => Err(process_error(e)),
        }
    }

    /// `GET .../processes/{pid}/output/stream`: tail (or from an offset), then live output.
    pub async fn process_stream(
        self: &Arc<Self>,
        workspace: &str,
        id: Uuid,
        process: Uuid,
        tail_bytes: u64,
        from_offset: Option<u64>,
    ) -> Result<AgentStream> {
        let conn = self.agent(workspace, id).await?;
        // Fail before the stream starts when the process is unknown or its
        // output is gone, so the caller gets a normal error response instead
        // of an error frame.
        let info = self.process_get(workspace, id, process).await?;
        if !info.output_retained && from_offset.is_none() {
            return Err(ServiceError::OutputNotRetained);
        }
        conn.stream(Request::ProcessStream {
            process,
            tail_bytes,
            from_offset,
        })
        .await
        .map_err(agent_error)
    }
}

fn process_error(e: AgentCallError) -> ServiceError {
    match e {
        AgentCallError::Agent(err) if err.code == AgentErrorCode::NotFound => {
            ServiceError::ProcessNotFound
        }
        other => agent_error(other),
    }
}

fn split_chunks(chunks: Vec<ChunkMeta>, payload: &[u8]) -> Vec<(ChunkMeta, Vec<u8>)> {
    let mut at = 0usize;
    chunks
        .into_iter()
        .map(|c| {
            let end = (at + c.len as usize).min(payload.len());
            let bytes = payload[at.min(end)..end].to_vec();
            at = end;
            (c, bytes)
        })
        .collect()
}
