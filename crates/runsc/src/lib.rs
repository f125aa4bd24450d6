//! `sbx-runsc`: a typed async wrapper of the gVisor `runsc` CLI.
//!
//! Modelled on containerd's `runc` crate: one options struct per subcommand,
//! global flags always placed before the subcommand, and failures that keep
//! the argv, exit status, stdout and stderr ([`Error`]).
//!
//! * [`Runsc`] runs the subcommands (`run`, `create`/`start`, `state`,
//!   `list`, `kill`, `delete`, `pause`, `resume`, `checkpoint`, `restore`,
//!   `exec`).
//! * [`oci`] builds the OCI `config.json` of a bundle.
//! * [`cleanup`] removes containers and cgroups left by killed processes.
//!
//! Written against runsc 0.0~20240729; see `NOTES.md` for what was measured.

#![warn(missing_docs)]

mod checkpoint;
pub mod cleanup;
mod error;
mod exec;
mod lifecycle;
pub mod oci;
mod process;
mod query;
mod types;

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use checkpoint::{CheckpointOptions, RestoreOptions};
pub use error::{is_enospc, Error, Result};
pub use exec::{ExecOptions, ExecOutput};
pub use lifecycle::{CreateOptions, RunOptions};
pub use types::{ContainerState, ContainerSummary, IoTarget, ProcessIo, SharedFd, Status};

/// Default location of the `runsc` binary (Debian package).
pub const DEFAULT_BINARY: &str = "/usr/bin/runsc";

/// Default `--root` state directory of runsc when run as root.
pub const DEFAULT_ROOT: &str = "/var/run/runsc";

/// The `--overlay2` value that keeps the root overlay's upper layer in a
/// file-backed store under `dir` (on disk, not sandbox memory). runsc fails
/// with "failed to stat filestore directory" unless `dir` already exists.
pub fn overlay2_root_dir(dir: &Path) -> String {
    format!("root:dir={}", dir.display())
}

/// Which network stack the sandbox gets (`--network=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Network {
    /// `--network=none`: loopback only; checkpoints work.
    #[default]
    None,
    /// `--network=host`: the host (or caller's netns) kernel stack; gVisor
    /// refuses to checkpoint such sandboxes.
    Host,
    /// `--network=sandbox`: gVisor netstack. Fails on newer kernels with
    /// runsc 20240729 ("cannot run with network enabled in root network
    /// namespace").
    Sandbox,
}

impl Network {
    /// The value passed to `--network=`.
    pub fn as_str(self) -> &'static str {
        match self {
            Network::None => "none",
            Network::Host => "host",
            Network::Sandbox => "sandbox",
        }
    }
}

/// Flags placed before the subcommand on every invocation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GlobalOptions {
    /// `--platform=`; `None` leaves runsc's default (systrap).
    pub platform: Option<String>,
    /// `--network=`; always passed.
    pub network: Network,
    /// `--overlay2=`, e.g. `root:dir=/var/lib/sbx/sandboxes/ID/overlay`.
    /// `run`, `create` and `restore` can override it per call.
    pub overlay2: Option<String>,
    /// `--debug-log=`; a path ending in `/` makes runsc create one file per
    /// command inside that directory.
    pub debug_log: Option<PathBuf>,
    /// `--debug`: debug-level logging (useful with `debug_log`).
    pub debug: bool,
    /// `--ignore-cgroups`: runsc leaves cgroups alone, so
    /// `linux.resources` is NOT enforced.
    pub ignore_cgroups: bool,
    /// Extra global flags, passed verbatim after the ones above.
    pub extra: Vec<String>,
}

/// Handle on one runsc installation and state root.
#[derive(Debug, Clone)]
pub struct Runsc {
    /// Path of the `runsc` binary.
    pub binary: PathBuf,
    /// `--root` state directory; containers are only visible under the root
    /// they were created with.
    pub root: PathBuf,
    /// Global flags.
    pub global: GlobalOptions,
    /// Upper bound on commands that run to completion (everything except
    /// the caller-spawned [`Runsc::exec_command`]); the process is killed
    /// when it expires. `None` waits forever.
    pub timeout: Option<Duration>,
    /// Guard against runsc's id PREFIX matching (see [`Runsc::exists`]):
    /// when true (the default), per-container commands first check that a
    /// state file for exactly this id exists under `root`, and otherwise
    /// return [`Error::NotFound`] (or `Ok` for `delete --force`) without
    /// running runsc.
    pub exact_ids: bool,
}

impl Runsc {
    /// A handle with default global options and no timeout.
    pub fn new(binary: impl Into<PathBuf>, root: impl Into<PathBuf>) -> Self {
        Runsc {
            binary: binary.into(),
            root: root.into(),
            global: GlobalOptions::default(),
            timeout: None,
            exact_ids: true,
        }
    }

    /// Whether a container with exactly this id has a state file under
    /// [`Runsc::root`] (`{id}_sandbox:{sandbox}.state`, runsc's layout).
    ///
    /// runsc resolves ids by prefix: with only `sbx-10` present,
    /// `runsc delete --force sbx-1` deletes `sbx-10`, and with both present
    /// every command on `sbx-1` fails as "ambiguous". Use ids of which none
    /// is a prefix of another (e.g. fixed length).
    pub fn exists(&self, id: &str) -> bool {
        if id.is_empty() || id.contains('/') {
            return false;
        }
        let prefix = format!("{id}_sandbox:");
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return false;
        };
        entries.filter_map(|e| e.ok()).any(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with(&prefix) && name.ends_with(".state")
        })
    }

    /// The [`Runsc::exact_ids`] guard: `NotFound` unless `id` exists.
    pub(crate) fn guard(&self, id: &str) -> Result<()> {
        if self.exact_ids && !self.exists(id) {
            return Err(Error::NotFound { id: id.to_string() });
        }
        Ok(())
    }

    /// Replaces the global options.
    pub fn with_global(mut self, global: GlobalOptions) -> Self {
        self.global = global;
        self
    }

    /// Sets [`Runsc::timeout`].
    pub fn with_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
        self
    }

    /// The argv prefix: binary, `--root`, global flags. `overlay2` overrides
    /// the global `--overlay2` for this call when set.
    pub(crate) fn argv(&self, overlay2: Option<&str>) -> Argv {
        let g = &self.global;
        let mut a = Argv::new(&self.binary);
        a.flag("--root=", &self.root);
        if let Some(p) = &g.platform {
            a.flag("--platform=", p);
        }
        a.flag("--network=", g.network.as_str());
        if let Some(o) = overlay2.or(g.overlay2.as_deref()) {
            a.flag("--overlay2=", o);
        }
        if let Some(d) = &g.debug_log {
            a.flag("--debug-log=", d);
        }
        if g.debug {
            a.arg("--debug");
        }
        if g.ignore_cgroups {
            a.arg("--ignore-cgroups");
        }
        for e in &g.extra {
            a.arg(e);
        }
        a
    }
}

/// A command line under construction; element 0 is the binary.
#[derive(Debug, Clone)]
pub(crate) struct Argv(Vec<OsString>);

impl Argv {
    fn new(binary: impl AsRef<OsStr>) -> Self {
        Argv(vec![binary.as_ref().to_owned()])
    }

    /// Appends one argument.
    pub(crate) fn arg(&mut self, a: impl AsRef<OsStr>) -> &mut Self {
        self.0.push(a.as_ref().to_owned());
        self
    }

    /// Appends `name` immediately followed by `value` as one argument,
    /// e.g. `flag("--bundle=", path)`.
    pub(crate) fn flag(&mut self, name: &str, value: impl AsRef<OsStr>) -> &mut Self {
        let mut s = OsString::from(name);
        s.push(value.as_ref());
        self.0.push(s);
        self
    }

    /// Lossy strings for error messages and logs.
    pub(crate) fn display(&self) -> Vec<String> {
        self.0
            .iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect()
    }

    /// The subcommand, for metrics: the first argument after the global
    /// flags that is a known runsc subcommand (`other` if none is).
    pub(crate) fn subcommand(&self) -> &'static str {
        const KNOWN: &[&str] = &[
            "run",
            "create",
            "start",
            "exec",
            "kill",
            "delete",
            "state",
            "list",
            "ps",
            "checkpoint",
            "restore",
            "pause",
            "resume",
            "wait",
            "events",
            "spec",
            "flags",
            "version",
            "install",
            "debug",
            "usage",
            "portforward",
            "tar",
        ];
        self.0
            .iter()
            .skip(1)
            .filter_map(|a| a.to_str())
            .find(|a| !a.starts_with('-'))
            .and_then(|a| KNOWN.iter().find(|k| **k == a).copied())
            .unwrap_or("other")
    }

    /// A `tokio::process::Command` for this argv with no stdio configured.
    pub(crate) fn command(&self) -> tokio::process::Command {
        let mut c = tokio::process::Command::new(&self.0[0]);
        c.args(&self.0[1..]);
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subcommand_for_metrics_skips_global_flags() {
        let r = Runsc::new("/bin/runsc", "/run/x").with_global(GlobalOptions {
            debug: true,
            extra: vec!["--host-uds=none".into()],
            ..GlobalOptions::default()
        });
        let mut a = r.argv(None);
        assert_eq!(a.subcommand(), "other");
        a.arg("checkpoint").arg("--image-path=/x").arg("sbx-1");
        assert_eq!(a.subcommand(), "checkpoint");
        let mut b = r.argv(None);
        b.arg("sbx-guest-word");
        assert_eq!(b.subcommand(), "other");
    }

    #[test]
    fn global_flags_in_order() {
        let r = Runsc::new("/bin/runsc", "/run/x").with_global(GlobalOptions {
            platform: Some("ptrace".into()),
            network: Network::Host,
            overlay2: Some("root:memory".into()),
            debug_log: Some("/tmp/dbg/".into()),
            debug: true,
            ignore_cgroups: true,
            extra: vec!["--host-uds=none".into()],
        });
        assert_eq!(
            r.argv(None).display(),
            [
                "/bin/runsc",
                "--root=/run/x",
                "--platform=ptrace",
                "--network=host",
                "--overlay2=root:memory",
                "--debug-log=/tmp/dbg/",
                "--debug",
                "--ignore-cgroups",
                "--host-uds=none"
            ]
        );
        let per_call = r.argv(Some(&overlay2_root_dir(Path::new("/d")))).display();
        assert!(per_call.contains(&"--overlay2=root:dir=/d".to_string()));
        assert!(!per_call.contains(&"--overlay2=root:memory".to_string()));
    }

    #[test]
    fn defaults_are_minimal() {
        let r = Runsc::new("runsc", "/r");
        assert_eq!(
            r.argv(None).display(),
            ["runsc", "--root=/r", "--network=none"]
        );
    }
}
