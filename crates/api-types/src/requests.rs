//! Request bodies. Unknown fields are rejected (`invalid_request`).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use uuid::Uuid;

/// `snapshotId` in a body: absent or `null`, or a canonical id
/// ([`crate::validate::canonical_id`]); the `uuid` crate alone would also
/// take upper case and other spellings.
fn canonical_snapshot_id<'de, D>(deserializer: D) -> Result<Option<Uuid>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    match Option::<String>::deserialize(deserializer)? {
        None => Ok(None),
        Some(raw) => crate::validate::canonical_id("snapshotId", &raw)
            .map(Some)
            .map_err(serde::de::Error::custom),
    }
}

/// `POST /v2/sandboxes`: a fresh sandbox or a clone (`snapshotId`).
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateSandboxRequest {
    /// Sandbox name (idempotency key while active).
    pub name: Option<String>,
    /// vCPUs (fresh sandboxes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vcpu: Option<u64>,
    /// Memory in MiB (fresh sandboxes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
    /// Base environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<BTreeMap<String, String>>,
    /// Names of workspace secrets to inject.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secrets: Option<Vec<String>>,
    /// Clone source (a canonical lower-case UUID).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "canonical_snapshot_id"
    )]
    pub snapshot_id: Option<Uuid>,
}

/// `POST /v2/sandboxes/{id}/exec`.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExecRequest {
    /// argv (1–128 items).
    pub command: Option<Vec<String>>,
    /// Per-command environment, merged over the sandbox's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<BTreeMap<String, String>>,
    /// Working directory; `""` means the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// `"<n>ms"`, 1–300000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
}

/// `POST /v2/sandboxes/{id}/processes`.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProcessStartRequest {
    /// argv (1–128 items).
    pub command: Option<Vec<String>>,
    /// Per-process environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<BTreeMap<String, String>>,
    /// Working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
}

/// `POST /v2/sandboxes/{id}/processes/{pid}/signals`.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SignalRequest {
    /// Signal number 1–64.
    pub signal: Option<i64>,
    /// Signal the whole process group (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_children: Option<bool>,
}

/// `POST /v2/sandboxes/{id}/snapshots`.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SnapshotCreateRequest {
    /// Optional snapshot name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// `POST /v1/sandboxes`: the v2 create body plus an egress policy.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateSandboxV1Request {
    /// Sandbox name (idempotency key while active).
    pub name: Option<String>,
    /// vCPUs (fresh sandboxes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vcpu: Option<u64>,
    /// Memory in MiB (fresh sandboxes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
    /// Base environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<BTreeMap<String, String>>,
    /// Names of workspace secrets to inject.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secrets: Option<Vec<String>>,
    /// Clone source (a clone keeps its source's network policy).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "canonical_snapshot_id"
    )]
    pub snapshot_id: Option<Uuid>,
    /// Egress policy; absent means the server's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<crate::network::NetworkPolicy>,
    /// Placement constraint: only nodes whose labels (`--node-label`) hold
    /// every pair may run the sandbox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    /// Preview URLs on from the start (see `PUT /v1/sandboxes/{id}/preview`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview: Option<crate::preview::PreviewRequest>,
    /// Volumes to mount (fresh sandboxes; a clone mounts its source's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<crate::volumes::VolumeMount>,
    /// Image to boot (`name:tag` or `sha256:…` of the caller's tenant; fresh
    /// sandboxes; absent: `default`; a clone runs its snapshot's image).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Template to clone (a READY template of the caller's tenant; not with
    /// `image`, `snapshotId`, resources, environment, secrets or network).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
}

impl CreateSandboxV1Request {
    /// Splits into the v2 body, the policy, the preview request, the mounts, the image and the template.
    #[allow(clippy::type_complexity)]
    pub fn split(
        self,
    ) -> (
        CreateSandboxRequest,
        Option<crate::network::NetworkPolicy>,
        Option<crate::preview::PreviewRequest>,
        Vec<crate::volumes::VolumeMount>,
        Option<String>,
        Option<String>,
    ) {
        (
            CreateSandboxRequest {
                name: self.name,
                vcpu: self.vcpu,
                memory_mb: self.memory_mb,
                environment: self.environment,
                secrets: self.secrets,
                snapshot_id: self.snapshot_id,
            },
            self.network,
            self.preview,
            self.volumes,
            self.image,
            self.template,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_id_in_a_body_must_be_canonical() {
        let id = "0f8fad5b-d9cb-469f-a165-70867728950e";
        let ok: CreateSandboxRequest =
            serde_json::from_str(&format!(r#"{{"name":"c","snapshotId":"{id}"}}"#))
                .expect("canonical id");
        assert_eq!(ok.snapshot_id.map(|u| u.to_string()).as_deref(), Some(id));
        let none: CreateSandboxRequest =
            serde_json::from_str(r#"{"name":"c","snapshotId":null}"#).expect("null");
        assert_eq!(none.snapshot_id, None);
        let absent: CreateSandboxV1Request =
            serde_json::from_str(r#"{"name":"c"}"#).expect("absent");
        assert_eq!(absent.snapshot_id, None);
        for raw in [id.to_uppercase(), id.replace('-', ""), format!("{{{id}}}")] {
            let body = format!(r#"{{"name":"c","snapshotId":"{raw}"}}"#);
            let v2 = serde_json::from_str::<CreateSandboxRequest>(&body).expect_err(&raw);
            assert!(v2.to_string().contains("snapshotId"), "{v2}");
            let v1 = serde_json::from_str::<CreateSandboxV1Request>(&body).expect_err(&raw);
            assert!(v1.to_string().contains("lowercase UUID"), "{v1}");
        }
    }
}
