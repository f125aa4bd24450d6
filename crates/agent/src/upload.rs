//! Chunked uploads: a temp file in the destination's directory, filled by
//! `FileWriteData` frames, fsynced and renamed over the destination on
//! `FileWriteEnd`, so readers see the old file or the whole new one.
//!
//! Each upload runs in its own task fed by a small bounded channel, so a
//! slow disk holds up the connection's reader for at most one write. The temp
//! file is removed by a drop guard whenever the upload does not commit:
//! abort, cancel, error, over-size, or the connection dropping.

use crate::files::{absolute, io_err, FileError};
use crate::owner;
use crate::server::{Outcome, Sink};
use sbx_agent_proto::file_metadata::FileMetadata;
use sbx_agent_proto::{AgentError, AgentErrorCode, Reply};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use tokio::sync::mpsc;

/// Marker in temp file names: `.<name>.sbx-upload-<random>`.
pub const TEMP_MARKER: &str = ".sbx-upload-";

/// Data frames buffered per upload before the connection's reader waits.
const UPLOAD_QUEUE: usize = 2;

/// Upload-specific failures (reported as [`AgentError`]s).
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    /// More bytes than `max_bytes`.
    #[error("upload exceeds {0} bytes")]
    TooLarge(u64),
    /// A filesystem failure (bad path, not a regular file, I/O).
    #[error(transparent)]
    File(#[from] FileError),
    /// The blocking worker died.
    #[error("upload worker failed")]
    Worker,
}

impl From<UploadError> for AgentError {
    fn from(e: UploadError) -> Self {
        match e {
            UploadError::File(f) => f.into(),
            UploadError::TooLarge(_) => AgentError::new(AgentErrorCode::TooLarge, e.to_string()),
            UploadError::Worker => AgentError::new(AgentErrorCode::Io, e.to_string()),
        }
    }
}

enum Msg {
    Data(Vec<u8>),
    End,
    Abort { reply: bool },
}

/// Handle to a running upload, held by its connection.
pub struct Upload {
    tx: mpsc::Sender<Msg>,
}

impl Upload {
    /// Starts an upload task; its final reply or error goes to `sink`.
    /// `owner` (a guest user name) owns the file and the parents created;
    /// `metadata` becomes the new file's `user.e2b.*` xattrs.
    pub fn begin(
        path: String,
        mode: u32,
        max_bytes: u64,
        (owner, metadata): (Option<String>, FileMetadata),
        sink: Sink,
    ) -> Upload {
        let (tx, rx) = mpsc::channel(UPLOAD_QUEUE);
        tokio::spawn(async move {
            if let Some(outcome) = run(path, mode, max_bytes, (owner, metadata), rx).await {
                sink.finish(outcome).await;
            }
        });
        Upload { tx }
    }

    /// Queues payload bytes (ignored once the upload has failed).
    pub async fn data(&self, bytes: Vec<u8>) {
        let _ = self.tx.send(Msg::Data(bytes)).await;
    }

    /// Commits the upload; the task replies `FileWritten` or an error.
    pub async fn end(self) {
        let _ = self.tx.send(Msg::End).await;
    }

    /// Aborts the upload and replies `Ok`.
    pub async fn abort(self) {
        let _ = self.tx.send(Msg::Abort { reply: true }).await;
    }

    /// Aborts the upload without any reply (the request was cancelled).
    pub async fn cancel(self) {
        let _ = self.tx.send(Msg::Abort { reply: false }).await;
    }
}

/// The temp file; removed on drop unless committed.
struct Temp {
    file: File,
    /// Permission bits of the final file.
    mode: u32,
    temp: PathBuf,
    dest: PathBuf,
    dest_str: String,
    committed: bool,
}

impl Drop for Temp {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

/// Fails with `not_regular_file` if `dest` exists and is not a regular file.
/// A symlink is refused too, as the contract asks: the rename would replace
/// the link itself, while a download of the same path follows it.
fn check_dest(dest: &Path, dest_str: &str) -> Result<(), FileError> {
    match std::fs::symlink_metadata(dest) {
        Ok(m) if m.is_file() => Ok(()),
        Ok(_) => Err(FileError::NotRegular(dest_str.to_string())),
        Err(_) => Ok(()),
    }
}

fn temp_name(name: &str) -> String {
    let rand = uuid::Uuid::new_v4().simple().to_string();
    let rand = &rand[..16];
    if name.len() + TEMP_MARKER.len() + 17 <= 255 {
        format!(".{name}{TEMP_MARKER}{rand}")
    } else {
        format!("{TEMP_MARKER}{rand}")
    }
}

fn open_temp(
    path: &str,
    mode: u32,
    owner: Option<&str>,
    metadata: &FileMetadata,
) -> Result<Temp, FileError> {
    let dest = absolute(path)?.to_path_buf();
    let owner = owner::resolve(owner)?;
    let name = match dest.file_name() {
        Some(n) if !path.ends_with('/') => n.to_string_lossy().into_owned(),
        _ => return Err(FileError::NotRegular(path.to_string())),
    };
    check_dest(&dest, path)?;
    let parent = dest.parent().unwrap_or(Path::new("/")).to_path_buf();
    owner::create_dirs(&parent, 0o755, owner)?;
    let temp = parent.join(temp_name(&name));
    let mode = mode & 0o7777;
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&temp)
        .map_err(|e| io_err(path, e))?;
    let guard = Temp {
        file,
        mode,
        temp,
        dest,
        dest_str: path.to_string(),
        committed: false,
    };
    // Before the mode: a chown clears the set-id bits.
    if let Some(o) = owner {
        std::os::unix::fs::fchown(&guard.file, Some(o.uid), Some(o.gid))
            .map_err(|e| io_err(path, e))?;
    }
    // The umask may have cleared bits: apply the mode exactly.
    guard
        .file
        .set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(|e| io_err(path, e))?;
    // On the temp file: the rename publishes the content and its metadata at once.
    crate::xattrs::set_all(&guard.file, metadata).map_err(|e| io_err(path, e))?;
    Ok(guard)
}

fn commit(mut t: Temp) -> Result<(), FileError> {
    check_dest(&t.dest, &t.dest_str)?;
    // Once more after the last write: a write clears the set-id bits (under
    // gVisor even for root, which Linux exempts).
    t.file
        .set_permissions(std::fs::Permissions::from_mode(t.mode))
        .map_err(|e| io_err(&t.dest_str, e))?;
    t.file.sync_all().map_err(|e| io_err(&t.dest_str, e))?;
    std::fs::rename(&t.temp, &t.dest).map_err(|e| io_err(&t.dest_str, e))?;
    t.committed = true;
    if let Some(parent) = t.dest.parent() {
        if let Ok(dir) = File::open(parent) {
            let _ = dir.sync_all();
        }
    }
    Ok(())
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, UploadError> + Send + 'static,
) -> Result<T, UploadError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|_| UploadError::Worker)?
}

/// Runs one upload to its outcome; `None` means "send nothing".
async fn run(
    path: String,
    mode: u32,
    max_bytes: u64,
    (owner, metadata): (Option<String>, FileMetadata),
    mut rx: mpsc::Receiver<Msg>,
) -> Option<Outcome> {
    let p = path.clone();
    let mut temp =
        match blocking(move || Ok(open_temp(&p, mode, owner.as_deref(), &metadata)?)).await {
            Ok(t) => t,
            Err(e) => return Some(Err(e.into())),
        };
    let mut written: u64 = 0;
    while let Some(msg) = rx.recv().await {
        match msg {
            Msg::Data(bytes) => {
                written += bytes.len() as u64;
                if written > max_bytes {
                    drop(temp);
                    return Some(Err(UploadError::TooLarge(max_bytes).into()));
                }
                let p = path.clone();
                temp = match blocking(move || {
                    temp.file.write_all(&bytes).map_err(|e| io_err(&p, e))?;
                    Ok(temp)
                })
                .await
                {
                    Ok(t) => t,
                    Err(e) => return Some(Err(e.into())),
                };
            }
            Msg::End => {
                return Some(match blocking(move || Ok(commit(temp)?)).await {
                    Ok(()) => Ok((
                        Reply::FileWritten {
                            bytes_written: written,
                        },
                        Vec::new(),
                    )),
                    Err(e) => Err(e.into()),
                });
            }
            Msg::Abort { reply } => {
                drop(temp);
                return reply.then(|| Ok((Reply::Ok, Vec::new())));
            }
        }
    }
    // The connection dropped: `temp` is removed on drop.
    None
}

/// Bytes read from stdin per `read` by [`write_file_from_stdin`].
const DIRECT_READ_BYTES: usize = 1024 * 1024;

/// `sbx-agent write-file`: the direct upload path (see
/// `sbx_agent_proto::direct`). Same temp file, checks and atomic commit as a
/// framed upload, but the bytes come straight from stdin, not through the
/// agent's connection.
/// `owner` and `metadata` as for [`Upload::begin`].
pub fn write_file_from_stdin(
    path: &str,
    mode: u32,
    max_bytes: u64,
    (owner, metadata): (Option<&str>, &FileMetadata),
) -> Result<u64, UploadError> {
    use sbx_agent_proto::{direct_upload_trailer_matches, DIRECT_UPLOAD_TRAILER_BYTES};
    use std::io::Read;
    let mut temp = open_temp(path, mode, owner, metadata)?;
    let mut stdin = std::io::stdin().lock();
    let mut buf = vec![0u8; DIRECT_READ_BYTES + DIRECT_UPLOAD_TRAILER_BYTES];
    // The last bytes seen are held back: they may be the trailer.
    let mut held = 0usize;
    let mut written: u64 = 0;
    loop {
        let n = match stdin.read(&mut buf[held..held + DIRECT_READ_BYTES]) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io_err(path, e).into()),
        };
        let total = held + n;
        let ready = total.saturating_sub(DIRECT_UPLOAD_TRAILER_BYTES);
        if ready > 0 {
            written += ready as u64;
            if written > max_bytes {
                return Err(UploadError::TooLarge(max_bytes));
            }
            temp.file
                .write_all(&buf[..ready])
                .map_err(|e| io_err(path, e))?;
            buf.copy_within(ready..total, 0);
        }
        held = total - ready;
    }
    if !direct_upload_trailer_matches(&buf[..held], written) {
        // Dropping `temp` removes it: nothing changes.
        return Err(io_err(
            path,
            std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the upload stream ended early",
            ),
        )
        .into());
    }
    commit(temp)?;
    Ok(written)
}
