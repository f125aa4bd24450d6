//! S3-backed volumes: a volume's files are objects under
//! `<prefix>/volumes/<id>/` in the cluster's object store, mounted on a node
//! by rclone's FUSE filesystem (`rclone mount`, Debian's package) while a
//! sandbox of that node uses it, and bound into the sandbox like a local
//! volume. Any node can mount any S3 volume.
//!
//! rclone runs with `--vfs-cache-mode writes`: a file is written to a local
//! cache and uploaded as a whole when it is closed (`--vfs-write-back 0s`),
//! and a directory listing is at most [`DIR_CACHE`] old. The consistency
//! rules that gives are written down in docs/volumes.md. Each volume keeps
//! one cache directory per node: a write whose upload a crash interrupted is
//! uploaded again by the next mount of that volume on that node.
//!
//! rclone has no quota: it mounts the volume on a hidden directory
//! (`<id>/remote`, reached by root only), and quotafs
//! ([`super::quotafs`], `sbxd quotafs`) mounts a passthrough of it that
//! enforces the volume's size on the mount point sandboxes bind (`<id>/mnt`).
//!
//! Both processes are started in their own process groups and outlive a
//! restart of sbxd (its sandboxes do too). A clean unmount takes quotafs
//! down first (its exit closes its files on rclone's mount, which uploads
//! them), then rclone (`fusermount3 -u` makes it finish its uploads before
//! it exits); [`S3Volumes::unmount`] waits for both exits. A layer found
//! dead is detached and both are mounted again.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use uuid::Uuid;

/// How old a directory listing may be: what another node's writes take at
/// most to show up in a listing here (after their upload).
pub const DIR_CACHE: &str = "2s";
/// Listings of a whole volume (size, purge) walk it one directory at a
/// time: a recursive listing without a delimiter is not answered by every
/// S3-compatible server (s3s-fs, the test suite's, lists nothing).
const WALK: [&str; 2] = ["--disable", "ListR"];
/// How long a mount may take to appear.
const MOUNT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long quotafs may take to appear: it first walks the volume (one
/// listing per directory through rclone) to count the bytes in use.
const QUOTAFS_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a clean unmount may take to finish its uploads.
const UNMOUNT_TIMEOUT: Duration = Duration::from_secs(600);

/// Errors of S3 volumes.
#[derive(Debug, thiserror::Error)]
pub enum S3VolumeError {
    /// Host file work failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The error.
        source: std::io::Error,
    },
    /// rclone could not be run or failed.
    #[error("rclone {what}: {message}")]
    Rclone {
        /// The subcommand.
        what: &'static str,
        /// Its exit status and the end of its log or stderr.
        message: String,
    },
    /// The quota layer could not be run or failed.
    #[error("quotafs {what}: {message}")]
    Quotafs {
        /// What was being done.
        what: &'static str,
        /// Its exit status and the end of its log.
        message: String,
    },
    /// This node has no object store for volumes.
    #[error("no object store is configured for S3 volumes (start sbxd with --snapshot-store s3://BUCKET/PREFIX)")]
    NotConfigured,
}

fn io(context: String) -> impl FnOnce(std::io::Error) -> S3VolumeError {
    move |source| S3VolumeError::Io { context, source }
}

/// Where S3 volumes live and how to reach it.
#[derive(Debug, Clone)]
pub struct S3VolumeConfig {
    /// The object store (the snapshot store's: bucket, prefix, endpoint,
    /// region, credentials); volumes go under `<prefix>/volumes/`.
    pub s3: crate::snapshot_store::S3Config,
    /// The rclone binary.
    pub rclone: PathBuf,
    /// The binary whose `quotafs` subcommand is the quota layer (sbxd itself).
    pub quotafs: PathBuf,
}

/// The S3 volumes this node mounts.
pub struct S3Volumes {
    dir: PathBuf,
    config: Option<S3VolumeConfig>,
    /// One mount or unmount at a time.
    lock: tokio::sync::Mutex<()>,
}

impl S3Volumes {
    /// S3 volumes mounted under `dir` (created if missing); `config` `None`:
    /// this node has no object store, and S3 volumes are refused.
    pub fn new(dir: &Path, config: Option<S3VolumeConfig>) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        Ok(S3Volumes {
            dir: dir.to_path_buf(),
            config,
            lock: tokio::sync::Mutex::new(()),
        })
    }

    /// Whether an object store is configured.
    pub fn configured(&self) -> bool {
        self.config.is_some()
    }

    fn config(&self) -> Result<&S3VolumeConfig, S3VolumeError> {
        self.config.as_ref().ok_or(S3VolumeError::NotConfigured)
    }

    /// Host directory the volume is mounted on (quotafs's mount).
    pub fn mount_point(&self, id: Uuid) -> PathBuf {
        self.dir.join(id.to_string()).join("mnt")
    }

    /// Where rclone mounts the volume, under the quota layer.
    fn remote_dir(&self, id: Uuid) -> PathBuf {
        self.dir.join(id.to_string()).join("remote")
    }

    fn cache_dir(&self, id: Uuid) -> PathBuf {
        self.dir.join(id.to_string()).join("cache")
    }

    fn pid_file(&self, id: Uuid, layer: Layer) -> PathBuf {
        self.dir
            .join(id.to_string())
            .join(format!("{}.pid", layer.name()))
    }

    fn log_file(&self, id: Uuid, layer: Layer) -> PathBuf {
        self.dir
            .join(id.to_string())
            .join(format!("{}.log", layer.name()))
    }

    /// The pid recorded for `layer` of volume `id`, if it still runs.
    fn live_pid(&self, id: Uuid, layer: Layer) -> Option<i32> {
        std::fs::read_to_string(self.pid_file(id, layer))
            .ok()
            .and_then(|p| p.trim().parse::<i32>().ok())
            .filter(|pid| layer.is(*pid))
    }

    /// The volume's objects as an rclone remote (the `:s3:` backend
    /// configured from the environment, see [`S3Volumes::command`]). The
    /// trailing `/` says it is a directory: rclone then skips its check
    /// that the path is not an object (a HEAD some S3 servers answer
    /// slowly, or with an error, for a key that is a prefix).
    fn remote(&self, id: Uuid) -> Result<String, S3VolumeError> {
        let c = &self.config()?.s3;
        Ok(if c.prefix.is_empty() {
            format!(":s3:{}/volumes/{id}/", c.bucket)
        } else {
            format!(":s3:{}/{}/volumes/{id}/", c.bucket, c.prefix)
        })
    }

    /// An rclone command with a clean environment: the S3 settings and
    /// credentials as `RCLONE_S3_*` variables (never arguments, which `ps`
    /// shows), no config file, and nothing of sbxd's own environment (an
    /// inherited `AWS_CA_BUNDLE`, for one, makes rclone 1.60 refuse to start).
    fn command(&self) -> Result<std::process::Command, S3VolumeError> {
        let config = self.config()?;
        let c = &config.s3;
        let mut cmd = std::process::Command::new(&config.rclone);
        cmd.env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
            .env("HOME", &self.dir)
            .env("RCLONE_CONFIG", "/dev/null")
            .env("RCLONE_S3_PROVIDER", "Other")
            .env("RCLONE_S3_REGION", &c.region)
            .env("RCLONE_S3_FORCE_PATH_STYLE", "true")
            .stdin(Stdio::null());
        if let Some(endpoint) = &c.endpoint {
            cmd.env("RCLONE_S3_ENDPOINT", endpoint);
        }
        match (&c.access_key_id, &c.secret_access_key) {
            (Some(key), Some(secret)) => {
                cmd.env("RCLONE_S3_ACCESS_KEY_ID", key)
                    .env("RCLONE_S3_SECRET_ACCESS_KEY", secret);
                if let Some(token) = &c.session_token {
                    cmd.env("RCLONE_S3_SESSION_TOKEN", token);
                }
            }
            _ => {
                cmd.env("RCLONE_S3_ENV_AUTH", "true");
            }
        }
        Ok(cmd)
    }

    /// The volume's mount point, mounting it first when it is not mounted:
    /// rclone on the hidden directory, quotafs over it with a limit of
    /// `limit_bytes`.
    pub async fn mounted(&self, id: Uuid, limit_bytes: u64) -> Result<PathBuf, S3VolumeError> {
        let _one = self.lock.lock().await;
        let point = self.mount_point(id);
        let remote = self.remote_dir(id);
        if is_live_mount(&point, Layer::Quotafs)? && is_live_mount(&remote, Layer::Rclone)? {
            return Ok(point);
        }
        // A quota layer that died, or that serves an rclone that died
        // (kill -9, host crash): it is redone. A dead FUSE mount point
        // reads ENOTCONN until it is unmounted.
        if let Some(pid) = self.live_pid(id, Layer::Quotafs) {
            // SAFETY: a signal to a pid just checked to be a quotafs.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        detach_dead(&point);
        for dir in [&point, &remote, &self.cache_dir(id)] {
            std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
        }
        if !is_live_mount(&remote, Layer::Rclone)? {
            detach_dead(&remote);
            let mut cmd = self.command()?;
            cmd.arg("mount")
                .arg(self.remote(id)?)
                .arg(&remote)
                .args(["--vfs-cache-mode", "writes", "--vfs-write-back", "0s"])
                .args(["--dir-cache-time", DIR_CACHE, "--attr-timeout", "1s"])
                .arg("--cache-dir")
                .arg(self.cache_dir(id))
                // No --allow-other: only quotafs (root, like rclone) reads
                // this mount; the sandboxes' gofer goes through quotafs.
                .args(["--umask", "000", "--log-level", "NOTICE"]);
            self.spawn_mount(id, Layer::Rclone, cmd, &remote, MOUNT_TIMEOUT)
                .await?;
        }
        let config = self.config()?;
        let mut cmd = std::process::Command::new(&config.quotafs);
        cmd.env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
            .arg("quotafs")
            .arg("--source")
            .arg(&remote)
            .arg("--mount")
            .arg(&point)
            .arg("--limit-bytes")
            .arg(limit_bytes.to_string());
        self.spawn_mount(id, Layer::Quotafs, cmd, &point, QUOTAFS_TIMEOUT)
            .await?;
        Ok(point)
    }

    /// Starts `cmd` (a FUSE server of `layer`) in its own process group
    /// and waits for its mount on `point`.
    async fn spawn_mount(
        &self,
        id: Uuid,
        layer: Layer,
        mut cmd: std::process::Command,
        point: &Path,
        timeout: Duration,
    ) -> Result<(), S3VolumeError> {
        let log = self.log_file(id, layer);
        let log_file =
            std::fs::File::create(&log).map_err(io(format!("creating {}", log.display())))?;
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file);
        // Its own process group: it outlives sbxd (the sandboxes using it
        // do too) and a signal to sbxd's group does not reach it.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let mut child = cmd
            .spawn()
            .map_err(|e| layer.error("mount", format!("cannot run it: {e}")))?;
        let pid_file = self.pid_file(id, layer);
        std::fs::write(&pid_file, child.id().to_string())
            .map_err(io(format!("writing {}", pid_file.display())))?;
        let deadline = Instant::now() + timeout;
        loop {
            if is_live_mount(point, layer)? {
                // Reaped by a thread of its own: sbxd never waits on it again.
                std::thread::spawn(move || child.wait());
                return Ok(());
            }
            if let Ok(Some(status)) = child.try_wait() {
                return Err(layer.error("mount", format!("{status}: {}", tail_of(&log))));
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(layer.error(
                    "mount",
                    format!("no mount after {timeout:?}: {}", tail_of(&log)),
                ));
            }
            // Waiting on another process's mount: nothing to be woken by.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Unmounts the volume cleanly when it is mounted: rclone finishes the
    /// uploads of every closed file, then exits; this returns after that.
    /// A mount some process still uses is left (and `Ok(false)` returned).
    pub async fn unmount(&self, id: Uuid) -> Result<bool, S3VolumeError> {
        let _one = self.lock.lock().await;
        self.unmount_locked(id).await
    }

    async fn unmount_locked(&self, id: Uuid) -> Result<bool, S3VolumeError> {
        // The quota layer first: its exit closes its files on rclone's
        // mount (rclone uploads them), and rclone's mount is busy until then.
        let point = self.mount_point(id);
        if is_live_mount(&point, Layer::Quotafs)? {
            if !fusermount_u(&point, Layer::Quotafs)? {
                return Ok(false);
            }
            self.wait_exit(id, Layer::Quotafs).await?;
        } else {
            detach_dead(&point);
        }
        let remote = self.remote_dir(id);
        if is_live_mount(&remote, Layer::Rclone)? {
            if !fusermount_u(&remote, Layer::Rclone)? {
                return Ok(false);
            }
            self.wait_exit(id, Layer::Rclone).await?;
        } else {
            detach_dead(&remote);
        }
        Ok(true)
    }

    /// Waits until the process of `layer` has exited after its unmount
    /// (for rclone: finished its uploads).
    async fn wait_exit(&self, id: Uuid, layer: Layer) -> Result<(), S3VolumeError> {
        let deadline = Instant::now() + UNMOUNT_TIMEOUT;
        while self.live_pid(id, layer).is_some() {
            if Instant::now() >= deadline {
                return Err(layer.error(
                    "unmount",
                    format!(
                        "still running after {UNMOUNT_TIMEOUT:?}: {}",
                        tail_of(&self.log_file(id, layer))
                    ),
                ));
            }
            // Not our child after a restart of sbxd: poll its pid.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// Unmounts the volume and deletes its objects and this node's cache.
    /// Safe to repeat. A mount a sandbox still uses (a forced delete) is
    /// detached lazily; that sandbox's later writes are lost.
    pub async fn remove(&self, id: Uuid) -> Result<(), S3VolumeError> {
        let _one = self.lock.lock().await;
        if !self.unmount_locked(id).await? {
            detach_dead(&self.mount_point(id));
            detach_dead(&self.remote_dir(id));
        }
        let out = self
            .command()?
            .arg("purge")
            .args(WALK)
            .arg(self.remote(id)?)
            .output()
            .map_err(|e| S3VolumeError::Rclone {
                what: "purge",
                message: format!("cannot run it: {e}"),
            })?;
        let err = String::from_utf8_lossy(&out.stderr);
        // Nothing was ever written: no objects, nothing to purge.
        if !out.status.success() && !err.contains("directory not found") {
            return Err(S3VolumeError::Rclone {
                what: "purge",
                message: format!("{}: {}", out.status, err.trim()),
            });
        }
        let dir = self.dir.join(id.to_string());
        match std::fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(io(format!("removing {}", dir.display()))(e))
            }
            _ => Ok(()),
        }
    }

    /// Bytes of the volume's objects (blocking: lists them with `rclone size`).
    pub fn used_bytes(&self, id: Uuid) -> Result<u64, S3VolumeError> {
        let out = self
            .command()?
            .args(["size", "--json"])
            .args(WALK)
            .arg(self.remote(id)?)
            .output()
            .map_err(|e| S3VolumeError::Rclone {
                what: "size",
                message: format!("cannot run it: {e}"),
            })?;
        if !out.status.success() {
            return Err(S3VolumeError::Rclone {
                what: "size",
                message: format!(
                    "{}: {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
            });
        }
        let v: serde_json::Value =
            serde_json::from_slice(&out.stdout).map_err(|e| S3VolumeError::Rclone {
                what: "size",
                message: format!("unreadable answer: {e}"),
            })?;
        Ok(v.get("bytes").and_then(|b| b.as_u64()).unwrap_or(0))
    }
}

/// One of the two FUSE layers of a mounted S3 volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layer {
    /// rclone's mount of the objects.
    Rclone,
    /// quotafs over it, the size limit.
    Quotafs,
}

impl Layer {
    fn name(self) -> &'static str {
        match self {
            Layer::Rclone => "rclone",
            Layer::Quotafs => "quotafs",
        }
    }

    /// Whether a `mountinfo` line's type and source are this layer's.
    fn matches(self, fs_type: &str, source: &str) -> bool {
        match self {
            Layer::Rclone => fs_type == "fuse.rclone",
            Layer::Quotafs => fs_type.starts_with("fuse") && source == super::quotafs::FS_NAME,
        }
    }

    fn error(self, what: &'static str, message: String) -> S3VolumeError {
        match self {
            Layer::Rclone => S3VolumeError::Rclone { what, message },
            Layer::Quotafs => S3VolumeError::Quotafs { what, message },
        }
    }

    /// Whether `pid` is (still) a process of this layer: a pid file may
    /// outlive its process, and the pid be reused.
    fn is(self, pid: i32) -> bool {
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            return false;
        };
        let mut args = cmdline.split(|b| *b == 0);
        let argv0 = args.next().unwrap_or_default();
        match self {
            Layer::Rclone => argv0.ends_with(b"rclone"),
            Layer::Quotafs => args.next() == Some(b"quotafs".as_slice()),
        }
    }
}

/// `fusermount3 -u point`: `Ok(false)` when the mount is busy (a process
/// still uses it).
fn fusermount_u(point: &Path, layer: Layer) -> Result<bool, S3VolumeError> {
    let out = std::process::Command::new("fusermount3")
        .arg("-u")
        .arg(point)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| layer.error("unmount", format!("cannot run fusermount3: {e}")))?;
    if out.status.success() {
        return Ok(true);
    }
    let err = String::from_utf8_lossy(&out.stderr);
    if err.contains("busy") {
        return Ok(false);
    }
    Err(layer.error("unmount", format!("fusermount3 -u: {}", err.trim())))
}

/// Whether `point` is a live FUSE mount of `layer` in `/proc/self/mountinfo`.
fn is_live_mount(point: &Path, layer: Layer) -> Result<bool, S3VolumeError> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(io("reading /proc/self/mountinfo".into()))?;
    let Some(point) = point.to_str() else {
        return Ok(false);
    };
    let mounted = mountinfo.lines().any(|line| {
        let target = line.split(' ').nth(4);
        // After the " - " separator: the type, then the source.
        let mut tail = line.split(" - ").nth(1).unwrap_or("").split(' ');
        let (fs_type, source) = (tail.next().unwrap_or(""), tail.next().unwrap_or(""));
        target == Some(point) && layer.matches(fs_type, source)
    });
    // Listed but dead (its server killed): not mounted for our purposes.
    Ok(mounted && std::fs::metadata(point).is_ok())
}

/// Lazily detaches whatever is mounted on `point` (a dead FUSE mount).
fn detach_dead(point: &Path) {
    let _ = std::process::Command::new("umount")
        .arg("-l")
        .arg(point)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// The last lines of a log file, for an error message.
fn tail_of(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().rev().take(3).collect();
    lines.into_iter().rev().collect::<Vec<_>>().join(" | ")
}
