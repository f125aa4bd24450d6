//! Guest users and groups, read from `/etc/passwd` and `/etc/group`.
//!
//! The files are parsed directly: the agent is a static binary, so NSS
//! (`getpwnam`) cannot load its modules, and the guest image's files are the
//! only source of truth anyway. They are read again on every lookup so that a
//! user added by the guest (`useradd`) is seen at once.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Where the guest keeps its user database.
const ETC: &str = "/etc";

/// Failures of a user lookup.
#[derive(Debug, thiserror::Error)]
pub enum UserError {
    /// No such name in `/etc/passwd` (the message is the one E2B clients expect).
    #[error("invalid username: '{0}'")]
    Unknown(String),
    /// `/etc/passwd` could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
}

/// A guest user with everything needed to run a process as it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// Login name.
    pub name: String,
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Home directory.
    pub home: String,
    /// All group ids: the primary one first, then every group listing the user.
    pub groups: Vec<u32>,
}

/// The user database of one root directory (`/` in production, a temp dir in tests).
#[derive(Debug, Clone)]
pub struct UserDb {
    etc: PathBuf,
}

impl Default for UserDb {
    fn default() -> Self {
        UserDb::new(Path::new(ETC))
    }
}

/// One `/etc/passwd` line: (name, uid, gid, home).
fn passwd_entry(line: &str) -> Option<(&str, u32, u32, &str)> {
    let f: Vec<&str> = line.split(':').collect();
    if f.len() < 7 || f[0].is_empty() || line.starts_with('#') {
        return None;
    }
    Some((f[0], f[2].parse().ok()?, f[3].parse().ok()?, f[5]))
}

/// One `/etc/group` line: (name, gid, members).
fn group_entry(line: &str) -> Option<(&str, u32, Vec<&str>)> {
    let f: Vec<&str> = line.split(':').collect();
    if f.len() < 4 || f[0].is_empty() || line.starts_with('#') {
        return None;
    }
    let members = f[3].split(',').filter(|m| !m.is_empty()).collect();
    Some((f[0], f[2].parse().ok()?, members))
}

impl UserDb {
    /// The database in `etc` (a directory holding `passwd` and `group`).
    pub fn new(etc: &Path) -> Self {
        UserDb {
            etc: etc.to_path_buf(),
        }
    }

    fn read(&self, file: &str) -> std::io::Result<String> {
        std::fs::read_to_string(self.etc.join(file))
    }

    /// Looks `name` up; unknown names (and an unreadable passwd) fail.
    pub fn user(&self, name: &str) -> Result<User, UserError> {
        let passwd = self.read("passwd").map_err(|source| UserError::Read {
            path: self.etc.join("passwd"),
            source,
        })?;
        let (uid, gid, home) = passwd
            .lines()
            .filter_map(passwd_entry)
            .find(|(n, ..)| *n == name)
            .map(|(_, uid, gid, home)| (uid, gid, home.to_string()))
            .ok_or_else(|| UserError::Unknown(name.to_string()))?;
        let mut groups = vec![gid];
        // No group file: the user still runs, with its primary group only.
        let group = self.read("group").unwrap_or_default();
        for (_, g, members) in group.lines().filter_map(group_entry) {
            if members.contains(&name) && !groups.contains(&g) {
                groups.push(g);
            }
        }
        Ok(User {
            name: name.to_string(),
            uid,
            gid,
            home,
            groups,
        })
    }

    /// uid → name and gid → name maps (empty when a file is unreadable).
    pub fn names(&self) -> Names {
        let mut names = Names::default();
        for (name, uid, ..) in self
            .read("passwd")
            .unwrap_or_default()
            .lines()
            .filter_map(passwd_entry)
        {
            // The first entry for an id wins, as with getpwuid.
            names.users.entry(uid).or_insert_with(|| name.to_string());
        }
        for (name, gid, _) in self
            .read("group")
            .unwrap_or_default()
            .lines()
            .filter_map(group_entry)
        {
            names.groups.entry(gid).or_insert_with(|| name.to_string());
        }
        names
    }
}

/// Owner and group names by id, for file metadata.
#[derive(Debug, Default, Clone)]
pub struct Names {
    users: HashMap<u32, String>,
    groups: HashMap<u32, String>,
}

impl Names {
    /// The name of `uid`, if the guest has one.
    pub fn user(&self, uid: u32) -> Option<String> {
        self.users.get(&uid).cloned()
    }

    /// The name of `gid`, if the guest has one.
    pub fn group(&self, gid: u32) -> Option<String> {
        self.groups.get(&gid).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db() -> (tempfile::TempDir, UserDb) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("passwd"),
            "# comment\nroot:x:0:0:root:/root:/bin/bash\n\
             user:x:1000:1000::/home/user:/bin/bash\nbroken:x:zz:1::/:\n\
             alias:x:0:0::/alias:/bin/sh\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("group"),
            "root:x:0:\nuser:x:1000:\nsudo:x:27:user,other\ndocker:x:999:other,user\nempty:x:5:\n",
        )
        .unwrap();
        let db = UserDb::new(dir.path());
        (dir, db)
    }

    #[test]
    fn finds_users_with_their_groups() {
        let (_dir, db) = db();
        let u = db.user("user").unwrap();
        assert_eq!(
            u,
            User {
                name: "user".into(),
                uid: 1000,
                gid: 1000,
                home: "/home/user".into(),
                groups: vec![1000, 27, 999],
            }
        );
        assert_eq!(db.user("root").unwrap().groups, vec![0]);
        let e = db.user("nobody-here").unwrap_err();
        assert_eq!(e.to_string(), "invalid username: 'nobody-here'");
        // A malformed line is skipped, not half-used.
        assert!(matches!(db.user("broken"), Err(UserError::Unknown(_))));
    }

    #[test]
    fn names_by_id_first_entry_wins() {
        let (_dir, db) = db();
        let n = db.names();
        assert_eq!(n.user(0).as_deref(), Some("root"));
        assert_eq!(n.user(1000).as_deref(), Some("user"));
        assert_eq!(n.user(4242), None);
        assert_eq!(n.group(27).as_deref(), Some("sudo"));
        assert_eq!(n.group(4242), None);
    }

    #[test]
    fn missing_files() {
        let dir = tempfile::tempdir().unwrap();
        let db = UserDb::new(dir.path());
        assert!(matches!(db.user("root"), Err(UserError::Read { .. })));
        assert_eq!(db.names().user(0), None);
    }
}
