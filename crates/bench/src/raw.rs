//! The raw side: the same operations with runsc directly, through
//! `sbx-runsc` with the flags sbxd uses (`--network=none`, per-call
//! `--overlay2=root:dir=...`, the same OCI spec).
//!
//! Every container id is `bench-raw-<run tag>-<5 digits>` (fixed length, so
//! runsc's id prefix matching never confuses two of them) and lives under
//! this run's own `--root`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use sbx_agent_proto::{AGENT_BINARY_PATH, AGENT_MOUNT_PATH};
use sbx_runsc::cleanup::{cgroup_roots, CgroupCleanup, DEFAULT_CGROUP_MOUNT};
use sbx_runsc::oci::SpecBuilder;
use sbx_runsc::{
    CheckpointOptions, ExecOptions, GlobalOptions, Network, ProcessIo, RestoreOptions, RunOptions,
    Runsc, Status,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Prefix of every raw container id.
pub const ID_PREFIX: &str = "bench-raw-";
/// Parent cgroup of the raw containers (sbxd uses `/sbx`).
const CGROUP_PARENT: &str = "sbx-bench";
/// The pids limit sbxd applies by default.
const PIDS_LIMIT: i64 = 4096;

/// Sandbox shape shared with the sbx side.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// vCPUs.
    pub vcpu: u32,
    /// Memory in MiB.
    pub memory_mb: u64,
}

/// Raw runsc containers of one bench run.
pub struct Raw {
    rs: Runsc,
    dir: PathBuf,
    rootfs: PathBuf,
    agent_dir: PathBuf,
    tag: String,
    shape: Shape,
    seq: AtomicU32,
    live: Mutex<BTreeSet<String>>,
}

impl Raw {
    /// Raw containers with state under `dir` (`dir/root` is runsc's `--root`).
    pub fn new(
        runsc_binary: &Path,
        dir: &Path,
        rootfs: &Path,
        agent_dir: &Path,
        tag: &str,
        shape: Shape,
    ) -> Result<Self> {
        let root = dir.join("root");
        std::fs::create_dir_all(&root).with_context(|| format!("creating {}", root.display()))?;
        let global = GlobalOptions {
            network: Network::None,
            ..GlobalOptions::default()
        };
        let rs = Runsc::new(runsc_binary, &root)
            .with_global(global)
            .with_timeout(Some(Duration::from_secs(180)));
        Ok(Raw {
            rs,
            dir: dir.to_path_buf(),
            rootfs: rootfs.to_path_buf(),
            agent_dir: agent_dir.to_path_buf(),
            tag: tag.to_string(),
            shape,
            seq: AtomicU32::new(0),
            live: Mutex::new(BTreeSet::new()),
        })
    }

    /// A fresh container id.
    pub fn new_id(&self) -> String {
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        format!("{ID_PREFIX}{}-{n:05}", self.tag)
    }

    fn cdir(&self, cid: &str) -> PathBuf {
        self.dir.join("c").join(cid)
    }

    /// A checkpoint image directory (not created: runsc creates it).
    pub fn image_dir(&self, name: &str) -> PathBuf {
        self.dir.join("images").join(name)
    }

    /// Writes `cid`'s bundle and overlay dir the way sbxd does; returns
    /// (bundle, overlay2 value, console log).
    fn prepare(&self, cid: &str, args: &[&str]) -> Result<(PathBuf, String, PathBuf)> {
        let d = self.cdir(cid);
        let bundle = d.join("bundle");
        let overlay = d.join("overlay");
        std::fs::create_dir_all(&bundle)?;
        std::fs::create_dir_all(&overlay)?;
        SpecBuilder::new(&self.rootfs)
            .args(args.iter().copied())
            .hostname("sandbox")
            .bind_mount(&self.agent_dir, AGENT_MOUNT_PATH, true)
            .memory_limit(self.shape.memory_mb * 1024 * 1024)
            .vcpus(self.shape.vcpu)
            .pids_limit(PIDS_LIMIT)
            .cgroups_path(format!("/{CGROUP_PARENT}/{cid}"))
            .write_bundle(&bundle)?;
        Ok((
            bundle,
            sbx_runsc::overlay2_root_dir(&overlay),
            d.join("console.log"),
        ))
    }

    async fn wait_running(&self, cid: &str) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let st = self.rs.state(cid).await?;
            match st.status {
                Status::Running => return Ok(()),
                Status::Stopped => bail!("{cid} stopped while starting"),
                _ if Instant::now() > deadline => bail!("{cid} is {}", st.status.as_str()),
                _ => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    }

    /// Bundle + `runsc run --detach` + `runsc state` until running.
    /// Returns the container id.
    pub async fn create(&self) -> Result<String> {
        self.create_with(&[AGENT_BINARY_PATH, "init"]).await
    }

    /// Like [`Raw::create`] with `args` as PID 1 (e.g. `sleep infinity`).
    pub async fn create_with(&self, args: &[&str]) -> Result<String> {
        let cid = self.new_id();
        let (bundle, overlay2, log) = self.prepare(&cid, args)?;
        self.live.lock().unwrap().insert(cid.clone());
        let opts = RunOptions {
            bundle,
            io: ProcessIo::console_log(log),
            overlay2: Some(overlay2),
            ..RunOptions::default()
        };
        self.rs.run(&cid, &opts).await?;
        self.wait_running(&cid).await?;
        Ok(cid)
    }

    /// New bundle + `runsc restore --detach` from `image` + state until
    /// running. Returns the new container id.
    pub async fn restore(&self, image: &Path) -> Result<String> {
        let cid = self.new_id();
        let (bundle, overlay2, log) = self.prepare(&cid, &[AGENT_BINARY_PATH, "init"])?;
        self.live.lock().unwrap().insert(cid.clone());
        let opts = RestoreOptions {
            bundle,
            image_path: image.to_path_buf(),
            detach: true,
            io: ProcessIo::console_log(log),
            overlay2: Some(overlay2),
            ..RestoreOptions::default()
        };
        self.rs.restore(&cid, &opts).await?;
        self.wait_running(&cid).await?;
        Ok(cid)
    }

    /// `runsc delete --force`, timed by the caller; the container's
    /// directory is removed afterwards by [`Raw::forget`].
    pub async fn delete(&self, cid: &str) -> Result<()> {
        self.rs.delete(cid, true).await?;
        Ok(())
    }

    /// Drops the bookkeeping and files of a deleted container.
    pub fn forget(&self, cid: &str) {
        self.live.lock().unwrap().remove(cid);
        let _ = std::fs::remove_dir_all(self.cdir(cid));
    }

    /// `delete` then `forget`.
    pub async fn destroy(&self, cid: &str) -> Result<()> {
        self.delete(cid).await?;
        self.forget(cid);
        Ok(())
    }

    /// `runsc exec CID ARGV...` to completion; fails unless it exits 0.
    pub async fn exec_ok(&self, cid: &str, argv: &[&str]) -> Result<()> {
        let out = self
            .rs
            .exec(
                cid,
                &ExecOptions {
                    argv: argv.iter().map(|s| s.to_string()).collect(),
                    ..ExecOptions::default()
                },
            )
            .await?;
        if !out.status.success() {
            bail!(
                "runsc exec {argv:?}: {} {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }

    /// `runsc exec CID sh -c 'cat > PATH'` with `data` piped to stdin.
    pub async fn upload(&self, cid: &str, path: &str, data: &Bytes) -> Result<()> {
        let opts = ExecOptions {
            argv: vec!["sh".into(), "-c".into(), format!("cat > {path}")],
            ..ExecOptions::default()
        };
        let mut child = self
            .rs
            .exec_command(cid, &opts)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let mut stdin = child.stdin.take().context("no stdin")?;
        stdin.write_all(data).await?;
        drop(stdin);
        let out = child.wait_with_output().await?;
        if !out.status.success() {
            bail!(
                "raw upload: {} {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }

    /// `runsc exec CID cat PATH`, counting stdout bytes.
    pub async fn download(&self, cid: &str, path: &str) -> Result<u64> {
        let opts = ExecOptions {
            argv: vec!["cat".into(), path.into()],
            ..ExecOptions::default()
        };
        let mut child = self
            .rs
            .exec_command(cid, &opts)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        let mut stdout = child.stdout.take().context("no stdout")?;
        let mut buf = vec![0u8; 1024 * 1024];
        let mut n = 0u64;
        loop {
            let k = stdout.read(&mut buf).await?;
            if k == 0 {
                break;
            }
            n += k as u64;
        }
        let status = child.wait().await?;
        if !status.success() {
            bail!("raw download: {status}");
        }
        Ok(n)
    }

    /// `runsc pause`.
    pub async fn pause(&self, cid: &str) -> Result<()> {
        Ok(self.rs.pause(cid).await?)
    }

    /// `runsc resume`.
    pub async fn resume(&self, cid: &str) -> Result<()> {
        Ok(self.rs.resume(cid).await?)
    }

    /// `runsc checkpoint --image-path=IMAGE --leave-running
    /// [--compression=C]` (sbxd passes `none`).
    pub async fn checkpoint(&self, cid: &str, image: &Path, compression: &str) -> Result<()> {
        if let Some(parent) = image.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let opts = CheckpointOptions {
            image_path: image.to_path_buf(),
            leave_running: true,
            compression: (!compression.is_empty()).then(|| compression.to_string()),
        };
        Ok(self.rs.checkpoint(cid, &opts).await?)
    }

    /// Deletes every container of this run (tracked ones, then anything
    /// left under this run's root), removes their cgroups. Returns failures.
    pub async fn cleanup(&self) -> Vec<String> {
        let mut failed = Vec::new();
        let live: Vec<String> = self.live.lock().unwrap().iter().cloned().collect();
        for cid in live {
            match self.destroy(&cid).await {
                Ok(()) => {}
                Err(e) => failed.push(format!("{cid}: {e:#}")),
            }
        }
        let cg = CgroupCleanup::new(CGROUP_PARENT);
        match sbx_runsc::cleanup::cleanup(&self.rs, |id| id.starts_with(ID_PREFIX), Some(&cg)).await
        {
            Ok(report) => {
                failed.extend(report.failed.iter().map(|(id, e)| format!("{id}: {e}")));
                failed.extend(
                    report
                        .cgroups_failed
                        .iter()
                        .map(|(p, e)| format!("{}: {e}", p.display())),
                );
            }
            Err(e) => failed.push(format!("runsc list: {e}")),
        }
        // The parent cgroup itself, now empty (ignored if something else uses it).
        for root in cgroup_roots(Path::new(DEFAULT_CGROUP_MOUNT)) {
            let _ = std::fs::remove_dir(root.join(CGROUP_PARENT));
        }
        failed
    }
}
