//! Errors of the service layer; `api::error` turns each into an HTTP status and code.

use sbx_api_types::validate::ValidationError;

/// Everything a service call can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// Input broke a rule of the contract.
    #[error(transparent)]
    Invalid(#[from] ValidationError),
    /// The request as a whole is malformed (bad JSON, unknown fields, bad cursor).
    #[error("{0}")]
    BadRequest(String),
    /// No such sandbox (or hidden from the caller).
    #[error("sandbox not found")]
    SandboxNotFound,
    /// No such process in the sandbox.
    #[error("process not found")]
    ProcessNotFound,
    /// The process exists but its output was evicted.
    #[error("the process's output is no longer retained")]
    OutputNotRetained,
    /// No such file.
    #[error("file not found: {0}")]
    FileNotFound(String),
    /// The path is not a regular file.
    #[error("{0}")]
    NotRegularFile(String),
    /// A file over the size limit.
    #[error("file is larger than the {0}-byte limit")]
    FileTooLarge(u64),
    /// A filesystem operation failed inside the sandbox (not found, not empty...).
    #[error("{0}")]
    FileOperation(String),
    /// No such snapshot.
    #[error("snapshot not found")]
    SnapshotNotFound,
    /// The snapshot exists but cannot be cloned yet (or ever).
    #[error("snapshot is {0}, not READY")]
    SnapshotNotReady(&'static str),
    /// A CREATING or READY snapshot holds the name.
    #[error("snapshot name {0:?} is already in use")]
    SnapshotNameTaken(String),
    /// The workspace has as many live snapshots as it may keep.
    #[error(
        "the workspace already has {0} snapshots (CREATING or READY), its limit; delete one first"
    )]
    SnapshotLimit(u32),
    /// The workspace's active sandboxes hold as much as its quota allows
    /// (`--workspace-max-*`); one more would pass it.
    #[error("the workspace's quota is reached: {0}; delete or wait for a sandbox to end")]
    WorkspaceQuota(String),
    /// The name is held by an active sandbox with another configuration.
    #[error(
        "sandbox name {0:?} is already in use by an active sandbox with a different configuration"
    )]
    NameTaken(String),
    /// The sandbox is not in a state that allows the operation.
    #[error("sandbox is {is}; this operation needs {needs}")]
    WrongState {
        /// The sandbox's status.
        is: &'static str,
        /// The status the operation needs.
        needs: &'static str,
    },
    /// Another actor (another sbxd, or another task of this one) kept changing the
    /// sandbox or snapshot while this call tried to change it.
    #[error("{0}")]
    Conflict(String),
    /// Exec ran out of time (the command was killed).
    #[error("command did not finish within {0} ms and was stopped")]
    ExecTimedOut(u64),
    /// Exec output over the limit (the command was killed).
    #[error("command output exceeded {0} bytes across stdout and stderr")]
    ExecOutputTooLarge(u64),
    /// Process wait ran out of time.
    #[error("process did not finish within {0} ms")]
    WaitTimedOut(u64),
    /// The start failed synchronously.
    #[error("sandbox failed to start: {0}")]
    StartFailed(String),
    /// The outcome of an unsafe operation is unknown.
    #[error("{0}")]
    Ambiguous(String),
    /// An `Idempotency-Key` was sent again with a different request.
    #[error("{0}")]
    IdempotencyKeyReused(String),
    /// No such volume in the tenant.
    #[error("volume {0:?} not found")]
    VolumeNotFound(String),
    /// The tenant has a volume of that name.
    #[error("volume name {0:?} is already in use")]
    VolumeNameTaken(String),
    /// No such image in the tenant.
    #[error("image {0:?} not found")]
    ImageNotFound(String),
    /// An image archive that is malformed or would write outside the image.
    #[error("{0}")]
    ImageInvalid(String),
    /// An image upload or its unpacked files over the limit.
    #[error("the image is larger than {0} bytes")]
    ImageTooLarge(u64),
    /// The tenant's images would take more than its image storage quota.
    #[error("images of this workspace would take {needed} bytes, over its quota of {quota} bytes (in use: {used}); delete images first")]
    ImageQuota {
        /// Bytes the tenant's images take now.
        used: u64,
        /// Bytes they would take with the new image.
        needed: u64,
        /// The quota.
        quota: u64,
    },
    /// No such template in the tenant.
    #[error("template {0:?} not found")]
    TemplateNotFound(String),
    /// The tenant has a template of that name.
    #[error("template name {0:?} is already in use")]
    TemplateNameTaken(String),
    /// A create from a template that has no READY snapshot yet.
    #[error("template {name:?} is not ready (its build is {status}{}); create from it once it is READY", error.as_ref().map(|e| format!(": {e}")).unwrap_or_default())]
    TemplateNotReady {
        /// The template.
        name: String,
        /// Its latest build's state.
        status: String,
        /// Why that build failed.
        error: Option<String>,
    },
    /// A feature that is specified but not built yet.
    #[error("{0}")]
    NotBuilt(String),
    /// No such node.
    #[error("node {0:?} not found")]
    NodeNotFound(String),
    /// The caller may not do this (an operator-only action).
    #[error("{0}")]
    AccessDenied(String),
    /// Capacity or a transient, safe-to-repeat failure.
    #[error("{0}")]
    Unavailable(String),
    /// The data disk is full: the change was not made (safe to repeat once space is freed).
    #[error("{0}")]
    StorageFull(String),
    /// A bug or an unexpected host failure.
    #[error("{0}")]
    Internal(String),
}

impl ServiceError {
    /// The operation needs a RUNNING sandbox and this one is `status`.
    pub fn not_running(status: sbx_api_types::SandboxStatus) -> Self {
        ServiceError::WrongState {
            is: status.as_str(),
            needs: "RUNNING",
        }
    }
}

/// The message of every store write refused for a full disk.
pub const STORE_FULL: &str = "the data disk is full: the metadata store could not record \
     the change, so nothing changed; free space in the data dir, then retry";

/// The message of a store call that could not reach the database.
pub const STORE_UNAVAILABLE: &str =
    "the metadata store is unavailable (database unreachable or connection lost); retry shortly";

impl From<sbx_store::StoreError> for ServiceError {
    fn from(e: sbx_store::StoreError) -> Self {
        use sbx_store::StoreError as E;
        match e {
            // The write was rolled back whole: nothing happened, and the same
            // call succeeds once space is freed.
            E::Full(_) => ServiceError::StorageFull(STORE_FULL.into()),
            // Connection refused or lost, or the database busy: retryable (503).
            E::Unavailable(source) => {
                tracing::warn!(error = %source, "metadata store unavailable");
                ServiceError::Unavailable(STORE_UNAVAILABLE.into())
            }
            // Another writer changed the row first (and kept doing so through the
            // caller's retries): 409, like any state that refuses the operation.
            E::Conflict(source) => ServiceError::Conflict(format!(
                "the resource was changed concurrently ({source}); read it again and retry"
            )),
            // Other failures are transient from the caller's view, as before.
            other @ (E::Corrupt(_)
            | E::SchemaTooNew { .. }
            | E::Database(_)
            | E::NotFound
            | E::Fenced { .. }) => {
                ServiceError::Unavailable(format!("metadata store unavailable: {other}"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_failures_become_retryable_service_errors() {
        let full = ServiceError::from(sbx_store::StoreError::Full("no space".into()));
        assert!(matches!(full, ServiceError::StorageFull(_)));
        let gone = ServiceError::from(sbx_store::StoreError::Unavailable(
            "connection refused: postgres://sbx:***@db/sbx".into(),
        ));
        let ServiceError::Unavailable(message) = gone else {
            panic!("unavailable store is a 503");
        };
        // The client is told what to do, not where the database is.
        assert_eq!(message, STORE_UNAVAILABLE);
        let raced = ServiceError::from(sbx_store::StoreError::Conflict("generation 3".into()));
        assert!(matches!(raced, ServiceError::Conflict(_)), "{raced:?}");
    }
}
