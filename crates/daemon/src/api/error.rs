//! The one place where errors become HTTP statuses and codes.

use crate::service::ServiceError;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use sbx_api_types::{validate::ValidationError, ErrorBody, ErrorCode};

/// An error on its way to the client.
#[derive(Debug)]
pub struct ApiError {
    /// Stable code.
    pub code: ErrorCode,
    /// Message for humans.
    pub message: String,
}

impl ApiError {
    /// Builds an error.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
        }
    }
}

impl From<ValidationError> for ApiError {
    fn from(e: ValidationError) -> Self {
        match e {
            ValidationError::Missing(_) => ApiError::new(ErrorCode::MissingField, e.to_string()),
            ValidationError::Format { .. } => {
                ApiError::new(ErrorCode::InvalidFieldFormat, e.to_string())
            }
        }
    }
}

impl From<crate::tenants::TenantError> for ApiError {
    fn from(e: crate::tenants::TenantError) -> Self {
        use crate::tenants::TenantError as T;
        let code = match &e {
            T::MissingKey => ErrorCode::AuthorizationHeaderMissing,
            T::InvalidKey(_) | T::UnknownKey(_) => ErrorCode::InvalidApiKey,
            T::BadName(_) => ErrorCode::InvalidFieldFormat,
            T::Store(_) | T::Random(_) => {
                tracing::warn!(error = %e, "authentication unavailable");
                ErrorCode::ComputeUnavailable
            }
        };
        ApiError::new(code, e.to_string())
    }
}

impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> Self {
        use ServiceError as S;
        let code = match &e {
            S::Invalid(v) => return v.clone().into(),
            S::BadRequest(_) => ErrorCode::InvalidRequest,
            S::SandboxNotFound => ErrorCode::SandboxNotFound,
            S::ProcessNotFound => ErrorCode::ProcessNotFound,
            S::OutputNotRetained => ErrorCode::ProcessOutputNotRetained,
            S::FileNotFound(_) => ErrorCode::FileNotFound,
            S::NotRegularFile(_) => ErrorCode::NotRegularFile,
            S::FileTooLarge(_) => ErrorCode::FileTooLarge,
            S::FileOperation(_) => ErrorCode::InvalidState,
            S::NameTaken(_) => ErrorCode::NameTaken,
            S::SnapshotNotFound => ErrorCode::SnapshotNotFound,
            S::SnapshotNotReady(_) => ErrorCode::SnapshotNotReady,
            S::SnapshotNameTaken(_) => ErrorCode::SnapshotNameTaken,
            S::WrongState(_) => ErrorCode::InvalidState,
            S::ExecTimedOut(_) => ErrorCode::ExecTimedOut,
            S::ExecOutputTooLarge(_) => ErrorCode::ExecOutputTooLarge,
            S::WaitTimedOut(_) => ErrorCode::ProcessWaitTimedOut,
            S::StartFailed(_) => ErrorCode::StartFailed,
            S::Ambiguous(_) => ErrorCode::OperationAmbiguous,
            S::IdempotencyKeyReused(_) => ErrorCode::IdempotencyKeyReused,
            S::Unavailable(_) => ErrorCode::ComputeUnavailable,
            S::Internal(_) => ErrorCode::InternalError,
        };
        match code {
            ErrorCode::InternalError => tracing::error!(error = %e, "internal error"),
            ErrorCode::ComputeUnavailable => tracing::warn!(error = %e, "unavailable"),
            _ => tracing::debug!(error = %e, "request refused"),
        }
        ApiError::new(code, e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.code.http_status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_vec(&ErrorBody::new(self.code.as_str(), self.message))
            .unwrap_or_default();
        let mut resp = (status, body).into_response();
        resp.headers_mut()
            .insert("content-type", HeaderValue::from_static("application/json"));
        resp
    }
}
