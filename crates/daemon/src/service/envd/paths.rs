//! Guest users and envd's path rules: empty → home, `~` → home, relative →
//! under home, everything normalised to an absolute path (contract §3.4).

use super::EnvdError;

/// A guest user name as envd callers give it (`user`, `root`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestUser(String);

impl GuestUser {
    /// Accepts a POSIX-style login name; the guest's `/etc/passwd` decides
    /// whether it exists (the agent answers "invalid username" otherwise).
    pub fn parse(name: &str) -> Result<GuestUser, EnvdError> {
        let ok = !name.is_empty()
            && name.len() <= 32
            && name
                .bytes()
                .next()
                .is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
        if ok {
            Ok(GuestUser(name.to_string()))
        } else {
            Err(EnvdError::Unauthenticated(format!(
                "invalid username: '{name}'"
            )))
        }
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.0
    }

    /// Its home directory by the image's convention (`/root`, `/home/NAME`).
    pub fn home(&self) -> String {
        if self.0 == "root" {
            "/root".to_string()
        } else {
            format!("/home/{}", self.0)
        }
    }

    /// `path` resolved as envd does: absolute and normalised.
    pub fn resolve(&self, path: &str) -> Result<String, EnvdError> {
        if path.contains('\0') {
            return Err(EnvdError::InvalidArgument(
                "path contains a NUL byte".into(),
            ));
        }
        let home = self.home();
        let joined = if path.is_empty() || path == "~" {
            home
        } else if let Some(rest) = path.strip_prefix("~/") {
            format!("{home}/{rest}")
        } else if path.starts_with('/') {
            path.to_string()
        } else {
            format!("{home}/{path}")
        };
        Ok(normalise(&joined))
    }
}

/// Lexical normalisation of an absolute path: no `.`, `..` or empty parts
/// (`..` above `/` stays at `/`, as the kernel does).
fn normalise(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    format!("/{}", parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_resolve_like_envd() {
        let user = GuestUser::parse("user").unwrap();
        assert_eq!(user.resolve("").unwrap(), "/home/user");
        assert_eq!(user.resolve("~").unwrap(), "/home/user");
        assert_eq!(user.resolve("~/a/b").unwrap(), "/home/user/a/b");
        assert_eq!(user.resolve("a.txt").unwrap(), "/home/user/a.txt");
        assert_eq!(user.resolve("./x/../y").unwrap(), "/home/user/y");
        assert_eq!(user.resolve("/tmp//a/./b/").unwrap(), "/tmp/a/b");
        assert_eq!(user.resolve("/../..").unwrap(), "/");
        assert_eq!(
            GuestUser::parse("root").unwrap().resolve("").unwrap(),
            "/root"
        );
        assert!(user.resolve("a\0b").is_err());
    }

    #[test]
    fn user_names_are_checked() {
        for bad in ["", "Root", "a b", "../x", "x:y", &"a".repeat(33), "1abc"] {
            assert!(
                matches!(GuestUser::parse(bad), Err(EnvdError::Unauthenticated(_))),
                "{bad:?}"
            );
        }
        for good in ["user", "root", "_svc", "a-b_1"] {
            assert!(GuestUser::parse(good).is_ok(), "{good}");
        }
    }
}
