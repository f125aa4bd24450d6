//! E2B rows: what the E2B API adds to a sandbox, kept beside its sandbox row so
//! that every node of a cluster sees the same template, metadata, end time and
//! access tokens.
//!
//! The end time and auto-pause change by compare-and-set on `generation`
//! ([`crate::Store::update_e2b_record`]): of two writers that read the same row
//! (two nodes extending a timeout, or the timeout sweep claiming an expiry while
//! a `connect` extends it) exactly one succeeds, and the other reads again.

use chrono::{DateTime, Utc};
use std::collections::BTreeMap;
use uuid::Uuid;

/// The E2B fields of one sandbox.
#[derive(Debug, Clone, PartialEq)]
pub struct E2bRecord {
    /// The sandbox (same id in every API).
    pub sandbox_id: Uuid,
    /// Its tenant scope (`workspace/env`).
    pub workspace: String,
    /// The template id the caller asked for (`base`, an alias, or a snapshot id).
    pub template_id: String,
    /// Caller metadata, filterable in list.
    pub metadata: BTreeMap<String, String>,
    /// When the E2B timeout ends the sandbox (destroys it, or pauses it with `auto_pause`).
    pub end_at: DateTime<Utc>,
    /// Pause instead of destroy at `end_at`.
    pub auto_pause: bool,
    /// The token envd requests carry (`X-Access-Token`).
    pub envd_access_token: String,
    /// Whether the sandbox may reach the internet (as created).
    pub allow_internet_access: bool,
    /// Whether preview URLs of the sandbox accept requests without the traffic token.
    pub allow_public_traffic: bool,
    /// The token preview-URL requests carry when public traffic is not allowed.
    pub traffic_access_token: Option<String>,
    /// Compare-and-set version: 0 when inserted, bumped by every update.
    pub generation: u64,
}

/// The columns of the `e2b_sandboxes` table, in the order both backends read them.
pub(crate) const E2B_COLUMNS: &str = "id, workspace, template_id, metadata, end_at_ms, \
     auto_pause, envd_access_token, allow_internet_access, allow_public_traffic, \
     traffic_access_token, generation";

/// Whether `record`'s metadata holds every pair of `filter` (the E2B list filter).
pub(crate) fn metadata_matches(record: &E2bRecord, filter: &BTreeMap<String, String>) -> bool {
    filter
        .iter()
        .all(|(k, v)| record.metadata.get(k).is_some_and(|have| have == v))
}
