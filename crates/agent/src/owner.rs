//! Creating files and directories owned by a guest user (`owner` on
//! uploads and `mkdir`, `parents_owner` on `rename`).

use crate::files::{io_err, FileError};
use crate::users::UserDb;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// Who owns what a request creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    /// User id.
    pub uid: u32,
    /// The user's primary group.
    pub gid: u32,
}

/// Looks the owner's name up in the guest's `/etc/passwd`; `None` stays `None`
/// (root, as the agent). Unknown → [`FileError::User`] (`invalid_argument`).
pub fn resolve(name: Option<&str>) -> Result<Option<Owner>, FileError> {
    match name {
        None => Ok(None),
        Some(name) => {
            let u = UserDb::default().user(name)?;
            Ok(Some(Owner {
                uid: u.uid,
                gid: u.gid,
            }))
        }
    }
}

/// Gives `path` (not following a final symlink) to `owner`.
pub fn chown(path: &Path, owner: Owner) -> io::Result<()> {
    std::os::unix::fs::lchown(path, Some(owner.uid), Some(owner.gid))
}

/// Creates `dir` and its missing parents with `mode` (less the umask); each
/// directory created here, and only those, is given to `owner`.
pub fn create_dirs(dir: &Path, mode: u32, owner: Option<Owner>) -> Result<(), FileError> {
    let fail = |p: &Path, e| io_err(&p.to_string_lossy(), e);
    // The missing ancestors, deepest first.
    let mut missing: Vec<PathBuf> = Vec::new();
    let mut cur = Some(dir);
    while let Some(p) = cur {
        match std::fs::metadata(p) {
            Ok(m) if m.is_dir() => break,
            // As mkdir(2) below it would: ENOTDIR (`not_found`, as before owners).
            Ok(_) => return Err(fail(p, io::Error::from_raw_os_error(libc::ENOTDIR))),
            // ENOTDIR: a file further up, found (and refused) on the way up.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::ENOTDIR)) => {
                missing.push(p.to_path_buf())
            }
            Err(e) => return Err(fail(p, e)),
        }
        cur = p.parent();
    }
    for p in missing.iter().rev() {
        match std::fs::DirBuilder::new().mode(mode).create(p) {
            Ok(()) => {
                if let Some(o) = owner {
                    chown(p, o).map_err(|e| fail(p, e))?;
                }
            }
            // Created meanwhile by someone else: theirs, left as it is.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && p.is_dir() => {}
            Err(e) => return Err(fail(p, e)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn only_created_directories_change_owner() {
        let dir = tempfile::tempdir().unwrap();
        let existing = dir.path().join("existing");
        std::fs::create_dir(&existing).unwrap();
        let deep = existing.join("a/b");
        let owner = Owner {
            uid: 65534,
            gid: 65534,
        };
        create_dirs(&deep, 0o755, Some(owner)).unwrap();
        let ids = |p: &Path| {
            let m = std::fs::metadata(p).unwrap();
            (m.uid(), m.gid())
        };
        assert_eq!(ids(&existing), (0, 0));
        assert_eq!(ids(&existing.join("a")), (65534, 65534));
        assert_eq!(ids(&deep), (65534, 65534));
        // Idempotent; a file in the way is refused.
        create_dirs(&deep, 0o755, Some(owner)).unwrap();
        std::fs::write(dir.path().join("file"), "x").unwrap();
        let e = create_dirs(&dir.path().join("file/sub"), 0o755, None).unwrap_err();
        assert!(
            matches!(&e, FileError::Io { source, .. } if source.raw_os_error() == Some(libc::ENOTDIR)),
            "{e:?}"
        );
    }

    #[test]
    fn unknown_owner_is_refused() {
        let e = resolve(Some("no-such-user-xyz")).unwrap_err();
        assert_eq!(e.to_string(), "invalid username: 'no-such-user-xyz'");
        assert_eq!(resolve(None).unwrap(), None);
        assert_eq!(
            resolve(Some("root")).unwrap(),
            Some(Owner { uid: 0, gid: 0 })
        );
    }
}
