//! OAuth2 authorization code flow with PKCE (S256): verifier/challenge, authorize URL,
//! code exchange and refresh against the package's token endpoint.

use crate::crypto::random_bytes;
use crate::egress::{BrokerConfig, EgressError};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use url::Url;

/// Largest token endpoint answer read.
const MAX_TOKEN_RESPONSE: usize = 64 * 1024;

/// Errors of the OAuth module.
#[derive(Debug, thiserror::Error)]
pub enum OauthError {
    /// The random source failed.
    #[error(transparent)]
    Random(#[from] crate::crypto::CryptoError),
    /// An endpoint URL is invalid.
    #[error("OAuth endpoint {0:?} is not a valid URL")]
    BadUrl(String),
    /// The endpoint may not be reached.
    #[error(transparent)]
    Egress(#[from] EgressError),
    /// The request failed without an HTTP answer.
    #[error("token endpoint: {0}")]
    Network(String),
    /// The grant (code or refresh token) was rejected (`invalid_grant`).
    #[error("the token endpoint rejected the grant")]
    Rejected,
    /// Any other error answer, or an answer that is not a token.
    #[error("token endpoint answered HTTP {status}{}", error.as_deref().map(|e| format!(" ({e})")).unwrap_or_default())]
    Failed {
        /// HTTP status.
        status: u16,
        /// The `error` field, if any.
        error: Option<String>,
    },
}

/// Tokens from a token endpoint.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenSet {
    /// Access token.
    pub access_token: String,
    /// Refresh token, if the endpoint sent one.
    pub refresh_token: Option<String>,
    /// Expiry, Unix seconds.
    pub expires_at: Option<i64>,
}

impl std::fmt::Debug for TokenSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenSet(..)")
    }
}

/// OAuth client identity.
#[derive(Clone, Copy)]
pub struct Client<'a> {
    /// Client id.
    pub id: &'a str,
    /// Client secret.
    pub secret: Option<&'a str>,
}

/// A fresh PKCE code verifier (43 characters of base64url).
pub fn pkce_verifier() -> Result<String, OauthError> {
    Ok(URL_SAFE_NO_PAD.encode(random_bytes::<32>()?))
}

/// The S256 challenge of a verifier.
pub fn pkce_challenge(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// A fresh unguessable `state`.
pub fn new_state() -> Result<String, OauthError> {
    Ok(URL_SAFE_NO_PAD.encode(random_bytes::<24>()?))
}

/// Builds the authorization URL the user's browser goes to.
pub fn authorize_url(
    authorize_url: &str,
    client_id: &str,
    redirect_uri: &str,
    scopes: &[String],
    state: &str,
    challenge: Option<&str>,
) -> Result<String, OauthError> {
    let mut url =
        Url::parse(authorize_url).map_err(|_| OauthError::BadUrl(authorize_url.into()))?;
    {
        let mut q = url.query_pairs_mut();
        q.append_pair("response_type", "code");
        q.append_pair("client_id", client_id);
        q.append_pair("redirect_uri", redirect_uri);
        if !scopes.is_empty() {
            q.append_pair("scope", &scopes.join(" "));
        }
        q.append_pair("state", state);
        if let Some(c) = challenge {
            q.append_pair("code_challenge", c);
            q.append_pair("code_challenge_method", "S256");
        }
    }
    Ok(url.into())
}

#[derive(Deserialize)]
struct TokenAnswer {
    access_token: Option<String>,
    refresh_token: Option<String>,
    expires_in: Option<i64>,
    error: Option<String>,
}

async fn token_request(
    config: &BrokerConfig,
    token_url: &str,
    client: Client<'_>,
    mut form: Vec<(&str, &str)>,
) -> Result<TokenSet, OauthError> {
    let url = Url::parse(token_url).map_err(|_| OauthError::BadUrl(token_url.into()))?;
    let http = config.client_for(&url).await?;
    form.push(("client_id", client.id));
    if let Some(secret) = client.secret {
        form.push(("client_secret", secret));
    }
    let body =
        serde_urlencoded::to_string(&form).map_err(|e| OauthError::Network(e.to_string()))?;
    let mut resp = http
        .post(url)
        .header("content-type", "application/x-www-form-urlencoded")
        .header("accept", "application/json")
        .body(body)
        .send()
        .await
        .map_err(|e| OauthError::Network(e.without_url().to_string()))?;
    let status = resp.status().as_u16();
    let mut bytes = Vec::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| OauthError::Network(e.without_url().to_string()))?
    {
        if bytes.len() + chunk.len() > MAX_TOKEN_RESPONSE {
            return Err(OauthError::Failed {
                status,
                error: Some("answer too large".into()),
            });
        }
        bytes.extend_from_slice(&chunk);
    }
    let answer: Option<TokenAnswer> = serde_json::from_slice(&bytes).ok();
    let error = answer.as_ref().and_then(|a| a.error.clone());
    if (status == 400 || status == 401) && error.as_deref() == Some("invalid_grant") {
        return Err(OauthError::Rejected);
    }
    match answer {
        Some(TokenAnswer {
            access_token: Some(access_token),
            refresh_token,
            expires_in,
            error: None,
        }) if (200..300).contains(&status) => Ok(TokenSet {
            access_token,
            refresh_token,
            expires_at: expires_in.map(|s| chrono::Utc::now().timestamp().saturating_add(s)),
        }),
        _ => Err(OauthError::Failed { status, error }),
    }
}

/// Exchanges an authorization code for tokens.
pub async fn exchange_code(
    config: &BrokerConfig,
    token_url: &str,
    client: Client<'_>,
    code: &str,
    redirect_uri: &str,
    verifier: Option<&str>,
) -> Result<TokenSet, OauthError> {
    let mut form = vec![
        ("grant_type", "authorization_code"),
        ("code", code),
        ("redirect_uri", redirect_uri),
    ];
    if let Some(v) = verifier {
        form.push(("code_verifier", v));
    }
    token_request(config, token_url, client, form).await
}

/// Gets a new access token with a refresh token.
pub async fn refresh(
    config: &BrokerConfig,
    token_url: &str,
    client: Client<'_>,
    refresh_token: &str,
) -> Result<TokenSet, OauthError> {
    let form = vec![
        ("grant_type", "refresh_token"),
        ("refresh_token", refresh_token),
    ];
    token_request(config, token_url, client, form).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc7636_appendix_b_vector() {
        let verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
        assert_eq!(
            pkce_challenge(verifier),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
    }

    #[test]
    fn verifier_is_43_chars_and_fresh() {
        let a = pkce_verifier().expect("verifier");
        let b = pkce_verifier().expect("verifier");
        assert_eq!(a.len(), 43);
        assert_ne!(a, b);
        assert!(a
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'));
    }

    #[test]
    fn authorize_url_carries_pkce_and_state() {
        let u = authorize_url(
            "https://auth.example.com/authorize?prompt=consent",
            "cid",
            "https://sbx.example/cb",
            &["read".to_string(), "write".to_string()],
            "st4te",
            Some("chal"),
        )
        .expect("url");
        let parsed = Url::parse(&u).expect("parse");
        let q: std::collections::HashMap<_, _> = parsed.query_pairs().into_owned().collect();
        assert_eq!(q["prompt"], "consent");
        assert_eq!(q["response_type"], "code");
        assert_eq!(q["client_id"], "cid");
        assert_eq!(q["redirect_uri"], "https://sbx.example/cb");
        assert_eq!(q["scope"], "read write");
        assert_eq!(q["state"], "st4te");
        assert_eq!(q["code_challenge"], "chal");
        assert_eq!(q["code_challenge_method"], "S256");
    }
}
