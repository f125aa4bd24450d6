//! The one place where errors become HTTP statuses and codes.

use super::browser_guard::GuardError;
use crate::service::ServiceError;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use sbx_api_types::{validate::ValidationError, ErrorBody, ErrorCode};
use sbx_connect::credentials::CredentialsError;
use sbx_connect::service::{ErrorClass, ServiceError as ConnectError, WebhookError};

/// An error on its way to the client.
#[derive(Debug)]
pub struct ApiError {
    /// Stable code.
    pub code: ErrorCode,
    /// Message for humans.
    pub message: String,
    /// Seconds for a `Retry-After` header (429s).
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// Builds an error.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
            retry_after: None,
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

impl From<crate::service::metrics::MetricsError> for ApiError {
    fn from(e: crate::service::metrics::MetricsError) -> Self {
        use crate::service::metrics::MetricsError as M;
        let code = match &e {
            M::Missing => ErrorCode::AuthorizationHeaderMissing,
            M::NoToken | M::Wrong => ErrorCode::InvalidApiKey,
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
            S::SnapshotLimit(_) => ErrorCode::SnapshotLimitExceeded,
            // Retryable on purpose: the quota frees up as the workspace's sandboxes end.
            S::WorkspaceQuota(_) => ErrorCode::RateLimited,
            S::WrongState { .. } => ErrorCode::InvalidState,
            // A transition that kept losing compare-and-set races: the state moved on.
            S::Conflict(_) => ErrorCode::InvalidState,
            S::ExecTimedOut(_) => ErrorCode::ExecTimedOut,
            S::ExecOutputTooLarge(_) => ErrorCode::ExecOutputTooLarge,
            S::WaitTimedOut(_) => ErrorCode::ProcessWaitTimedOut,
            S::StartFailed(_) => ErrorCode::StartFailed,
            S::Ambiguous(_) => ErrorCode::OperationAmbiguous,
            S::IdempotencyKeyReused(_) => ErrorCode::IdempotencyKeyReused,
            S::NodeNotFound(_) => ErrorCode::NodeNotFound,
            S::VolumeNotFound(_) => ErrorCode::VolumeNotFound,
            S::VolumeNameTaken(_) => ErrorCode::VolumeNameTaken,
            S::ImageNotFound(_) => ErrorCode::ImageNotFound,
            S::ImageInvalid(_) => ErrorCode::ImageInvalid,
            S::ImageTooLarge(_) => ErrorCode::PayloadTooLarge,
            S::ImageQuota { .. } => ErrorCode::ImageQuotaExceeded,
            S::TemplateNotFound(_) => ErrorCode::TemplateNotFound,
            S::TemplateNameTaken(_) => ErrorCode::TemplateNameTaken,
            S::TemplateNotReady { .. } => ErrorCode::TemplateNotReady,
            S::NotBuilt(_) => ErrorCode::NotImplemented,
            S::AccessDenied(_) => ErrorCode::AccessDenied,
            S::Unavailable(_) => ErrorCode::ComputeUnavailable,
            S::StorageFull(_) => ErrorCode::StorageFull,
            S::Internal(_) => ErrorCode::InternalError,
        };
        match code {
            ErrorCode::InternalError => tracing::error!(error = %e, "internal error"),
            ErrorCode::ComputeUnavailable => tracing::warn!(error = %e, "unavailable"),
            ErrorCode::StorageFull => tracing::warn!(error = %e, "data disk full"),
            _ => tracing::debug!(error = %e, "request refused"),
        }
        ApiError::new(code, e.to_string())
    }
}

/// The Connect use case that failed: decides the code of an invalid-request or conflict error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectOp {
    /// A package upload: invalid is a bad package, conflict an existing version.
    Upload,
    /// Creating or changing a connection: invalid is bad config, origin, credentials or schedule.
    Connection,
    /// Anything else.
    Other,
}

impl ApiError {
    /// The Connect runtime is not installed in this daemon.
    pub fn connect_unavailable(e: ServiceError) -> Self {
        tracing::warn!(error = %e, "connect unavailable");
        ApiError::new(
            ErrorCode::ConnectUnavailable,
            "the Connect runtime is not running",
        )
    }

    /// Maps a Connect service error for the use case `op`. Internal and upstream errors get a
    /// fixed message: their text (paths, provider answers) stays in the daemon log.
    pub fn connect(op: ConnectOp, e: ConnectError) -> Self {
        let (code, message) = connect_code(op, &e);
        match code {
            ErrorCode::InternalError => tracing::error!(error = %e, "connect internal error"),
            ErrorCode::ConnectOauthFailed => tracing::warn!(error = %e, "connect OAuth failed"),
            ErrorCode::StorageFull => tracing::warn!(error = %e, "connect: data disk full"),
            ErrorCode::ComputeUnavailable => {
                tracing::warn!(error = %e, "connect: database unavailable")
            }
            _ => tracing::debug!(error = %e, "connect request refused"),
        }
        ApiError::new(code, message.unwrap_or_else(|| e.to_string()))
    }
}

/// The code for a Connect error and, when its own text must not be shown, the message to send.
fn connect_code(op: ConnectOp, e: &ConnectError) -> (ErrorCode, Option<String>) {
    use ConnectError as C;
    match (e.class(), e) {
        (ErrorClass::NotFound, C::NotFound(what)) => (not_found_code(what), None),
        (ErrorClass::NotFound, _) => (ErrorCode::RouteNotFound, None),
        (ErrorClass::Conflict, _) if op == ConnectOp::Upload => {
            (ErrorCode::ConnectVersionExists, None)
        }
        (ErrorClass::Conflict, _) => (ErrorCode::ConnectInvalidState, None),
        (ErrorClass::Invalid, C::Oauth(_)) => (ErrorCode::ConnectOauthRejected, None),
        // A secret too short to redact: a malformed field, named in the message, not a config
        // problem of the package.
        (ErrorClass::Invalid, C::Credentials(CredentialsError::TooShort { .. })) => {
            (ErrorCode::InvalidFieldFormat, None)
        }
        (ErrorClass::Invalid, _) => match op {
            ConnectOp::Upload => (ErrorCode::ConnectInvalidPackage, None),
            ConnectOp::Connection => (ErrorCode::ConnectInvalidConfig, None),
            ConnectOp::Other => (ErrorCode::InvalidRequest, None),
        },
        (ErrorClass::Upstream, _) => (
            ErrorCode::ConnectOauthFailed,
            Some("the OAuth token endpoint failed; try Connect with OAuth again".into()),
        ),
        // Fixed text: the error names files under the data dir; it stays in the log.
        (ErrorClass::StorageFull, _) => (
            ErrorCode::StorageFull,
            Some("the data disk is full: the Connect runtime could not record the change, so nothing changed; free space in the data dir, then retry".into()),
        ),
        // As the sandbox API answers a store that is down: 503, retryable.
        (ErrorClass::Unavailable, _) => (
            ErrorCode::ComputeUnavailable,
            Some("the Connect database is unavailable, so nothing changed; retry".into()),
        ),
        (ErrorClass::Internal, _) => (
            ErrorCode::InternalError,
            Some("internal error in the Connect runtime".into()),
        ),
    }
}

impl ApiError {
    /// Maps a refusal of the webhook delivery path.
    pub fn webhook(e: WebhookError) -> Self {
        let (code, retry_after) = match &e {
            WebhookError::UnknownToken => (ErrorCode::ConnectWebhookNotFound, None),
            WebhookError::Signature(_) => (ErrorCode::ConnectWebhookSignatureInvalid, None),
            WebhookError::TooLarge(_) => (ErrorCode::PayloadTooLarge, None),
            WebhookError::RateLimited { retry_after_secs }
            | WebhookError::InboxFull {
                retry_after_secs, ..
            } => (ErrorCode::RateLimited, Some(*retry_after_secs)),
            WebhookError::Service(_) => {
                let WebhookError::Service(inner) = e else {
                    unreachable!()
                };
                return ApiError::connect(ConnectOp::Other, inner);
            }
        };
        tracing::debug!(error = %e, "webhook delivery refused");
        ApiError {
            code,
            message: e.to_string(),
            retry_after,
        }
    }
}

/// The not-found code for what the Connect service says is missing.
fn not_found_code(what: &str) -> ErrorCode {
    match what {
        "package version" | "package" => ErrorCode::ConnectPackageNotFound,
        "build" => ErrorCode::ConnectBuildNotFound,
        "connection" => ErrorCode::ConnectConnectionNotFound,
        "run" => ErrorCode::ConnectRunNotFound,
        "sync" => ErrorCode::ConnectSyncNotFound,
        "oauth state" => ErrorCode::ConnectOauthStateNotFound,
        "delivery" => ErrorCode::ConnectDeliveryNotFound,
        _ => ErrorCode::RouteNotFound,
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.code.http_status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut resp = envelope(status, self.code.as_str(), self.message);
        if let Some(secs) = self.retry_after {
            resp.headers_mut()
                .insert("retry-after", HeaderValue::from(secs));
        }
        resp
    }
}

/// The browser guard's refusals. Their codes are sbxd's own, outside
/// `ErrorCode` for now (docs/openapi.yaml lists them in its introduction).
impl IntoResponse for GuardError {
    fn into_response(self) -> Response {
        let (status, code) = match &self {
            GuardError::ForeignHost(_) => (StatusCode::FORBIDDEN, "forbidden_host"),
            GuardError::ForeignOrigin(_) | GuardError::CrossSite(_) => {
                (StatusCode::FORBIDDEN, "forbidden_origin")
            }
            GuardError::NotJson(_) => {
                (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")
            }
        };
        // Not debug: a console that stops working should say why in the log.
        tracing::info!(error = %self, code, "browser guard refused a request");
        envelope(status, code, self.to_string())
    }
}

/// The error envelope `{"errors":[{code, message}]}` with its status.
fn envelope(status: StatusCode, code: &str, message: String) -> Response {
    let body = serde_json::to_vec(&ErrorBody::new(code, message)).unwrap_or_default();
    let mut resp = (status, body).into_response();
    resp.headers_mut()
        .insert("content-type", HeaderValue::from_static("application/json"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(op: ConnectOp, e: ConnectError) -> (&'static str, u16, String) {
        let a = ApiError::connect(op, e);
        (a.code.as_str(), a.code.http_status(), a.message)
    }

    #[test]
    fn a_conflict_that_outlasted_its_retries_is_a_409() {
        let raced = ApiError::from(ServiceError::from(sbx_store::StoreError::Conflict(
            "sandboxes row is at generation 4, not 3".into(),
        )));
        assert_eq!(
            (raced.code, raced.code.http_status()),
            (ErrorCode::InvalidState, 409)
        );
    }

    #[test]
    fn wrong_state_names_the_state_the_operation_needs() {
        let resume = ApiError::from(ServiceError::WrongState {
            is: "TERMINATED",
            needs: "PAUSED",
        });
        assert_eq!(
            (resume.code.as_str(), resume.code.http_status()),
            ("invalid_request", 409)
        );
        assert_eq!(
            resume.message,
            "sandbox is TERMINATED; this operation needs PAUSED"
        );
        let exec = ApiError::from(ServiceError::not_running(
            sbx_api_types::SandboxStatus::Paused,
        ));
        assert_eq!(
            exec.message,
            "sandbox is PAUSED; this operation needs RUNNING"
        );
    }

    #[test]
    fn webhook_refusals_have_their_codes_and_retry_after() {
        use sbx_connect::service::WebhookError as W;
        let answer = |e: W| {
            let resp = ApiError::webhook(e).into_response();
            let retry = resp
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap_or_default().to_string());
            (resp.status().as_u16(), retry)
        };
        assert_eq!(answer(W::UnknownToken), (404, None));
        assert_eq!(
            answer(W::Signature(
                sbx_connect::signature::SignatureError::Mismatch
            )),
            (401, None)
        );
        assert_eq!(answer(W::TooLarge(1 << 20)), (413, None));
        assert_eq!(
            answer(W::RateLimited {
                retry_after_secs: 2
            }),
            (429, Some("2".into()))
        );
        assert_eq!(
            answer(W::InboxFull {
                max: 1000,
                retry_after_secs: 30
            }),
            (429, Some("30".into()))
        );
        let code = ApiError::webhook(W::InboxFull {
            max: 1000,
            retry_after_secs: 30,
        })
        .code;
        assert_eq!(code.as_str(), "rate_limited");
    }

    #[test]
    fn connect_not_found_codes() {
        for (what, want) in [
            ("package version", "connect_package_not_found"),
            ("build", "connect_build_not_found"),
            ("connection", "connect_connection_not_found"),
            ("run", "connect_run_not_found"),
            ("sync", "connect_sync_not_found"),
            ("oauth state", "connect_oauth_state_not_found"),
        ] {
            let (c, status, _) = code(ConnectOp::Other, ConnectError::NotFound(what));
            assert_eq!((c, status), (want, 404), "{what}");
        }
    }

    #[test]
    fn connect_invalid_and_conflict_depend_on_the_use_case() {
        let bad = || ConnectError::Invalid("$.pageSize: must be an integer".into());
        assert_eq!(code(ConnectOp::Upload, bad()).0, "connect_invalid_package");
        assert_eq!(code(ConnectOp::Upload, bad()).1, 400);
        let (c, status, message) = code(ConnectOp::Connection, bad());
        assert_eq!((c, status), ("connect_invalid_config", 422));
        assert!(message.starts_with("$.pageSize"), "{message}");
        assert_eq!(code(ConnectOp::Other, bad()).0, "invalid_request");
        let taken = || ConnectError::Conflict("exists".into());
        assert_eq!(
            code(ConnectOp::Upload, taken()),
            ("connect_version_exists", 409, "exists".into())
        );
        assert_eq!(code(ConnectOp::Other, taken()).0, "connect_invalid_state");
    }

    #[test]
    fn a_too_short_secret_is_a_400_naming_the_field_and_the_minimum() {
        let short = ConnectError::Credentials(CredentialsError::TooShort {
            field: "key",
            min: 8,
        });
        let (c, status, message) = code(ConnectOp::Connection, short);
        assert_eq!((c, status), ("invalid_field_format", 400));
        assert!(
            message.starts_with("credentials.key: must be at least 8 bytes"),
            "{message}"
        );
        // Credentials of the wrong kind stay a 422 like any other unfitting connection input.
        let wrong = ConnectError::Credentials(CredentialsError::WrongKind {
            wanted: "apiKey",
            given: "bearer",
        });
        assert_eq!(
            code(ConnectOp::Connection, wrong),
            (
                "connect_invalid_config",
                422,
                "the package needs apiKey credentials, not bearer".into()
            )
        );
    }

    #[test]
    fn a_full_disk_is_storage_full_everywhere() {
        let e = ConnectError::StorageFull("writing /var/lib/sbx/connect/tarballs/x.tmp".into());
        let (c, status, message) = code(ConnectOp::Upload, e);
        assert_eq!((c, status), ("storage_full", 503));
        assert!(message.contains("disk is full"), "{message}");
        assert!(!message.contains("tarballs"), "{message}");
        let e = ServiceError::StorageFull(crate::service::STORE_FULL.into());
        let a = ApiError::from(e);
        assert_eq!(
            (a.code.as_str(), a.code.http_status()),
            ("storage_full", 503)
        );
    }

    #[test]
    fn an_unreachable_connect_database_is_a_retryable_503() {
        let e = sbx_connect::store::StoreError::Unavailable("connection refused".into());
        let (c, status, message) = code(ConnectOp::Other, ConnectError::from(e));
        assert_eq!((c, status), ("compute_unavailable", 503));
        assert!(message.contains("retry"), "{message}");
    }

    #[test]
    fn an_unreachable_store_is_a_retryable_503() {
        let e = sbx_store::StoreError::Unavailable("connection refused".into());
        let a = ApiError::from(ServiceError::from(e));
        assert_eq!(
            (a.code.as_str(), a.code.http_status()),
            ("compute_unavailable", 503)
        );
        assert!(a.message.contains("retry"), "{}", a.message);
    }

    #[test]
    fn browser_guard_refusals_are_403_or_415_envelopes() {
        for (e, status, code) in [
            (
                GuardError::ForeignHost("evil.example".into()),
                403,
                "forbidden_host",
            ),
            (
                GuardError::ForeignOrigin("http://evil.example".into()),
                403,
                "forbidden_origin",
            ),
            (
                GuardError::CrossSite("cross-site".into()),
                403,
                "forbidden_origin",
            ),
            (
                GuardError::NotJson("text/plain".into()),
                415,
                "unsupported_media_type",
            ),
        ] {
            let resp = e.into_response();
            assert_eq!(resp.status().as_u16(), status, "{code}");
            assert_eq!(resp.headers()["content-type"], "application/json");
            let body = futures::executor::block_on(axum::body::to_bytes(resp.into_body(), 4096))
                .expect("body");
            let body: ErrorBody = serde_json::from_slice(&body).expect("envelope");
            assert_eq!(body.errors[0].code, code);
        }
    }

    #[test]
    fn connect_internal_errors_hide_their_text() {
        let e = ConnectError::Io("/var/lib/sbx/connect/secret-path: denied".into());
        let (c, status, message) = code(ConnectOp::Other, e);
        assert_eq!((c, status), ("internal_error", 500));
        assert!(!message.contains("secret-path"), "{message}");
        let e = ConnectError::Oauth(sbx_connect::oauth::OauthError::Network("token=abc".into()));
        let (c, status, message) = code(ConnectOp::Other, e);
        assert_eq!((c, status), ("connect_oauth_failed", 502));
        assert!(!message.contains("abc"), "{message}");
        let e = ConnectError::Oauth(sbx_connect::oauth::OauthError::Rejected);
        assert_eq!(code(ConnectOp::Other, e).0, "connect_oauth_rejected");
    }
}
