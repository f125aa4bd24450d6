//! The host HTTP client behind `ctx.fetch`: reaches only the connection's origin and its OAuth
//! endpoints, strips credentials the package set, injects the connection's credentials, refreshes
//! OAuth tokens, never follows redirects and bounds the response size.

mod auth;
mod decode;
mod redaction;
mod request;
mod response;

use crate::credentials::Credentials;
use crate::egress::{origin_of, BrokerConfig, EgressError};
use crate::model::AuthDefinition;
use crate::secrets::{SecretSet, SecretsError};
use auth::AuthValue;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::time::Instant;
use url::Url;

pub use crate::secrets::REDACTED;

/// Errors of the broker set-up (request failures are [`FetchReply::Error`]s).
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// The origin is not `https://host[:port]`.
    #[error("origin {0:?} must be an https URL without path, query or user info")]
    BadOrigin(String),
    /// The matcher of the connection's secrets could not be built.
    #[error(transparent)]
    Secrets(#[from] SecretsError),
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
    /// The answer was larger than allowed (after decoding its content encoding).
    TooLarge,
    /// The answer's `content-encoding` is not one the broker decodes (gzip, deflate, br).
    UnsupportedEncoding,
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

/// A broker for one job of one connection.
pub struct BrokerSession {
    config: BrokerConfig,
    origin: String,
    oauth_endpoints: Vec<Url>,
    auth: AuthDefinition,
    credentials: tokio::sync::Mutex<Credentials>,
    tokens: Arc<dyn TokenStore>,
    reauth: AtomicBool,
    /// Every secret of the connection seen in this job (refreshed OAuth tokens are added, old
    /// ones kept): redacted from answers and refused in what the job stores.
    secrets: std::sync::Mutex<Arc<SecretSet>>,
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
        let secrets = Arc::new(SecretSet::of_credentials(&credentials)?);
        Ok(BrokerSession {
            config,
            origin,
            oauth_endpoints,
            auth,
            credentials: tokio::sync::Mutex::new(credentials),
            tokens,
            reauth: AtomicBool::new(false),
            secrets: std::sync::Mutex::new(secrets),
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

    /// The connection's secrets known to this session (for screening what a job stores).
    pub fn secrets(&self) -> Arc<SecretSet> {
        // A poisoned lock still holds a valid set: a panic elsewhere cannot corrupt an Arc swap.
        self.secrets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Adds the secrets of refreshed credentials to the set.
    fn learn_secrets(&self, credentials: &Credentials) {
        let mut guard = self.secrets.lock().unwrap_or_else(|p| p.into_inner());
        match guard.with(crate::secrets::credential_values(credentials)) {
            Ok(set) => *guard = Arc::new(set),
            // Cannot happen for a handful of token-sized patterns; the old set still applies.
            Err(e) => tracing::error!(error = %e, "extending the secret set failed"),
        }
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
}
