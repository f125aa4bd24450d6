//! Filesystem requests: stat, list, mkdir, remove, rename, sync and download.
//!
//! Every path must be absolute. Symlinks are followed where the request says
//! so (download); the sandbox is its own kernel, so a link cannot escape it.

use crate::owner::{self, Owner};
use crate::server::{Outcome, Sink};
use crate::users::{Names, UserDb, UserError};
use sbx_agent_proto::{
    AgentError, AgentErrorCode, DirectDownloadHeader, Event, FileKind, FileStat, Reply,
};
use std::fs::Metadata;
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::time::UNIX_EPOCH;

/// Largest payload of one `FileData` event.
pub const FILE_DATA_CHUNK_BYTES: usize = 1024 * 1024;

/// Filesystem request failures (reported to the daemon as [`AgentError`]s).
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The path is not absolute (or empty).
    #[error("path must be absolute: {0:?}")]
    NotAbsolute(String),
    /// An operation on `/` itself that makes no sense.
    #[error("refusing to operate on /")]
    Root,
    /// The path exists but is not a regular file.
    #[error("{0}: not a regular file")]
    NotRegular(String),
    /// The path exists but is not a directory.
    #[error("{0}: exists and is not a directory")]
    NotDirectory(String),
    /// File larger than allowed.
    #[error("{path}: {size} bytes exceeds the limit of {max}")]
    TooLarge {
        /// Path.
        path: String,
        /// Actual size.
        size: u64,
        /// Limit.
        max: u64,
    },
    /// A listing over [`crate::listing::MAX_LIST_ENTRIES`] entries.
    #[error("{path}: more than {max} entries")]
    TooManyEntries {
        /// The listed directory.
        path: String,
        /// Limit.
        max: usize,
    },
    /// An unknown owner (or an unreadable user database).
    #[error(transparent)]
    User(#[from] UserError),
    /// A system call failed.
    #[error("{path}: {source}")]
    Io {
        /// Path involved.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
}

impl From<FileError> for AgentError {
    fn from(e: FileError) -> Self {
        let code = match &e {
            FileError::NotAbsolute(_) | FileError::Root => AgentErrorCode::InvalidArgument,
            FileError::NotRegular(_) => AgentErrorCode::NotRegularFile,
            FileError::NotDirectory(_) => AgentErrorCode::Io,
            FileError::TooLarge { .. } | FileError::TooManyEntries { .. } => {
                AgentErrorCode::TooLarge
            }
            FileError::User(UserError::Unknown(_)) => AgentErrorCode::InvalidArgument,
            FileError::User(UserError::Read { .. }) => AgentErrorCode::Io,
            FileError::Io { source, .. } => io_code(source),
        };
        AgentError::new(code, e.to_string())
    }
}

/// Maps an I/O error to the protocol's error code.
pub fn io_code(err: &std::io::Error) -> AgentErrorCode {
    match err.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ENOTDIR) => AgentErrorCode::NotFound,
        Some(libc::EACCES) | Some(libc::EPERM) | Some(libc::EROFS) => {
            AgentErrorCode::PermissionDenied
        }
        Some(libc::ENOSPC) | Some(libc::EDQUOT) => AgentErrorCode::NoSpace,
        Some(libc::ENOTEMPTY) => AgentErrorCode::NotEmpty,
        _ => AgentErrorCode::Io,
    }
}

/// Wraps an I/O error with its path.
pub fn io_err(path: &str, source: std::io::Error) -> FileError {
    FileError::Io {
        path: path.to_string(),
        source,
    }
}

/// Checks that `path` is absolute.
pub fn absolute(path: &str) -> Result<&Path, FileError> {
    if path.starts_with('/') && !path.contains('\0') {
        Ok(Path::new(path))
    } else {
        Err(FileError::NotAbsolute(path.to_string()))
    }
}

fn kind_of(ft: std::fs::FileType) -> FileKind {
    if ft.is_file() {
        FileKind::File
    } else if ft.is_dir() {
        FileKind::Dir
    } else if ft.is_symlink() {
        FileKind::Symlink
    } else {
        FileKind::Other
    }
}

/// `path` with `.` and `..` resolved lexically (for links that resolve to nothing).
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// Where the symlink at `path` points (canonical when it resolves, else
/// its raw target made absolute) and the kind of the final target.
fn symlink_target(path: &Path) -> (Option<String>, Option<FileKind>) {
    if let Ok(target) = std::fs::canonicalize(path) {
        let kind = std::fs::metadata(&target)
            .ok()
            .map(|m| kind_of(m.file_type()));
        return (Some(target.to_string_lossy().into_owned()), kind);
    }
    match std::fs::read_link(path) {
        Ok(raw) => {
            let dir = path.parent().unwrap_or(Path::new("/"));
            (
                Some(lexical(&dir.join(raw)).to_string_lossy().into_owned()),
                None,
            )
        }
        Err(_) => (None, None),
    }
}

/// [`file_stat`] plus owner and group names and, for a symlink, its target.
pub fn full_stat(path: &Path, meta: &Metadata, names: &Names) -> FileStat {
    let mut stat = file_stat(path, meta);
    stat.owner = names.user(stat.uid);
    stat.group = names.group(stat.gid);
    if stat.kind == FileKind::Symlink {
        (stat.symlink_target, stat.target_kind) = symlink_target(path);
    } else {
        stat.metadata = crate::xattrs::read(path);
    }
    stat
}

/// Builds a [`FileStat`] from metadata (ids but no names, no link target).
pub fn file_stat(path: &Path, meta: &Metadata) -> FileStat {
    let kind = kind_of(meta.file_type());
    let mtime_ms = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    FileStat {
        path: path.to_string_lossy().into_owned(),
        name: path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "/".to_string()),
        kind,
        size: meta.size(),
        mode: meta.permissions().mode() & 0o7777,
        mtime_ms,
        uid: meta.uid(),
        gid: meta.gid(),
        owner: None,
        group: None,
        symlink_target: None,
        target_kind: None,
        metadata: Default::default(),
    }
}

/// Runs a blocking filesystem operation off the async workers.
pub async fn blocking<F>(f: F) -> Outcome
where
    F: FnOnce() -> Result<Reply, FileError> + Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(Ok(reply)) => Ok((reply, Vec::new())),
        Ok(Err(e)) => Err(e.into()),
        Err(e) => Err(AgentError::new(
            AgentErrorCode::Io,
            format!("worker failed: {e}"),
        )),
    }
}

/// `Stat` (does not follow a final symlink).
pub fn stat(path: &str) -> Result<Reply, FileError> {
    let p = absolute(path)?;
    let meta = std::fs::symlink_metadata(p).map_err(|e| io_err(path, e))?;
    Ok(Reply::Stat {
        stat: full_stat(p, &meta, &UserDb::default().names()),
    })
}

/// `Mkdir`: create the directory and its missing parents (given to `owner`);
/// fine, and untouched, if it already is one.
pub fn mkdir(path: &str, owner: Option<&str>) -> Result<Reply, FileError> {
    let p = absolute(path)?;
    match std::fs::metadata(p) {
        Ok(m) if m.is_dir() => return Ok(Reply::Ok),
        Ok(_) => return Err(FileError::NotDirectory(path.to_string())),
        Err(_) => {}
    }
    let owner = owner::resolve(owner)?;
    owner::create_dirs(p, 0o777, owner)?;
    Ok(Reply::Ok)
}

/// `Remove`: a file, a symlink, an empty directory, or a tree with `recursive`.
pub fn remove(path: &str, recursive: bool) -> Result<Reply, FileError> {
    let p = absolute(path)?;
    if p.parent().is_none() {
        return Err(FileError::Root);
    }
    let meta = std::fs::symlink_metadata(p).map_err(|e| io_err(path, e))?;
    let result = if meta.is_dir() {
        if recursive {
            std::fs::remove_dir_all(p)
        } else {
            std::fs::remove_dir(p)
        }
    } else {
        std::fs::remove_file(p)
    };
    result.map_err(|e| io_err(path, e))?;
    Ok(Reply::Ok)
}

/// `Rename`; with `parents_owner`, the missing parents of `to` are created
/// first, owned by that user.
pub fn rename(from: &str, to: &str, parents_owner: Option<&str>) -> Result<Reply, FileError> {
    let f = absolute(from)?;
    let t = absolute(to)?;
    if parents_owner.is_some() {
        // A missing source is reported before anything is created.
        f.symlink_metadata().map_err(|e| io_err(from, e))?;
        let owner: Option<Owner> = owner::resolve(parents_owner)?;
        if let Some(parent) = t.parent() {
            owner::create_dirs(parent, 0o755, owner)?;
        }
    }
    std::fs::rename(f, t).map_err(|e| {
        // ENOENT with the source in place means the destination's directory is missing.
        let blamed = if e.kind() == std::io::ErrorKind::NotFound && f.symlink_metadata().is_ok() {
            to
        } else {
            from
        };
        io_err(blamed, e)
    })?;
    Ok(Reply::Ok)
}

/// `Sync`: flush all filesystem buffers.
pub fn sync() -> Result<Reply, FileError> {
    // SAFETY: sync(2) has no arguments and cannot fail.
    unsafe { libc::sync() };
    Ok(Reply::Ok)
}

/// Opens a download: must be a regular file (after following symlinks) no
/// larger than `max_bytes`.
fn open_for_read(path: &str, max_bytes: u64) -> Result<(std::fs::File, FileStat), FileError> {
    let p = absolute(path)?;
    // Check before opening: opening a FIFO would block.
    if !std::fs::metadata(p).map_err(|e| io_err(path, e))?.is_file() {
        return Err(FileError::NotRegular(path.to_string()));
    }
    let file = std::fs::File::open(p).map_err(|e| io_err(path, e))?;
    let meta = file.metadata().map_err(|e| io_err(path, e))?;
    if !meta.is_file() {
        return Err(FileError::NotRegular(path.to_string()));
    }
    if meta.len() > max_bytes {
        return Err(FileError::TooLarge {
            path: path.to_string(),
            size: meta.len(),
            max: max_bytes,
        });
    }
    Ok((file, full_stat(p, &meta, &UserDb::default().names())))
}

/// Bytes copied per system call by [`read_file_to`].
const DIRECT_COPY_BYTES: usize = 1024 * 1024;

/// `read-file PATH MAX_BYTES`, the direct download path: writes a
/// [`DirectDownloadHeader`] line to `out`, then exactly `stat.size` bytes of
/// the file (fewer only if the file shrank meanwhile, which the reader sees
/// as a failed download). Errors after the header are the caller's to report.
pub fn read_file_to<W: Write>(path: &str, max_bytes: u64, out: &mut W) -> std::io::Result<()> {
    let (mut file, stat) = match open_for_read(path, max_bytes) {
        Ok(opened) => opened,
        Err(e) => return write_header(out, &DirectDownloadHeader::Failed(e.into())),
    };
    let size = stat.size;
    write_header(out, &DirectDownloadHeader::Ready { stat })?;
    let mut left = size;
    let mut buf = vec![0u8; DIRECT_COPY_BYTES];
    while left > 0 {
        let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let n = match file.read(&mut buf[..want]) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        out.write_all(&buf[..n])?;
        left -= n as u64;
    }
    out.flush()
}

fn write_header<W: Write>(out: &mut W, header: &DirectDownloadHeader) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(header).map_err(std::io::Error::other)?;
    line.push(b'\n');
    out.write_all(&line)?;
    out.flush()
}

/// `FileRead`: `FileMeta`, then `FileData` events of at most
/// [`FILE_DATA_CHUNK_BYTES`], then `Reply::FileRead`. A file that grows past
/// `max_bytes` while being sent fails with `too_large`.
pub async fn read(path: String, max_bytes: u64, sink: &Sink) -> Outcome {
    let p = path.clone();
    let opened = tokio::task::spawn_blocking(move || open_for_read(&p, max_bytes))
        .await
        .map_err(|e| AgentError::new(AgentErrorCode::Io, format!("worker failed: {e}")))?;
    let (file, stat) = opened?;
    sink.event(Event::FileMeta { stat }, Vec::new()).await?;
    let mut file = file;
    let mut sent: u64 = 0;
    loop {
        let p = path.clone();
        let (f, chunk) = tokio::task::spawn_blocking(move || {
            let mut buf = vec![0u8; FILE_DATA_CHUNK_BYTES];
            let mut filled = 0;
            while filled < buf.len() {
                match file.read(&mut buf[filled..]) {
                    Ok(0) => break,
                    Ok(n) => filled += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return (file, Err(io_err(&p, e))),
                }
            }
            buf.truncate(filled);
            (file, Ok(buf))
        })
        .await
        .map_err(|e| AgentError::new(AgentErrorCode::Io, format!("worker failed: {e}")))?;
        file = f;
        let chunk = chunk?;
        if chunk.is_empty() {
            break;
        }
        sent += chunk.len() as u64;
        if sent > max_bytes {
            return Err(FileError::TooLarge {
                path,
                size: sent,
                max: max_bytes,
            }
            .into());
        }
        sink.event(Event::FileData, chunk).await?;
    }
    Ok((Reply::FileRead { bytes: sent }, Vec::new()))
}
