//! Running `runsc` processes: captured output, timeouts, detached starts.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use crate::error::means_not_found;
use crate::{Argv, Error, IoTarget, ProcessIo, Result, Runsc};

/// How much of a console log is read back into [`Error::Failed`].
const MAX_TAIL: u64 = 64 * 1024;

/// runsc's own exit code for its failures in `exec` (as opposed to the process's).
const RUNSC_FAILURE: i32 = 128;

impl Runsc {
    /// Runs `argv` to completion with stdin null and stdout/stderr captured.
    /// Only spawn errors and timeouts are errors here; the exit status is
    /// left to the caller.
    pub(crate) async fn output(&self, argv: &Argv) -> Result<Output> {
        let started = std::time::Instant::now();
        let res = self.output_inner(argv).await;
        let sub = argv.subcommand();
        // `exec` exits with the guest process's status: only runsc's own 128 is a runsc failure.
        let failed = match &res {
            Ok(out) if sub == "exec" => out.status.code() == Some(RUNSC_FAILURE),
            Ok(out) => !out.status.success(),
            Err(_) => true,
        };
        sbx_metrics::global().runsc_command(sub, started.elapsed(), failed);
        res
    }

    async fn output_inner(&self, argv: &Argv) -> Result<Output> {
        let mut cmd = argv.command();
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        tracing::debug!(argv = ?argv.display(), "runsc");
        let child = cmd.spawn().map_err(|source| Error::Spawn {
            argv: argv.display(),
            source,
        })?;
        let wait = child.wait_with_output();
        let res = match self.timeout {
            Some(t) => tokio::time::timeout(t, wait)
                .await
                .map_err(|_| Error::Timeout {
                    argv: argv.display(),
                    after: t,
                })?,
            None => wait.await,
        };
        res.map_err(|source| Error::Spawn {
            argv: argv.display(),
            source,
        })
    }

    /// Like [`Runsc::output`] but a non-zero exit is an error: `NotFound`
    /// when `id` is given and stderr says the container does not exist,
    /// `Failed` otherwise.
    pub(crate) async fn checked(&self, argv: &Argv, id: Option<&str>) -> Result<Output> {
        let out = self.output(argv).await?;
        if out.status.success() {
            return Ok(out);
        }
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if let Some(id) = id {
            if means_not_found(&stderr) {
                return Err(Error::NotFound { id: id.to_string() });
            }
        }
        Err(Error::Failed {
            argv: argv.display(),
            status: out.status,
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr,
        })
    }

    /// Runs a command that starts a sandbox (`run --detach`, `create`,
    /// `restore --detach`) with the given stdio, which the sandbox keeps.
    /// Waits for the runsc process itself to exit. On failure, the bytes the
    /// command appended to file-backed stdout/stderr become the error text.
    pub(crate) async fn detached(&self, argv: &Argv, io: &ProcessIo) -> Result<()> {
        let started = std::time::Instant::now();
        let res = self.detached_inner(argv, io).await;
        sbx_metrics::global().runsc_command(argv.subcommand(), started.elapsed(), res.is_err());
        res
    }

    async fn detached_inner(&self, argv: &Argv, io: &ProcessIo) -> Result<()> {
        let mut cmd = argv.command();
        cmd.stdin(open_target(&io.stdin, false)?)
            .stdout(open_target(&io.stdout, true)?)
            .stderr(open_target(&io.stderr, true)?)
            .kill_on_drop(true);
        let out_mark = file_len(&io.stdout);
        let err_mark = file_len(&io.stderr);
        tracing::debug!(argv = ?argv.display(), "runsc (detached stdio)");
        let mut child = cmd.spawn().map_err(|source| Error::Spawn {
            argv: argv.display(),
            source,
        })?;
        let wait = child.wait();
        let res = match self.timeout {
            Some(t) => tokio::time::timeout(t, wait)
                .await
                .map_err(|_| Error::Timeout {
                    argv: argv.display(),
                    after: t,
                })?,
            None => wait.await,
        };
        let status = res.map_err(|source| Error::Spawn {
            argv: argv.display(),
            source,
        })?;
        if status.success() {
            return Ok(());
        }
        let stderr = read_tail(&io.stderr, err_mark);
        let stdout = if io.stdout == io.stderr {
            String::new()
        } else {
            read_tail(&io.stdout, out_mark)
        };
        Err(Error::Failed {
            argv: argv.display(),
            status,
            stdout,
            stderr,
        })
    }
}

/// Opens one stdio target.
pub(crate) fn open_target(t: &IoTarget, write: bool) -> Result<Stdio> {
    match t {
        IoTarget::Null => Ok(Stdio::null()),
        IoTarget::Inherit => Ok(Stdio::inherit()),
        IoTarget::Fd(fd) => {
            fd.0.try_clone()
                .map(Stdio::from)
                .map_err(|source| Error::Io {
                    op: "duplicating",
                    path: PathBuf::from("(stdio channel)"),
                    source,
                })
        }
        IoTarget::File(p) => {
            let f = if write {
                OpenOptions::new().create(true).append(true).open(p)
            } else {
                File::open(p)
            };
            f.map(Stdio::from).map_err(|source| Error::Io {
                op: "opening",
                path: p.clone(),
                source,
            })
        }
    }
}

/// Current length of a file target (0 for others or on error).
fn file_len(t: &IoTarget) -> u64 {
    match t {
        IoTarget::File(p) => std::fs::metadata(p).map(|m| m.len()).unwrap_or(0),
        _ => 0,
    }
}

/// What was appended to a file target after `mark`, at most [`MAX_TAIL`]
/// bytes (the newest ones). Best effort: errors give an empty string.
fn read_tail(t: &IoTarget, mark: u64) -> String {
    let IoTarget::File(p) = t else {
        return String::new();
    };
    read_file_from(p, mark).unwrap_or_default()
}

fn read_file_from(p: &Path, mark: u64) -> std::io::Result<String> {
    let mut f = File::open(p)?;
    let len = f.metadata()?.len();
    let start = mark.max(len.saturating_sub(MAX_TAIL));
    f.seek(SeekFrom::Start(start))?;
    let mut buf = Vec::new();
    f.take(MAX_TAIL).read_to_end(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}
