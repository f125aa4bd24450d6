//! Templates (`/v1/templates`): an image booted, its start command run until
//! a ready check passes, then snapshotted, so that a create is a clone.

use crate::validate::ValidationError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Ready timeout when the request names none.
pub const DEFAULT_READY_TIMEOUT_SECS: u64 = 60;
/// Longest ready timeout.
pub const MAX_READY_TIMEOUT_SECS: u64 = 1800;

/// How a build knows the start command is serving.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ReadyCheck {
    /// A TCP connect to `127.0.0.1:port` inside the sandbox succeeds.
    Port {
        /// TCP port, 1–65535.
        port: u16,
    },
    /// A shell command (`sh -c`) exits 0 (polled).
    Command {
        /// The command.
        command: String,
    },
}

/// `POST /v1/templates`: a template's definition (also what it shows).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TemplateSpec {
    /// Name, unique in the tenant (image-name rules).
    pub name: String,
    /// The image (`name:tag`, `sha256:…` or `default`); absent: `default`.
    #[serde(default)]
    pub image: Option<String>,
    /// Shell command started in the background (`sh -c`, as the image's
    /// user, in its workdir, with its env and `environment`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_command: Option<String>,
    /// What makes the build ready; absent: ready once started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_check: Option<ReadyCheck>,
    /// How long the ready check may take (default 60 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_timeout_secs: Option<u64>,
    /// vCPUs of the build sandbox and its clones (default: the smallest shape).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vcpu: Option<u64>,
    /// Memory in MiB of the build sandbox and its clones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
    /// Environment over the image's (the clones keep it).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub environment: BTreeMap<String, String>,
    /// Egress policy of the build sandbox and its clones (absent: the server's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<crate::network::NetworkPolicy>,
}

impl TemplateSpec {
    /// Checks the name, the ready check and the timeout.
    pub fn validate(&self) -> Result<(), ValidationError> {
        validate_name(&self.name)?;
        match &self.ready_check {
            Some(ReadyCheck::Port { port: 0 }) => {
                return Err(ValidationError::Format {
                    field: "readyCheck",
                    reason: "port must be 1-65535".into(),
                })
            }
            Some(ReadyCheck::Command { command }) if command.trim().is_empty() => {
                return Err(ValidationError::Format {
                    field: "readyCheck",
                    reason: "command is empty".into(),
                })
            }
            _ => {}
        }
        if let Some(cmd) = &self.start_command {
            if cmd.trim().is_empty() {
                return Err(ValidationError::Format {
                    field: "startCommand",
                    reason: "empty".into(),
                });
            }
        }
        if let Some(t) = self.ready_timeout_secs {
            if t == 0 || t > MAX_READY_TIMEOUT_SECS {
                return Err(ValidationError::Format {
                    field: "readyTimeoutSecs",
                    reason: format!("1-{MAX_READY_TIMEOUT_SECS}"),
                });
            }
        }
        Ok(())
    }

    /// The ready timeout in effect.
    pub fn ready_timeout(&self) -> u64 {
        self.ready_timeout_secs
            .unwrap_or(DEFAULT_READY_TIMEOUT_SECS)
    }
}

/// Checks a template name (the rules of image names: 1–128 of `[a-z0-9._-]`).
pub fn validate_name(name: &str) -> Result<(), ValidationError> {
    if crate::images::valid_part(name) {
        Ok(())
    } else {
        Err(ValidationError::Format {
            field: "name",
            reason: format!(
                "{name:?} is not a template name (1-{} of lowercase letters, digits, '.', '_', '-')",
                crate::images::MAX_NAME_CHARS
            ),
        })
    }
}

/// State of a template's latest build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TemplateStatus {
    /// A build is running (a rebuild keeps serving the previous snapshot).
    Building,
    /// The latest build's snapshot serves creates.
    Ready,
    /// The latest build failed (`error` says why).
    Failed,
}

impl TemplateStatus {
    /// The stored form.
    pub fn as_str(self) -> &'static str {
        match self {
            TemplateStatus::Building => "BUILDING",
            TemplateStatus::Ready => "READY",
            TemplateStatus::Failed => "FAILED",
        }
    }

    /// Parses the stored form.
    pub fn parse(s: &str) -> Option<TemplateStatus> {
        Some(match s {
            "BUILDING" => TemplateStatus::Building,
            "READY" => TemplateStatus::Ready,
            "FAILED" => TemplateStatus::Failed,
            _ => return None,
        })
    }
}

/// A template as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Template {
    /// Its definition.
    #[serde(flatten)]
    pub spec: TemplateSpec,
    /// State of the latest build.
    pub status: TemplateStatus,
    /// Why the latest build failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The image the serving snapshot runs (`name:tag@sha256:…` or `default`).
    pub image_ref: String,
    /// The snapshot creates clone; present once a build succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_id: Option<uuid::Uuid>,
    /// Whether a create from it works now (it has a snapshot).
    pub creatable: bool,
    /// Creation time (RFC 3339).
    pub created_at: String,
    /// Last change (RFC 3339).
    pub updated_at: String,
}

/// `GET /v1/templates`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TemplateList {
    /// The tenant's templates by name.
    pub templates: Vec<Template>,
}
