//! `run`, `create`, `start`, `kill`, `delete`, `pause`, `resume`.

use std::path::{Path, PathBuf};

use crate::{Argv, ProcessIo, Result, Runsc};

/// Options of `runsc run --detach`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunOptions {
    /// Bundle directory holding `config.json` (`--bundle=`).
    pub bundle: PathBuf,
    /// stdio of runsc and of PID 1 (the sandbox console).
    pub io: ProcessIo,
    /// `--pid-file=`: runsc writes the sandbox pid there.
    pub pid_file: Option<PathBuf>,
    /// `--user-log=`: user-visible runsc log.
    pub user_log: Option<PathBuf>,
    /// Per-call `--overlay2=`, overriding [`crate::GlobalOptions::overlay2`].
    pub overlay2: Option<String>,
}

/// Options of `runsc create` (followed by [`Runsc::start`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CreateOptions {
    /// Bundle directory holding `config.json` (`--bundle=`).
    pub bundle: PathBuf,
    /// stdio of runsc and of PID 1 (the sandbox console).
    pub io: ProcessIo,
    /// `--pid-file=`.
    pub pid_file: Option<PathBuf>,
    /// `--user-log=`.
    pub user_log: Option<PathBuf>,
    /// Per-call `--overlay2=`.
    pub overlay2: Option<String>,
}

/// Appends the flags `run`, `create` and `restore` share.
pub(crate) fn push_common(
    a: &mut Argv,
    bundle: &Path,
    pid_file: Option<&Path>,
    user_log: Option<&Path>,
) {
    a.flag("--bundle=", bundle);
    if let Some(p) = pid_file {
        a.flag("--pid-file=", p);
    }
    if let Some(p) = user_log {
        a.flag("--user-log=", p);
    }
}

impl Runsc {
    /// `runsc [global] run --detach --bundle=B [--pid-file=P] ID`.
    ///
    /// Returns once runsc has started the container (status `running`). The
    /// sandbox keeps `opts.io` as its console: use files or null.
    pub async fn run(&self, id: &str, opts: &RunOptions) -> Result<()> {
        let mut a = self.argv(opts.overlay2.as_deref());
        a.arg("run").arg("--detach");
        push_common(
            &mut a,
            &opts.bundle,
            opts.pid_file.as_deref(),
            opts.user_log.as_deref(),
        );
        a.arg(id);
        self.detached(&a, &opts.io).await
    }

    /// `runsc [global] create --bundle=B ID`: sandbox up, PID 1 not started.
    pub async fn create(&self, id: &str, opts: &CreateOptions) -> Result<()> {
        let mut a = self.argv(opts.overlay2.as_deref());
        a.arg("create");
        push_common(
            &mut a,
            &opts.bundle,
            opts.pid_file.as_deref(),
            opts.user_log.as_deref(),
        );
        a.arg(id);
        self.detached(&a, &opts.io).await
    }

    /// `runsc [global] start ID`.
    pub async fn start(&self, id: &str) -> Result<()> {
        self.guard(id)?;
        let mut a = self.argv(None);
        a.arg("start").arg(id);
        self.checked(&a, Some(id)).await.map(drop)
    }

    /// `runsc [global] kill [--all] ID SIGNAL`; `signal` is a name (`KILL`,
    /// `SIGTERM`) or a number. Killing a stopped container fails with
    /// "sandbox is not running"; a missing one is [`crate::Error::NotFound`].
    pub async fn kill(&self, id: &str, signal: &str, all: bool) -> Result<()> {
        self.guard(id)?;
        let mut a = self.argv(None);
        a.arg("kill");
        if all {
            a.arg("--all");
        }
        a.arg(id).arg(signal);
        self.checked(&a, Some(id)).await.map(drop)
    }

    /// `runsc [global] delete [--force] ID`. With `force`, a missing id is
    /// success (as runsc 20240729 does), so destroy is idempotent; without
    /// it a missing id is [`crate::Error::NotFound`]. Deleting a running
    /// sandbox waits for its processes to be reaped.
    pub async fn delete(&self, id: &str, force: bool) -> Result<()> {
        match self.guard(id) {
            Err(_) if force => return Ok(()),
            other => other?,
        }
        let mut a = self.argv(None);
        a.arg("delete");
        if force {
            a.arg("--force");
        }
        a.arg(id);
        self.checked(&a, Some(id)).await.map(drop)
    }

    /// `runsc [global] pause ID`.
    pub async fn pause(&self, id: &str) -> Result<()> {
        self.guard(id)?;
        let mut a = self.argv(None);
        a.arg("pause").arg(id);
        self.checked(&a, Some(id)).await.map(drop)
    }

    /// `runsc [global] resume ID`.
    pub async fn resume(&self, id: &str) -> Result<()> {
        self.guard(id)?;
        let mut a = self.argv(None);
        a.arg("resume").arg(id);
        self.checked(&a, Some(id)).await.map(drop)
    }
}
