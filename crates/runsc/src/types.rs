//! Data types shared by several subcommands.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Container status as runsc reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// Created, not started (`runsc create` without `start`).
    Created,
    /// Running.
    Running,
    /// Paused (`runsc pause`).
    Paused,
    /// Stopped: PID 1 exited or the sandbox died; `delete` is still needed.
    Stopped,
    /// Any other string (future runsc versions).
    Unknown(String),
}

impl Status {
    /// The string runsc uses.
    pub fn as_str(&self) -> &str {
        match self {
            Status::Created => "created",
            Status::Running => "running",
            Status::Paused => "paused",
            Status::Stopped => "stopped",
            Status::Unknown(s) => s,
        }
    }

    /// Parses runsc's status string; never fails.
    pub fn parse(s: &str) -> Status {
        match s {
            "created" => Status::Created,
            "running" => Status::Running,
            "paused" => Status::Paused,
            "stopped" => Status::Stopped,
            other => Status::Unknown(other.to_string()),
        }
    }
}

impl Serialize for Status {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Status {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Ok(Status::parse(&s))
    }
}

/// Output of `runsc state ID` (the OCI state document).
///
/// runsc 20240729 prints `ociVersion`, `id`, `status`, `pid`, `bundle`;
/// `created` and `annotations` are read when present.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerState {
    /// OCI version string.
    #[serde(default)]
    pub oci_version: String,
    /// Container id.
    pub id: String,
    /// Status.
    pub status: Status,
    /// Host pid of the sandbox process (0 when not running).
    #[serde(default)]
    pub pid: i32,
    /// Bundle directory.
    #[serde(default)]
    pub bundle: PathBuf,
    /// Creation time (RFC 3339), if reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<String>,
    /// Annotations from the spec, if reported.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// One element of `runsc list -format=json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerSummary {
    /// Container id.
    pub id: String,
    /// Status.
    pub status: Status,
    /// Host pid of the sandbox process.
    #[serde(default)]
    pub pid: i32,
    /// Bundle directory.
    #[serde(default)]
    pub bundle: PathBuf,
    /// Creation time (RFC 3339), if reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<String>,
}

/// Where one standard stream of a runsc process goes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum IoTarget {
    /// `/dev/null`.
    #[default]
    Null,
    /// The caller's own stream.
    Inherit,
    /// A file: opened read-only for stdin; created and appended to for
    /// stdout/stderr (a sandbox console log).
    File(PathBuf),
    /// An open descriptor (a socket sbxd made), given to the process as is.
    Fd(SharedFd),
}

/// A descriptor shared by the clones of a [`ProcessIo`]; equal only to itself.
#[derive(Debug, Clone)]
pub struct SharedFd(pub std::sync::Arc<std::os::fd::OwnedFd>);

impl PartialEq for SharedFd {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for SharedFd {}

/// Standard streams of a `run`/`create`/`restore` invocation. With
/// `--detach`, the sandbox keeps these for its whole life, so they are
/// files, null or a socket sbxd holds, never pipes read to EOF.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessIo {
    /// stdin of PID 1.
    pub stdin: IoTarget,
    /// stdout of PID 1 and of runsc itself.
    pub stdout: IoTarget,
    /// stderr of PID 1 and of runsc itself; when it is a file, the error
    /// text of a failed command is read back from it.
    pub stderr: IoTarget,
}

impl ProcessIo {
    /// stdin null; stdout and stderr both appended to `log`.
    pub fn console_log(log: impl Into<PathBuf>) -> Self {
        let log = log.into();
        ProcessIo {
            stdin: IoTarget::Null,
            stdout: IoTarget::File(log.clone()),
            stderr: IoTarget::File(log),
        }
    }

    /// PID 1's stdin and stdout on `channel` (a socket); stderr appended to `log`.
    pub fn channel_and_log(channel: SharedFd, log: impl Into<PathBuf>) -> Self {
        ProcessIo {
            stdin: IoTarget::Fd(channel.clone()),
            stdout: IoTarget::Fd(channel),
            stderr: IoTarget::File(log.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_runsc_state() {
        let json = r#"{
  "ociVersion": "1.0.2-dev",
  "id": "runsc-probe-x",
  "status": "running",
  "pid": 13613,
  "bundle": "/tmp/probe/b1"
}"#;
        let s: ContainerState = serde_json::from_str(json).expect("parse");
        assert_eq!(s.id, "runsc-probe-x");
        assert_eq!(s.status, Status::Running);
        assert_eq!(s.pid, 13613);
        assert_eq!(s.bundle, PathBuf::from("/tmp/probe/b1"));
        assert_eq!(s.created, None);
    }

    #[test]
    fn unknown_status_is_kept() {
        let s: ContainerSummary =
            serde_json::from_str(r#"{"id":"a","status":"creating","pid":0}"#).expect("parse");
        assert_eq!(s.status, Status::Unknown("creating".into()));
        assert_eq!(s.status.as_str(), "creating");
        for st in ["created", "running", "paused", "stopped"] {
            assert_eq!(Status::parse(st).as_str(), st);
        }
    }
}
