//! Custom images (`/v1/images`): immutable root filesystems named by content
//! digest, with per-tenant `name:tag` names.

use crate::validate::ValidationError;
use serde::{Deserialize, Serialize};

/// The image every node has and nobody can delete.
pub const DEFAULT_IMAGE: &str = "default";
/// Longest image name or tag.
pub const MAX_NAME_CHARS: usize = 128;

/// What a sandbox names as its image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageRef {
    /// The node's default image.
    Default,
    /// A tenant's `name:tag` (tag `latest` when left out).
    Named {
        /// Name.
        name: String,
        /// Tag.
        tag: String,
    },
    /// `sha256:` and 64 lowercase hex digits.
    Digest(String),
}

fn bad(reason: String) -> ValidationError {
    ValidationError::Format {
        field: "image",
        reason,
    }
}

/// Whether `part` is a valid image name or tag: 1–128 of `[a-z0-9._-]`,
/// starting with a letter or digit (no `/`: a name is one URL path segment).
pub(crate) fn valid_part(part: &str) -> bool {
    !part.is_empty()
        && part.len() <= MAX_NAME_CHARS
        && part
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && part.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
        })
        && !part.contains("..")
}

/// Whether `digest` is `sha256:` and 64 lowercase hex digits.
pub fn is_digest(digest: &str) -> bool {
    digest.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

impl ImageRef {
    /// Parses `default`, `sha256:<hex>`, `name` or `name:tag`.
    pub fn parse(raw: &str) -> Result<ImageRef, ValidationError> {
        if raw == DEFAULT_IMAGE || raw == "default:latest" {
            return Ok(ImageRef::Default);
        }
        if raw.starts_with("sha256:") {
            return if is_digest(raw) {
                Ok(ImageRef::Digest(raw.to_string()))
            } else {
                Err(bad(format!(
                    "{raw:?} is not a digest (sha256: and 64 lowercase hex digits)"
                )))
            };
        }
        let (name, tag) = raw.rsplit_once(':').unwrap_or((raw, "latest"));
        if !valid_part(name) || !valid_part(tag) {
            return Err(bad(format!(
                "{raw:?} is not name:tag (lowercase letters, digits, '.', '_', '-'; at most {MAX_NAME_CHARS} each)"
            )));
        }
        Ok(ImageRef::Named {
            name: name.to_string(),
            tag: tag.to_string(),
        })
    }

    /// Parses the target of a tag: a new `name:tag`, or `default` (the
    /// tenant's default image; only with the tag `latest`).
    pub fn parse_tag_target(raw: &str) -> Result<(String, String), ValidationError> {
        match ImageRef::parse(raw)? {
            ImageRef::Default => Ok((DEFAULT_IMAGE.to_string(), "latest".to_string())),
            ImageRef::Named { name, tag } if name != DEFAULT_IMAGE => Ok((name, tag)),
            _ => Err(bad(format!(
                "{raw:?} cannot name an image: use name:tag, or default (tag latest)"
            ))),
        }
    }

    /// Parses a `name:tag` that names a new image (not `default`, not a digest).
    pub fn parse_new_name(raw: &str) -> Result<(String, String), ValidationError> {
        match ImageRef::parse(raw)? {
            ImageRef::Named { name, tag } if name != DEFAULT_IMAGE => Ok((name, tag)),
            _ => Err(bad(format!(
                "{raw:?} cannot name a new image: use name:tag (not default, not a digest)"
            ))),
        }
    }
}

/// An image's process defaults, from its OCI config (`Env`, `WorkingDir`,
/// `User`, `Entrypoint`, `Cmd`). Sandboxes take `env` as their base
/// environment and `workdir` as the working directory of commands that name none.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ImageConfig {
    /// `KEY=value` entries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// Working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    /// User that exec and process commands naming none run as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Entrypoint (kept as metadata).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<Vec<String>>,
    /// Command (kept as metadata).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cmd: Option<Vec<String>>,
    /// Labels (a Dockerfile's `LABEL`; metadata).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: std::collections::BTreeMap<String, String>,
    /// Ports a Dockerfile's `EXPOSE` named, as written (`8000`, `53/udp`; metadata).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exposed_ports: Vec<String>,
}

/// An image as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Image {
    /// Name.
    pub name: String,
    /// Tag.
    pub tag: String,
    /// `sha256:` content digest.
    pub digest: String,
    /// Bytes of the flattened root filesystem.
    pub size_bytes: u64,
    /// `import`, `sandbox` or `default`.
    pub origin: String,
    /// Process defaults.
    pub config: ImageConfig,
    /// The node that imported or made the image.
    pub node_id: String,
    /// When the name was pointed at the digest.
    pub created_at: String,
}

/// `GET /v1/images`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ImageList {
    /// The tenant's images by name and tag (the default image first).
    pub images: Vec<Image>,
    /// Bytes the tenant's images take: each distinct digest it names once.
    #[serde(default)]
    pub usage_bytes: u64,
    /// The tenant's image storage quota in bytes (0: no quota).
    #[serde(default)]
    pub quota_bytes: u64,
}

/// `POST /v1/images/{ref}/tag`: another name for the same content.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImageTagRequest {
    /// The new name (`default` makes the image the tenant's default).
    pub name: Option<String>,
    /// Tag (default `latest`; `default` takes no other).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
}

/// `POST /v1/sandboxes/{id}/image`.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImageFromSandboxRequest {
    /// Name of the new image.
    pub name: Option<String>,
    /// Tag (default `latest`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_parse_or_are_refused() {
        assert_eq!(ImageRef::parse("default").unwrap(), ImageRef::Default);
        assert_eq!(
            ImageRef::parse("py-tools:1.2").unwrap(),
            ImageRef::Named {
                name: "py-tools".into(),
                tag: "1.2".into()
            }
        );
        assert_eq!(
            ImageRef::parse("py").unwrap(),
            ImageRef::Named {
                name: "py".into(),
                tag: "latest".into()
            }
        );
        let d = format!("sha256:{}", "ab".repeat(32));
        assert_eq!(ImageRef::parse(&d).unwrap(), ImageRef::Digest(d.clone()));
        for bad in [
            "",
            "Py:1",
            "py:",
            ":1",
            "../x:1",
            "a/../b",
            "py:1/2",
            "sha256:zz",
            "/abs",
            "a//b",
        ] {
            assert!(ImageRef::parse(bad).is_err(), "{bad:?}");
        }
        assert!(ImageRef::parse_new_name("default").is_err());
        assert!(ImageRef::parse_new_name(&d).is_err());
    }
}

/// One line of a build's NDJSON log (`POST /v1/images/build`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum BuildEvent {
    /// A step starts (or is served from the cache).
    Step {
        /// 1-based step number.
        step: usize,
        /// Number of steps.
        of: usize,
        /// Its line in the Dockerfile.
        line: usize,
        /// The instruction, variables substituted.
        instruction: String,
        /// Served from the layer cache: nothing ran.
        cached: bool,
    },
    /// Output of a step's command.
    Output {
        /// The step.
        step: usize,
        /// `stdout` or `stderr`.
        stream: String,
        /// The bytes (lossy UTF-8).
        data: String,
    },
    /// The build succeeded: the named image.
    Result {
        /// The image.
        image: Box<Image>,
    },
    /// The build failed; nothing was stored.
    Error {
        /// Stable code (`build_failed` for a failing step, else an API error code).
        code: String,
        /// What happened.
        message: String,
        /// The Dockerfile line, when a step failed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        line: Option<usize>,
        /// The failing RUN's exit code.
        #[serde(default, rename = "exitCode", skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
        /// The last output of the failing step.
        #[serde(
            default,
            rename = "outputTail",
            skip_serializing_if = "Option::is_none"
        )]
        output_tail: Option<String>,
    },
}
