//! `ListDir`: the entries of a directory, down to a depth.

use crate::files::{absolute, full_stat, io_err, FileError};
use crate::users::{Names, UserDb};
use sbx_agent_proto::{FileStat, Reply};

/// Most entries one listing returns (`too_large` beyond).
pub const MAX_LIST_ENTRIES: usize = 100_000;

/// `ListDir`: every entry down to `depth` levels (0 and 1: the direct
/// children), sorted by full path. The listed directory may be a symlink to
/// one; symlinks below it are listed but never followed.
pub fn list_dir(path: &str, depth: u32) -> Result<Reply, FileError> {
    let p = absolute(path)?;
    let meta = std::fs::metadata(p).map_err(|e| io_err(path, e))?;
    if !meta.is_dir() {
        return Err(FileError::NotDirectory(path.to_string()));
    }
    let names = UserDb::default().names();
    let mut entries = Vec::new();
    let read = std::fs::read_dir(p).map_err(|e| io_err(path, e))?;
    walk(read, depth.max(1), &names, &mut entries, path)?;
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(Reply::Dir { entries })
}

/// Adds the entries of one directory (and, with `levels` > 1, of its
/// subdirectories) to `out`.
fn walk(
    read: std::fs::ReadDir,
    levels: u32,
    names: &Names,
    out: &mut Vec<FileStat>,
    root: &str,
) -> Result<(), FileError> {
    for entry in read {
        let entry = entry.map_err(|e| io_err(root, e))?;
        let full = entry.path();
        // An entry removed while listing is skipped.
        let Ok(m) = std::fs::symlink_metadata(&full) else {
            continue;
        };
        if out.len() >= MAX_LIST_ENTRIES {
            return Err(FileError::TooManyEntries {
                path: root.to_string(),
                max: MAX_LIST_ENTRIES,
            });
        }
        out.push(full_stat(&full, &m, names));
        // symlink_metadata: a link to a directory is not a directory here.
        if levels > 1 && m.is_dir() {
            // An unreadable subdirectory is listed without its contents.
            if let Ok(sub) = std::fs::read_dir(&full) {
                walk(sub, levels - 1, names, out, root)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn paths(reply: Reply, root: &Path) -> Vec<String> {
        let Reply::Dir { entries } = reply else {
            panic!("not a listing")
        };
        entries
            .iter()
            .map(|e| {
                Path::new(&e.path)
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect()
    }

    #[test]
    fn depth_limits_and_links_are_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir_all(d.join("a/b/c")).unwrap();
        std::fs::write(d.join("a/b/c/deep.txt"), "x").unwrap();
        std::fs::write(d.join("a/one.txt"), "x").unwrap();
        std::os::unix::fs::symlink(d.join("a"), d.join("link")).unwrap();
        let list = |depth| paths(list_dir(d.to_str().unwrap(), depth).unwrap(), d);
        assert_eq!(list(0), ["a", "link"]);
        assert_eq!(list(1), ["a", "link"]);
        assert_eq!(list(2), ["a", "a/b", "a/one.txt", "link"]);
        assert_eq!(
            list(9),
            ["a", "a/b", "a/b/c", "a/b/c/deep.txt", "a/one.txt", "link"]
        );
        // The listed root may itself be a link to a directory.
        let via_link = list_dir(d.join("link").to_str().unwrap(), 1).unwrap();
        assert_eq!(paths(via_link, &d.join("link")), ["b", "one.txt"]);
    }
}
