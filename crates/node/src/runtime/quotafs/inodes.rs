//! The FUSE inode numbers of the passthrough and the paths (relative to
//! the source) they stand for.
//!
//! The source is rclone's mount, whose own inode numbers are only stable
//! while rclone keeps a node in memory: paths are what identify a file, so
//! the table maps numbers to paths and follows renames.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// The root's number (FUSE's).
pub const ROOT: u64 = 1;

/// Inode numbers ↔ relative paths (the root is the empty path).
#[derive(Debug)]
pub struct Inodes {
    by_ino: HashMap<u64, PathBuf>,
    by_path: HashMap<PathBuf, u64>,
    next: u64,
}

impl Default for Inodes {
    fn default() -> Self {
        Self::new()
    }
}

impl Inodes {
    /// A table holding only the root.
    pub fn new() -> Self {
        let mut t = Inodes {
            by_ino: HashMap::new(),
            by_path: HashMap::new(),
            next: ROOT + 1,
        };
        t.by_ino.insert(ROOT, PathBuf::new());
        t.by_path.insert(PathBuf::new(), ROOT);
        t
    }

    /// The path of `ino`, if it is known.
    pub fn path(&self, ino: u64) -> Option<&Path> {
        self.by_ino.get(&ino).map(PathBuf::as_path)
    }

    /// The path of `name` in directory `parent`; `None` for an unknown
    /// parent or a name that is not one plain component (the kernel sends
    /// none, but it is input from the guest's side).
    pub fn child(&self, parent: u64, name: &OsStr) -> Option<PathBuf> {
        if !is_component(name) {
            return None;
        }
        self.path(parent).map(|p| p.join(name))
    }

    /// The number of `path`, given one when it has none yet.
    pub fn ino_of(&mut self, path: &Path) -> u64 {
        if let Some(ino) = self.by_path.get(path) {
            return *ino;
        }
        let ino = self.next;
        self.next += 1;
        self.by_ino.insert(ino, path.to_path_buf());
        self.by_path.insert(path.to_path_buf(), ino);
        ino
    }

    /// Forgets `path` and everything under it (removed).
    pub fn remove(&mut self, path: &Path) {
        let gone: Vec<PathBuf> = self
            .by_path
            .keys()
            .filter(|p| p.starts_with(path))
            .cloned()
            .collect();
        for p in gone {
            if let Some(ino) = self.by_path.remove(&p) {
                self.by_ino.remove(&ino);
            }
        }
    }

    /// `from` (and everything under it) is now at `to`; what was at `to`
    /// before is forgotten (replaced).
    pub fn rename(&mut self, from: &Path, to: &Path) {
        self.remove(to);
        let moved: Vec<(PathBuf, u64)> = self
            .by_path
            .iter()
            .filter(|(p, _)| p.starts_with(from))
            .map(|(p, i)| (p.clone(), *i))
            .collect();
        for (old, ino) in moved {
            self.by_path.remove(&old);
            let rest = old.strip_prefix(from).unwrap_or(Path::new(""));
            let new = if rest.as_os_str().is_empty() {
                to.to_path_buf()
            } else {
                to.join(rest)
            };
            self.by_ino.insert(ino, new.clone());
            self.by_path.insert(new, ino);
        }
    }

    /// Swaps `a` and `b` (a rename with `RENAME_EXCHANGE`).
    pub fn exchange(&mut self, a: &Path, b: &Path) {
        let tmp = PathBuf::from("\0exchange");
        self.rename_keep(a, &tmp);
        self.rename_keep(b, a);
        self.rename_keep(&tmp, b);
    }

    /// `rename` without forgetting the target (for [`Inodes::exchange`]).
    fn rename_keep(&mut self, from: &Path, to: &Path) {
        let moved: Vec<(PathBuf, u64)> = self
            .by_path
            .iter()
            .filter(|(p, _)| p.starts_with(from))
            .map(|(p, i)| (p.clone(), *i))
            .collect();
        for (old, _) in &moved {
            self.by_path.remove(old);
        }
        for (old, ino) in moved {
            let rest = old.strip_prefix(from).unwrap_or(Path::new(""));
            let new = if rest.as_os_str().is_empty() {
                to.to_path_buf()
            } else {
                to.join(rest)
            };
            self.by_ino.insert(ino, new.clone());
            self.by_path.insert(new, ino);
        }
    }
}

/// Whether `name` is one plain path component (not empty, `.`, `..`, and
/// without `/`).
fn is_component(name: &OsStr) -> bool {
    let b = name.as_encoded_bytes();
    !b.is_empty() && b != b"." && b != b".." && !b.contains(&b'/') && !b.contains(&0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_get_stable_numbers() {
        let mut t = Inodes::new();
        let a = t.child(ROOT, OsStr::new("a")).unwrap();
        let ia = t.ino_of(&a);
        assert_eq!(t.ino_of(&a), ia);
        assert_eq!(t.path(ia), Some(Path::new("a")));
        let b = t.child(ia, OsStr::new("b")).unwrap();
        assert_eq!(b, Path::new("a/b"));
    }

    #[test]
    fn names_that_are_not_one_component_are_refused() {
        let t = Inodes::new();
        for bad in ["", ".", "..", "a/b", "../x"] {
            assert_eq!(t.child(ROOT, OsStr::new(bad)), None, "{bad:?}");
        }
        assert_eq!(t.child(999, OsStr::new("a")), None);
    }

    #[test]
    fn rename_moves_descendants_and_drops_the_target() {
        let mut t = Inodes::new();
        let d = t.ino_of(Path::new("d"));
        let f = t.ino_of(Path::new("d/f"));
        let old = t.ino_of(Path::new("e"));
        t.rename(Path::new("d"), Path::new("e"));
        assert_eq!(t.path(d), Some(Path::new("e")));
        assert_eq!(t.path(f), Some(Path::new("e/f")));
        assert_eq!(t.path(old), None);
        // "dx" is not under "d".
        let dx = t.ino_of(Path::new("dx"));
        t.rename(Path::new("e"), Path::new("g"));
        assert_eq!(t.path(dx), Some(Path::new("dx")));
    }

    #[test]
    fn remove_forgets_a_subtree() {
        let mut t = Inodes::new();
        let d = t.ino_of(Path::new("d"));
        let f = t.ino_of(Path::new("d/f"));
        t.remove(Path::new("d"));
        assert_eq!(t.path(d), None);
        assert_eq!(t.path(f), None);
        assert_eq!(t.path(ROOT), Some(Path::new("")));
    }

    #[test]
    fn exchange_swaps() {
        let mut t = Inodes::new();
        let a = t.ino_of(Path::new("a"));
        let b = t.ino_of(Path::new("b"));
        t.exchange(Path::new("a"), Path::new("b"));
        assert_eq!(t.path(a), Some(Path::new("b")));
        assert_eq!(t.path(b), Some(Path::new("a")));
    }
}
