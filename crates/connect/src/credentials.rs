//! The secret half of a connection: what the user gave and the OAuth tokens. Only the broker
//! reads it; it is never sent to a sandbox or returned by the API.

use crate::model::AuthKind;
use serde::{Deserialize, Serialize};

/// Errors of the credentials module.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    /// The credentials do not fit the package's auth kind.
    #[error("the package needs {wanted} credentials, not {given}")]
    WrongKind {
        /// The definition's kind.
        wanted: &'static str,
        /// The kind given.
        given: &'static str,
    },
    /// A required value is empty.
    #[error("credential field {0} must not be empty")]
    Empty(&'static str),
}

/// Connection credentials.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum Credentials {
    /// API key.
    #[serde(rename_all = "camelCase")]
    ApiKey {
        /// The key.
        key: String,
    },
    /// Bearer token.
    #[serde(rename_all = "camelCase")]
    Bearer {
        /// The token.
        token: String,
    },
    /// Basic auth.
    #[serde(rename_all = "camelCase")]
    Basic {
        /// User name.
        username: String,
        /// Password.
        password: String,
    },
    /// OAuth2 client and tokens.
    #[serde(rename_all = "camelCase")]
    Oauth2 {
        /// Client id of the OAuth app.
        client_id: String,
        /// Client secret (absent for public clients).
        #[serde(default)]
        client_secret: Option<String>,
        /// Access token (after authorization).
        #[serde(default)]
        access_token: Option<String>,
        /// Refresh token.
        #[serde(default)]
        refresh_token: Option<String>,
        /// Access token expiry, Unix seconds.
        #[serde(default)]
        expires_at: Option<i64>,
    },
    /// No credentials.
    None,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print secrets, even in debug logs.
        write!(f, "Credentials({})", self.kind().as_str())
    }
}

impl Credentials {
    /// The auth kind.
    pub fn kind(&self) -> AuthKind {
        match self {
            Credentials::ApiKey { .. } => AuthKind::ApiKey,
            Credentials::Bearer { .. } => AuthKind::Bearer,
            Credentials::Basic { .. } => AuthKind::Basic,
            Credentials::Oauth2 { .. } => AuthKind::Oauth2,
            Credentials::None => AuthKind::None,
        }
    }

    /// Checks that user-given credentials fit the definition's kind and are not empty.
    pub fn check(&self, wanted: AuthKind) -> Result<(), CredentialsError> {
        if self.kind() != wanted {
            return Err(CredentialsError::WrongKind {
                wanted: wanted.as_str(),
                given: self.kind().as_str(),
            });
        }
        let empty = match self {
            Credentials::ApiKey { key } if key.is_empty() => Some("key"),
            Credentials::Bearer { token } if token.is_empty() => Some("token"),
            Credentials::Basic { username, .. } if username.is_empty() => Some("username"),
            Credentials::Oauth2 { client_id, .. } if client_id.is_empty() => Some("clientId"),
            _ => None,
        };
        match empty {
            Some(field) => Err(CredentialsError::Empty(field)),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_and_debug() {
        let c: Credentials =
            serde_json::from_str(r#"{"type":"apiKey","key":"k-123"}"#).expect("parse");
        assert!(c.check(AuthKind::ApiKey).is_ok());
        assert!(c.check(AuthKind::Bearer).is_err());
        assert!(!format!("{c:?}").contains("k-123"));
        let e: Credentials =
            serde_json::from_str(r#"{"type":"bearer","token":""}"#).expect("parse");
        assert!(matches!(
            e.check(AuthKind::Bearer),
            Err(CredentialsError::Empty("token"))
        ));
    }
}
