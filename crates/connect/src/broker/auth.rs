//! The credential the broker adds to a request: API key, bearer, basic or (refreshed) OAuth token.

use super::{BrokerSession, FetchErrorCode, FetchReply};
use crate::credentials::Credentials;
use crate::egress::EgressError;
use crate::model::{ApiKeyPlacement, AuthDefinition};
use crate::oauth::{self, OauthError};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use std::sync::atomic::Ordering;

/// Access tokens this close to expiry are refreshed before use.
const EXPIRY_MARGIN_SECS: i64 = 30;

/// The credential to add to one request.
#[derive(Clone, PartialEq, Eq)]
pub(super) enum AuthValue {
    None,
    Header(String, String),
    Query(String, String),
}

impl BrokerSession {
    /// The credential for the next request; `stale` is an access token that just got a 401.
    pub(super) async fn auth_value(
        &self,
        stale: Option<&AuthValue>,
    ) -> Result<AuthValue, FetchReply> {
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
                self.learn_secrets(creds);
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
}
