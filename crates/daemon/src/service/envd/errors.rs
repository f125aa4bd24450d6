//! envd's errors: named after the Connect codes the SDKs act on (contract §3.7).

use crate::runtime::AgentCallError;
use crate::service::ServiceError;
use sbx_agent_proto::AgentErrorCode;

/// Why an envd call failed.
#[derive(Debug, thiserror::Error)]
pub enum EnvdError {
    /// The sandbox does not exist or does not run (HTTP 502 "was not found" on
    /// plain routes, which the SDKs read as "not running").
    #[error("{0}")]
    SandboxGone(String),
    /// Missing or wrong access token or signature, or an unknown user.
    #[error("{0}")]
    Unauthenticated(String),
    /// No such process, file or watcher.
    #[error("{0}")]
    NotFound(String),
    /// The request is malformed or names something unusable.
    #[error("{0}")]
    InvalidArgument(String),
    /// The directory to create already exists.
    #[error("{0}")]
    AlreadyExists(String),
    /// The guest refused the operation (permissions).
    #[error("{0}")]
    PermissionDenied(String),
    /// The deadline the caller set (`Connect-Timeout-Ms`) passed.
    #[error("{0}")]
    DeadlineExceeded(String),
    /// Over a limit (file size, watchers, request size).
    #[error("{0}")]
    ResourceExhausted(String),
    /// The sandbox's disk is full.
    #[error("{0}")]
    NoSpace(String),
    /// Not built in sbx.
    #[error("{0}")]
    Unimplemented(String),
    /// Retry later (the agent is busy reconnecting, the node is unavailable).
    #[error("{0}")]
    Unavailable(String),
    /// Anything else; the text stays in the log.
    #[error("{0}")]
    Internal(String),
}

impl From<ServiceError> for EnvdError {
    fn from(e: ServiceError) -> Self {
        use ServiceError as S;
        match e {
            S::SandboxNotFound => EnvdError::SandboxGone("The sandbox was not found".into()),
            S::WrongState { .. } => {
                EnvdError::SandboxGone(format!("The sandbox was not found (not running: {e})"))
            }
            S::ProcessNotFound => EnvdError::NotFound("process not found".into()),
            S::FileNotFound(p) => EnvdError::NotFound(format!("path '{p}' does not exist")),
            S::Invalid(_) | S::BadRequest(_) | S::NotRegularFile(_) | S::FileOperation(_) => {
                EnvdError::InvalidArgument(e.to_string())
            }
            S::FileTooLarge(_) => EnvdError::ResourceExhausted(e.to_string()),
            S::StorageFull(_) => EnvdError::NoSpace(e.to_string()),
            S::AccessDenied(_) => EnvdError::PermissionDenied(e.to_string()),
            S::Unavailable(_) | S::Ambiguous(_) => EnvdError::Unavailable(e.to_string()),
            other => EnvdError::Internal(other.to_string()),
        }
    }
}

/// An agent failure on a path or process the caller named.
pub fn from_agent(e: AgentCallError, what: &str) -> EnvdError {
    let err = match e {
        AgentCallError::Agent(err) => err,
        other => return crate::service::agent_error(other).into(),
    };
    let message = format!("{what}: {}", err.message);
    match err.code {
        AgentErrorCode::NotFound => EnvdError::NotFound(message),
        // The agent's message for a user missing from the guest's /etc/passwd;
        // E2B answers that as `unauthenticated` (contract §3.1).
        AgentErrorCode::InvalidArgument if err.message.starts_with("invalid username") => {
            EnvdError::Unauthenticated(err.message)
        }
        AgentErrorCode::InvalidArgument
        | AgentErrorCode::NotRegularFile
        | AgentErrorCode::NotEmpty
        | AgentErrorCode::SpawnFailed
        | AgentErrorCode::Io => EnvdError::InvalidArgument(message),
        AgentErrorCode::PermissionDenied => EnvdError::PermissionDenied(message),
        AgentErrorCode::NoSpace => EnvdError::NoSpace(message),
        AgentErrorCode::TooLarge | AgentErrorCode::OutputTooLarge => {
            EnvdError::ResourceExhausted(message)
        }
        AgentErrorCode::TimedOut => EnvdError::DeadlineExceeded(message),
        AgentErrorCode::OutputNotRetained
        | AgentErrorCode::Protocol
        | AgentErrorCode::ConnectionRefused => EnvdError::Internal(message),
    }
}
