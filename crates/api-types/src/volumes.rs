//! Persistent volumes (`/v1/volumes`) and the mounts a sandbox takes at create.
//! Only the `local` kind (a size-limited filesystem on the node) is built.

use crate::validate::ValidationError;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Most volumes one sandbox may mount.
pub const MAX_MOUNTS: usize = 8;
/// Smallest volume, MiB (ext4 with a journal needs a few MiB of its own).
pub const MIN_VOLUME_MB: u64 = 16;
/// Largest volume, MiB (1 TiB; the image is sparse, so this is a limit, not an allocation).
pub const MAX_VOLUME_MB: u64 = 1024 * 1024;
/// Guest directories a volume may not be mounted on or under: the system's
/// own trees, the agent's mount, and `/tmp`/`/run` (tmpfs the runtime owns).
pub const RESERVED_MOUNT_DIRS: &[&str] = &[
    "/proc", "/sys", "/dev", "/etc", "/bin", "/sbin", "/usr", "/lib", "/lib32", "/lib64",
    "/libx32", "/boot", "/run", "/tmp", "/var/run", "/.sbx",
];

/// Where a volume's data lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VolumeKind {
    /// A size-limited ext4 filesystem image on one node.
    Local,
    /// Object storage through a FUSE filesystem (not built yet).
    S3,
}

impl VolumeKind {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            VolumeKind::Local => "local",
            VolumeKind::S3 => "s3",
        }
    }

    /// Parses the wire spelling.
    pub fn parse(raw: &str) -> Option<Self> {
        match raw {
            "local" => Some(VolumeKind::Local),
            "s3" => Some(VolumeKind::S3),
            _ => None,
        }
    }
}

/// `POST /v1/volumes`.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateVolumeRequest {
    /// Name, unique in the tenant (sandbox-name rules).
    pub name: Option<String>,
    /// `local` (default) or `s3` (answered 501: not built yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<VolumeKind>,
    /// Size limit, MiB ([`MIN_VOLUME_MB`]–[`MAX_VOLUME_MB`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_mb: Option<u64>,
}

/// A volume as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Volume {
    /// Lowercase UUID.
    pub id: Uuid,
    /// Name, unique in the tenant.
    pub name: String,
    /// Kind.
    pub kind: VolumeKind,
    /// Size limit, MiB.
    pub size_mb: u64,
    /// Bytes in use (`GET /v1/volumes/{name}` only; absent in lists).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_bytes: Option<u64>,
    /// Node holding the data.
    pub node_id: String,
    /// Creation time.
    pub created_at: String,
}

/// `GET /v1/volumes`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VolumeList {
    /// Volumes by name.
    pub volumes: Vec<Volume>,
}

/// One entry of `volumes` in `POST /v1/sandboxes`, and of `mounts` in the
/// sandbox's detail.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VolumeMount {
    /// Volume name (in the caller's tenant).
    pub name: String,
    /// Absolute, normalised guest path.
    pub path: String,
    /// Mounted read-only (enforced by gVisor).
    #[serde(default)]
    pub read_only: bool,
}

fn bad(field: &'static str, reason: impl Into<String>) -> ValidationError {
    ValidationError::Format {
        field,
        reason: reason.into(),
    }
}

/// Size of a new volume.
pub fn volume_size(size_mb: Option<u64>) -> Result<u64, ValidationError> {
    let mb = size_mb.ok_or(ValidationError::Missing("sizeMb"))?;
    if !(MIN_VOLUME_MB..=MAX_VOLUME_MB).contains(&mb) {
        return Err(bad(
            "sizeMb",
            format!("must be {MIN_VOLUME_MB}-{MAX_VOLUME_MB} MiB"),
        ));
    }
    Ok(mb)
}

/// A mount path: absolute, normalised, not `/`, not on or under a [`RESERVED_MOUNT_DIRS`] entry.
pub fn mount_path(path: &str) -> Result<(), ValidationError> {
    const FIELD: &str = "volumes.path";
    if !path.starts_with('/') {
        return Err(bad(FIELD, format!("{path:?} must be an absolute path")));
    }
    if path == "/" {
        return Err(bad(FIELD, "a volume cannot be mounted on /"));
    }
    if path.len() > 1024 || path.contains('\0') {
        return Err(bad(FIELD, "must be at most 1024 bytes without NUL"));
    }
    if path.ends_with('/')
        || path[1..]
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return Err(bad(
            FIELD,
            format!(
                "{path:?} must be normalised: no trailing '/', no empty, '.' or '..' components"
            ),
        ));
    }
    if path.chars().any(|c| c.is_control()) {
        return Err(bad(FIELD, "must not contain control characters"));
    }
    for dir in RESERVED_MOUNT_DIRS {
        let under = path
            .strip_prefix(dir)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'));
        if under {
            return Err(bad(
                FIELD,
                format!("{path:?} is a system directory ({dir} and below are reserved)"),
            ));
        }
    }
    Ok(())
}

/// The mounts of a create request: each name and path valid, at most
/// [`MAX_MOUNTS`], no path twice and no path inside another (one would hide the other).
pub fn mounts(list: &[VolumeMount]) -> Result<(), ValidationError> {
    if list.len() > MAX_MOUNTS {
        return Err(bad(
            "volumes",
            format!("at most {MAX_MOUNTS} volumes per sandbox"),
        ));
    }
    for (i, m) in list.iter().enumerate() {
        crate::validate::name("volumes.name", &m.name)?;
        mount_path(&m.path)?;
        for other in &list[..i] {
            let nested = |a: &str, b: &str| {
                a.strip_prefix(b)
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
            };
            if nested(&m.path, &other.path) || nested(&other.path, &m.path) {
                return Err(bad(
                    "volumes.path",
                    format!("{:?} and {:?} overlap", other.path, m.path),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(name: &str, path: &str) -> VolumeMount {
        VolumeMount {
            name: name.into(),
            path: path.into(),
            read_only: false,
        }
    }

    #[test]
    fn mount_paths_must_be_absolute_normalised_and_outside_system_dirs() {
        for ok in [
            "/data",
            "/home/user/work",
            "/mnt/a",
            "/var/data",
            "/libfoo",
            "/procs",
        ] {
            mount_path(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        for bad in [
            "",
            "data",
            "/",
            "/data/",
            "/a//b",
            "/a/./b",
            "/a/../etc",
            "/proc",
            "/proc/1",
            "/sys",
            "/dev/shm",
            "/etc",
            "/usr/local",
            "/lib",
            "/lib64",
            "/bin",
            "/sbin",
            "/run",
            "/tmp",
            "/tmp/x",
            "/.sbx",
            "/a\nb",
        ] {
            assert!(mount_path(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn mount_lists_refuse_duplicates_overlaps_bad_names_and_too_many() {
        mounts(&[m("a", "/data"), m("b", "/data2")]).expect("distinct");
        assert!(mounts(&[m("a", "/data"), m("b", "/data")]).is_err());
        assert!(mounts(&[m("a", "/data"), m("b", "/data/sub")]).is_err());
        assert!(mounts(&[m("", "/data")]).is_err());
        let many: Vec<_> = (0..=MAX_MOUNTS)
            .map(|i| m("v", &format!("/m{i}")))
            .collect();
        assert!(mounts(&many).is_err());
    }

    #[test]
    fn sizes_are_bounded() {
        assert_eq!(volume_size(Some(64)).unwrap(), 64);
        assert!(volume_size(None).is_err());
        assert!(volume_size(Some(0)).is_err());
        assert!(volume_size(Some(MIN_VOLUME_MB - 1)).is_err());
        assert!(volume_size(Some(MAX_VOLUME_MB + 1)).is_err());
    }

    #[test]
    fn kinds_parse_and_serialise_in_lower_case() {
        let req: CreateVolumeRequest =
            serde_json::from_str(r#"{"name":"v","kind":"s3","sizeMb":64}"#).unwrap();
        assert_eq!(req.kind, Some(VolumeKind::S3));
        assert!(serde_json::from_str::<CreateVolumeRequest>(r#"{"kind":"nfs"}"#).is_err());
        assert_eq!(VolumeKind::parse("local"), Some(VolumeKind::Local));
    }
}
