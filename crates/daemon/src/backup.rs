//! `sbxd backup DIR` and `sbxd restore DIR`: a consistent copy of a node's
//! store and secret key, taken while sbxd runs, and its return into the data
//! dir of a stopped sbxd.
//!
//! In a backup: the SQLite store (`sbx.sqlite`: keys, tenants, sandbox and
//! snapshot records, secrets, E2B fields), Connect's store (`connect/connect.db`)
//! with its uploaded package tarballs and built artifacts, and the key file
//! `secret.key` when the node uses the data dir's one. Each store is copied with
//! `VACUUM INTO` (one read transaction: a consistent snapshot while sbxd writes).
//! Not in a backup: running sandboxes (their memory and disks), snapshot
//! checkpoint files (large; with `--snapshot-store s3://…` they stay in the
//! bucket), images, the agent, runsc state. A PostgreSQL store is backed up with
//! `pg_dump`, not here.
//!
//! A backup is complete when `manifest.json` is there: it is written last, inside
//! a temporary directory that is renamed to DIR at the end, and lists every file
//! with its SHA-256, which restore checks before it writes anything.

use crate::data_dir::{DataDirError, DataDirLock};
use sha2::{Digest, Sha256};
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// What a backup's manifest says it is.
const FORMAT: &str = "sbx-backup";
/// Version of the backup layout.
const VERSION: u32 = 1;
/// The manifest's file name.
const MANIFEST: &str = "manifest.json";
/// The store files that make a data dir's state; their `-wal` and `-shm`
/// siblings belong to them.
const STORES: &[&str] = &["sbx.sqlite", "connect/connect.db"];
/// The data dir's key file.
const KEY_FILE: &str = "secret.key";
/// Connect's files the store's rows point at (immutable once written).
const CONNECT_FILES: &[&str] = &["connect/tarballs", "connect/artifacts"];

/// Errors of backup and restore.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// The node's store is PostgreSQL.
    #[error(
        "sbxd backup copies the SQLite store of a data dir; this node's store is PostgreSQL: \
         back it up with pg_dump (e.g. pg_dump --format=custom --file=sbx.dump DBNAME) and keep a \
         copy of the secret key file yourself; see docs/operations.md#backups"
    )]
    Postgres,
    /// The data dir has no store.
    #[error("no store to back up: {0} does not exist (is --data-dir right?)")]
    NoStore(PathBuf),
    /// The backup directory exists and is not empty.
    #[error("the backup directory {0} exists and is not empty: give a new or empty directory")]
    TargetNotEmpty(PathBuf),
    /// The directory given to restore holds no complete backup.
    #[error("{0} is not an sbx backup ({1}); nothing was written")]
    NotABackup(PathBuf, String),
    /// A file of the backup does not match the manifest.
    #[error("the backup in {0} is damaged: {1}; nothing was written")]
    Damaged(PathBuf, String),
    /// The data dir to restore into holds state already.
    #[error(
        "the data dir {0} is not empty ({1}): restore into a new data dir, or pass --force to \
         replace its store and key (sandboxes and snapshots it has are kept as files; the \
         restored store decides what becomes of them)"
    )]
    DataDirNotEmpty(PathBuf, String),
    /// sbxd runs on the data dir, or it cannot be locked.
    #[error(transparent)]
    DataDir(#[from] DataDirError),
    /// Copying a store failed.
    #[error("copying {path}: {source}")]
    Store {
        /// The store file.
        path: PathBuf,
        /// Cause.
        source: sbx_store::StoreError,
    },
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BackupError + '_ {
    move |source| BackupError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// `sbxd backup`: copies a running or stopped node's store and key into a new directory.
#[derive(clap::Parser, Debug)]
#[command(name = "sbxd backup")]
pub struct BackupArgs {
    /// Directory to write the backup into: new, or empty.
    pub dir: PathBuf,
    /// Data directory of the node (sbxd may be running on it).
    #[arg(long, env = "SBX_DATA_DIR", default_value = "/var/lib/sbx")]
    pub data_dir: PathBuf,
    /// The node's PostgreSQL, as given to sbxd: refused (back it up with pg_dump).
    #[arg(long, env = "SBX_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
}

/// `sbxd restore`: puts a backup into the data dir of a stopped sbxd.
#[derive(clap::Parser, Debug)]
#[command(name = "sbxd restore")]
pub struct RestoreArgs {
    /// Directory holding a backup made by `sbxd backup`.
    pub dir: PathBuf,
    /// Data directory to restore into; sbxd must not be running on it.
    #[arg(long, env = "SBX_DATA_DIR", default_value = "/var/lib/sbx")]
    pub data_dir: PathBuf,
    /// Replace the store and key of a data dir that has state already.
    #[arg(long)]
    pub force: bool,
}

/// One file of a backup.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct Entry {
    /// Path relative to the backup (and to the data dir).
    path: String,
    bytes: u64,
    /// Of the contents; empty for a symlink.
    sha256: String,
    /// A symlink's target (Connect artifacts have `node_modules/.bin` links).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    link: Option<String>,
}

/// `manifest.json`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct Manifest {
    format: String,
    version: u32,
    created_at: String,
    sbxd_version: String,
    /// The data dir it was taken from (information only).
    data_dir: String,
    files: Vec<Entry>,
}

/// Copies the store(s), Connect's files and the key file of `args.data_dir`
/// into `args.dir`; returns a summary for the operator.
pub fn backup(args: &BackupArgs) -> Result<String, BackupError> {
    if args
        .database_url
        .as_deref()
        .is_some_and(|u| !u.trim().is_empty())
    {
        return Err(BackupError::Postgres);
    }
    let store = args.data_dir.join(STORES[0]);
    if !store.is_file() {
        return Err(BackupError::NoStore(store));
    }
    if first_entry(&args.dir, &[])?.is_some() {
        return Err(BackupError::TargetNotEmpty(args.dir.clone()));
    }
    let parent = match args.dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent).map_err(io(&parent))?;
    let name = args
        .dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "backup".into());
    // Built beside DIR and renamed onto it at the end: DIR is a whole backup or nothing.
    let tmp = parent.join(format!(".{name}.partial-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let result = write_backup(&args.data_dir, &tmp).and_then(|summary| {
        std::fs::rename(&tmp, &args.dir).map_err(io(&args.dir))?;
        Ok(summary)
    });
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    result
}

fn write_backup(data_dir: &Path, out: &Path) -> Result<String, BackupError> {
    std::fs::create_dir_all(out).map_err(io(out))?;
    // Keys and secrets are inside: readable by root only.
    std::fs::set_permissions(out, std::fs::Permissions::from_mode(0o700)).map_err(io(out))?;
    let mut summary = Vec::new();
    for store in STORES {
        let from = data_dir.join(store);
        if !from.is_file() {
            summary.push(format!("{store}: none (never created on this node)"));
            continue;
        }
        let to = out.join(store);
        if let Some(dir) = to.parent() {
            std::fs::create_dir_all(dir).map_err(io(dir))?;
        }
        sbx_store::backup_sqlite(&from, &to)
            .map_err(|source| BackupError::Store { path: from, source })?;
        summary.push(format!("{store}: copied"));
    }
    let key = data_dir.join(KEY_FILE);
    if key.is_file() {
        copy_file(&key, &out.join(KEY_FILE))?;
        summary.push(format!("{KEY_FILE}: copied"));
    } else {
        summary.push(format!(
            "{KEY_FILE}: none in the data dir (the node's key comes from --secret-key-file or \
             SBX_SECRET_KEY): keep a copy of that key with this backup"
        ));
    }
    for dir in CONNECT_FILES {
        let from = data_dir.join(dir);
        if from.is_dir() {
            copy_tree(&from, &out.join(dir))?;
        }
    }
    let files = list_files(out)?;
    summary.push(format!("{} files in all", files.len()));
    let manifest = Manifest {
        format: FORMAT.into(),
        version: VERSION,
        created_at: sbx_api_types::format_time(chrono::Utc::now()),
        sbxd_version: env!("CARGO_PKG_VERSION").into(),
        data_dir: data_dir.display().to_string(),
        files,
    };
    let json = serde_json::to_vec_pretty(&manifest).map_err(|e| BackupError::Io {
        path: out.join(MANIFEST),
        source: std::io::Error::other(e),
    })?;
    write_synced(&out.join(MANIFEST), &json, 0o600)?;
    Ok(summary.join("\n"))
}

/// Restores the backup in `args.dir` into `args.data_dir`; returns a summary.
pub fn restore(args: &RestoreArgs) -> Result<String, BackupError> {
    let manifest = read_manifest(&args.dir)?;
    // Every file is checked before anything is written.
    for entry in &manifest.files {
        let path = safe_join(&args.dir, &entry.path).ok_or_else(|| {
            BackupError::Damaged(args.dir.clone(), format!("bad path {:?}", entry.path))
        })?;
        let damaged = |e: std::io::Error| {
            BackupError::Damaged(args.dir.clone(), format!("{}: {e}", entry.path))
        };
        let matches = match &entry.link {
            Some(link) => std::fs::read_link(&path).map_err(damaged)? == Path::new(link),
            None => digest(&path).map_err(damaged)? == (entry.bytes, entry.sha256.clone()),
        };
        if !matches {
            return Err(BackupError::Damaged(
                args.dir.clone(),
                format!("{} does not match its checksum", entry.path),
            ));
        }
    }
    if !manifest.files.iter().any(|e| e.path == STORES[0]) {
        return Err(BackupError::NotABackup(
            args.dir.clone(),
            format!("it has no {}", STORES[0]),
        ));
    }
    let data_dir = &args.data_dir;
    // Refuses at once when an sbxd holds the data dir; held while files are written.
    let _lock = DataDirLock::acquire(data_dir)?;
    if let Some(found) = first_entry(data_dir, &["sbxd.lock"])? {
        if !args.force {
            return Err(BackupError::DataDirNotEmpty(data_dir.clone(), found));
        }
    }
    // Journals of a replaced store would be replayed onto the restored file.
    for store in STORES {
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let path = data_dir.join(format!("{store}{suffix}"));
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(&path)(e)),
            }
        }
    }
    for entry in &manifest.files {
        let from = args.dir.join(&entry.path);
        let Some(to) = safe_join(data_dir, &entry.path) else {
            continue;
        };
        if let Some(dir) = to.parent() {
            std::fs::create_dir_all(dir).map_err(io(dir))?;
        }
        match &entry.link {
            Some(link) => {
                // --force over an earlier restore: the link is made anew.
                let _ = std::fs::remove_file(&to);
                std::os::unix::fs::symlink(link, &to).map_err(io(&to))?;
            }
            None => copy_file(&from, &to)?,
        }
    }
    Ok(format!(
        "restored {} files of the backup taken {} (sbxd {}) into {}; start sbxd on it",
        manifest.files.len(),
        manifest.created_at,
        manifest.sbxd_version,
        data_dir.display()
    ))
}

fn read_manifest(dir: &Path) -> Result<Manifest, BackupError> {
    let not = |why: String| BackupError::NotABackup(dir.to_path_buf(), why);
    let raw = match std::fs::read(dir.join(MANIFEST)) {
        Ok(raw) => raw,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(not(format!("no {MANIFEST}")));
        }
        Err(e) => return Err(not(format!("{MANIFEST}: {e}"))),
    };
    let manifest: Manifest =
        serde_json::from_slice(&raw).map_err(|e| not(format!("{MANIFEST}: {e}")))?;
    if manifest.format != FORMAT {
        return Err(not(format!("{MANIFEST} says {:?}", manifest.format)));
    }
    if manifest.version != VERSION {
        return Err(not(format!(
            "backup layout version {} (this sbxd reads {VERSION})",
            manifest.version
        )));
    }
    Ok(manifest)
}

/// `base/rel` when `rel` is a plain relative path (no `..`, not absolute).
fn safe_join(base: &Path, rel: &str) -> Option<PathBuf> {
    let p = Path::new(rel);
    let plain = p
        .components()
        .all(|c| matches!(c, std::path::Component::Normal(_)));
    (plain && !rel.is_empty()).then(|| base.join(p))
}

/// The first entry of `dir` not in `ignore` (`None`: missing or empty).
fn first_entry(dir: &Path, ignore: &[&str]) -> Result<Option<String>, BackupError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(dir)(e)),
    };
    for entry in entries {
        let name = entry.map_err(io(dir))?.file_name();
        let name = name.to_string_lossy();
        if !ignore.contains(&name.as_ref()) {
            return Ok(Some(format!("it has {name}")));
        }
    }
    Ok(None)
}

/// Every regular file (size, SHA-256) and symlink (target) under `root`, relative.
fn list_files(root: &Path) -> Result<Vec<Entry>, BackupError> {
    let mut out = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).map_err(io(&dir))? {
            let path = entry.map_err(io(&dir))?.path();
            let meta = std::fs::symlink_metadata(&path).map_err(io(&path))?;
            if meta.is_dir() {
                todo.push(path);
                continue;
            }
            let rel = path
                .strip_prefix(root)
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default();
            if meta.file_type().is_symlink() {
                let link = std::fs::read_link(&path).map_err(io(&path))?;
                out.push(Entry {
                    path: rel,
                    bytes: 0,
                    sha256: String::new(),
                    link: Some(link.to_string_lossy().into_owned()),
                });
            } else if meta.is_file() {
                let (bytes, sha256) = digest(&path).map_err(io(&path))?;
                out.push(Entry {
                    path: rel,
                    bytes,
                    sha256,
                    link: None,
                });
            }
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

fn digest(path: &Path) -> std::io::Result<(u64, String)> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut total = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        total += n as u64;
    }
    Ok((total, hex::encode(hasher.finalize())))
}

/// Copies a file, keeping its mode, through a temporary name (a crash leaves no torn file).
fn copy_file(from: &Path, to: &Path) -> Result<(), BackupError> {
    let mode = std::fs::metadata(from)
        .map_err(io(from))?
        .permissions()
        .mode()
        & 0o7777;
    let tmp = to.with_file_name(format!(
        ".{}.tmp-{}",
        to.file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default(),
        std::process::id()
    ));
    std::fs::copy(from, &tmp).map_err(io(from))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode)).map_err(io(&tmp))?;
    std::fs::File::open(&tmp)
        .and_then(|f| f.sync_all())
        .map_err(io(&tmp))?;
    std::fs::rename(&tmp, to).map_err(io(to))
}

fn write_synced(path: &Path, bytes: &[u8], mode: u32) -> Result<(), BackupError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(io(path))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .map_err(io(path))
}

/// Copies a directory tree: files (with their modes), directories, symlinks as symlinks.
fn copy_tree(from: &Path, to: &Path) -> Result<(), BackupError> {
    std::fs::create_dir_all(to).map_err(io(to))?;
    for entry in std::fs::read_dir(from).map_err(io(from))? {
        let entry = entry.map_err(io(from))?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let meta = std::fs::symlink_metadata(&src).map_err(io(&src))?;
        // A tarball still being written (tmp-… name) is not one the store names yet.
        if entry.file_name().to_string_lossy().contains(".tmp-") {
            continue;
        }
        if meta.is_dir() {
            copy_tree(&src, &dst)?;
        } else if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&src).map_err(io(&src))?;
            std::os::unix::fs::symlink(target, &dst).map_err(io(&dst))?;
        } else if meta.is_file() {
            std::fs::copy(&src, &dst).map_err(io(&src))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_paths_stay_inside() {
        let base = Path::new("/data");
        assert_eq!(
            safe_join(base, "connect/connect.db"),
            Some(PathBuf::from("/data/connect/connect.db"))
        );
        for bad in ["", "/etc/passwd", "../x", "a/../../x", "./x"] {
            assert_eq!(safe_join(base, bad), None, "{bad:?}");
        }
    }
}
