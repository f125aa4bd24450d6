//! Who may reach a `/v1` sandbox's preview URLs (`{port}-{id}.{domain}`):
//! its owner turns them on at create or later, public or behind a token.
//! (E2B sandboxes keep theirs in their E2B record, as E2B's API sets them.)

use uuid::Uuid;

/// A sandbox's preview-URL access, one row per sandbox that has any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreviewRecord {
    /// The sandbox.
    pub sandbox_id: Uuid,
    /// Its tenant scope (`workspace/env`).
    pub workspace: String,
    /// Requests need the token (`None`: anyone who knows the URL may call).
    pub token: Option<String>,
}

/// The columns of the `sandbox_previews` table, in the order both backends read them.
pub(crate) const PREVIEW_COLUMNS: &str = "id, workspace, token";
