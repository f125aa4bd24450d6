//! The passthrough's operations on the source directory (rclone's mount),
//! with the quota kept: plain `io::Result` functions the FUSE adapter
//! ([`super::fuse`]) calls, so they can be tested on any directory.
//!
//! Every operation that may grow a regular file holds the ledger's lock
//! from the size it reads before to the size it reads after, so two writers
//! cannot both take the last free bytes. Reads, listings and lookups never
//! take it.

use super::inodes::Inodes;
use super::ledger::Ledger;
pub use super::sys::SetTime;
use super::sys::{options, renameat2, set_times};
use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// One looked-up file: our inode number and the source's attributes.
#[derive(Debug)]
pub struct Entry {
    /// Our inode number.
    pub ino: u64,
    /// The source's attributes.
    pub meta: Metadata,
}

/// One directory entry as listed at `opendir`.
#[derive(Debug, Clone)]
pub struct DirEntry {
    /// The inode number shown as `d_ino` (the source's; ours for `.` and `..`).
    pub ino: u64,
    /// The name.
    pub name: OsString,
    /// Whether it is a directory (else a file: rclone shows nothing else).
    pub is_dir: bool,
}

/// The passthrough of one source directory under one limit.
pub struct Passthrough {
    source: PathBuf,
    inodes: Mutex<Inodes>,
    ledger: Mutex<Ledger>,
    files: Mutex<HashMap<u64, Arc<File>>>,
    dirs: Mutex<HashMap<u64, Arc<Vec<DirEntry>>>>,
    next_fh: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere cannot leave these maps half-updated in a way that
    // matters more than refusing every later request would.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn errno(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code)
}

/// `ENOSPC`: what a write past the limit returns (what a full ext4 returns,
/// like a local volume).
fn full() -> io::Error {
    errno(libc::ENOSPC)
}

/// Bytes a file's size counts for: regular files only (directories'
/// sizes are whatever rclone says and no data).
fn counted(meta: &Metadata) -> u64 {
    if meta.is_file() {
        meta.len()
    } else {
        0
    }
}

/// Bytes of the regular files under `dir` (the walk at mount).
pub fn walk(dir: &Path) -> io::Result<u64> {
    let mut total = 0u64;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d)? {
            let entry = entry?;
            let meta = std::fs::symlink_metadata(entry.path())?;
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                total = total.saturating_add(counted(&meta));
            }
        }
    }
    Ok(total)
}

impl Passthrough {
    /// A passthrough of `source` whose regular files may take `limit`
    /// bytes, `used` of them already taken.
    pub fn new(source: &Path, limit: u64, used: u64) -> Self {
        Passthrough {
            source: source.to_path_buf(),
            inodes: Mutex::new(Inodes::new()),
            ledger: Mutex::new(Ledger::new(limit, used)),
            files: Mutex::new(HashMap::new()),
            dirs: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
        }
    }

    /// The limit and the bytes free under it (`statfs`).
    pub fn usage(&self) -> (u64, u64) {
        let l = lock(&self.ledger);
        (l.limit(), l.free())
    }

    /// Bytes in use.
    #[cfg(test)]
    pub fn used(&self) -> u64 {
        lock(&self.ledger).used()
    }

    fn host(&self, rel: &Path) -> PathBuf {
        if rel.as_os_str().is_empty() {
            self.source.clone()
        } else {
            self.source.join(rel)
        }
    }

    fn path_of(&self, ino: u64) -> io::Result<PathBuf> {
        lock(&self.inodes)
            .path(ino)
            .map(Path::to_path_buf)
            .ok_or_else(|| errno(libc::ENOENT))
    }

    fn child_of(&self, parent: u64, name: &OsStr) -> io::Result<PathBuf> {
        let inodes = lock(&self.inodes);
        if inodes.path(parent).is_none() {
            return Err(errno(libc::ENOENT));
        }
        inodes
            .child(parent, name)
            .ok_or_else(|| errno(libc::EINVAL))
    }

    fn entry(&self, rel: &Path, meta: Metadata) -> Entry {
        Entry {
            ino: lock(&self.inodes).ino_of(rel),
            meta,
        }
    }

    fn file(&self, fh: u64) -> io::Result<Arc<File>> {
        lock(&self.files)
            .get(&fh)
            .cloned()
            .ok_or_else(|| errno(libc::EBADF))
    }

    fn keep(&self, file: File) -> u64 {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        lock(&self.files).insert(fh, Arc::new(file));
        fh
    }

    /// `name` in directory `parent`.
    pub fn lookup(&self, parent: u64, name: &OsStr) -> io::Result<Entry> {
        let rel = self.child_of(parent, name)?;
        let meta = std::fs::symlink_metadata(self.host(&rel))?;
        Ok(self.entry(&rel, meta))
    }

    /// The attributes of `ino` (through `fh` when given: an unlinked file
    /// still open has no path).
    pub fn getattr(&self, ino: u64, fh: Option<u64>) -> io::Result<Metadata> {
        if let Some(fh) = fh {
            if let Ok(file) = self.file(fh) {
                return file.metadata();
            }
        }
        std::fs::symlink_metadata(self.host(&self.path_of(ino)?))
    }

    /// Changes the size (charged like a write), mode, owner or times of `ino`.
    #[allow(clippy::too_many_arguments)]
    pub fn setattr(
        &self,
        ino: u64,
        fh: Option<u64>,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<SetTime>,
        mtime: Option<SetTime>,
    ) -> io::Result<Metadata> {
        let rel = self.path_of(ino)?;
        let host = self.host(&rel);
        let open = fh.and_then(|fh| self.file(fh).ok());
        if let Some(size) = size {
            let mut ledger = lock(&self.ledger);
            let before = match &open {
                Some(f) => f.metadata()?,
                None => std::fs::symlink_metadata(&host)?,
            };
            if !before.is_file() {
                return Err(errno(libc::EISDIR));
            }
            ledger.resize(before.len(), size).map_err(|_| full())?;
            let done = match &open {
                Some(f) => f.set_len(size),
                None => OpenOptions::new()
                    .write(true)
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(&host)
                    .and_then(|f| f.set_len(size)),
            };
            // Charged for `size`; take what is really there now.
            let after = match &open {
                Some(f) => f.metadata().map(|m| m.len()),
                None => std::fs::symlink_metadata(&host).map(|m| m.len()),
            }
            .unwrap_or(before.len());
            ledger.record(size, after);
            done?;
        }
        if let Some(mode) = mode {
            std::fs::set_permissions(
                &host,
                std::os::unix::fs::PermissionsExt::from_mode(mode & 0o7777),
            )?;
        }
        if uid.is_some() || gid.is_some() {
            std::os::unix::fs::lchown(&host, uid, gid)?;
        }
        if atime.is_some() || mtime.is_some() {
            set_times(&host, atime, mtime)?;
        }
        match &open {
            Some(f) => f.metadata(),
            None => std::fs::symlink_metadata(&host),
        }
    }

    /// Makes directory `name` in `parent`.
    pub fn mkdir(&self, parent: u64, name: &OsStr, mode: u32) -> io::Result<Entry> {
        let rel = self.child_of(parent, name)?;
        let host = self.host(&rel);
        std::fs::DirBuilder::new()
            .mode(mode & 0o7777)
            .create(&host)?;
        let meta = std::fs::symlink_metadata(&host)?;
        Ok(self.entry(&rel, meta))
    }

    /// Removes file `name` of `parent`; its bytes are free again.
    pub fn unlink(&self, parent: u64, name: &OsStr) -> io::Result<()> {
        let rel = self.child_of(parent, name)?;
        let host = self.host(&rel);
        {
            let mut ledger = lock(&self.ledger);
            let meta = std::fs::symlink_metadata(&host)?;
            std::fs::remove_file(&host)?;
            // The last name of the file: its data goes (rclone has no hard
            // links, but a source that has them keeps the bytes).
            if meta.nlink() <= 1 {
                ledger.release(counted(&meta));
            }
        }
        lock(&self.inodes).remove(&rel);
        Ok(())
    }

    /// Removes the empty directory `name` of `parent`.
    pub fn rmdir(&self, parent: u64, name: &OsStr) -> io::Result<()> {
        let rel = self.child_of(parent, name)?;
        std::fs::remove_dir(self.host(&rel))?;
        lock(&self.inodes).remove(&rel);
        Ok(())
    }

    /// Renames; a regular file it replaces gives its bytes back.
    pub fn rename(
        &self,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: u32,
    ) -> io::Result<()> {
        let from = self.child_of(parent, name)?;
        let to = self.child_of(newparent, newname)?;
        let (hfrom, hto) = (self.host(&from), self.host(&to));
        {
            let mut ledger = lock(&self.ledger);
            let replaced = std::fs::symlink_metadata(&hto).ok();
            let source = std::fs::symlink_metadata(&hfrom)?;
            if flags == 0 {
                std::fs::rename(&hfrom, &hto)?;
            } else {
                renameat2(&hfrom, &hto, flags)?;
            }
            let exchanged = flags & libc::RENAME_EXCHANGE != 0;
            if let Some(old) = replaced.filter(|m| !exchanged && m.ino() != source.ino()) {
                if old.nlink() <= 1 {
                    ledger.release(counted(&old));
                }
            }
        }
        let mut inodes = lock(&self.inodes);
        if flags & libc::RENAME_EXCHANGE != 0 {
            inodes.exchange(&from, &to);
        } else {
            inodes.rename(&from, &to);
        }
        Ok(())
    }

    /// Opens `ino`; `O_TRUNC` gives the old bytes back.
    pub fn open(&self, ino: u64, flags: i32) -> io::Result<u64> {
        let rel = self.path_of(ino)?;
        let host = self.host(&rel);
        let mut opts = options(flags);
        let trunc = flags & libc::O_TRUNC != 0 && flags & libc::O_ACCMODE != libc::O_RDONLY;
        let file = if trunc {
            let mut ledger = lock(&self.ledger);
            let before = std::fs::symlink_metadata(&host)?;
            let file = opts.truncate(true).open(&host)?;
            let after = file.metadata().map(|m| m.len()).unwrap_or(0);
            ledger.record(counted(&before), after);
            file
        } else {
            opts.open(&host)?
        };
        Ok(self.keep(file))
    }

    /// Creates (or, without `O_EXCL`, opens) file `name` in `parent`.
    pub fn create(
        &self,
        parent: u64,
        name: &OsStr,
        mode: u32,
        flags: i32,
    ) -> io::Result<(Entry, u64)> {
        let rel = self.child_of(parent, name)?;
        let host = self.host(&rel);
        let mut opts = options(flags);
        opts.create(true).mode(mode & 0o7777);
        if flags & libc::O_EXCL != 0 {
            opts.create_new(true);
        }
        let trunc = flags & libc::O_TRUNC != 0 && flags & libc::O_ACCMODE != libc::O_RDONLY;
        opts.truncate(trunc);
        let (file, meta) = {
            let mut ledger = lock(&self.ledger);
            let before = std::fs::symlink_metadata(&host)
                .map(|m| counted(&m))
                .unwrap_or(0);
            let file = opts.open(&host)?;
            let meta = file.metadata()?;
            ledger.record(before, meta.len());
            (file, meta)
        };
        let entry = self.entry(&rel, meta);
        Ok((entry, self.keep(file)))
    }

    /// Reads up to `size` bytes at `offset`.
    pub fn read(&self, fh: u64, offset: u64, size: u32) -> io::Result<Vec<u8>> {
        let file = self.file(fh)?;
        let mut buf = vec![0u8; size as usize];
        let mut done = 0;
        while done < buf.len() {
            match file.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        buf.truncate(done);
        Ok(buf)
    }

    /// Writes `data` at `offset`: refused whole with `ENOSPC` when the
    /// growth it causes does not fit.
    pub fn write(&self, fh: u64, offset: u64, data: &[u8]) -> io::Result<usize> {
        let file = self.file(fh)?;
        let end = offset
            .checked_add(data.len() as u64)
            .ok_or_else(|| errno(libc::EFBIG))?;
        let mut ledger = lock(&self.ledger);
        let before = file.metadata()?.len();
        let charged = end.max(before);
        ledger.resize(before, charged).map_err(|_| full())?;
        let written = file.write_all_at(data, offset);
        let after = file.metadata().map(|m| m.len()).unwrap_or(charged);
        ledger.record(charged, after);
        written.map(|()| data.len())
    }

    /// `fallocate`: a size it adds is charged like a write.
    pub fn fallocate(&self, fh: u64, offset: u64, length: u64, mode: i32) -> io::Result<()> {
        let file = self.file(fh)?;
        let (Ok(off), Ok(len)) = (i64::try_from(offset), i64::try_from(length)) else {
            return Err(errno(libc::EFBIG));
        };
        let mut ledger = lock(&self.ledger);
        let before = file.metadata()?.len();
        let end = offset.saturating_add(length);
        let charged = if mode & libc::FALLOC_FL_KEEP_SIZE == 0 {
            end.max(before)
        } else {
            before
        };
        ledger.resize(before, charged).map_err(|_| full())?;
        // SAFETY: a plain syscall on a descriptor we own.
        let rc = unsafe { libc::fallocate(file.as_raw_fd(), mode, off, len) };
        let done = if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        };
        let after = file.metadata().map(|m| m.len()).unwrap_or(charged);
        ledger.record(charged, after);
        done
    }

    /// A `close` of one descriptor of the file in the sandbox: passed on as
    /// a close of a duplicate, so the source sees the flush it saw before
    /// this layer existed (rclone keeps its handle until the release).
    pub fn flush(&self, fh: u64) -> io::Result<()> {
        let file = self.file(fh)?;
        // SAFETY: dup of a descriptor we own; the duplicate is closed at once.
        let dup = unsafe { libc::dup(file.as_raw_fd()) };
        if dup < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `dup` is ours and closed once.
        if unsafe { libc::close(dup) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// `fsync`: reaches the source (for rclone: uploads the file now).
    pub fn fsync(&self, fh: u64, datasync: bool) -> io::Result<()> {
        let file = self.file(fh)?;
        if datasync {
            file.sync_data()
        } else {
            file.sync_all()
        }
    }

    /// The last close: the source's file is closed (for rclone: uploaded).
    pub fn release(&self, fh: u64) {
        lock(&self.files).remove(&fh);
    }

    /// The kernel dropped `n` lookups of `ino`.
    pub fn forget(&self, ino: u64, n: u64) {
        lock(&self.inodes).forget(ino, n);
    }

    /// Lists directory `ino` once, for the `readdir` calls that follow.
    /// Entries carry the source's inode numbers: a plain `readdir` hands
    /// no number to the kernel to hold (only `d_ino` to the reader), and
    /// numbering every listed entry would keep them all in the table.
    pub fn opendir(&self, ino: u64) -> io::Result<u64> {
        let rel = self.path_of(ino)?;
        let mut entries = vec![
            DirEntry {
                ino,
                name: ".".into(),
                is_dir: true,
            },
            DirEntry {
                ino,
                name: "..".into(),
                is_dir: true,
            },
        ];
        for e in std::fs::read_dir(self.host(&rel))? {
            let e = e?;
            let is_dir = e.file_type().map(|t| t.is_dir()).unwrap_or(false);
            entries.push(DirEntry {
                ino: std::os::unix::fs::DirEntryExt::ino(&e),
                name: e.file_name(),
                is_dir,
            });
        }
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        lock(&self.dirs).insert(fh, Arc::new(entries));
        Ok(fh)
    }

    /// The listing made by [`Passthrough::opendir`].
    pub fn readdir(&self, fh: u64) -> io::Result<Arc<Vec<DirEntry>>> {
        lock(&self.dirs)
            .get(&fh)
            .cloned()
            .ok_or_else(|| errno(libc::EBADF))
    }

    /// Forgets a listing.
    pub fn releasedir(&self, fh: u64) {
        lock(&self.dirs).remove(&fh);
    }
}
