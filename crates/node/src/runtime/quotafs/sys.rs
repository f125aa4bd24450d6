//! The system calls the passthrough makes that `std` does not wrap, and
//! how open flags are passed on.

use std::fs::OpenOptions;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::SystemTime;

/// Open flags not passed on to the source: creation is done by `create`,
/// truncation is accounted here, `O_APPEND` is dropped because the kernel
/// already gives each write its offset (the file's end) and a positioned
/// write must land exactly there for the accounting to hold, and
/// `O_DIRECT` would demand aligned buffers of ours.
const STRIPPED: i32 = libc::O_ACCMODE
    | libc::O_CREAT
    | libc::O_EXCL
    | libc::O_TRUNC
    | libc::O_APPEND
    | libc::O_DIRECT;

/// A time to set: now, or a given time (`setattr`).
#[derive(Debug, Clone, Copy)]
pub enum SetTime {
    /// The current time.
    Now,
    /// This time.
    At(SystemTime),
}

/// Open options for the access mode and the flags the source keeps.
pub(super) fn options(flags: i32) -> OpenOptions {
    let mut o = OpenOptions::new();
    match flags & libc::O_ACCMODE {
        libc::O_WRONLY => o.write(true),
        libc::O_RDWR => o.read(true).write(true),
        _ => o.read(true),
    };
    // rclone shows no symlinks; should a source have one, it is not
    // followed out of the volume.
    o.custom_flags((flags & !STRIPPED) | libc::O_NOFOLLOW);
    o
}

fn cpath(p: &Path) -> io::Result<std::ffi::CString> {
    std::ffi::CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

pub(super) fn renameat2(from: &Path, to: &Path, flags: u32) -> io::Result<()> {
    let (f, t) = (cpath(from)?, cpath(to)?);
    // SAFETY: two valid C strings; AT_FDCWD with absolute paths.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            f.as_ptr(),
            libc::AT_FDCWD,
            t.as_ptr(),
            flags,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn timespec(t: Option<SetTime>) -> libc::timespec {
    match t {
        None => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        Some(SetTime::Now) => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
        Some(SetTime::At(at)) => {
            let d = at
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default();
            libc::timespec {
                tv_sec: d.as_secs() as libc::time_t,
                tv_nsec: d.subsec_nanos() as libc::c_long,
            }
        }
    }
}

pub(super) fn set_times(
    path: &Path,
    atime: Option<SetTime>,
    mtime: Option<SetTime>,
) -> io::Result<()> {
    let p = cpath(path)?;
    let times = [timespec(atime), timespec(mtime)];
    // SAFETY: a valid C string and an array of two timespecs.
    let rc = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            p.as_ptr(),
            times.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
