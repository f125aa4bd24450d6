//! Builds and sends one request: strips package-set credential headers, places the credential.

use super::auth::AuthValue;
use super::decode::ACCEPT_ENCODING;
use super::redaction::redact;
use super::{BrokerSession, FetchErrorCode, FetchReply, FetchRequest};
use crate::model::ApiKeyPlacement;
use tokio::time::Instant;
use url::Url;

/// Headers a package may not set: credentials (ours are added by the broker) and transport headers.
fn is_stripped_header(name: &str, api_key_header: Option<&str>) -> bool {
    let n = name.to_ascii_lowercase();
    let fixed = matches!(
        n.as_str(),
        "authorization"
            | "proxy-authorization"
            | "cookie"
            | "cookie2"
            | "host"
            | "content-length"
            | "connection"
            | "keep-alive"
            | "proxy-connection"
            | "transfer-encoding"
            | "te"
            | "trailer"
            | "upgrade"
            // The broker asks for the encodings it decodes itself.
            | "accept-encoding"
    );
    let credential_like = [
        "api-key",
        "apikey",
        "api_key",
        "auth",
        "token",
        "secret",
        "session",
        "password",
        "signature",
    ]
    .iter()
    .any(|w| n.contains(w));
    fixed || credential_like || api_key_header.is_some_and(|h| h.eq_ignore_ascii_case(&n))
}

impl BrokerSession {
    fn api_key_header(&self) -> Option<&str> {
        match self.auth.api_key_placement() {
            Some((ApiKeyPlacement::Header, name)) => Some(name),
            _ => None,
        }
    }

    pub(super) async fn send_once(
        &self,
        client: &reqwest::Client,
        method: reqwest::Method,
        url: &Url,
        req: &FetchRequest,
        auth: &AuthValue,
        deadline: Instant,
    ) -> FetchReply {
        let mut url = url.clone();
        let api_key_header = self.api_key_header();
        if let AuthValue::Query(name, value) = auth {
            // Drop a same-named parameter the package set, then add ours.
            let kept: Vec<(String, String)> = url
                .query_pairs()
                .filter(|(k, _)| k != name)
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect();
            url.set_query(None);
            {
                let mut q = url.query_pairs_mut();
                for (k, v) in &kept {
                    q.append_pair(k, v);
                }
                q.append_pair(name, value);
            }
        }
        let mut builder = client.request(method, url);
        for (name, value) in &req.headers {
            if is_stripped_header(name, api_key_header) {
                continue;
            }
            builder = builder.header(name.as_str(), value.as_str());
        }
        if let AuthValue::Header(name, value) = auth {
            builder = builder.header(name.as_str(), value.as_str());
        }
        builder = builder.header("accept-encoding", ACCEPT_ENCODING);
        if let Some(body) = &req.body {
            builder = builder.body(body.clone());
        }
        let now = Instant::now();
        if now >= deadline {
            return FetchReply::error(FetchErrorCode::Timeout, false);
        }
        let budget = (deadline - now).min(self.config.request_timeout);
        match tokio::time::timeout(budget, self.exchange(builder)).await {
            Ok(FetchReply::Response(answer)) => {
                FetchReply::Response(redact(answer, &self.secrets()))
            }
            Ok(reply) => reply,
            Err(_) => FetchReply::error(FetchErrorCode::Timeout, true),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_headers_are_stripped() {
        for h in [
            "Authorization",
            "cookie",
            "X-Api-Key",
            "x-auth-token",
            "X-Custom-Secret",
            "Proxy-Authorization",
            "Host",
            "Accept-Encoding",
        ] {
            assert!(is_stripped_header(h, None), "{h}");
        }
        assert!(is_stripped_header("X-Key", Some("x-key")));
        for h in ["accept", "content-type", "x-request-id", "user-agent"] {
            assert!(!is_stripped_header(h, None), "{h}");
        }
    }
}
