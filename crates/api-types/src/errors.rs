//! The error envelope and the stable error codes of the contract (§7).

use serde::{Deserialize, Serialize};

/// `{ "errors": [ {code, message} ] }`
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ErrorBody {
    /// Non-empty list; the SDK reads the first item.
    pub errors: Vec<ErrorItem>,
}

/// One error.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ErrorItem {
    /// Stable code (see [`ErrorCode`]).
    pub code: String,
    /// Human-readable message.
    pub message: String,
}

/// Every error code sbx emits, with its HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// 400: invalid JSON, unknown fields.
    InvalidRequest,
    /// 409: resource in the wrong state.
    InvalidState,
    /// 400: a required field is missing.
    MissingField,
    /// 400: a field is malformed or over a limit.
    InvalidFieldFormat,
    /// 401: no Authorization header.
    AuthorizationHeaderMissing,
    /// 401: unknown key.
    InvalidApiKey,
    /// 401: the console session cookie is unknown or expired.
    ConsoleSessionInvalid,
    /// 401: a request marked as forwarded by another node of the cluster without
    /// the cluster's token.
    ClusterTokenInvalid,
    /// 403: a cookie-authenticated unsafe request without the session's CSRF token.
    CsrfTokenInvalid,
    /// 403: not allowed.
    AccessDenied,
    /// 403: snapshot quota.
    SnapshotLimitExceeded,
    /// 403: the tenant's images would take more than its image storage quota.
    ImageQuotaExceeded,
    /// 404: unknown sandbox.
    SandboxNotFound,
    /// 404: unknown process.
    ProcessNotFound,
    /// 404: output evicted.
    ProcessOutputNotRetained,
    /// 404: unknown snapshot.
    SnapshotNotFound,
    /// 404: no such file.
    FileNotFound,
    /// 404: no such route.
    RouteNotFound,
    /// 405: wrong method.
    MethodNotAllowed,
    /// 409: name held by another sandbox with another configuration.
    NameTaken,
    /// 409: snapshot name held.
    SnapshotNameTaken,
    /// 409: snapshot exists but is not READY.
    SnapshotNotReady,
    /// 409: outcome unknown.
    OperationAmbiguous,
    /// 413: exec output over the limit.
    ExecOutputTooLarge,
    /// 413: file over 100 MiB.
    FileTooLarge,
    /// 413: request body over the cap.
    PayloadTooLarge,
    /// 415/400: the path is not a regular file.
    NotRegularFile,
    /// 422: the start failed synchronously.
    StartFailed,
    /// 422: an `Idempotency-Key` reused with a different request.
    IdempotencyKeyReused,
    /// 429: rate limited.
    RateLimited,
    /// 500: unexpected.
    InternalError,
    /// 501: not supported.
    NotImplemented,
    /// 503: capacity or a safe-to-repeat failure.
    ComputeUnavailable,
    /// 503: the data disk is full; nothing changed, retry once space is freed.
    StorageFull,
    /// 504: exec timeout.
    ExecTimedOut,
    /// 504: wait timeout.
    ProcessWaitTimedOut,
    /// 400: the uploaded Connect package is not a valid package tarball.
    ConnectInvalidPackage,
    /// 400: the OAuth token endpoint rejected the authorization code.
    ConnectOauthRejected,
    /// 404: unknown Connect package or version.
    ConnectPackageNotFound,
    /// 404: unknown Connect build.
    ConnectBuildNotFound,
    /// 404: unknown Connect connection.
    ConnectConnectionNotFound,
    /// 404: unknown Connect run.
    ConnectRunNotFound,
    /// 404: the package has no sync of that name.
    ConnectSyncNotFound,
    /// 404: unknown or used OAuth state.
    ConnectOauthStateNotFound,
    /// 404: unknown node (`/v1/nodes/{id}`).
    NodeNotFound,
    /// 404: unknown volume (or another tenant's).
    VolumeNotFound,
    /// 409: the tenant has a volume of that name.
    VolumeNameTaken,
    /// 404: unknown image (or another tenant's).
    ImageNotFound,
    /// 400: an image archive that is malformed or unsafe (an entry that would
    /// land outside the image, a device node).
    ImageInvalid,
    /// 404: unknown template (or another tenant's).
    TemplateNotFound,
    /// 409: the tenant has a template of that name.
    TemplateNameTaken,
    /// 409: the template has no READY snapshot yet (building or failed).
    TemplateNotReady,
    /// 404: no webhook has this delivery URL.
    ConnectWebhookNotFound,
    /// 404: unknown webhook delivery.
    ConnectDeliveryNotFound,
    /// 401: a webhook delivery's signature is missing, wrong or too old.
    ConnectWebhookSignatureInvalid,
    /// 409: the package version exists with other content (versions are immutable).
    ConnectVersionExists,
    /// 409: not built yet, sync already running, connection disabled or needing OAuth.
    ConnectInvalidState,
    /// 422: connection config, origin, credentials or schedule are invalid.
    ConnectInvalidConfig,
    /// 502: the OAuth token endpoint failed.
    ConnectOauthFailed,
    /// 503: the Connect runtime is not running.
    ConnectUnavailable,
}

impl ErrorCode {
    /// The code string on the wire.
    pub fn as_str(self) -> &'static str {
        use ErrorCode::*;
        match self {
            InvalidRequest | InvalidState => "invalid_request",
            MissingField => "missing_field",
            InvalidFieldFormat | NotRegularFile => "invalid_field_format",
            AuthorizationHeaderMissing => "authorization_header_missing",
            InvalidApiKey => "invalid_api_key",
            ConsoleSessionInvalid => "console_session_invalid",
            ClusterTokenInvalid => "cluster_token_invalid",
            CsrfTokenInvalid => "csrf_token_invalid",
            AccessDenied => "access_denied",
            SnapshotLimitExceeded => "sandbox_snapshot_limit_exceeded",
            ImageQuotaExceeded => "image_quota_exceeded",
            SandboxNotFound => "sandbox_not_found",
            ProcessNotFound => "sandbox_process_not_found",
            ProcessOutputNotRetained => "sandbox_process_output_not_retained",
            SnapshotNotFound => "sandbox_snapshot_not_found",
            FileNotFound => "sandbox_file_not_found",
            RouteNotFound => "not_found",
            MethodNotAllowed => "method_not_allowed",
            NameTaken => "sandbox_name_taken",
            SnapshotNameTaken => "sandbox_snapshot_name_taken",
            SnapshotNotReady => "sandbox_snapshot_not_ready",
            OperationAmbiguous => "operation_ambiguous",
            ExecOutputTooLarge => "sandbox_exec_output_too_large",
            FileTooLarge => "sandbox_file_too_large",
            PayloadTooLarge => "payload_too_large",
            StartFailed => "sandbox_start_failed",
            IdempotencyKeyReused => "idempotency_key_reused",
            RateLimited => "rate_limited",
            InternalError => "internal_error",
            NotImplemented => "not_implemented",
            ComputeUnavailable => "compute_unavailable",
            StorageFull => "storage_full",
            ExecTimedOut => "sandbox_exec_timed_out",
            ProcessWaitTimedOut => "sandbox_process_wait_timed_out",
            ConnectInvalidPackage => "connect_invalid_package",
            ConnectOauthRejected => "connect_oauth_rejected",
            ConnectPackageNotFound => "connect_package_not_found",
            ConnectBuildNotFound => "connect_build_not_found",
            ConnectConnectionNotFound => "connect_connection_not_found",
            ConnectRunNotFound => "connect_run_not_found",
            ConnectSyncNotFound => "connect_sync_not_found",
            ConnectOauthStateNotFound => "connect_oauth_state_not_found",
            NodeNotFound => "node_not_found",
            VolumeNotFound => "volume_not_found",
            VolumeNameTaken => "volume_name_taken",
            ImageNotFound => "image_not_found",
            ImageInvalid => "image_invalid",
            TemplateNotFound => "template_not_found",
            TemplateNameTaken => "template_name_taken",
            TemplateNotReady => "template_not_ready",
            ConnectWebhookNotFound => "connect_webhook_not_found",
            ConnectDeliveryNotFound => "connect_delivery_not_found",
            ConnectWebhookSignatureInvalid => "connect_webhook_signature_invalid",
            ConnectVersionExists => "connect_version_exists",
            ConnectInvalidState => "connect_invalid_state",
            ConnectInvalidConfig => "connect_invalid_config",
            ConnectOauthFailed => "connect_oauth_failed",
            ConnectUnavailable => "connect_unavailable",
        }
    }

    /// The HTTP status for the code.
    pub fn http_status(self) -> u16 {
        use ErrorCode::*;
        match self {
            InvalidRequest | MissingField | InvalidFieldFormat | NotRegularFile => 400,
            ConnectInvalidPackage | ConnectOauthRejected => 400,
            ImageInvalid => 400,
            AuthorizationHeaderMissing
            | InvalidApiKey
            | ConsoleSessionInvalid
            | ClusterTokenInvalid
            | ConnectWebhookSignatureInvalid => 401,
            AccessDenied | SnapshotLimitExceeded | ImageQuotaExceeded | CsrfTokenInvalid => 403,
            SandboxNotFound
            | ProcessNotFound
            | ProcessOutputNotRetained
            | SnapshotNotFound
            | FileNotFound
            | RouteNotFound
            | ConnectPackageNotFound
            | ConnectBuildNotFound
            | ConnectConnectionNotFound
            | ConnectRunNotFound
            | ConnectSyncNotFound
            | ConnectOauthStateNotFound
            | ConnectWebhookNotFound
            | ConnectDeliveryNotFound
            | NodeNotFound
            | VolumeNotFound
            | ImageNotFound
            | TemplateNotFound => 404,
            MethodNotAllowed => 405,
            InvalidState | NameTaken | SnapshotNameTaken | SnapshotNotReady
            | OperationAmbiguous | ConnectVersionExists | ConnectInvalidState => 409,
            VolumeNameTaken | TemplateNameTaken | TemplateNotReady => 409,
            ExecOutputTooLarge | FileTooLarge | PayloadTooLarge => 413,
            StartFailed | IdempotencyKeyReused | ConnectInvalidConfig => 422,
            RateLimited => 429,
            InternalError => 500,
            ConnectOauthFailed => 502,
            NotImplemented => 501,
            ComputeUnavailable | StorageFull | ConnectUnavailable => 503,
            ExecTimedOut | ProcessWaitTimedOut => 504,
        }
    }
}

impl ErrorBody {
    /// A one-item envelope.
    pub fn new(code: &str, message: impl Into<String>) -> Self {
        ErrorBody {
            errors: vec![ErrorItem {
                code: code.to_string(),
                message: message.into(),
            }],
        }
    }
}
