//! User metadata as `user.e2b.*` extended attributes (see
//! `sbx_agent_proto::file_metadata`): written on an upload's temp file before
//! it is renamed into place, read back for `Stat` and `ListDir`.

use sbx_agent_proto::file_metadata::{self, FileMetadata, XATTR_PREFIX};
use std::ffi::CString;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// Sets every pair on `file` as `user.e2b.<key>`; the map is checked again
/// here, since the agent does not trust its peer's validation.
pub fn set_all(file: &File, metadata: &FileMetadata) -> std::io::Result<()> {
    let invalid = |e: file_metadata::MetadataError| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string())
    };
    let checked = file_metadata::normalize(metadata.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .map_err(invalid)?;
    for (key, value) in &checked {
        let name = CString::new(format!("{XATTR_PREFIX}{key}"))
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        // SAFETY: a valid fd, a NUL-terminated name and a live buffer of the given length.
        let rc = unsafe {
            libc::fsetxattr(
                file.as_raw_fd(),
                name.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                0,
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The `user.e2b.*` attributes of `path` (a symlink itself is not followed);
/// empty when there are none or the filesystem keeps no xattrs. A value that
/// is not printable ASCII (set from inside the sandbox) is left out.
pub fn read(path: &Path) -> FileMetadata {
    let mut out = FileMetadata::new();
    let Ok(cpath) = CString::new(path.as_os_str().as_bytes()) else {
        return out;
    };
    let Some(names) = list(&cpath) else {
        return out;
    };
    for name in names.split(|b| *b == 0).filter(|n| !n.is_empty()) {
        let Some(key) = name.strip_prefix(XATTR_PREFIX.as_bytes()) else {
            continue;
        };
        let Ok(key) = std::str::from_utf8(key) else {
            continue;
        };
        let Ok(cname) = CString::new(name) else {
            continue;
        };
        if let Some(value) = get(&cpath, &cname) {
            if file_metadata::check_key(key).is_ok()
                && file_metadata::check_value(key, &value).is_ok()
            {
                out.insert(key.to_string(), value);
            }
        }
    }
    out
}

/// The NUL-separated attribute names of `path`, or `None`.
fn list(path: &CString) -> Option<Vec<u8>> {
    // SAFETY: a size query with a null buffer.
    let size = unsafe { libc::llistxattr(path.as_ptr(), std::ptr::null_mut(), 0) };
    if size <= 0 {
        return None;
    }
    let mut buf = vec![0u8; size as usize];
    // SAFETY: the buffer is `buf.len()` bytes long.
    let n = unsafe { libc::llistxattr(path.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return None;
    }
    buf.truncate(n as usize);
    Some(buf)
}

/// One attribute's value, if it is UTF-8 and fits a file's metadata budget.
fn get(path: &CString, name: &CString) -> Option<String> {
    let mut buf = vec![0u8; file_metadata::MAX_TOTAL_BYTES];
    // SAFETY: the buffer is `buf.len()` bytes long; ERANGE (too long) is an error.
    let n = unsafe {
        libc::lgetxattr(
            path.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        return None;
    }
    buf.truncate(n as usize);
    String::from_utf8(buf).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On the host's temp directory (tmpfs and ext4 keep user xattrs).
    #[test]
    fn set_then_read_round_trips_and_ignores_other_attributes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let file = File::create(&path).unwrap();
        let meta: FileMetadata = [
            ("owner".to_string(), "me".to_string()),
            ("a.b".into(), "x y".into()),
        ]
        .into_iter()
        .collect();
        set_all(&file, &meta).unwrap();
        let other = CString::new("user.other").unwrap();
        // SAFETY: valid fd, name and buffer.
        let rc = unsafe {
            libc::fsetxattr(file.as_raw_fd(), other.as_ptr(), b"z".as_ptr().cast(), 1, 0)
        };
        assert_eq!(rc, 0);
        assert_eq!(read(&path), meta);
        assert!(read(&dir.path().join("missing")).is_empty());
    }

    #[test]
    fn bad_keys_are_refused_before_any_attribute_is_set() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let file = File::create(&path).unwrap();
        let meta: FileMetadata = [
            ("ok".to_string(), "1".to_string()),
            ("bad key".into(), "2".into()),
        ]
        .into_iter()
        .collect();
        assert!(set_all(&file, &meta).is_err());
        assert!(read(&path).is_empty());
    }
}
