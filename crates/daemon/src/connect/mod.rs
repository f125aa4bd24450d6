//! The Connect runtime inside sbxd: `sbx-connect`'s jobs run in gVisor
//! sandboxes started by this daemon.
//!
//! Job and build sandboxes have no store row: they are not in anyone's
//! sandbox list, and a restart of sbxd removes any that a crash left behind
//! (their containers are `sbx-<uuid>` like every sandbox, and start-up
//! reconciliation destroys every container no active sandbox owns).

mod build;
mod jobs;

pub use jobs::{GvisorJobs, JobsConfig};

/// Errors of the Connect sandboxes.
#[derive(Debug, thiserror::Error)]
pub enum JobsError {
    /// The node has no room for the sandbox.
    #[error("no room for the sandbox: {0}")]
    Admission(String),
    /// The runtime could not start the sandbox.
    #[error("starting the sandbox: {0}")]
    Start(String),
    /// The sandbox's agent refused or failed a request.
    #[error("sandbox agent: {0}")]
    Agent(String),
    /// The configured npm registry is not a usable URL.
    #[error("npm registry {0:?} is not an http(s) URL with a host")]
    Registry(String),
}

impl From<JobsError> for sbx_connect::sandbox::SandboxError {
    fn from(e: JobsError) -> Self {
        sbx_connect::sandbox::SandboxError::Failed(e.to_string())
    }
}
