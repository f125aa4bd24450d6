//! Wire format of the job protocol (docs/connect/job-protocol.md): NDJSON lines both ways.

use crate::broker::{FetchReply, HttpAnswer};
use crate::limits::{OutputLimits, RetryPolicy};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;
use std::collections::BTreeMap;
use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// Longest line either side may send.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// A runner → host message. One flat struct (rather than a tagged enum) so that records and
/// checkpoints stay raw JSON text: they go to the spool without being re-serialized.
#[derive(Debug, Deserialize)]
pub struct Incoming {
    /// Message type.
    pub t: String,
    /// `hello`: protocol version.
    pub v: Option<u64>,
    /// `fetch`: request id.
    pub id: Option<u64>,
    /// `fetch`: method.
    pub method: Option<String>,
    /// `fetch`: URL or path.
    pub url: Option<String>,
    /// `fetch`: headers.
    pub headers: Option<BTreeMap<String, String>>,
    /// `fetch`: base64 body.
    pub body: Option<String>,
    /// `log`: level.
    pub level: Option<String>,
    /// `log`: text.
    pub message: Option<String>,
    /// `records`: the batch.
    pub records: Option<Vec<Box<RawValue>>>,
    /// `checkpoint`: the checkpoint.
    pub checkpoint: Option<Box<RawValue>>,
    /// `done`: the result.
    pub result: Option<Value>,
    /// `fail`: package or platform.
    pub category: Option<String>,
    /// `fail`: short machine word.
    pub kind: Option<String>,
}

/// The `job` message.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JobMessage<'a> {
    /// Always `job`.
    pub t: &'static str,
    /// describe | verify | oauth | sync | webhook.
    pub kind: &'static str,
    /// Entry module path.
    pub entry: &'a str,
    /// Validated config.
    pub config: &'a Value,
    /// Sync name.
    pub sync: Option<&'a str>,
    /// Last committed checkpoint.
    pub checkpoint: Option<&'a Value>,
    /// OAuth hook.
    pub oauth_step: Option<&'a str>,
    /// The delivery of a webhook job.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delivery: Option<&'a Value>,
    /// Milliseconds until the host kills the job.
    pub deadline_ms: u64,
    /// Output limits.
    pub limits: OutputLimits,
    /// Fetch retry policy.
    pub retry: RetryPolicy,
}

/// Serializes one line (with the trailing newline).
pub fn line<T: Serialize>(msg: &T) -> Vec<u8> {
    // Serializing our own structs and `json!` values cannot fail.
    let mut out = serde_json::to_vec(msg).unwrap_or_default();
    out.push(b'\n');
    out
}

/// The `fetch_result` / `fetch_error` line for a broker reply.
pub fn fetch_reply_line(id: u64, reply: &FetchReply) -> Vec<u8> {
    match reply {
        FetchReply::Response(HttpAnswer {
            status,
            headers,
            body,
        }) => line(&serde_json::json!({
            "t": "fetch_result",
            "id": id,
            "status": status,
            "headers": headers,
            "body": STANDARD.encode(body),
        })),
        FetchReply::Error { code, retryable } => line(&serde_json::json!({
            "t": "fetch_error",
            "id": id,
            "code": code,
            "retryable": retryable,
        })),
    }
}

/// The `abort` line.
pub fn abort_line(reason: &str) -> Vec<u8> {
    line(&serde_json::json!({"t": "abort", "reason": reason}))
}

/// Result of reading one line.
#[derive(Debug, PartialEq, Eq)]
pub enum ReadLine {
    /// A full line is in the buffer (without the newline).
    Line,
    /// The channel closed (a partial last line is dropped).
    Eof,
    /// The line is longer than allowed.
    TooLong,
}

/// Reads one line into `buf` (cleared first by the caller). Cancel-safe: the only await is
/// `fill_buf`, and bytes are moved into `buf` before the next await, so a cancelled call can be
/// repeated with the same `buf`.
pub async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<ReadLine> {
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(ReadLine::Eof);
        }
        let (chunk, found) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (&available[..i], Some(i + 1)),
            None => (available, None),
        };
        if buf.len() + chunk.len() > max {
            return Ok(ReadLine::TooLong);
        }
        buf.extend_from_slice(chunk);
        match found {
            Some(n) => {
                reader.consume(n);
                return Ok(ReadLine::Line);
            }
            None => {
                let n = chunk.len();
                reader.consume(n);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::BufReader;

    #[tokio::test]
    async fn reads_lines_and_bounds_them() {
        let data: &[u8] = b"{\"t\":\"hello\"}\nabcdefghij\npartial";
        let mut r = BufReader::with_capacity(4, data);
        let mut buf = Vec::new();
        assert_eq!(
            read_line(&mut r, &mut buf, 100).await.ok(),
            Some(ReadLine::Line)
        );
        assert_eq!(buf, b"{\"t\":\"hello\"}");
        buf.clear();
        assert_eq!(
            read_line(&mut r, &mut buf, 5).await.ok(),
            Some(ReadLine::TooLong)
        );
        let mut r = BufReader::new(&b"x\n"[..]);
        buf.clear();
        assert_eq!(
            read_line(&mut r, &mut buf, 5).await.ok(),
            Some(ReadLine::Line)
        );
        buf.clear();
        assert_eq!(
            read_line(&mut r, &mut buf, 5).await.ok(),
            Some(ReadLine::Eof)
        );
    }

    #[test]
    fn incoming_keeps_records_raw() {
        let m: Incoming =
            serde_json::from_str(r#"{"t":"records","records":[{"a": 1},{"b":[2]}],"extra":true}"#)
                .expect("parse");
        let recs = m.records.expect("records");
        assert_eq!(recs[0].get(), r#"{"a": 1}"#);
        assert_eq!(recs[1].get(), r#"{"b":[2]}"#);
    }
}
