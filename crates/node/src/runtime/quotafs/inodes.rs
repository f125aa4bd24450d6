//! The FUSE inode numbers of the passthrough and the paths (relative to
//! the source) they stand for.
//!
//! The source is rclone's mount, whose own inode numbers are only stable
//! while rclone keeps a node in memory: paths are what identify a file, so
//! the table maps numbers to paths and follows renames. A number lives
//! while the kernel holds it: each reply that hands one out counts as a
//! lookup, and the kernel's `forget` gives them back, so a long-lived mount
//! keeps only what its sandboxes use.

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
    /// Lookups the kernel holds, per number (the root is never forgotten).
    lookups: HashMap<u64, u64>,
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
            lookups: HashMap::new(),
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

    /// The number of `path`, given one when it has none yet, handed to the
    /// kernel (one more lookup it holds).
    pub fn ino_of(&mut self, path: &Path) -> u64 {
        let ino = match self.by_path.get(path) {
            Some(ino) => *ino,
            None => {
                let ino = self.next;
                self.next += 1;
                self.by_ino.insert(ino, path.to_path_buf());
                self.by_path.insert(path.to_path_buf(), ino);
                ino
            }
        };
        if ino != ROOT {
            *self.lookups.entry(ino).or_insert(0) += 1;
        }
        ino
    }

    /// The kernel dropped `n` lookups of `ino`: at none left, the number
    /// is forgotten (a number already removed is ignored).
    pub fn forget(&mut self, ino: u64, n: u64) {
        let Some(count) = self.lookups.get_mut(&ino) else {
            return;
        };
        *count = count.saturating_sub(n);
        if *count == 0 {
            self.lookups.remove(&ino);
            if let Some(path) = self.by_ino.remove(&ino) {
                self.by_path.remove(&path);
            }
        }
    }

    /// How many numbers are known (tests).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.by_ino.len()
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
                self.lookups.remove(&ino);
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
    fn forget_drops_a_number_when_the_kernel_holds_none() {
        let mut t = Inodes::new();
        let a = t.ino_of(Path::new("a"));
        assert_eq!(t.ino_of(Path::new("a")), a);
        t.forget(a, 1);
        assert_eq!(t.path(a), Some(Path::new("a")), "one lookup still held");
        t.forget(a, 1);
        assert_eq!(t.path(a), None);
        assert_eq!(t.len(), 1, "only the root");
        t.forget(ROOT, 5);
        t.forget(12345, 1);
        assert_eq!(t.path(ROOT), Some(Path::new("")));
        assert_ne!(t.ino_of(Path::new("a")), a, "a new number");
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
