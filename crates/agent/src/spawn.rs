//! Environment merging, `argv[0]` resolution and building the child command.
//!
//! Resolution happens in the agent (not in the child) so that a missing
//! executable or a bad working directory produces the same exit code (127, or
//! 126 for permission problems) and `sbx: ...` message for every caller,
//! whether or not a shell is involved.

use nix::errno::Errno;
use sbx_agent_proto::CommandSpec;
use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Variables with this prefix in the agent's own environment are never passed on.
pub const PRIVATE_ENV_PREFIX: &str = "SBX_AGENT_";

/// `PATH` used when the merged environment has none.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Why a command could not be started.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// `argv` was empty.
    #[error("argv is empty")]
    EmptyArgv,
    /// An argument, the cwd or a variable contains a NUL byte, or a
    /// variable name contains `=`.
    #[error("argument, cwd or environment contains a NUL byte (or a variable name contains '=')")]
    Nul,
    /// The working directory is unusable.
    #[error("sbx: cd: {cwd}: {}", .errno.desc())]
    BadCwd {
        /// The directory as requested.
        cwd: String,
        /// Why.
        errno: Errno,
    },
    /// The executable is missing or not executable.
    #[error("sbx: {argv0}: {}", .errno.desc())]
    NotRunnable {
        /// `argv[0]` as requested.
        argv0: String,
        /// Why.
        errno: Errno,
    },
}

impl SpawnError {
    /// Whether the request itself was malformed (not a "command not found").
    pub fn is_invalid_request(&self) -> bool {
        matches!(self, SpawnError::EmptyArgv | SpawnError::Nul)
    }

    /// Shell-style exit code: 127 for "not found", 126 otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            SpawnError::BadCwd { errno, .. } | SpawnError::NotRunnable { errno, .. } => {
                if matches!(errno, Errno::ENOENT | Errno::ENOTDIR) {
                    127
                } else {
                    126
                }
            }
            _ => 126,
        }
    }

    /// Builds the error for an `exec` that failed inside `spawn`.
    pub fn from_io(argv0: &str, err: &std::io::Error) -> SpawnError {
        SpawnError::NotRunnable {
            argv0: argv0.to_string(),
            errno: Errno::from_raw(err.raw_os_error().unwrap_or(libc::EIO)),
        }
    }
}

/// The environment layers: guest defaults (the agent's own environment at
/// start, minus `SBX_AGENT_*`) and the configured base environment.
pub struct Environment {
    guest: BTreeMap<String, String>,
    base: Mutex<BTreeMap<String, String>>,
}

impl Environment {
    /// Guest defaults taken from this process's environment.
    pub fn from_process() -> Self {
        let guest = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .filter(|(k, _)| !k.starts_with(PRIVATE_ENV_PREFIX))
            .collect();
        Environment {
            guest,
            base: Mutex::new(BTreeMap::new()),
        }
    }

    /// Replaces the base environment.
    pub fn configure(&self, env: BTreeMap<String, String>) {
        *self.base.lock().unwrap_or_else(|e| e.into_inner()) = env;
    }

    /// guest defaults, overridden by the base environment, overridden by `call`.
    pub fn merged(&self, call: &BTreeMap<String, String>) -> BTreeMap<String, String> {
        self.merged_for(None, call)
    }

    /// Like [`Environment::merged`], with the `user`'s `HOME`, `USER` and
    /// `LOGNAME` between the guest defaults and the base environment.
    pub fn merged_for(
        &self,
        user: Option<&crate::users::User>,
        call: &BTreeMap<String, String>,
    ) -> BTreeMap<String, String> {
        let mut env = self.guest.clone();
        if let Some(u) = user {
            env.insert("HOME".into(), u.home.clone());
            env.insert("USER".into(), u.name.clone());
            env.insert("LOGNAME".into(), u.name.clone());
        }
        let base = self.base.lock().unwrap_or_else(|e| e.into_inner());
        env.extend(base.iter().map(|(k, v)| (k.clone(), v.clone())));
        env.extend(call.iter().map(|(k, v)| (k.clone(), v.clone())));
        env
    }
}

/// A command ready to spawn.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// Resolved executable path.
    pub program: PathBuf,
    /// argv as requested (`argv[0]` unchanged).
    pub argv: Vec<String>,
    /// Absolute working directory.
    pub cwd: PathBuf,
    /// Full environment.
    pub env: BTreeMap<String, String>,
}

fn errno_of(err: &std::io::Error) -> Errno {
    Errno::from_raw(err.raw_os_error().unwrap_or(libc::EIO))
}

fn is_executable(path: &Path) -> bool {
    match CString::new(path.as_os_str().as_bytes()) {
        // SAFETY: valid NUL-terminated string.
        Ok(c) => unsafe { libc::access(c.as_ptr(), libc::X_OK) == 0 },
        Err(_) => false,
    }
}

/// Whether `path` can be executed: `Ok` or the errno a shell would report.
fn check_executable(path: &Path) -> Result<(), Errno> {
    let meta = std::fs::metadata(path).map_err(|e| errno_of(&e))?;
    if meta.is_dir() {
        return Err(Errno::EISDIR);
    }
    if !is_executable(path) {
        return Err(Errno::EACCES);
    }
    Ok(())
}

/// Resolves `argv0` like `execvp`: through `path_var` when it has no `/`,
/// relative to `cwd` otherwise.
pub fn resolve(argv0: &str, cwd: &Path, path_var: &str) -> Result<PathBuf, Errno> {
    if argv0.is_empty() {
        return Err(Errno::ENOENT);
    }
    if argv0.contains('/') {
        let p = cwd.join(argv0);
        return check_executable(&p).map(|_| p);
    }
    let mut denied = None;
    for dir in path_var.split(':') {
        let dir = if dir.is_empty() { "." } else { dir };
        let candidate = cwd.join(dir).join(argv0);
        // Like a shell: a candidate that exists but cannot be run makes the
        // result 126; unreadable PATH directories are skipped silently.
        if std::fs::metadata(&candidate).is_err() {
            continue;
        }
        match check_executable(&candidate) {
            Ok(()) => return Ok(candidate),
            Err(e) => denied = denied.or(Some(e)),
        }
    }
    Err(denied.unwrap_or(Errno::ENOENT))
}

/// Validates the working directory and resolves the executable.
pub fn prepare(spec: &CommandSpec, env: BTreeMap<String, String>) -> Result<Prepared, SpawnError> {
    let argv0 = spec.argv.first().ok_or(SpawnError::EmptyArgv)?;
    let has_nul = spec.argv.iter().any(|a| a.contains('\0'))
        || env
            .iter()
            .any(|(k, v)| k.contains('\0') || k.contains('=') || v.contains('\0'))
        || spec.cwd.as_deref().is_some_and(|c| c.contains('\0'));
    if has_nul {
        return Err(SpawnError::Nul);
    }
    let cwd_str = spec
        .cwd
        .clone()
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "/".into());
    let cwd = Path::new("/").join(&cwd_str);
    match std::fs::metadata(&cwd) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(SpawnError::BadCwd {
                cwd: cwd_str,
                errno: Errno::ENOTDIR,
            })
        }
        Err(e) => {
            return Err(SpawnError::BadCwd {
                cwd: cwd_str,
                errno: errno_of(&e),
            })
        }
    }
    let path_var = env.get("PATH").map(String::as_str).unwrap_or(DEFAULT_PATH);
    let program = resolve(argv0, &cwd, path_var).map_err(|errno| SpawnError::NotRunnable {
        argv0: argv0.clone(),
        errno,
    })?;
    Ok(Prepared {
        program,
        argv: spec.argv.clone(),
        cwd,
        env,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_through_path_and_reports_missing() {
        let sh = resolve("sh", Path::new("/"), DEFAULT_PATH).unwrap();
        assert!(sh.ends_with("sh"));
        assert_eq!(
            resolve("definitely-not-here-xyz", Path::new("/"), DEFAULT_PATH),
            Err(Errno::ENOENT)
        );
        assert_eq!(
            resolve("/tmp", Path::new("/"), DEFAULT_PATH),
            Err(Errno::EISDIR)
        );
    }

    #[test]
    fn missing_command_message() {
        let spec = CommandSpec {
            argv: vec!["nope-xyz".into()],
            ..Default::default()
        };
        let err = prepare(&spec, BTreeMap::new()).unwrap_err();
        assert_eq!(err.exit_code(), 127);
        assert_eq!(err.to_string(), "sbx: nope-xyz: No such file or directory");
    }

    #[test]
    fn env_layers_override_in_order() {
        let e = Environment {
            guest: [("A".to_string(), "g".to_string()), ("B".into(), "g".into())].into(),
            base: Mutex::new(BTreeMap::new()),
        };
        e.configure(
            [
                ("B".to_string(), "base".to_string()),
                ("C".into(), "base".into()),
            ]
            .into(),
        );
        let m = e.merged(&[("C".to_string(), "call".to_string())].into());
        assert_eq!(m["A"], "g");
        assert_eq!(m["B"], "base");
        assert_eq!(m["C"], "call");
        // A user's variables sit between the guest defaults and the base.
        let user = crate::users::User {
            name: "u".into(),
            uid: 1,
            gid: 1,
            home: "/home/u".into(),
            groups: vec![1],
        };
        e.configure([("USER".to_string(), "base".to_string())].into());
        let m = e.merged_for(
            Some(&user),
            &[("LOGNAME".to_string(), "call".to_string())].into(),
        );
        assert_eq!(m["HOME"], "/home/u");
        assert_eq!(m["USER"], "base");
        assert_eq!(m["LOGNAME"], "call");
    }
}
