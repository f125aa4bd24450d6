//! Booting a sandbox: its bundle and overlay dir (and disk) written, then
//! `runsc run` of a fresh one or `runsc restore` of a checkpoint.

use super::teardown::remove_sandbox_dir;
use super::{container_id, GvisorRuntime, CGROUP_PARENT};
use crate::runtime::{AgentConn, JobOptions, RuntimeError, SandboxSpec};
use sbx_agent_proto::{AGENT_BINARY_PATH, AGENT_MOUNT_PATH};
use sbx_api_types::VolumeKind;
use sbx_runsc::oci::SpecBuilder;
use sbx_runsc::{ProcessIo, RestoreOptions, RunOptions, SharedFd};
use std::os::unix::net::UnixStream as StdUnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;

impl GvisorRuntime {
    /// PID 1's command line: `sbx-agent init`, with the guest task limit when set.
    fn agent_init_args(&self) -> Vec<String> {
        let mut args = vec![AGENT_BINARY_PATH.to_string(), "init".to_string()];
        if self.config.guest_task_limit > 0 {
            args.push("--task-limit".into());
            args.push(self.config.guest_task_limit.to_string());
        }
        args
    }

    /// Writes a fresh bundle and overlay dir, with the sandbox's disk mounted
    /// on the overlay dir (unless `with_disk` is false); returns the
    /// container id and run options. `job`
    /// adds a Connect job's mounts and, with a read-only root, turns the
    /// overlay (and so the disk) off.
    async fn prepare(
        &self,
        spec: &SandboxSpec,
        job: Option<&JobOptions>,
        with_disk: bool,
    ) -> Result<(String, RunOptions, Option<StdUnixStream>), RuntimeError> {
        let dir = self.dir(spec.id);
        if dir.exists() {
            remove_sandbox_dir(&dir).await?;
        }
        let bundle = dir.join("bundle");
        let overlay = dir.join("overlay");
        tokio::fs::create_dir_all(&bundle).await?;
        tokio::fs::create_dir_all(&overlay).await?;
        let cid = container_id(spec.id);
        let rootfs = spec.rootfs.as_deref().unwrap_or(&self.config.image_rootfs);
        let mut builder = SpecBuilder::new(rootfs)
            .args(self.agent_init_args())
            .hostname("sandbox")
            .bind_mount(&self.config.agent_dir, AGENT_MOUNT_PATH, true)
            .memory_limit(u64::from(spec.memory_mb) * 1024 * 1024)
            .vcpus(spec.vcpu)
            .pids_limit(self.config.pids_limit)
            .cgroups_path(format!("/{CGROUP_PARENT}/{cid}"));
        // Each volume's host mount point, bound through the gofer: gVisor
        // resolves every guest path inside it, and enforces `ro`.
        for v in &spec.volumes {
            let host = match v.kind {
                VolumeKind::Local => self.volumes.mounted(v.volume_id).await?,
                VolumeKind::S3 => {
                    self.s3_volumes
                        .mounted(v.volume_id, v.size_mb.saturating_mul(1 << 20))
                        .await?
                }
            };
            builder = builder.bind_mount(host, v.path.as_str(), v.read_only);
        }
        let mut overlay2 = Some(format!("root:dir={}", overlay.display()));
        if let Some(job) = job {
            builder = builder
                .root_readonly(job.readonly_root)
                .tmpfs("/tmp", Some(job.tmp_bytes));
            for (source, destination, readonly) in &job.binds {
                builder = builder.bind_mount(source, destination.as_str(), *readonly);
            }
            if job.readonly_root {
                // Nothing of the root is writable: no overlay at all (`/run` and `/tmp` are tmpfs).
                overlay2 = Some("none".to_string());
            }
        }
        builder.write_bundle(&bundle)?;
        let has_overlay = overlay2.as_deref() != Some("none");
        if let (Some(disks), true, true) = (&self.disks, has_overlay, with_disk) {
            disks.attach(&dir.join("disk.img"), &overlay).await?;
        }
        let log = dir.join("console.log");
        let (io, ours) = if self.config.stdio_channel {
            // PID 1's stdin and stdout: the sandbox's end of the channel.
            let (ours, theirs) = StdUnixStream::pair()?;
            let theirs = SharedFd(Arc::new(std::os::fd::OwnedFd::from(theirs)));
            (ProcessIo::channel_and_log(theirs, log), Some(ours))
        } else {
            (ProcessIo::console_log(log), None)
        };
        let opts = RunOptions {
            bundle: bundle.clone(),
            io,
            overlay2,
            ..RunOptions::default()
        };
        Ok((cid, opts, ours))
    }

    pub(super) async fn start_inner(
        &self,
        spec: SandboxSpec,
        job: Option<JobOptions>,
    ) -> Result<AgentConn, RuntimeError> {
        let (cid, opts, channel) = self.prepare(&spec, job.as_ref(), true).await?;
        self.runsc.run(&cid, &opts).await?;
        self.channels.set(spec.id, channel);
        prefer_guest_oom_kills(&cid);
        self.wait_for_agent(spec.id).await
    }

    /// `with_disk: false` (a verification probe) puts the overlay on the
    /// sandboxes dir itself: no spare disk taken, mounted, unmounted and
    /// formatted again for a copy that lives a few hundred milliseconds.
    pub(super) async fn restore_inner(
        &self,
        spec: SandboxSpec,
        image: PathBuf,
        with_disk: bool,
    ) -> Result<(), RuntimeError> {
        let (cid, run, channel) = self.prepare(&spec, None, with_disk).await?;
        let opts = RestoreOptions {
            bundle: run.bundle,
            image_path: image,
            detach: true,
            io: run.io,
            overlay2: run.overlay2,
            ..RestoreOptions::default()
        };
        self.runsc.restore(&cid, &opts).await?;
        self.channels.set(spec.id, channel);
        prefer_guest_oom_kills(&cid);
        Ok(())
    }
}

/// Points the host OOM killer at guest processes rather than the sandbox's
/// kernel (see `oom.rs`); a failure only loses that preference.
fn prefer_guest_oom_kills(cid: &str) {
    let mount = Path::new(sbx_runsc::cleanup::DEFAULT_CGROUP_MOUNT);
    match crate::runtime::oom::prefer_guest_processes(mount, CGROUP_PARENT, cid) {
        Ok(0) => tracing::warn!(container = cid, "no guest stub processes found to adjust"),
        Ok(_) => {}
        Err(e) => tracing::warn!(container = cid, error = %e, "cannot adjust OOM preference"),
    }
}
