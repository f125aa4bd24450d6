//! The seam between the Connect runtime and the node: `sbx-connect`'s
//! [`JobSandboxes`] on the node's job and build sandboxes ([`sbx_node::jobs`]),
//! admitted by this daemon's lifecycle service. Plain translation, no logic: the
//! sandboxes themselves (mounts, limits, job channel, memory watchdog) are the node's.

use crate::runtime::Runtime;
use crate::service::Service;
use sbx_connect::job::JobChannel;
use sbx_connect::sandbox::{
    BuildOutput, BuildRequest, JobSandbox, JobSandboxRequest, JobSandboxes, SandboxEnd,
    SandboxError,
};
use sbx_node::jobs::{self, Admission, AdmissionGuard, AdmissionRefused, GvisorJobs, JobEnd};
use std::sync::Arc;
use std::time::Duration;

pub use sbx_node::jobs::JobsConfig;

/// The node's job and build sandboxes, as the Connect runtime uses them.
pub struct ConnectJobs(GvisorJobs);

impl ConnectJobs {
    /// Job sandboxes admitted by `service` on `runtime`; `test_public` as
    /// `--network-test-public-cidr`.
    pub fn new(
        service: &Arc<Service>,
        runtime: Arc<dyn Runtime>,
        config: JobsConfig,
        test_public: &[String],
    ) -> Result<Self, String> {
        let admission = Arc::new(ServiceAdmission(Arc::clone(service)));
        GvisorJobs::new(admission, runtime, config, test_public).map(ConnectJobs)
    }
}

/// The lifecycle service's admission control, asked by the node. One way only: the
/// service knows nothing of Connect.
struct ServiceAdmission(Arc<Service>);

#[async_trait::async_trait]
impl Admission for ServiceAdmission {
    async fn admit(&self, vcpu: u32, memory_mb: u32) -> Result<AdmissionGuard, AdmissionRefused> {
        match self.0.admit_job(vcpu, memory_mb).await {
            Ok(reservation) => Ok(Box::new(reservation)),
            Err(e) => Err(AdmissionRefused(e.to_string())),
        }
    }
}

fn failed(e: jobs::JobsError) -> SandboxError {
    SandboxError::Failed(e.to_string())
}

#[async_trait::async_trait]
impl JobSandboxes for ConnectJobs {
    async fn start_job(&self, req: JobSandboxRequest) -> Result<Box<dyn JobSandbox>, SandboxError> {
        let req = jobs::JobRequest {
            run_id: req.run_id,
            attempt: req.attempt,
            kind: format!("{:?}", req.kind),
            artifact_dir: req.artifact_dir,
            memory_mib: req.memory_mib,
        };
        let job = self.0.start_job(req).await.map_err(failed)?;
        Ok(Box::new(ConnectJob(job)))
    }

    async fn run_build(&self, req: BuildRequest) -> Result<BuildOutput, SandboxError> {
        let req = jobs::BuildRequest {
            build_id: req.build_id,
            package_dir: req.package_dir,
            memory_mib: req.memory_mib,
            time_budget: req.time_budget,
        };
        let out = self.0.run_build(req).await.map_err(failed)?;
        Ok(BuildOutput {
            success: out.success,
            log: out.log,
        })
    }
}

/// One running job sandbox of the node.
struct ConnectJob(jobs::JobSandbox);

#[async_trait::async_trait]
impl JobSandbox for ConnectJob {
    async fn take_channel(&mut self) -> Option<Box<dyn JobChannel>> {
        let stream = self.0.take_channel().await?;
        Some(Box::new(stream))
    }

    async fn finish(self: Box<Self>, grace: Duration) -> SandboxEnd {
        match self.0.finish(grace).await {
            JobEnd::Exited(code) => SandboxEnd::Exited(code),
            JobEnd::MemoryLimit => SandboxEnd::MemoryLimit,
            JobEnd::Crashed(why) => SandboxEnd::Crashed(why),
        }
    }
}
