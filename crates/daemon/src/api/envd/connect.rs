//! The Connect protocol as the E2B SDKs speak it (contract §3.2): JSON codec,
//! unary calls as plain JSON, streams as 5-byte envelopes (`flags`, big-endian
//! length) with one final end-stream envelope, and HTTP 200 even for stream
//! errors.

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};
use serde_json::{json, Value};
use std::time::Duration;
use tokio::sync::mpsc;

/// Flag of the last envelope of a stream.
pub const END_STREAM: u8 = 0x02;
/// Flag of a compressed envelope (never negotiated here).
const COMPRESSED: u8 = 0x01;
/// Largest request message.
pub const MAX_MESSAGE_BYTES: usize = 8 << 20;
/// Keepalive interval when the client names none (upstream's default).
const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(90);

/// A Connect error code and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectError {
    /// `not_found`, `invalid_argument`, ...
    pub code: &'static str,
    /// Human-readable detail.
    pub message: String,
}

impl ConnectError {
    /// An error with this code.
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        ConnectError {
            code,
            message: message.into(),
        }
    }

    /// `invalid_argument`.
    pub fn invalid(message: impl Into<String>) -> Self {
        ConnectError::new("invalid_argument", message)
    }

    /// The HTTP status of a unary error (Connect spec).
    pub fn status(&self) -> StatusCode {
        let code = match self.code {
            "canceled" => 499,
            "invalid_argument" | "failed_precondition" | "out_of_range" => 400,
            "deadline_exceeded" => 504,
            "not_found" => 404,
            "already_exists" | "aborted" => 409,
            "permission_denied" => 403,
            "resource_exhausted" => 429,
            "unimplemented" => 501,
            "unavailable" => 503,
            "unauthenticated" => 401,
            _ => 500,
        };
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    fn json(&self) -> Value {
        json!({"code": self.code, "message": self.message})
    }
}

impl IntoResponse for ConnectError {
    /// The unary error response.
    fn into_response(self) -> Response {
        (self.status(), axum::Json(self.json())).into_response()
    }
}

/// A successful unary response.
pub fn unary(message: Value) -> Response {
    (StatusCode::OK, axum::Json(message)).into_response()
}

/// Whether the request is a streaming one (`application/connect+json`).
pub fn is_stream(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/connect+json"))
}

/// One envelope.
pub fn envelope(flags: u8, payload: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(5 + payload.len());
    out.push(flags);
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
    Bytes::from(out)
}

/// The message of a request: the body of a unary call, or the one
/// envelope of a server-streaming call.
pub fn request_message(headers: &HeaderMap, body: &[u8]) -> Result<Value, ConnectError> {
    let payload = if is_stream(headers) {
        let mut reader = EnvelopeBuf::default();
        reader.push(body);
        match reader.next()? {
            Some(p) => p,
            None => return Err(ConnectError::invalid("the request has no complete message")),
        }
    } else {
        body.to_vec()
    };
    if payload.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    serde_json::from_slice(&payload)
        .map_err(|e| ConnectError::invalid(format!("invalid JSON message: {e}")))
}

/// Reads a request body (at most [`MAX_MESSAGE_BYTES`]) and its message.
pub async fn read_message(headers: &HeaderMap, body: Body) -> Result<Value, ConnectError> {
    let bytes = axum::body::to_bytes(body, MAX_MESSAGE_BYTES)
        .await
        .map_err(|e| {
            ConnectError::new("resource_exhausted", format!("reading the request: {e}"))
        })?;
    request_message(headers, &bytes)
}

/// An error in the shape the call expects: only an end-stream envelope for
/// a streaming request, an HTTP error for a unary one.
pub fn error_response(headers: &HeaderMap, e: ConnectError) -> Response {
    if is_stream(headers) {
        client_stream_response(Err(e))
    } else {
        e.into_response()
    }
}

/// Parses a typed message out of a JSON value.
pub fn parse<T: serde::de::DeserializeOwned>(v: Value) -> Result<T, ConnectError> {
    serde_json::from_value(v).map_err(|e| ConnectError::invalid(format!("invalid message: {e}")))
}

/// Envelopes cut out of bytes as they arrive (a client stream).
#[derive(Default)]
pub struct EnvelopeBuf {
    buf: Vec<u8>,
}

impl EnvelopeBuf {
    /// Adds received bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete message payload, if there is one; `None` also for
    /// an end-stream envelope (clients do not send one, but it ends nothing).
    pub fn next(&mut self) -> Result<Option<Vec<u8>>, ConnectError> {
        loop {
            if self.buf.len() < 5 {
                return Ok(None);
            }
            let flags = self.buf[0];
            let len =
                u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]) as usize;
            if len > MAX_MESSAGE_BYTES {
                return Err(ConnectError::new(
                    "resource_exhausted",
                    format!("message of {len} bytes is over the {MAX_MESSAGE_BYTES}-byte limit"),
                ));
            }
            if flags & COMPRESSED != 0 {
                return Err(ConnectError::new(
                    "internal",
                    "compressed messages are not supported (no encoding was negotiated)",
                ));
            }
            if self.buf.len() < 5 + len {
                return Ok(None);
            }
            let payload = self.buf[5..5 + len].to_vec();
            self.buf.drain(..5 + len);
            if flags & END_STREAM != 0 {
                continue;
            }
            return Ok(Some(payload));
        }
    }

    /// Bytes of an incomplete envelope left over.
    pub fn leftover(&self) -> usize {
        self.buf.len()
    }
}

/// Reads a client stream's messages as they arrive; `Err` on a bad frame or
/// a body error, `None` at the end of the body.
pub struct ClientStream {
    body: axum::body::BodyDataStream,
    buf: EnvelopeBuf,
}

impl ClientStream {
    /// Reads `body`.
    pub fn new(body: Body) -> Self {
        ClientStream {
            body: body.into_data_stream(),
            buf: EnvelopeBuf::default(),
        }
    }

    /// The next message.
    pub async fn next(&mut self) -> Option<Result<Value, ConnectError>> {
        loop {
            match self.buf.next() {
                Ok(Some(payload)) => {
                    return Some(
                        serde_json::from_slice(&payload).map_err(|e| {
                            ConnectError::invalid(format!("invalid JSON message: {e}"))
                        }),
                    )
                }
                Ok(None) => {}
                Err(e) => return Some(Err(e)),
            }
            match self.body.next().await {
                Some(Ok(bytes)) => self.buf.push(&bytes),
                Some(Err(e)) => {
                    return Some(Err(ConnectError::new(
                        "canceled",
                        format!("reading the request stream: {e}"),
                    )))
                }
                None if self.buf.leftover() == 0 => return None,
                None => {
                    return Some(Err(ConnectError::invalid(
                        "the request stream ended inside a message",
                    )))
                }
            }
        }
    }
}

/// The `Keepalive-Ping-Interval` the client asked for.
pub fn keepalive(headers: &HeaderMap) -> Duration {
    headers
        .get("keepalive-ping-interval")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|s| *s > 0)
        .map(Duration::from_secs)
        .unwrap_or(DEFAULT_KEEPALIVE)
}

/// The `Connect-Timeout-Ms` deadline (`None`: absent or 0).
pub fn timeout(headers: &HeaderMap) -> Result<Option<Duration>, ConnectError> {
    match headers.get("connect-timeout-ms") {
        None => Ok(None),
        Some(v) => {
            let ms = v
                .to_str()
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .ok_or_else(|| ConnectError::invalid("Connect-Timeout-Ms is not a number"))?;
            Ok((ms > 0).then(|| Duration::from_millis(ms)))
        }
    }
}

/// A server stream's response: messages from `messages` as envelopes, a
/// keepalive message after every `keepalive` of silence, and the end-stream
/// envelope when `messages` yields an error or ends.
pub fn stream_response<S>(messages: S, keepalive: Duration, keepalive_message: Value) -> Response
where
    S: Stream<Item = Result<Value, ConnectError>> + Send + 'static,
{
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(8);
    tokio::spawn(async move {
        let mut messages = std::pin::pin!(messages);
        let end = loop {
            let next = tokio::time::timeout(keepalive, messages.next()).await;
            let frame = match next {
                Err(_) => envelope(0, keepalive_message.to_string().as_bytes()),
                Ok(Some(Ok(m))) => envelope(0, m.to_string().as_bytes()),
                Ok(Some(Err(e))) => break Some(e),
                Ok(None) => break None,
            };
            if tx.send(Ok(frame)).await.is_err() {
                // The client went away; dropping `messages` cancels the work.
                return;
            }
        };
        let payload = match end {
            None => json!({}),
            Some(e) => json!({"error": e.json()}),
        };
        let _ = tx
            .send(Ok(envelope(END_STREAM, payload.to_string().as_bytes())))
            .await;
    });
    let body = Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
    let mut resp = Response::new(body);
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/connect+json"),
    );
    resp
}

/// A client-stream call's answer: `{}` then the end-stream envelope (or
/// only the end-stream envelope with the error).
pub fn client_stream_response(result: Result<(), ConnectError>) -> Response {
    let mut body = Vec::new();
    match result {
        Ok(()) => {
            body.extend_from_slice(&envelope(0, b"{}"));
            body.extend_from_slice(&envelope(END_STREAM, b"{}"));
        }
        Err(e) => {
            let payload = json!({"error": e.json()}).to_string();
            body.extend_from_slice(&envelope(END_STREAM, payload.as_bytes()));
        }
    }
    let mut resp = Response::new(Body::from(body));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/connect+json"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes_round_trip_in_pieces() {
        let mut all = Vec::new();
        all.extend_from_slice(&envelope(0, br#"{"a":1}"#));
        all.extend_from_slice(&envelope(0, br#"{"b":2}"#));
        let mut buf = EnvelopeBuf::default();
        let mut got = Vec::new();
        // One byte at a time: a message is only released when complete.
        for b in &all {
            buf.push(&[*b]);
            while let Some(m) = buf.next().unwrap() {
                got.push(String::from_utf8(m).unwrap());
            }
        }
        assert_eq!(got, vec![r#"{"a":1}"#, r#"{"b":2}"#]);
        assert_eq!(buf.leftover(), 0);
    }

    #[test]
    fn oversized_and_compressed_frames_are_refused() {
        let mut buf = EnvelopeBuf::default();
        buf.push(&[0, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(buf.next().unwrap_err().code, "resource_exhausted");
        let mut buf = EnvelopeBuf::default();
        buf.push(&envelope(COMPRESSED, b"{}"));
        assert!(buf.next().is_err());
    }

    #[test]
    fn stream_request_needs_its_envelope() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/connect+json"),
        );
        let v = request_message(&h, &envelope(0, br#"{"x":1}"#)).unwrap();
        assert_eq!(v, json!({"x": 1}));
        assert!(request_message(&h, br#"{"x":1}"#).is_err());
        let unary = HeaderMap::new();
        assert_eq!(request_message(&unary, b"").unwrap(), json!({}));
        assert!(request_message(&unary, b"{").is_err());
    }

    #[test]
    fn unary_error_statuses_follow_connect() {
        assert_eq!(ConnectError::new("not_found", "").status(), 404);
        assert_eq!(ConnectError::new("unauthenticated", "").status(), 401);
        assert_eq!(ConnectError::new("already_exists", "").status(), 409);
        assert_eq!(ConnectError::new("data_loss", "").status(), 500);
    }
}
