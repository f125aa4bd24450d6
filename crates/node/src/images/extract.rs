//! Applies one layer (a tar stream) to an image's root directory without ever
//! touching anything outside it.
//!
//! Every path is resolved component by component from a directory fd with
//! `openat(O_NOFOLLOW)`, so no symlink is ever followed while extracting: an
//! entry whose parent path goes through a symlink (which could point out of
//! the root) is refused, as are absolute paths, `..` components, hard links
//! to anything that is not already in the root, and device nodes. Setuid and
//! setgid bits are dropped (a root-owned setuid file in a host directory is a
//! way up for any host user who can reach it). Symlinks themselves are
//! created as they are: their targets only mean something inside the sandbox.

use std::collections::HashSet;
use std::ffi::{CStr, CString};
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// OCI whiteout prefix: `.wh.NAME` deletes `NAME` of the layers below.
const WHITEOUT: &str = ".wh.";
/// OCI opaque marker: the directory hides everything the layers below put in it.
const OPAQUE: &str = ".wh..wh..opq";

/// Why a layer could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum ExtractError {
    /// An entry that would reach outside the root, or that images may not hold.
    #[error("refused entry {path:?}: {reason}")]
    Unsafe {
        /// The entry's path as the archive names it.
        path: String,
        /// Why.
        reason: &'static str,
    },
    /// Not a readable tar stream.
    #[error("malformed layer: {0}")]
    Malformed(String),
    /// The unpacked image would exceed the limit.
    #[error("the unpacked image exceeds {0} bytes")]
    TooLarge(u64),
    /// A host file system call failed.
    #[error("{path}: {source}")]
    Io {
        /// The entry being written.
        path: String,
        /// Cause.
        #[source]
        source: io::Error,
    },
}

impl ExtractError {
    /// Whether the host's disk is full.
    pub fn is_disk_full(&self) -> bool {
        matches!(self, ExtractError::Io { source, .. } if source.raw_os_error() == Some(libc::ENOSPC))
    }
}

/// How a layer is read.
#[derive(Debug, Clone, Copy)]
pub struct LayerOptions {
    /// Interpret OCI whiteouts (`.wh.` files); off for a plain root filesystem tar.
    pub whiteouts: bool,
    /// Most bytes of file data the whole image may hold.
    pub max_bytes: u64,
}

/// An open image root directory.
pub struct Root {
    fd: OwnedFd,
    /// File data bytes written so far (across layers).
    written: u64,
}

fn cstring(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn open_at(dir: BorrowedFd<'_>, name: &CStr, flags: libc::c_int, mode: u32) -> io::Result<OwnedFd> {
    // SAFETY: a valid fd and a NUL-terminated name; the new fd is owned here.
    let fd = check(unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            flags | libc::O_CLOEXEC | libc::O_NOFOLLOW,
            mode as libc::c_uint,
        )
    })?;
    // SAFETY: `fd` was just returned by openat and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn open_dir_at(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<OwnedFd> {
    open_at(dir, name, libc::O_RDONLY | libc::O_DIRECTORY, 0)
}

fn lstat_at(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<Option<libc::stat>> {
    // SAFETY: zeroed stat is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd, name and out-pointer.
    let ret = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    match check(ret) {
        Ok(_) => Ok(Some(st)),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

fn is_dir(st: &libc::stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFDIR
}

/// The names in a directory (without `.` and `..`).
fn list_dir(dir: BorrowedFd<'_>) -> io::Result<Vec<CString>> {
    // SAFETY: dup of a valid fd; fdopendir takes ownership of the duplicate.
    let dup = check(unsafe { libc::fcntl(dir.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) })?;
    // SAFETY: `dup` is a fresh directory fd.
    let stream = unsafe { libc::fdopendir(dup) };
    if stream.is_null() {
        let e = io::Error::last_os_error();
        // SAFETY: fdopendir failed, so `dup` is still ours to close.
        unsafe { libc::close(dup) };
        return Err(e);
    }
    // SAFETY: rewind to the start: the duplicate shares the offset with `dir`.
    unsafe { libc::rewinddir(stream) };
    let mut names = Vec::new();
    loop {
        // SAFETY: `stream` is a valid DIR*; readdir's entry lives until the next call.
        let entry = unsafe { libc::readdir(stream) };
        if entry.is_null() {
            break;
        }
        // SAFETY: d_name is NUL-terminated.
        let name = unsafe { CStr::from_ptr((*entry).d_name.as_ptr()) };
        if name.to_bytes() != b"." && name.to_bytes() != b".." {
            names.push(name.to_owned());
        }
    }
    // SAFETY: closes `stream` and `dup` once.
    unsafe { libc::closedir(stream) };
    Ok(names)
}

/// Removes `name` in `dir` and, for a directory, everything under it, never following a symlink.
fn remove_at(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    let Some(st) = lstat_at(dir, name)? else {
        return Ok(());
    };
    if is_dir(&st) {
        let sub = open_dir_at(dir, name)?;
        for child in list_dir(sub.as_fd())? {
            remove_at(sub.as_fd(), &child)?;
        }
        // SAFETY: valid fd and name.
        check(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), libc::AT_REMOVEDIR) })?;
    } else {
        // SAFETY: valid fd and name.
        check(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), 0) })?;
    }
    Ok(())
}

/// An archive path split into components: `..`, absolute paths and empty names refused.
fn components(raw: &[u8]) -> Result<Vec<&[u8]>, &'static str> {
    if raw.starts_with(b"/") {
        return Err("absolute path");
    }
    let mut out = Vec::new();
    for part in raw.split(|b| *b == b'/') {
        match part {
            b"" | b"." => {}
            b".." => return Err("`..` in path"),
            p => out.push(p),
        }
    }
    Ok(out)
}

fn unsafe_entry(path: &[u8], reason: &'static str) -> ExtractError {
    ExtractError::Unsafe {
        path: String::from_utf8_lossy(path).into_owned(),
        reason,
    }
}

fn io_error(path: &[u8]) -> impl Fn(io::Error) -> ExtractError + '_ {
    move |source| ExtractError::Io {
        path: String::from_utf8_lossy(path).into_owned(),
        source,
    }
}

/// Mode bits an image keeps: permissions and the sticky bit, never setuid or setgid.
fn safe_mode(mode: u32) -> u32 {
    mode & 0o1777
}

impl Root {
    /// Opens an existing directory as an image root.
    pub fn open(dir: &Path) -> io::Result<Root> {
        let name = cstring(dir.as_os_str().as_bytes())?;
        // SAFETY: AT_FDCWD with an absolute or relative NUL-terminated path.
        let fd = check(unsafe {
            libc::open(
                name.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        })?;
        Ok(Root {
            // SAFETY: `fd` was just opened and is owned here.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            written: 0,
        })
    }

    /// File data bytes written so far.
    pub fn bytes_written(&self) -> u64 {
        self.written
    }

    /// The directory holding `parts` (all but the last), created as needed
    /// (mode 0755) when `create`; any component that is a symlink or not a
    /// directory is refused.
    fn parent(&self, path: &[u8], parts: &[&[u8]], create: bool) -> Result<OwnedFd, ExtractError> {
        let dup = self.fd.try_clone().map_err(io_error(path))?;
        let mut dir = dup;
        for part in parts {
            let name = cstring(part).map_err(io_error(path))?;
            let next = match open_dir_at(dir.as_fd(), &name) {
                Ok(fd) => fd,
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) && create => {
                    // SAFETY: valid fd and name.
                    let made = unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), 0o755) };
                    check(made).map_err(io_error(path))?;
                    open_dir_at(dir.as_fd(), &name).map_err(io_error(path))?
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                    return Err(unsafe_entry(
                        path,
                        "links to a file that is not in the image",
                    ))
                }
                Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) => {
                    return Err(unsafe_entry(
                        path,
                        "its parent path goes through a symlink or a non-directory",
                    ))
                }
                Err(e) => return Err(io_error(path)(e)),
            };
            dir = next;
        }
        Ok(dir)
    }

    /// Applies one layer read from `reader`.
    pub fn apply_layer<R: Read>(
        &mut self,
        reader: R,
        opts: LayerOptions,
    ) -> Result<u64, ExtractError> {
        let mut archive = tar::Archive::new(reader);
        let entries = archive
            .entries()
            .map_err(|e| ExtractError::Malformed(e.to_string()))?;
        // Paths this layer wrote: its own whiteouts never remove them.
        let mut written: HashSet<Vec<u8>> = HashSet::new();
        let mut count = 0u64;
        for entry in entries {
            let mut entry = entry.map_err(|e| ExtractError::Malformed(e.to_string()))?;
            let raw = entry.path_bytes().into_owned();
            let parts = components(&raw).map_err(|why| unsafe_entry(&raw, why))?;
            let Some((last, parents)) = parts.split_last() else {
                // The root directory itself: its attributes stay the runtime's.
                continue;
            };
            let normal: Vec<u8> = parts.join(&b'/');
            count += 1;
            if opts.whiteouts && last.starts_with(WHITEOUT.as_bytes()) {
                let dir = self.parent(&raw, parents, true)?;
                if *last == OPAQUE.as_bytes() {
                    let prefix: Vec<u8> = parents.join(&b'/');
                    for child in list_dir(dir.as_fd()).map_err(io_error(&raw))? {
                        let mut full = prefix.clone();
                        if !full.is_empty() {
                            full.push(b'/');
                        }
                        full.extend_from_slice(child.to_bytes());
                        if !written.contains(&full) {
                            remove_at(dir.as_fd(), &child).map_err(io_error(&raw))?;
                        }
                    }
                } else {
                    let target = &last[WHITEOUT.len()..];
                    if target.is_empty() {
                        return Err(unsafe_entry(&raw, "whiteout of nothing"));
                    }
                    let mut full: Vec<u8> = parents.join(&b'/');
                    if !full.is_empty() {
                        full.push(b'/');
                    }
                    full.extend_from_slice(target);
                    if !written.contains(&full) {
                        let name = cstring(target).map_err(io_error(&raw))?;
                        remove_at(dir.as_fd(), &name).map_err(io_error(&raw))?;
                    }
                }
                continue;
            }
            let dir = self.parent(&raw, parents, true)?;
            let name = cstring(last).map_err(io_error(&raw))?;
            self.write_entry(&mut entry, &raw, dir.as_fd(), &name, opts)?;
            written.insert(normal);
        }
        Ok(count)
    }

    fn write_entry<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        raw: &[u8],
        dir: BorrowedFd<'_>,
        name: &CStr,
        opts: LayerOptions,
    ) -> Result<(), ExtractError> {
        let header = entry.header();
        let kind = header.entry_type();
        let mode = safe_mode(header.mode().unwrap_or(0o644));
        let uid = header.uid().unwrap_or(0) as libc::uid_t;
        let gid = header.gid().unwrap_or(0) as libc::gid_t;
        let mtime = header.mtime().unwrap_or(0) as libc::time_t;
        let err = io_error(raw);
        let existing = lstat_at(dir, name).map_err(&err)?;
        match kind {
            tar::EntryType::Directory => {
                match existing {
                    Some(st) if is_dir(&st) => {}
                    Some(_) => {
                        remove_at(dir, name).map_err(&err)?;
                        // SAFETY: valid fd and name.
                        check(unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), 0o755) })
                            .map_err(&err)?;
                    }
                    None => {
                        // SAFETY: valid fd and name.
                        check(unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), 0o755) })
                            .map_err(&err)?;
                    }
                }
                let fd = open_dir_at(dir, name).map_err(&err)?;
                fix_owner_mode(fd.as_fd(), uid, gid, mode).map_err(&err)?;
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                if existing.is_some() {
                    remove_at(dir, name).map_err(&err)?;
                }
                let fd = open_at(
                    dir,
                    name,
                    libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
                    0o600,
                )
                .map_err(&err)?;
                let size = entry.header().size().unwrap_or(0);
                if self.written.saturating_add(size) > opts.max_bytes {
                    return Err(ExtractError::TooLarge(opts.max_bytes));
                }
                let mut file = std::fs::File::from(fd);
                let copied = io::copy(&mut entry.take(size), &mut file).map_err(|e| {
                    if e.kind() == io::ErrorKind::UnexpectedEof
                        || e.kind() == io::ErrorKind::InvalidData
                    {
                        ExtractError::Malformed(e.to_string())
                    } else {
                        err(e)
                    }
                })?;
                self.written += copied;
                fix_owner_mode(file.as_fd(), uid, gid, mode).map_err(&err)?;
                let times = [
                    libc::timespec {
                        tv_sec: mtime,
                        tv_nsec: 0,
                    },
                    libc::timespec {
                        tv_sec: mtime,
                        tv_nsec: 0,
                    },
                ];
                // SAFETY: valid fd and a two-element timespec array.
                check(unsafe { libc::futimens(file.as_raw_fd(), times.as_ptr()) }).map_err(&err)?;
            }
            tar::EntryType::Symlink => {
                let target = entry
                    .link_name_bytes()
                    .ok_or_else(|| ExtractError::Malformed("symlink without a target".into()))?;
                let target = cstring(&target).map_err(&err)?;
                if existing.is_some() {
                    remove_at(dir, name).map_err(&err)?;
                }
                // SAFETY: valid fd and NUL-terminated strings.
                check(unsafe { libc::symlinkat(target.as_ptr(), dir.as_raw_fd(), name.as_ptr()) })
                    .map_err(&err)?;
                // SAFETY: valid fd and name; the link itself, never its target.
                check(unsafe {
                    libc::fchownat(
                        dir.as_raw_fd(),
                        name.as_ptr(),
                        uid,
                        gid,
                        libc::AT_SYMLINK_NOFOLLOW,
                    )
                })
                .map_err(&err)?;
            }
            tar::EntryType::Link => {
                let target = entry
                    .link_name_bytes()
                    .ok_or_else(|| ExtractError::Malformed("hard link without a target".into()))?
                    .into_owned();
                let parts = components(&target).map_err(|why| unsafe_entry(raw, why))?;
                let Some((last, parents)) = parts.split_last() else {
                    return Err(unsafe_entry(raw, "hard link to the root directory"));
                };
                let from_dir = self.parent(raw, parents, false)?;
                let from = cstring(last).map_err(&err)?;
                match lstat_at(from_dir.as_fd(), &from).map_err(&err)? {
                    None => {
                        return Err(unsafe_entry(
                            raw,
                            "links to a file that is not in the image",
                        ))
                    }
                    Some(st) if is_dir(&st) => {
                        return Err(unsafe_entry(raw, "hard link to a directory"))
                    }
                    Some(_) => {}
                }
                if existing.is_some() {
                    remove_at(dir, name).map_err(&err)?;
                }
                // SAFETY: valid fds and names; flags 0: a symlink is linked, not followed.
                check(unsafe {
                    libc::linkat(
                        from_dir.as_raw_fd(),
                        from.as_ptr(),
                        dir.as_raw_fd(),
                        name.as_ptr(),
                        0,
                    )
                })
                .map_err(&err)?;
            }
            tar::EntryType::Fifo => {
                if existing.is_some() {
                    remove_at(dir, name).map_err(&err)?;
                }
                // SAFETY: valid fd and name; a FIFO has no device number.
                check(unsafe {
                    libc::mknodat(dir.as_raw_fd(), name.as_ptr(), libc::S_IFIFO | mode, 0)
                })
                .map_err(&err)?;
            }
            tar::EntryType::Char | tar::EntryType::Block => {
                return Err(unsafe_entry(
                    raw,
                    "device node (images may not hold devices)",
                ))
            }
            tar::EntryType::XGlobalHeader | tar::EntryType::XHeader => {}
            _ => return Err(unsafe_entry(raw, "unsupported tar entry type")),
        }
        Ok(())
    }
}

fn fix_owner_mode(fd: BorrowedFd<'_>, uid: u32, gid: u32, mode: u32) -> io::Result<()> {
    // SAFETY: a valid fd.
    check(unsafe { libc::fchown(fd.as_raw_fd(), uid, gid) })?;
    // SAFETY: a valid fd; after chown, which clears setuid bits anyway.
    check(unsafe { libc::fchmod(fd.as_raw_fd(), mode as libc::mode_t) })?;
    Ok(())
}

/// Bytes of regular files under `dir` (symlinks not followed; hard links counted once).
pub fn tree_size(dir: &Path) -> io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    let mut seen = HashSet::new();
    let mut total = 0u64;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d)? {
            let entry = entry?;
            let meta = entry.path().symlink_metadata()?;
            if meta.is_dir() {
                stack.push(entry.path());
            } else if meta.is_file() && (meta.nlink() < 2 || seen.insert(meta.ino())) {
                total += meta.len();
            }
        }
    }
    Ok(total)
}
