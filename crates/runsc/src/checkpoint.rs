//! `checkpoint` and `restore`.

use std::path::PathBuf;

use crate::lifecycle::push_common;
use crate::{Argv, ProcessIo, Result, Runsc};

/// Options of `runsc checkpoint`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckpointOptions {
    /// `--image-path=`: directory that receives the image (created by runsc).
    pub image_path: PathBuf,
    /// `--leave-running`: the container keeps running after the checkpoint
    /// (otherwise runsc stops it).
    pub leave_running: bool,
    /// `--compression=`: `none` or `flate-best-speed` (runsc's default).
    pub compression: Option<String>,
}

/// Options of `runsc restore`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RestoreOptions {
    /// Bundle directory of the new container (`--bundle=`); its
    /// `config.json` must describe the same mounts as the checkpointed one.
    pub bundle: PathBuf,
    /// `--image-path=`: a directory written by `checkpoint`.
    pub image_path: PathBuf,
    /// `--detach`: return once the container runs. Without it the call
    /// lasts as long as the container.
    pub detach: bool,
    /// stdio of runsc and of the restored PID 1.
    pub io: ProcessIo,
    /// `--pid-file=`.
    pub pid_file: Option<PathBuf>,
    /// `--user-log=`.
    pub user_log: Option<PathBuf>,
    /// Per-call `--overlay2=` (the new container's own overlay dir).
    pub overlay2: Option<String>,
}

impl Runsc {
    /// `runsc [global] checkpoint --image-path=DIR [--leave-running] ID`.
    pub async fn checkpoint(&self, id: &str, opts: &CheckpointOptions) -> Result<()> {
        self.guard(id)?;
        let mut a = self.argv(None);
        a.arg("checkpoint").flag("--image-path=", &opts.image_path);
        if opts.leave_running {
            a.arg("--leave-running");
        }
        if let Some(c) = &opts.compression {
            a.flag("--compression=", c);
        }
        a.arg(id);
        self.checked(&a, Some(id)).await.map(drop)
    }

    /// `runsc [global] restore --bundle=B --image-path=DIR [--detach] ID`:
    /// a new container `id` from a checkpoint image.
    pub async fn restore(&self, id: &str, opts: &RestoreOptions) -> Result<()> {
        let a = self.restore_argv(id, opts);
        self.detached(&a, &opts.io).await
    }

    /// The `restore` command line, for callers that want to spawn a
    /// non-detached restore themselves (e.g. with piped stdio).
    pub fn restore_command(&self, id: &str, opts: &RestoreOptions) -> tokio::process::Command {
        self.restore_argv(id, opts).command()
    }

    fn restore_argv(&self, id: &str, opts: &RestoreOptions) -> Argv {
        let mut a = self.argv(opts.overlay2.as_deref());
        a.arg("restore");
        push_common(
            &mut a,
            &opts.bundle,
            opts.pid_file.as_deref(),
            opts.user_log.as_deref(),
        );
        a.flag("--image-path=", &opts.image_path);
        if opts.detach {
            a.arg("--detach");
        }
        a.arg(id);
        a
    }
}
