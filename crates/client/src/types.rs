//! Client-side views of responses: decoded bytes, and shapes not (yet) in `sbx-api-types`.

use crate::ClientError;
use base64::Engine;
use sbx_api_types::{OutputStream, ProcessState, Resources};
use serde::{Deserialize, Deserializer, Serialize};
use uuid::Uuid;

/// A captured command result with its output decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOutput {
    /// Raw stdout bytes.
    pub stdout: Vec<u8>,
    /// Raw stderr bytes.
    pub stderr: Vec<u8>,
    /// The command's exit code.
    pub exit_code: i32,
}

/// A run of process or console output, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// Which stream the bytes came from.
    pub stream: OutputStream,
    /// The bytes.
    pub data: Vec<u8>,
    /// When the bytes were read.
    pub at: Option<String>,
    /// sbx extra: byte offset of the chunk in the process's combined output.
    pub offset: Option<u64>,
}

impl Chunk {
    /// The offset just past this chunk: what to pass as `fromOffset` to resume after it.
    pub fn end_offset(&self) -> Option<u64> {
        self.offset.map(|o| o + self.data.len() as u64)
    }
}

/// The chunk shape on the wire (lenient: absent `data` means empty).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WireChunk {
    pub stream: OutputStream,
    #[serde(default)]
    pub data: Option<String>,
    #[serde(default)]
    pub encoding: Option<String>,
    #[serde(default)]
    pub at: Option<String>,
    #[serde(default)]
    pub offset: Option<u64>,
}

impl WireChunk {
    pub(crate) fn decode(self) -> Result<Chunk, ClientError> {
        if let Some(enc) = self.encoding.as_deref() {
            if enc != "base64" {
                return Err(ClientError::Decode(format!(
                    "unsupported chunk encoding {enc:?}"
                )));
            }
        }
        Ok(Chunk {
            stream: self.stream,
            data: decode_b64(self.data.as_deref().unwrap_or(""), "chunk data")?,
            at: self.at,
            offset: self.offset,
        })
    }
}

/// Decodes padded standard base64.
pub(crate) fn decode_b64(s: &str, what: &str) -> Result<Vec<u8>, ClientError> {
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .map_err(|e| ClientError::Decode(format!("{what}: invalid base64: {e}")))
}

/// `data` of the process wait endpoint: a terminal state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WaitResult {
    /// Process id.
    pub id: Uuid,
    /// Terminal state: EXITED, KILLED, FAILED or LOST.
    pub state: ProcessState,
    /// Present iff EXITED.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Present iff KILLED.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_signal: Option<i32>,
    /// Guest pid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<i32>,
    /// Start time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// End time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<String>,
}

/// Snapshot states (§4): the server's own type.
pub use sbx_api_types::SnapshotStatus;

/// A snapshot (§3.6).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    /// Snapshot id.
    pub id: Uuid,
    /// Name; `None` (or `""` on the wire) means unnamed.
    #[serde(default, deserialize_with = "empty_as_none")]
    pub name: Option<String>,
    /// Image identity (64 hex when READY).
    #[serde(default)]
    pub source_image_id: String,
    /// State.
    pub status: SnapshotStatus,
    /// Required when READY.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compatibility_id: Option<String>,
    /// Shape of clones.
    pub resources: Resources,
    /// Informational.
    #[serde(default)]
    pub memory_pack_count: u32,
    /// Informational.
    #[serde(default)]
    pub disk_pack_count: u32,
    /// Bytes stored (a number or a decimal string on the wire).
    #[serde(default, deserialize_with = "number_or_string")]
    pub stored_bytes: u64,
    /// Creation time.
    pub created_at: String,
    /// Last change.
    #[serde(default)]
    pub updated_at: String,
    /// When the server will delete it.
    #[serde(default)]
    pub expires_at: String,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// sbx extra: the sandbox the snapshot was taken from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_sandbox_id: Option<Uuid>,
}

/// A workspace secret as listed (values are never returned).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecretInfo {
    /// Secret name (also the environment variable it becomes).
    pub name: String,
    /// Creation time.
    #[serde(default)]
    pub created_at: Option<String>,
    /// Last update.
    #[serde(default)]
    pub updated_at: Option<String>,
}

fn empty_as_none<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(Option::<String>::deserialize(d)?.filter(|s| !s.is_empty()))
}

fn number_or_string<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum NumOrStr {
        Num(u64),
        Str(String),
    }
    match NumOrStr::deserialize(d)? {
        NumOrStr::Num(n) => Ok(n),
        NumOrStr::Str(s) => s.parse().map_err(serde::de::Error::custom),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_accepts_string_sizes_and_empty_names() {
        let s: Snapshot = serde_json::from_value(serde_json::json!({
            "id": "9f6c1a52-3a5b-4f7c-9a0e-0d6a3c1d2e3f",
            "name": "",
            "sourceImageId": "ab",
            "status": "READY",
            "compatibilityId": "linux-amd64-v1",
            "resources": {"vcpu": 2, "memoryMb": 2048},
            "storedBytes": "1048576",
            "createdAt": "2026-07-30T12:00:00Z",
            "updatedAt": "2026-07-30T12:00:00Z",
            "expiresAt": "2026-08-06T12:00:00Z"
        }))
        .unwrap();
        assert_eq!(s.name, None);
        assert_eq!(s.stored_bytes, 1_048_576);
        assert_eq!(s.status, SnapshotStatus::Ready);
    }

    #[test]
    fn chunk_end_offset_is_offset_plus_length() {
        let c = Chunk {
            stream: OutputStream::Stdout,
            data: b"hello".to_vec(),
            at: None,
            offset: Some(10),
        };
        assert_eq!(c.end_offset(), Some(15));
        assert_eq!(Chunk { offset: None, ..c }.end_offset(), None);
    }
}
