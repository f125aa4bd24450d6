//! The one error type of the client.

use sbx_api_types::ErrorBody;
use std::fmt;

/// Everything a client call can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered with an error envelope (or a stream error frame).
    #[error("{}", ApiDisplay { code, message, request_id })]
    Api {
        /// HTTP status (the stream's status, usually 200, for stream error frames).
        status: u16,
        /// Stable error code, e.g. `sandbox_not_found`.
        code: String,
        /// Human-readable message.
        message: String,
        /// The `x-request-id` response header.
        request_id: Option<String>,
    },
    /// The request did not complete: connection refused or reset, a body cut short.
    #[error("transport error: {}", chain(.0))]
    Transport(#[source] reqwest::Error),
    /// The server's answer was not what the contract says.
    #[error("could not decode the response: {0}")]
    Decode(String),
    /// A local read or write failed (upload source, download destination, short download).
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    /// The caller's input was refused before anything was sent (e.g. a malformed base URL).
    #[error("invalid input: {0}")]
    Invalid(String),
}

struct ApiDisplay<'a> {
    code: &'a str,
    message: &'a str,
    request_id: &'a Option<String>,
}

impl fmt::Display for ApiDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)?;
        if let Some(id) = self.request_id {
            write!(f, " (request {id})")?;
        }
        Ok(())
    }
}

/// reqwest's own message is terse ("error sending request"); add the causes.
fn chain(e: &reqwest::Error) -> String {
    let mut out = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

impl From<reqwest::Error> for ClientError {
    fn from(e: reqwest::Error) -> Self {
        if e.is_decode() {
            ClientError::Decode(chain(&e))
        } else {
            ClientError::Transport(e)
        }
    }
}

impl ClientError {
    /// Builds the error for a non-success response from its status, body and request id.
    ///
    /// The first item of `{errors:[{code,message}]}` wins; a body that is not an envelope
    /// becomes `internal_error` with "Sandbox API returned HTTP <status>", as in the SDK.
    pub fn from_response_parts(status: u16, body: &[u8], request_id: Option<String>) -> Self {
        let first = serde_json::from_slice::<ErrorBody>(body)
            .ok()
            .and_then(|b| b.errors.into_iter().next())
            .filter(|e| !e.code.is_empty());
        match first {
            Some(item) => ClientError::Api {
                status,
                code: item.code,
                message: item.message,
                request_id,
            },
            None => ClientError::Api {
                status,
                code: "internal_error".into(),
                message: format!("Sandbox API returned HTTP {status}"),
                request_id,
            },
        }
    }

    /// The error code, for API errors.
    pub fn code(&self) -> Option<&str> {
        match self {
            ClientError::Api { code, .. } => Some(code),
            _ => None,
        }
    }

    /// The HTTP status, for API errors.
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Api { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The server's request id, for API errors.
    pub fn request_id(&self) -> Option<&str> {
        match self {
            ClientError::Api { request_id, .. } => request_id.as_deref(),
            _ => None,
        }
    }

    /// Whether the error has the given code.
    pub fn is_code(&self, code: &str) -> bool {
        self.code() == Some(code)
    }

    /// `sandbox_not_found`, `sandbox_process_not_found` or `sandbox_snapshot_not_found`.
    pub fn is_not_found(&self) -> bool {
        matches!(
            self.code(),
            Some("sandbox_not_found" | "sandbox_process_not_found" | "sandbox_snapshot_not_found")
        )
    }

    /// Whether repeating the call is the right reaction, by the SDK's rule (§7.3):
    /// `compute_unavailable`, `rate_limited`, HTTP 429 or 503, or a transport failure.
    /// Callers must still only repeat calls that are safe to repeat.
    pub fn is_retryable(&self) -> bool {
        match self {
            ClientError::Api { status, code, .. } => {
                let ambiguous = matches!(
                    code.as_str(),
                    "operation_ambiguous"
                        | "sandbox_exec_output_too_large"
                        | "sandbox_exec_timed_out"
                );
                !ambiguous
                    && (matches!(code.as_str(), "compute_unavailable" | "rate_limited")
                        || matches!(status, 429 | 503))
            }
            ClientError::Transport(_) => true,
            ClientError::Decode(_) | ClientError::Io(_) | ClientError::Invalid(_) => false,
        }
    }
}
