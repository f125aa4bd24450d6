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
//! The rclone process is started in its own process group and outlives a
//! restart of sbxd (its sandboxes do too); a clean unmount (`fusermount3 -u`)
//! makes rclone finish its uploads before it exits, and [`S3Volumes::unmount`]
//! waits for that exit.

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

    /// Host directory the volume is mounted on.
    pub fn mount_point(&self, id: Uuid) -> PathBuf {
        self.dir.join(id.to_string()).join("mnt")
    }

    fn cache_dir(&self, id: Uuid) -> PathBuf {
        self.dir.join(id.to_string()).join("cache")
    }

    fn pid_file(&self, id: Uuid) -> PathBuf {
        self.dir.join(id.to_string()).join("rclone.pid")
    }

    fn log_file(&self, id: Uuid) -> PathBuf {
        self.dir.join(id.to_string()).join("rclone.log")
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

    /// The volume's mount point, mounting it first when it is not mounted.
    pub async fn mounted(&self, id: Uuid) -> Result<PathBuf, S3VolumeError> {
        let _one = self.lock.lock().await;
        let point = self.mount_point(id);
        if is_fuse_mount(&point)? {
            return Ok(point);
        }
        // A mount point left by an rclone that died (kill -9, host crash)
        // reads ENOTCONN until it is unmounted.
        detach_dead(&point);
        for dir in [&point, &self.cache_dir(id)] {
            std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
        }
        let log = self.log_file(id);
        let log_file =
            std::fs::File::create(&log).map_err(io(format!("creating {}", log.display())))?;
        let mut cmd = self.command()?;
        cmd.arg("mount")
            .arg(self.remote(id)?)
            .arg(&point)
            .args(["--vfs-cache-mode", "writes", "--vfs-write-back", "0s"])
            .args(["--dir-cache-time", DIR_CACHE, "--attr-timeout", "1s"])
            .arg("--cache-dir")
            .arg(self.cache_dir(id))
            // The gofer of runsc opens the files, in its own namespaces.
            .arg("--allow-other")
            .args(["--umask", "000", "--log-level", "NOTICE"])
            .stdout(Stdio::null())
            .stderr(log_file);
        // Its own process group: it outlives sbxd (the sandboxes using it
        // do too) and a signal to sbxd's group does not reach it.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let mut child = cmd.spawn().map_err(|e| S3VolumeError::Rclone {
            what: "mount",
            message: format!("cannot run it: {e}"),
        })?;
        let pid_file = self.pid_file(id);
        std::fs::write(&pid_file, child.id().to_string())
            .map_err(io(format!("writing {}", pid_file.display())))?;
        let deadline = Instant::now() + MOUNT_TIMEOUT;
        loop {
            if is_fuse_mount(&point)? {
                // Reaped by a thread of its own: sbxd never waits on it again.
                std::thread::spawn(move || child.wait());
                return Ok(point);
            }
            if let Ok(Some(status)) = child.try_wait() {
                return Err(S3VolumeError::Rclone {
                    what: "mount",
                    message: format!("{status}: {}", tail_of(&log)),
                });
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(S3VolumeError::Rclone {
                    what: "mount",
                    message: format!("no mount after {MOUNT_TIMEOUT:?}: {}", tail_of(&log)),
                });
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
        let point = self.mount_point(id);
        if !is_fuse_mount(&point)? {
            detach_dead(&point);
            return Ok(true);
        }
        let out = std::process::Command::new("fusermount3")
            .arg("-u")
            .arg(&point)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| S3VolumeError::Rclone {
                what: "unmount",
                message: format!("cannot run fusermount3: {e}"),
            })?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            if err.contains("busy") {
                return Ok(false);
            }
            return Err(S3VolumeError::Rclone {
                what: "unmount",
                message: format!("fusermount3 -u: {}", err.trim()),
            });
        }
        let pid = std::fs::read_to_string(self.pid_file(id))
            .ok()
            .and_then(|p| p.trim().parse::<i32>().ok());
        if let Some(pid) = pid {
            let deadline = Instant::now() + UNMOUNT_TIMEOUT;
            while is_rclone(pid) {
                if Instant::now() >= deadline {
                    return Err(S3VolumeError::Rclone {
                        what: "unmount",
                        message: format!(
                            "still uploading after {UNMOUNT_TIMEOUT:?}: {}",
                            tail_of(&self.log_file(id))
                        ),
                    });
                }
                // rclone is not our child after a restart of sbxd: poll its pid.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        Ok(true)
    }

    /// Unmounts the volume and deletes its objects and this node's cache.
    /// Safe to repeat. A mount a sandbox still uses (a forced delete) is
    /// detached lazily; that sandbox's later writes are lost.
    pub async fn remove(&self, id: Uuid) -> Result<(), S3VolumeError> {
        let _one = self.lock.lock().await;
        if !self.unmount_locked(id).await? {
            detach_dead(&self.mount_point(id));
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

/// Whether `point` is a live rclone FUSE mount in `/proc/self/mountinfo`.
fn is_fuse_mount(point: &Path) -> Result<bool, S3VolumeError> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(io("reading /proc/self/mountinfo".into()))?;
    let Some(point) = point.to_str() else {
        return Ok(false);
    };
    let mounted = mountinfo.lines().any(|line| {
        let mut fields = line.split(' ');
        let target = fields.nth(4);
        target == Some(point) && line.contains(" - fuse.rclone ")
    });
    // Listed but dead (rclone killed): not mounted for our purposes.
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

/// Whether `pid` is (still) an rclone process.
fn is_rclone(pid: i32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
        c.split(|b| *b == 0)
            .next()
            .is_some_and(|a| a.ends_with(b"rclone"))
    })
}

/// The last lines of a log file, for an error message.
fn tail_of(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().rev().take(3).collect();
    lines.into_iter().rev().collect::<Vec<_>>().join(" | ")
}
