//! NDJSON output streams (§6): one frame per line, `log` frames carry chunks and a
//! terminal `error` frame ends the stream with an error.

use crate::types::WireChunk;
use crate::{Chunk, ClientError};
use bytes::Bytes;
use futures::stream::{self, BoxStream, Stream, StreamExt};
use sbx_api_types::ErrorItem;
use serde::Deserialize;
use std::collections::VecDeque;

/// A stream of decoded output chunks; ends at EOF, or after the first error.
pub type ChunkStream = BoxStream<'static, Result<Chunk, ClientError>>;

/// Longest line accepted before the stream is declared broken.
const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// Splits a byte stream into lines. Lines are returned without their terminator.
#[derive(Debug, Default)]
pub struct LineDecoder {
    buf: Vec<u8>,
}

impl LineDecoder {
    /// Adds bytes; returns the lines they complete.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<Vec<u8>> {
        let mut lines = Vec::new();
        let mut rest = bytes;
        while let Some(pos) = rest.iter().position(|b| *b == b'\n') {
            let mut line = std::mem::take(&mut self.buf);
            line.extend_from_slice(&rest[..pos]);
            lines.push(line);
            rest = &rest[pos + 1..];
        }
        self.buf.extend_from_slice(rest);
        lines
    }

    /// Bytes held for an unfinished line.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// The final line when the input ends without a newline.
    pub fn finish(&mut self) -> Option<Vec<u8>> {
        let line = std::mem::take(&mut self.buf);
        (!line.is_empty()).then_some(line)
    }
}

#[derive(Deserialize)]
struct Frame {
    #[serde(rename = "type")]
    kind: Option<String>,
    error: Option<ErrorItem>,
    errors: Option<Vec<ErrorItem>>,
}

/// Parses one line. Blank lines (keep-alives) give `Ok(None)`; an error frame gives
/// `Err(ClientError::Api)` with the stream's status and request id.
pub fn parse_frame(
    line: &[u8],
    status: u16,
    request_id: Option<&str>,
) -> Result<Option<Chunk>, ClientError> {
    let line = line.trim_ascii();
    if line.is_empty() {
        return Ok(None);
    }
    let value: serde_json::Value = serde_json::from_slice(line)
        .map_err(|e| ClientError::Decode(format!("invalid stream frame: {e}")))?;
    let frame: Frame = serde_json::from_value(value.clone())
        .map_err(|e| ClientError::Decode(format!("invalid stream frame: {e}")))?;
    match frame.kind.as_deref() {
        Some("log") => {
            let chunk: WireChunk = serde_json::from_value(value)
                .map_err(|e| ClientError::Decode(format!("invalid log frame: {e}")))?;
            chunk.decode().map(Some)
        }
        Some("error") => {
            let item = frame
                .error
                .or_else(|| frame.errors.and_then(|e| e.into_iter().next()))
                .ok_or_else(|| ClientError::Decode("error frame without an error".into()))?;
            Err(ClientError::Api {
                status,
                code: item.code,
                message: item.message,
                request_id: request_id.map(str::to_string),
            })
        }
        other => Err(ClientError::Decode(format!(
            "invalid stream frame type {other:?}"
        ))),
    }
}

struct State<S> {
    body: S,
    decoder: LineDecoder,
    lines: VecDeque<Vec<u8>>,
    body_done: bool,
    failed: bool,
    status: u16,
    request_id: Option<String>,
}

/// Decodes an NDJSON body into chunks. The stream ends after the first error.
pub fn decode_stream<S>(body: S, status: u16, request_id: Option<String>) -> ChunkStream
where
    S: Stream<Item = Result<Bytes, ClientError>> + Send + Unpin + 'static,
{
    let state = State {
        body,
        decoder: LineDecoder::default(),
        lines: VecDeque::new(),
        body_done: false,
        failed: false,
        status,
        request_id,
    };
    stream::unfold(state, |mut st| async move {
        if st.failed {
            return None;
        }
        loop {
            if let Some(line) = st.lines.pop_front() {
                match parse_frame(&line, st.status, st.request_id.as_deref()) {
                    Ok(None) => continue,
                    Ok(Some(chunk)) => return Some((Ok(chunk), st)),
                    Err(e) => {
                        st.failed = true;
                        return Some((Err(e), st));
                    }
                }
            }
            if st.body_done {
                return None;
            }
            match st.body.next().await {
                Some(Ok(bytes)) => {
                    st.lines.extend(st.decoder.push(&bytes));
                    if st.decoder.pending() > MAX_LINE_BYTES {
                        st.failed = true;
                        return Some((
                            Err(ClientError::Decode("stream line is too long".into())),
                            st,
                        ));
                    }
                }
                Some(Err(e)) => {
                    st.failed = true;
                    return Some((Err(e), st));
                }
                None => {
                    st.body_done = true;
                    st.lines.extend(st.decoder.finish());
                }
            }
        }
    })
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_split_across_pushes() {
        let mut d = LineDecoder::default();
        assert!(d.push(b"{\"a\"").is_empty());
        assert_eq!(
            d.push(b":1}\n\n{\"b\""),
            vec![b"{\"a\":1}".to_vec(), vec![]]
        );
        assert_eq!(d.finish(), Some(b"{\"b\"".to_vec()));
        assert_eq!(d.finish(), None);
    }

    #[test]
    fn frames() {
        let c = parse_frame(
            br#"{"type":"log","stream":"STDERR","data":"aGkK","encoding":"base64","offset":3}"#,
            200,
            None,
        )
        .unwrap()
        .unwrap();
        assert_eq!(c.data, b"hi\n");
        assert_eq!(c.offset, Some(3));
        assert!(parse_frame(b"  \r", 200, None).unwrap().is_none());
        let e = parse_frame(
            br#"{"type":"error","errors":[{"code":"rate_limited","message":"slow"}]}"#,
            200,
            Some("r1"),
        )
        .unwrap_err();
        assert_eq!(e.code(), Some("rate_limited"));
        assert_eq!(e.request_id(), Some("r1"));
        assert!(matches!(
            parse_frame(br#"{"type":"end"}"#, 200, None),
            Err(ClientError::Decode(_))
        ));
        assert!(matches!(
            parse_frame(b"not json", 200, None),
            Err(ClientError::Decode(_))
        ));
    }
}
