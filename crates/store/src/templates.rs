//! Templates: an image booted, started and snapshotted (issue 17).

use chrono::{DateTime, Utc};
use uuid::Uuid;

/// One tenant's template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateRecord {
    /// Its tenant scope (`workspace/env`).
    pub workspace: String,
    /// Name, unique in the tenant.
    pub name: String,
    /// The definition (image, start command, ready check, shape) as JSON; the store does not read it.
    pub spec: String,
    /// State of the latest build: `BUILDING`, `READY` or `FAILED`.
    pub status: String,
    /// Why the latest build failed.
    pub error: Option<String>,
    /// The image the serving snapshot runs (`default`, `name:tag@sha256:…`); the spec's ref before the first build.
    pub image_ref: String,
    /// The READY snapshot creates clone (kept while a rebuild runs).
    pub snapshot_id: Option<Uuid>,
    /// Bumped by every write; an update applies only to the generation it read.
    pub generation: i64,
    /// When the template was made.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
}

/// The columns of the `templates` table, in the order both backends read them.
pub(crate) const TEMPLATE_COLUMNS: &str = "workspace, name, spec, status, error, image_ref, \
     snapshot_id, generation, created_at_ms, updated_at_ms";

/// A row's snapshot id column as stored.
pub(crate) fn snapshot_text(r: &TemplateRecord) -> Option<String> {
    r.snapshot_id.map(|id| id.to_string())
}

/// A row's snapshot id, creation and update times.
pub(crate) type Parts = (Option<Uuid>, DateTime<Utc>, DateTime<Utc>);

/// Parses the stored snapshot id and times (shared by both backends).
pub(crate) fn parts(
    snapshot: Option<String>,
    created_ms: i64,
    updated_ms: i64,
) -> Result<Parts, String> {
    let snapshot_id = snapshot
        .map(|s| Uuid::parse_str(&s).map_err(|e| format!("template snapshot_id {s:?}: {e}")))
        .transpose()?;
    let at =
        |ms: i64| DateTime::from_timestamp_millis(ms).ok_or_else(|| format!("template time {ms}"));
    Ok((snapshot_id, at(created_ms)?, at(updated_ms)?))
}
