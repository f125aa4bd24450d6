//! `exec`: extra processes inside a running container.

use std::path::PathBuf;
use std::process::ExitStatus;

use crate::error::means_not_found;
use crate::{Argv, Error, Result, Runsc};

/// runsc's own exit code for its failures (as opposed to the process's).
const RUNSC_FAILURE: i32 = 128;

/// Options of `runsc exec`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecOptions {
    /// Program and arguments; `argv[0]` is resolved with the container's
    /// `PATH` by runsc.
    pub argv: Vec<String>,
    /// Extra `KEY=VALUE` variables (`--env=`), added to the spec's env.
    pub env: Vec<String>,
    /// Working directory (`--cwd=`).
    pub cwd: Option<PathBuf>,
    /// `--user=UID[:GID]`.
    pub user: Option<String>,
}

/// Result of [`Runsc::exec`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOutput {
    /// Exit status of `runsc exec`, which is that of the process (runsc's
    /// own failures exit 128).
    pub status: ExitStatus,
    /// Captured stdout.
    pub stdout: Vec<u8>,
    /// Captured stderr.
    pub stderr: Vec<u8>,
}

impl Runsc {
    fn exec_argv(&self, id: &str, opts: &ExecOptions) -> Argv {
        let mut a = self.argv(None);
        a.arg("exec");
        for e in &opts.env {
            a.flag("--env=", e);
        }
        if let Some(c) = &opts.cwd {
            a.flag("--cwd=", c);
        }
        if let Some(u) = &opts.user {
            a.flag("--user=", u);
        }
        a.arg(id);
        if opts.argv.first().is_some_and(|s| s.starts_with('-')) {
            a.arg("--");
        }
        for s in &opts.argv {
            a.arg(s);
        }
        a
    }

    /// A `runsc [global] exec [--env=..] [--cwd=..] ID ARGV..` command with
    /// nothing configured: the caller sets stdio (e.g. piped stdin/stdout for
    /// a long-lived relay), `kill_on_drop`, and spawns it. Its lifetime is
    /// that of the process in the sandbox. Not guarded by
    /// [`Runsc::exact_ids`]: call [`Runsc::exists`] first if needed.
    pub fn exec_command(&self, id: &str, opts: &ExecOptions) -> tokio::process::Command {
        self.exec_argv(id, opts).command()
    }

    /// Runs `runsc exec` to completion with stdin null and output captured.
    /// A non-zero exit of the process is returned in [`ExecOutput::status`];
    /// a missing container is [`Error::NotFound`]. Other runsc failures
    /// (e.g. an empty `argv`) show as status 128 with runsc's message on
    /// stderr.
    pub async fn exec(&self, id: &str, opts: &ExecOptions) -> Result<ExecOutput> {
        self.guard(id)?;
        let a = self.exec_argv(id, opts);
        let out = self.output(&a).await?;
        let stderr_text = String::from_utf8_lossy(&out.stderr);
        if out.status.code() == Some(RUNSC_FAILURE) && means_not_found(&stderr_text) {
            return Err(Error::NotFound { id: id.to_string() });
        }
        Ok(ExecOutput {
            status: out.status,
            stdout: out.stdout,
            stderr: out.stderr,
        })
    }
}
