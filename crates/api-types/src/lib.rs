//! Wire types of the sbx HTTP API and the validation rules shared by server and clients.
//!
//! The `/v2` shapes follow `inngest-sandboxes-v2.md` (what the `inngest` SDK accepts);
//! `/v1` holds sbx extras.

pub mod errors;
pub mod images;
pub mod network;
pub mod nodes;
pub mod preview;
pub mod requests;
pub mod resources;
pub mod signing_key;
pub mod templates;
pub mod usage;
pub mod validate;
pub mod volumes;

pub use errors::{ErrorBody, ErrorCode, ErrorItem};
pub use images::{
    BuildEvent, Image, ImageConfig, ImageFromSandboxRequest, ImageList, ImageRef, ImageTagRequest,
};
pub use network::{AllowRule, NetworkDenial, NetworkMode, NetworkPolicy, NetworkStatus};
pub use nodes::{Node, NodeCapacity, NodeState};
pub use preview::{PreviewRequest, SandboxPreview, PREVIEW_TOKEN_HEADER};
pub use requests::*;
pub use resources::*;
pub use templates::{ReadyCheck, Template, TemplateList, TemplateSpec, TemplateStatus};
pub use usage::{SandboxMetrics, UsageSample};
pub use volumes::{CreateVolumeRequest, Volume, VolumeKind, VolumeList, VolumeMount};

/// Formats a timestamp the way the SDK accepts it (RFC 3339, `Z`, milliseconds).
pub fn format_time(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Formats milliseconds since the epoch as an SDK timestamp.
pub fn format_unix_ms(ms: u64) -> String {
    let t = chrono::DateTime::<chrono::Utc>::from_timestamp_millis(ms as i64).unwrap_or_default();
    format_time(t)
}
