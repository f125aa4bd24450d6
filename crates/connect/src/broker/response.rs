//! Reads an answer: collects status and headers, bounds the body size on the wire and after
//! decoding its content encodings.

use super::decode::{decode_body, DecodeError};
use super::{BrokerSession, FetchErrorCode, FetchReply, HttpAnswer};
use std::collections::BTreeMap;

impl BrokerSession {
    pub(super) async fn exchange(&self, builder: reqwest::RequestBuilder) -> FetchReply {
        let mut resp = match builder.send().await {
            Ok(r) => r,
            Err(e) if e.is_builder() => return FetchReply::denied(),
            Err(e) if e.is_timeout() => return FetchReply::error(FetchErrorCode::Timeout, true),
            Err(e) => {
                // Without the URL: it carries a query-placed API key.
                tracing::debug!(error = %e.without_url(), "fetch failed");
                return FetchReply::error(FetchErrorCode::Network, true);
            }
        };
        let max = self.config.max_response_bytes;
        if resp.content_length().is_some_and(|n| n > max) {
            return FetchReply::error(FetchErrorCode::TooLarge, false);
        }
        let status = resp.status().as_u16();
        let mut headers: BTreeMap<String, String> = BTreeMap::new();
        for (name, value) in resp.headers() {
            let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
            headers
                .entry(name.as_str().to_ascii_lowercase())
                .and_modify(|v| {
                    v.push_str(", ");
                    v.push_str(&value);
                })
                .or_insert(value);
        }
        let mut body = Vec::new();
        loop {
            match resp.chunk().await {
                Ok(Some(chunk)) => {
                    if (body.len() + chunk.len()) as u64 > max {
                        return FetchReply::error(FetchErrorCode::TooLarge, false);
                    }
                    body.extend_from_slice(&chunk);
                }
                Ok(None) => break,
                Err(e) if e.is_timeout() => {
                    return FetchReply::error(FetchErrorCode::Timeout, true)
                }
                Err(_) => return FetchReply::error(FetchErrorCode::Network, true),
            }
        }
        // The package gets the decoded body: the codings and the length no longer describe it
        // (redaction changes the length too).
        let encoding = headers.remove("content-encoding");
        headers.remove("content-length");
        match decode_body(body, encoding.as_deref(), max) {
            Ok(body) => FetchReply::Response(HttpAnswer {
                status,
                headers,
                body,
            }),
            Err(DecodeError::Unsupported(coding)) => {
                tracing::debug!(%coding, "answer refused: unsupported content encoding");
                FetchReply::error(FetchErrorCode::UnsupportedEncoding, false)
            }
            Err(DecodeError::TooLarge(_)) => FetchReply::error(FetchErrorCode::TooLarge, false),
            // Like a connection cut mid-body: another attempt may get an intact answer.
            Err(DecodeError::Corrupt(what)) => {
                tracing::debug!(coding = what, "answer refused: corrupt encoded body");
                FetchReply::error(FetchErrorCode::Network, true)
            }
        }
    }
}
