//! OCI runtime bundles: the subset of `config.json` that sbx uses, and a
//! builder with the defaults a sandbox needs.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// `PATH` given to PID 1 and to exec'd processes by default.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// CFS period used to turn a vCPU count into a quota (100 ms).
pub const DEFAULT_CPU_PERIOD_US: u64 = 100_000;

/// Capabilities of PID 1 by default (Docker's default set).
pub const DEFAULT_CAPABILITIES: &[&str] = &[
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
];

/// An OCI runtime spec (`config.json`), restricted to the fields sbx sets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    /// OCI version.
    pub oci_version: String,
    /// PID 1.
    pub process: Process,
    /// Root filesystem.
    pub root: Root,
    /// Hostname inside the sandbox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// Mounts, in order.
    #[serde(default)]
    pub mounts: Vec<Mount>,
    /// Linux-specific settings.
    pub linux: Linux,
    /// Free-form annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// `process`: what runs as PID 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Process {
    /// Allocate a terminal (always false for sbx: stdio is the console log).
    pub terminal: bool,
    /// User and group.
    pub user: User,
    /// argv.
    pub args: Vec<String>,
    /// `KEY=VALUE` environment.
    pub env: Vec<String>,
    /// Working directory (absolute).
    pub cwd: String,
    /// Capability sets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Capabilities>,
    /// Resource limits.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rlimits: Vec<Rlimit>,
    /// `no_new_privs`.
    #[serde(default)]
    pub no_new_privileges: bool,
}

/// `process.user`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct User {
    /// uid.
    pub uid: u32,
    /// gid.
    pub gid: u32,
}

/// `process.capabilities`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    /// Bounding set.
    pub bounding: Vec<String>,
    /// Effective set.
    pub effective: Vec<String>,
    /// Permitted set.
    pub permitted: Vec<String>,
}

/// One `process.rlimits` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rlimit {
    /// e.g. `RLIMIT_NOFILE`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Hard limit.
    pub hard: u64,
    /// Soft limit.
    pub soft: u64,
}

/// `root`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Root {
    /// Host path of the root filesystem.
    pub path: PathBuf,
    /// Must be false for `--overlay2` to put a writable layer on top.
    pub readonly: bool,
}

/// One `mounts` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mount {
    /// Path inside the sandbox.
    pub destination: PathBuf,
    /// Filesystem type (`proc`, `tmpfs`, `bind`, ...).
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Source (host path for bind mounts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<PathBuf>,
    /// Mount options.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
}

impl Mount {
    fn special(dest: &str, kind: &str, source: &str, options: &[&str]) -> Mount {
        Mount {
            destination: dest.into(),
            kind: Some(kind.into()),
            source: Some(source.into()),
            options: options.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// A bind mount of a host file or directory.
    pub fn bind(
        source: impl Into<PathBuf>,
        destination: impl Into<PathBuf>,
        readonly: bool,
    ) -> Self {
        let mode = if readonly { "ro" } else { "rw" };
        Mount {
            destination: destination.into(),
            kind: Some("bind".into()),
            source: Some(source.into()),
            options: vec!["rbind".into(), "nosuid".into(), "nodev".into(), mode.into()],
        }
    }

    /// A tmpfs (inside gVisor it lives in sandbox memory).
    pub fn tmpfs(destination: impl Into<PathBuf>, size_bytes: Option<u64>) -> Self {
        let mut options = vec!["nosuid".to_string(), "nodev".into(), "mode=1777".into()];
        if let Some(s) = size_bytes {
            options.push(format!("size={s}"));
        }
        Mount {
            destination: destination.into(),
            kind: Some("tmpfs".into()),
            source: Some("tmpfs".into()),
            options,
        }
    }
}

/// The standard mounts: /proc, /dev, /dev/pts, /dev/shm, /sys (ro), /run.
pub fn standard_mounts() -> Vec<Mount> {
    vec![
        Mount::special("/proc", "proc", "proc", &[]),
        Mount::special(
            "/dev",
            "tmpfs",
            "tmpfs",
            &["nosuid", "strictatime", "mode=755", "size=65536k"],
        ),
        Mount::special(
            "/dev/pts",
            "devpts",
            "devpts",
            &[
                "nosuid",
                "noexec",
                "newinstance",
                "ptmxmode=0666",
                "mode=0620",
            ],
        ),
        Mount::special(
            "/dev/shm",
            "tmpfs",
            "shm",
            &["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"],
        ),
        Mount::special(
            "/sys",
            "sysfs",
            "sysfs",
            &["nosuid", "noexec", "nodev", "ro"],
        ),
        Mount::special("/run", "tmpfs", "tmpfs", &["nosuid", "nodev", "mode=755"]),
    ]
}

/// `linux`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Linux {
    /// Namespaces to create (or join, with `path`).
    pub namespaces: Vec<Namespace>,
    /// cgroup limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Resources>,
    /// cgroup path, e.g. `/sbx/ID`: relative to each v1 controller mount,
    /// or to the v2 unified root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroups_path: Option<String>,
}

/// One `linux.namespaces` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Namespace {
    /// `pid`, `ipc`, `uts`, `mount`, `network`, ...
    #[serde(rename = "type")]
    pub kind: String,
    /// Existing namespace to join.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
}

/// `linux.resources`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resources {
    /// Memory limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Memory>,
    /// CPU bandwidth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Cpu>,
    /// Process count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<Pids>,
}

/// `linux.resources.memory`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Memory {
    /// Limit in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<i64>,
    /// Memory+swap limit in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swap: Option<i64>,
}

/// `linux.resources.cpu`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cpu {
    /// CFS quota in microseconds per period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<i64>,
    /// CFS period in microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period: Option<u64>,
}

/// `linux.resources.pids`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pids {
    /// Maximum number of tasks.
    pub limit: i64,
}

impl Spec {
    /// Writes `dir/config.json` atomically (temporary file, fsync, rename),
    /// creating `dir` if needed. Returns the path written.
    pub fn write_bundle(&self, dir: &Path) -> Result<PathBuf> {
        let io = |op: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |source| Error::Io { op, path, source }
        };
        std::fs::create_dir_all(dir).map_err(io("creating", dir))?;
        let target = dir.join("config.json");
        let tmp = dir.join(format!(".config.json.tmp-{}", std::process::id()));
        let json = serde_json::to_vec_pretty(self).map_err(|e| Error::Io {
            op: "serializing",
            path: target.clone(),
            source: e.into(),
        })?;
        let mut f = std::fs::File::create(&tmp).map_err(io("creating", &tmp))?;
        f.write_all(&json).map_err(io("writing", &tmp))?;
        f.sync_all().map_err(io("syncing", &tmp))?;
        drop(f);
        std::fs::rename(&tmp, &target).map_err(io("renaming", &tmp))?;
        Ok(target)
    }
}

/// Builds a [`Spec`] with sbx's defaults: root (uid 0) running `/bin/sh`,
/// default env, the standard mounts, pid/ipc/uts/mount/network namespaces,
/// writable root (so `--overlay2` applies), Docker's default capabilities,
/// `RLIMIT_NOFILE` 65536.
#[derive(Debug, Clone)]
pub struct SpecBuilder {
    spec: Spec,
    cpu_period: u64,
    vcpus: Option<u32>,
}

impl SpecBuilder {
    /// Starts from the defaults with the given host rootfs directory.
    pub fn new(rootfs: impl Into<PathBuf>) -> Self {
        let caps: Vec<String> = DEFAULT_CAPABILITIES.iter().map(|s| s.to_string()).collect();
        let ns = ["pid", "ipc", "uts", "mount", "network"];
        let spec = Spec {
            oci_version: "1.0.2".into(),
            process: Process {
                terminal: false,
                user: User { uid: 0, gid: 0 },
                args: vec!["/bin/sh".into()],
                env: vec![
                    format!("PATH={DEFAULT_PATH}"),
                    "HOME=/root".into(),
                    "LANG=C.UTF-8".into(),
                    "TERM=xterm".into(),
                ],
                cwd: "/".into(),
                capabilities: Some(Capabilities {
                    bounding: caps.clone(),
                    effective: caps.clone(),
                    permitted: caps,
                }),
                rlimits: vec![Rlimit {
                    kind: "RLIMIT_NOFILE".into(),
                    hard: 65536,
                    soft: 65536,
                }],
                no_new_privileges: false,
            },
            root: Root {
                path: rootfs.into(),
                readonly: false,
            },
            hostname: None,
            mounts: standard_mounts(),
            linux: Linux {
                namespaces: ns
                    .iter()
                    .map(|k| Namespace {
                        kind: k.to_string(),
                        path: None,
                    })
                    .collect(),
                resources: None,
                cgroups_path: None,
            },
            annotations: BTreeMap::new(),
        };
        SpecBuilder {
            spec,
            cpu_period: DEFAULT_CPU_PERIOD_US,
            vcpus: None,
        }
    }

    /// PID 1's argv, e.g. `["/.sbx/sbx-agent", "init"]`.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.spec.process.args = args.into_iter().map(Into::into).collect();
        self
    }

    /// Sets `KEY=VALUE`, replacing an existing `KEY`.
    pub fn env(mut self, key: &str, value: &str) -> Self {
        let prefix = format!("{key}=");
        self.spec.process.env.retain(|e| !e.starts_with(&prefix));
        self.spec.process.env.push(format!("{key}={value}"));
        self
    }

    /// PID 1's working directory.
    pub fn cwd(mut self, cwd: impl Into<String>) -> Self {
        self.spec.process.cwd = cwd.into();
        self
    }

    /// PID 1's uid and gid.
    pub fn user(mut self, uid: u32, gid: u32) -> Self {
        self.spec.process.user = User { uid, gid };
        self
    }

    /// Replaces the capability sets (bounding = effective = permitted).
    pub fn capabilities<I, S>(mut self, caps: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let caps: Vec<String> = caps.into_iter().map(Into::into).collect();
        self.spec.process.capabilities = Some(Capabilities {
            bounding: caps.clone(),
            effective: caps.clone(),
            permitted: caps,
        });
        self
    }

    /// Sets `RLIMIT_NOFILE` (soft = hard).
    pub fn nofile(mut self, n: u64) -> Self {
        self.spec
            .process
            .rlimits
            .retain(|r| r.kind != "RLIMIT_NOFILE");
        self.spec.process.rlimits.push(Rlimit {
            kind: "RLIMIT_NOFILE".into(),
            hard: n,
            soft: n,
        });
        self
    }

    /// Sandbox hostname.
    pub fn hostname(mut self, hostname: impl Into<String>) -> Self {
        self.spec.hostname = Some(hostname.into());
        self
    }

    /// Makes the root read-only. Note: `--overlay2` then does not apply.
    pub fn root_readonly(mut self, readonly: bool) -> Self {
        self.spec.root.readonly = readonly;
        self
    }

    /// Adds a bind mount of a host file or directory.
    pub fn bind_mount(
        mut self,
        source: impl Into<PathBuf>,
        destination: impl Into<PathBuf>,
        readonly: bool,
    ) -> Self {
        self.spec
            .mounts
            .push(Mount::bind(source, destination, readonly));
        self
    }

    /// Adds a tmpfs mount (e.g. a fresh `/tmp`).
    pub fn tmpfs(mut self, destination: impl Into<PathBuf>, size_bytes: Option<u64>) -> Self {
        self.spec.mounts.push(Mount::tmpfs(destination, size_bytes));
        self
    }

    /// Adds any mount.
    pub fn mount(mut self, mount: Mount) -> Self {
        self.spec.mounts.push(mount);
        self
    }

    /// Replaces the namespace of `kind` with one joined at `path`, or
    /// (with `None`) a fresh one.
    pub fn namespace(mut self, kind: &str, path: Option<PathBuf>) -> Self {
        self.spec.linux.namespaces.retain(|n| n.kind != kind);
        self.spec.linux.namespaces.push(Namespace {
            kind: kind.into(),
            path,
        });
        self
    }

    fn resources(&mut self) -> &mut Resources {
        self.spec
            .linux
            .resources
            .get_or_insert_with(Resources::default)
    }

    /// Memory limit in bytes (`linux.resources.memory.limit`).
    pub fn memory_limit(mut self, bytes: u64) -> Self {
        let limit = i64::try_from(bytes).unwrap_or(i64::MAX);
        self.resources()
            .memory
            .get_or_insert_with(Memory::default)
            .limit = Some(limit);
        self
    }

    /// CPU bandwidth of `n` vCPUs: quota = n × period.
    pub fn vcpus(mut self, n: u32) -> Self {
        self.vcpus = Some(n);
        self
    }

    /// CFS period in microseconds used with [`SpecBuilder::vcpus`]
    /// (default 100 000).
    pub fn cpu_period_us(mut self, period: u64) -> Self {
        self.cpu_period = period;
        self
    }

    /// Maximum number of tasks (`linux.resources.pids.limit`).
    pub fn pids_limit(mut self, n: i64) -> Self {
        self.resources().pids = Some(Pids { limit: n });
        self
    }

    /// `linux.cgroupsPath`, e.g. `/sbx/ID`.
    pub fn cgroups_path(mut self, path: impl Into<String>) -> Self {
        self.spec.linux.cgroups_path = Some(path.into());
        self
    }

    /// Adds an annotation.
    pub fn annotation(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.spec.annotations.insert(key.into(), value.into());
        self
    }

    /// The finished spec.
    pub fn build(&self) -> Spec {
        let mut spec = self.spec.clone();
        if let Some(n) = self.vcpus {
            let period = self.cpu_period;
            let quota = i64::try_from(u64::from(n).saturating_mul(period)).unwrap_or(i64::MAX);
            let res = spec.linux.resources.get_or_insert_with(Resources::default);
            res.cpu = Some(Cpu {
                quota: Some(quota),
                period: Some(period),
            });
        }
        spec
    }

    /// Builds and writes `dir/config.json` atomically.
    pub fn write_bundle(&self, dir: &Path) -> Result<PathBuf> {
        self.build().write_bundle(dir)
    }
}
