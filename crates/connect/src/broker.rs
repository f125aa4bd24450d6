//! The host HTTP client behind `ctx.fetch`: reaches only the connection's origin and its OAuth
//! endpoints, strips credentials the package set, injects the connection's credentials, refreshes
//! OAuth tokens, never follows redirects and bounds the response size.

use crate::credentials::Credentials;
use crate::egress::{origin_of, BrokerConfig, EgressError};
use crate::model::{ApiKeyPlacement, AuthDefinition};
use crate::oauth::{self, OauthError};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::time::Instant;
use url::Url;

/// Access tokens this close to expiry are refreshed before use.
const EXPIRY_MARGIN_SECS: i64 = 30;

/// Errors of the broker set-up (request failures are [`FetchReply::Error`]s).
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// The origin is not `https://host[:port]`.
    #[error("origin {0:?} must be an https URL without path, query or user info")]
    BadOrigin(String),
}

/// Persists what the broker learns about a connection's authorization.
pub trait TokenStore: Send + Sync {
    /// Stores refreshed credentials (encrypted).
    fn save(&self, credentials: &Credentials) -> Result<(), String>;
    /// Marks the connection `reauthorization_required`.
    fn reauthorization_required(&self) -> Result<(), String>;
}

/// One request from the package.
#[derive(Debug, Clone)]
pub struct FetchRequest {
    /// HTTP method.
    pub method: String,
    /// Absolute https URL or a path starting with `/`.
    pub url: String,
    /// Request headers.
    pub headers: BTreeMap<String, String>,
    /// Request body.
    pub body: Option<Vec<u8>>,
}

/// Why the broker gave no HTTP answer (the protocol's `fetch_error.code`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FetchErrorCode {
    /// Destination or request not allowed.
    Denied,
    /// Connection or protocol failure.
    Network,
    /// No answer in time.
    Timeout,
    /// The OAuth refresh token was rejected.
    ReauthorizationRequired,
    /// The answer was larger than allowed.
    TooLarge,
}

/// An HTTP answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpAnswer {
    /// Status code.
    pub status: u16,
    /// Lower-case header names; repeated headers joined with `, `.
    pub headers: BTreeMap<String, String>,
    /// Body bytes.
    pub body: Vec<u8>,
}

/// The broker's answer to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchReply {
    /// An HTTP answer (any status).
    Response(HttpAnswer),
    /// No HTTP answer.
    Error {
        /// Why.
        code: FetchErrorCode,
        /// Whether the runner may retry.
        retryable: bool,
    },
}

impl FetchReply {
    fn error(code: FetchErrorCode, retryable: bool) -> Self {
        FetchReply::Error { code, retryable }
    }

    fn denied() -> Self {
        Self::error(FetchErrorCode::Denied, false)
    }
}

/// Normalizes a connection origin to `https://host[:port]`.
pub fn normalize_origin(raw: &str) -> Result<String, BrokerError> {
    let bad = || BrokerError::BadOrigin(raw.to_string());
    let url = Url::parse(raw).map_err(|_| bad())?;
    let plain = url.scheme() == "https"
        && url.host().is_some()
        && url.username().is_empty()
        && url.password().is_none()
        && url.path() == "/"
        && url.query().is_none()
        && url.fragment().is_none();
    if !plain {
        return Err(bad());
    }
    Ok(origin_of(&url))
}

/// The credential to add to one request.
#[derive(Clone, PartialEq, Eq)]
enum AuthValue {
    None,
    Header(String, String),
    Query(String, String),
}

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

/// What replaces an injected credential in an answer handed to the package.
pub const REDACTED: &str = "[redacted]";

/// Secret forms shorter than this are not redacted.
const MIN_REDACTED_LEN: usize = 4;

/// Every form in which the credential of `auth` may come back in an answer: the raw value, the
/// value after its scheme word, for basic auth the base64 `user:pass`, `user:pass` and the
/// password, each also percent-encoded as URLs and forms carry them. Longest first.
fn secret_forms(auth: &AuthValue) -> Vec<String> {
    let mut raw: Vec<String> = Vec::new();
    match auth {
        AuthValue::None => {}
        AuthValue::Query(_, v) => raw.push(v.clone()),
        AuthValue::Header(_, v) => {
            raw.push(v.clone());
            if let Some((scheme, rest)) = v.split_once(' ') {
                let rest = rest.trim();
                raw.push(rest.to_string());
                if scheme.eq_ignore_ascii_case("basic") {
                    if let Ok(pair) = STANDARD.decode(rest) {
                        let pair = String::from_utf8_lossy(&pair).into_owned();
                        if let Some((_, password)) = pair.split_once(':') {
                            raw.push(password.to_string());
                        }
                        raw.push(pair);
                    }
                }
            }
        }
    }
    let mut forms: Vec<String> = Vec::new();
    for r in raw {
        let form: String = url::form_urlencoded::byte_serialize(r.as_bytes()).collect();
        let path: String = form.replace('+', "%20");
        let lower = |s: &str| {
            // %2F and %2f are the same octet.
            let mut out = String::with_capacity(s.len());
            let mut hex = 0;
            for c in s.chars() {
                if c == '%' {
                    hex = 2;
                    out.push(c);
                } else if hex > 0 {
                    hex -= 1;
                    out.push(c.to_ascii_lowercase());
                } else {
                    out.push(c);
                }
            }
            out
        };
        let extra = [lower(&form), lower(&path)];
        for f in [r, form, path].into_iter().chain(extra) {
            // Shorter values would mangle every answer (a 1-character password) and protect
            // nothing a guess would not find.
            if f.len() >= MIN_REDACTED_LEN && !forms.contains(&f) {
                forms.push(f);
            }
        }
    }
    forms.sort_by_key(|f| std::cmp::Reverse(f.len()));
    forms
}

/// Replaces every occurrence of `needle` in `hay`; `None` when there is none.
fn replace_bytes(hay: &[u8], needle: &[u8], with: &[u8]) -> Option<Vec<u8>> {
    let first = hay.windows(needle.len()).position(|w| w == needle)?;
    let mut out = Vec::with_capacity(hay.len());
    out.extend_from_slice(&hay[..first]);
    out.extend_from_slice(with);
    let mut i = first + needle.len();
    while i < hay.len() {
        if hay[i..].starts_with(needle) {
            out.extend_from_slice(with);
            i += needle.len();
        } else {
            out.push(hay[i]);
            i += 1;
        }
    }
    Some(out)
}

/// Removes the injected credential from an answer before the package sees it (a redirect that
/// keeps `?api_key=`, an error page quoting the URL, a server echoing request headers).
fn redact(mut answer: HttpAnswer, auth: &AuthValue) -> HttpAnswer {
    let forms = secret_forms(auth);
    if forms.is_empty() {
        return answer;
    }
    for value in answer.headers.values_mut() {
        for f in &forms {
            if value.contains(f.as_str()) {
                *value = value.replace(f.as_str(), REDACTED);
            }
        }
    }
    for f in &forms {
        if let Some(body) = replace_bytes(&answer.body, f.as_bytes(), REDACTED.as_bytes()) {
            answer.body = body;
        }
    }
    answer
}

/// A broker for one job of one connection.
pub struct BrokerSession {
    config: BrokerConfig,
    origin: String,
    oauth_endpoints: Vec<Url>,
    auth: AuthDefinition,
    credentials: tokio::sync::Mutex<Credentials>,
    tokens: Arc<dyn TokenStore>,
    reauth: AtomicBool,
    /// One pinned client per origin for the job: keeps connections alive between requests and
    /// resolves each host once per job.
    clients: tokio::sync::Mutex<HashMap<String, reqwest::Client>>,
}

impl std::fmt::Debug for BrokerSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokerSession")
            .field("origin", &self.origin)
            .finish()
    }
}

impl BrokerSession {
    /// A session for a connection's origin, auth definition and decrypted credentials.
    pub fn new(
        config: BrokerConfig,
        origin: &str,
        auth: AuthDefinition,
        credentials: Credentials,
        tokens: Arc<dyn TokenStore>,
    ) -> Result<Self, BrokerError> {
        let origin = normalize_origin(origin)?;
        let oauth_endpoints = match &auth {
            AuthDefinition::Oauth2 {
                authorize_url,
                token_url,
                ..
            } => [authorize_url, token_url]
                .into_iter()
                .filter_map(|u| Url::parse(u).ok())
                .collect(),
            _ => Vec::new(),
        };
        Ok(BrokerSession {
            config,
            origin,
            oauth_endpoints,
            auth,
            credentials: tokio::sync::Mutex::new(credentials),
            tokens,
            reauth: AtomicBool::new(false),
            clients: tokio::sync::Mutex::new(HashMap::new()),
        })
    }

    /// The URL to request and whether it gets credentials; `None` when denied.
    fn resolve_url(&self, raw: &str) -> Option<(Url, bool)> {
        if raw.starts_with('/') {
            // "//host/..." would be a scheme-relative URL to another host.
            if raw.starts_with("//") || raw.contains('\\') {
                return None;
            }
            let mut url = Url::parse(&format!("{}{}", self.origin, raw)).ok()?;
            url.set_fragment(None);
            return (origin_of(&url) == self.origin).then_some((url, true));
        }
        let mut url = Url::parse(raw).ok()?;
        url.set_fragment(None);
        if url.scheme() != "https" {
            return None;
        }
        if origin_of(&url) == self.origin {
            return Some((url, true));
        }
        let is_endpoint = self
            .oauth_endpoints
            .iter()
            .any(|e| origin_of(e) == origin_of(&url) && e.path() == url.path());
        // OAuth endpoints on another origin are reachable but never get the connection's credentials.
        is_endpoint.then_some((url, false))
    }

    fn api_key_header(&self) -> Option<&str> {
        match self.auth.api_key_placement() {
            Some((ApiKeyPlacement::Header, name)) => Some(name),
            _ => None,
        }
    }

    /// The credential for the next request; `stale` is an access token that just got a 401.
    async fn auth_value(&self, stale: Option<&AuthValue>) -> Result<AuthValue, FetchReply> {
        let mut creds = self.credentials.lock().await;
        let value = match (&self.auth, &*creds) {
            (AuthDefinition::ApiKey { .. }, Credentials::ApiKey { key }) => {
                match self.auth.api_key_placement() {
                    Some((ApiKeyPlacement::Header, name)) => {
                        AuthValue::Header(name.to_string(), key.clone())
                    }
                    Some((ApiKeyPlacement::Query, name)) => {
                        AuthValue::Query(name.to_string(), key.clone())
                    }
                    // A definition without exactly one placement never passes the build.
                    None => return Err(FetchReply::denied()),
                }
            }
            (AuthDefinition::Bearer, Credentials::Bearer { token }) => {
                AuthValue::Header("authorization".into(), format!("Bearer {token}"))
            }
            (AuthDefinition::Basic, Credentials::Basic { username, password }) => {
                AuthValue::Header(
                    "authorization".into(),
                    format!(
                        "Basic {}",
                        STANDARD.encode(format!("{username}:{password}"))
                    ),
                )
            }
            (AuthDefinition::Oauth2 { token_url, .. }, Credentials::Oauth2 { .. }) => {
                let token_url = token_url.clone();
                return self.oauth_value(&mut creds, &token_url, stale).await;
            }
            (AuthDefinition::None, _) => AuthValue::None,
            // Credentials of another kind than the definition: send nothing rather than guess.
            _ => return Err(FetchReply::denied()),
        };
        Ok(value)
    }

    async fn oauth_value(
        &self,
        creds: &mut Credentials,
        token_url: &str,
        stale: Option<&AuthValue>,
    ) -> Result<AuthValue, FetchReply> {
        let Credentials::Oauth2 {
            client_id,
            client_secret,
            access_token,
            refresh_token,
            expires_at,
        } = creds
        else {
            return Err(FetchReply::denied());
        };
        let bearer = |t: &str| AuthValue::Header("authorization".into(), format!("Bearer {t}"));
        let now = chrono::Utc::now().timestamp();
        let expired = expires_at.is_some_and(|e| e <= now + EXPIRY_MARGIN_SECS);
        let is_stale = match (stale, access_token.as_deref()) {
            (Some(s), Some(t)) => *s == bearer(t),
            _ => false,
        };
        let needs_refresh = access_token.is_none() || expired || is_stale;
        let Some(rt) = refresh_token.clone().filter(|_| needs_refresh) else {
            return match access_token.as_deref() {
                Some(t) => Ok(bearer(t)),
                None => Err(self.reauthorization_required()),
            };
        };
        let client = oauth::Client {
            id: client_id,
            secret: client_secret.as_deref(),
        };
        match oauth::refresh(&self.config, token_url, client, &rt).await {
            Ok(t) => {
                *access_token = Some(t.access_token.clone());
                if t.refresh_token.is_some() {
                    *refresh_token = t.refresh_token;
                }
                *expires_at = t.expires_at;
                if let Err(e) = self.tokens.save(creds) {
                    // The new token still works for this job; the next job refreshes again.
                    tracing::warn!(error = %e, "storing refreshed OAuth tokens failed");
                }
                Ok(bearer(&t.access_token))
            }
            Err(OauthError::Rejected) => Err(self.reauthorization_required()),
            Err(OauthError::Egress(EgressError::Denied(_))) => Err(FetchReply::denied()),
            Err(e) => {
                tracing::info!(error = %e, "OAuth refresh failed");
                Err(FetchReply::error(FetchErrorCode::Network, true))
            }
        }
    }

    fn reauthorization_required(&self) -> FetchReply {
        if !self.reauth.swap(true, Ordering::SeqCst) {
            if let Err(e) = self.tokens.reauthorization_required() {
                tracing::warn!(error = %e, "marking connection reauthorization_required failed");
            }
        }
        FetchReply::error(FetchErrorCode::ReauthorizationRequired, false)
    }

    /// Whether a refresh token was rejected during this session.
    pub fn needs_reauthorization(&self) -> bool {
        self.reauth.load(Ordering::SeqCst)
    }

    async fn client(&self, url: &Url) -> Result<reqwest::Client, EgressError> {
        self.config.check_url(url)?;
        let origin = origin_of(url);
        let mut clients = self.clients.lock().await;
        if let Some(c) = clients.get(&origin) {
            return Ok(c.clone());
        }
        let c = self.config.client_for(url).await?;
        clients.insert(origin, c.clone());
        Ok(c)
    }

    /// Performs one package request before `deadline`.
    pub async fn fetch(&self, req: FetchRequest, deadline: Instant) -> FetchReply {
        if self.needs_reauthorization() {
            return FetchReply::error(FetchErrorCode::ReauthorizationRequired, false);
        }
        let Some((url, with_credentials)) = self.resolve_url(&req.url) else {
            return FetchReply::denied();
        };
        let Ok(method) = reqwest::Method::from_bytes(req.method.to_ascii_uppercase().as_bytes())
        else {
            return FetchReply::denied();
        };
        let client = match self.client(&url).await {
            Ok(c) => c,
            Err(EgressError::Denied(why)) => {
                tracing::debug!(%why, "fetch denied");
                return FetchReply::denied();
            }
            Err(e) => {
                tracing::debug!(error = %e, "fetch set-up failed");
                return FetchReply::error(FetchErrorCode::Network, true);
            }
        };
        let is_oauth = matches!(self.auth, AuthDefinition::Oauth2 { .. });
        let mut auth = if with_credentials {
            match self.auth_value(None).await {
                Ok(a) => a,
                Err(reply) => return reply,
            }
        } else {
            AuthValue::None
        };
        let mut retried = false;
        loop {
            let reply = self
                .send_once(&client, method.clone(), &url, &req, &auth, deadline)
                .await;
            let unauthorized = matches!(&reply, FetchReply::Response(a) if a.status == 401);
            if !(unauthorized && with_credentials && is_oauth && !retried) {
                return reply;
            }
            retried = true;
            match self.auth_value(Some(&auth)).await {
                Ok(fresh) if fresh != auth => auth = fresh,
                // No refresh token: the 401 goes to the package.
                Ok(_) => return reply,
                Err(e) => return e,
            }
        }
    }

    async fn send_once(
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
        if let Some(body) = &req.body {
            builder = builder.body(body.clone());
        }
        let now = Instant::now();
        if now >= deadline {
            return FetchReply::error(FetchErrorCode::Timeout, false);
        }
        let budget = (deadline - now).min(self.config.request_timeout);
        match tokio::time::timeout(budget, self.exchange(builder)).await {
            Ok(FetchReply::Response(answer)) => FetchReply::Response(redact(answer, auth)),
            Ok(reply) => reply,
            Err(_) => FetchReply::error(FetchErrorCode::Timeout, true),
        }
    }

    async fn exchange(&self, builder: reqwest::RequestBuilder) -> FetchReply {
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
        FetchReply::Response(HttpAnswer {
            status,
            headers,
            body,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_normalize() {
        assert_eq!(
            normalize_origin("https://API.example.com").ok().as_deref(),
            Some("https://api.example.com")
        );
        assert_eq!(
            normalize_origin("https://api.example.com:443/")
                .ok()
                .as_deref(),
            Some("https://api.example.com")
        );
        assert_eq!(
            normalize_origin("https://a.example:8443").ok().as_deref(),
            Some("https://a.example:8443")
        );
        for bad in [
            "http://a.example",
            "https://a.example/v1",
            "https://u:p@a.example",
            "https://a.example/?x=1",
            "nope",
        ] {
            assert!(normalize_origin(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn injected_secrets_are_redacted_from_answers() {
        let answer = |text: &str| HttpAnswer {
            status: 302,
            headers: BTreeMap::from([
                ("location".to_string(), text.to_string()),
                ("x-echo".to_string(), text.to_string()),
            ]),
            body: text.as_bytes().to_vec(),
        };
        let clean = |a: &HttpAnswer, secrets: &[&str]| {
            let body = String::from_utf8_lossy(&a.body).into_owned();
            for s in secrets {
                assert!(!body.contains(s), "body keeps {s}: {body}");
                for v in a.headers.values() {
                    assert!(!v.contains(s), "header keeps {s}: {v}");
                }
            }
            assert!(body.contains(REDACTED));
        };
        // API key in the query: raw and percent-encoded.
        let key = "k3y/with+odd=chars&x";
        let enc: String = url::form_urlencoded::byte_serialize(key.as_bytes()).collect();
        let q = AuthValue::Query("api_key".into(), key.into());
        let a = redact(
            answer(&format!("https://a.example/next?api_key={enc} raw={key}")),
            &q,
        );
        clean(&a, &[key, &enc]);
        assert!(a.headers["location"].starts_with("https://a.example/next?api_key=[redacted]"));
        // API key in a header.
        let h = AuthValue::Header("x-key".into(), "plainkey123".into());
        clean(&redact(answer("echo plainkey123"), &h), &["plainkey123"]);
        // Bearer / OAuth token.
        let b = AuthValue::Header("authorization".into(), "Bearer tok-123".into());
        clean(
            &redact(answer("got Bearer tok-123 / tok-123"), &b),
            &["tok-123"],
        );
        // Basic: base64 of user:pass, the pair and the password.
        let b64 = STANDARD.encode("user:s3cr3t!");
        let basic = AuthValue::Header("authorization".into(), format!("Basic {b64}"));
        clean(
            &redact(
                answer(&format!("{b64} user:s3cr3t! s3cr3t%21 s3cr3t!")),
                &basic,
            ),
            &[&b64, "s3cr3t"],
        );
        // No credential: untouched.
        assert_eq!(redact(answer("x"), &AuthValue::None), answer("x"));
    }

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
        ] {
            assert!(is_stripped_header(h, None), "{h}");
        }
        assert!(is_stripped_header("X-Key", Some("x-key")));
        for h in ["accept", "content-type", "x-request-id", "user-agent"] {
            assert!(!is_stripped_header(h, None), "{h}");
        }
    }
}
