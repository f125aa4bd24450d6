//! Preview URLs of `/v1` sandboxes: `{port}-{sandboxId}.{domain}` reaches the
//! server listening on that port inside the sandbox (see docs/e2b.md).

use serde::{Deserialize, Serialize};

/// The header a restricted sandbox's preview requests carry its token in.
pub const PREVIEW_TOKEN_HEADER: &str = "e2b-traffic-access-token";

/// `PUT /v1/sandboxes/{id}/preview` (and `preview` at create): turns the
/// sandbox's preview URLs on.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PreviewRequest {
    /// Anyone who knows the URL may call; otherwise requests need the token.
    #[serde(default)]
    pub public: bool,
}

/// `GET /v1/sandboxes/{id}/preview`: whether and how the sandbox's preview
/// URLs answer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SandboxPreview {
    /// Preview URLs answer (while the sandbox runs).
    pub enabled: bool,
    /// No token needed.
    pub public: bool,
    /// The token requests must carry (restricted previews only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// The header that carries the token.
    pub token_header: String,
    /// The domain sbxd serves preview URLs under (`--e2b-domain`); without
    /// one, preview URLs cannot be reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// `{port}-{sandboxId}.{domain}` for the port asked for (`?port=`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}
