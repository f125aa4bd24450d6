//! The secret half of a connection: what the user gave and the OAuth tokens. Only the broker
//! reads it; it is never sent to a sandbox or returned by the API.

use crate::model::AuthKind;
use crate::secrets::MIN_SECRET_LEN;
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
    /// A secret is too short to be found again in answers and output (see
    /// [`crate::secrets::MIN_SECRET_LEN`]).
    #[error(
        "credentials.{field}: must be at least {min} bytes long; a shorter secret cannot be \
         told apart from ordinary data, so it could not be redacted from what packages receive \
         or kept out of what they store"
    )]
    TooShort {
        /// The field as on the wire (`key`, `token`, `password`, `clientSecret`).
        field: &'static str,
        /// The shortest length accepted, bytes.
        min: usize,
    },
}

/// Connection credentials.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
// Unknown fields are refused like everywhere in Connect request bodies (`{"type": "apiKey",
// "apikey": ...}` must not pass as a key-less credential); stored credentials are written by
// this same type, so they always parse.
#[serde(tag = "type", rename_all = "camelCase", deny_unknown_fields)]
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

    /// Checks that user-given credentials fit the definition's kind, are not empty, and that
    /// every secret is long enough for the broker to redact and the job screen to find.
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
        if let Some(field) = empty {
            return Err(CredentialsError::Empty(field));
        }
        // The secrets only: a user name or client id is not secret and may be short.
        let secret = match self {
            Credentials::ApiKey { key } => Some(("key", key.as_str())),
            Credentials::Bearer { token } => Some(("token", token.as_str())),
            Credentials::Basic { password, .. } => Some(("password", password.as_str())),
            Credentials::Oauth2 {
                client_secret: Some(s),
                ..
            } => Some(("clientSecret", s.as_str())),
            _ => None,
        };
        match secret {
            Some((field, value)) if value.len() < MIN_SECRET_LEN => {
                Err(CredentialsError::TooShort {
                    field,
                    min: MIN_SECRET_LEN,
                })
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_and_debug() {
        let c: Credentials =
            serde_json::from_str(r#"{"type":"apiKey","key":"k-123456"}"#).expect("parse");
        assert!(c.check(AuthKind::ApiKey).is_ok());
        assert!(c.check(AuthKind::Bearer).is_err());
        assert!(!format!("{c:?}").contains("k-123456"));
        let e: Credentials =
            serde_json::from_str(r#"{"type":"bearer","token":""}"#).expect("parse");
        assert!(matches!(
            e.check(AuthKind::Bearer),
            Err(CredentialsError::Empty("token"))
        ));
    }

    #[test]
    fn unknown_fields_are_refused_and_stored_credentials_parse() {
        let e = serde_json::from_str::<Credentials>(
            r#"{"type":"apiKey","key":"k-123456","header":"X-Key"}"#,
        )
        .expect_err("unknown field");
        assert!(e.to_string().contains("unknown field `header`"), "{e}");
        let e =
            serde_json::from_str::<Credentials>(r#"{"type":"basic","username":"u","pass":"x"}"#)
                .expect_err("misspelt field");
        assert!(e.to_string().contains("unknown field `pass`"), "{e}");
        let stored = Credentials::Oauth2 {
            client_id: "c".into(),
            client_secret: None,
            access_token: Some("at-123456".into()),
            refresh_token: None,
            expires_at: Some(1),
        };
        let text = serde_json::to_string(&stored).expect("json");
        assert_eq!(
            serde_json::from_str::<Credentials>(&text).expect("parse"),
            stored
        );
    }

    #[test]
    fn secrets_shorter_than_the_redaction_minimum_are_refused() {
        let cases = [
            (
                r#"{"type":"apiKey","key":"k-12345"}"#,
                AuthKind::ApiKey,
                "key",
            ),
            (
                r#"{"type":"bearer","token":"t0k"}"#,
                AuthKind::Bearer,
                "token",
            ),
            (
                r#"{"type":"basic","username":"u","password":"pw"}"#,
                AuthKind::Basic,
                "password",
            ),
            (
                r#"{"type":"oauth2","clientId":"c","clientSecret":"shh"}"#,
                AuthKind::Oauth2,
                "clientSecret",
            ),
        ];
        for (json, kind, field) in cases {
            let c: Credentials = serde_json::from_str(json).expect("parse");
            let e = c.check(kind).expect_err(json);
            assert!(
                matches!(e, CredentialsError::TooShort { field: f, min: 8 } if f == field),
                "{json}: {e:?}"
            );
            let text = e.to_string();
            assert!(
                text.starts_with(&format!("credentials.{field}: must be at least 8 bytes")),
                "{text}"
            );
        }
        // Exactly the minimum passes; a short user name or client id is not a secret.
        for (json, kind) in [
            (r#"{"type":"apiKey","key":"k-123456"}"#, AuthKind::ApiKey),
            (
                r#"{"type":"basic","username":"u","password":"pw-45678"}"#,
                AuthKind::Basic,
            ),
            (r#"{"type":"oauth2","clientId":"c"}"#, AuthKind::Oauth2),
        ] {
            let c: Credentials = serde_json::from_str(json).expect("parse");
            assert!(c.check(kind).is_ok(), "{json}");
        }
    }
}
