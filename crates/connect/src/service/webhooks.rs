//! Webhook connections: delivery URLs and signing secrets, the inbound path (token, rate,
//! signature, inbox) and the deliveries' read API; `deliveries.rs` runs them.

use super::{ConnectService, ServiceError};
use crate::api::PageQuery;
use crate::model::{ConnectionStatus, Delivery, DeliveryStatus, SignatureScheme};
use crate::signature::{self, SignatureError};
use crate::store::{DeliveryInsert, NewDelivery, WebhookSettings};
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use chrono::Utc;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

/// Path of a delivery URL; the token follows.
pub const DELIVERY_PATH: &str = "/v1/connect/webhooks/";

/// Errors of the inbound path.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// No webhook has this URL.
    #[error("no webhook has this URL")]
    UnknownToken,
    /// The signature check failed; nothing was stored.
    #[error("the delivery's signature was refused: {0}")]
    Signature(#[from] SignatureError),
    /// The body is over the limit.
    #[error("the delivery body is larger than {0} bytes")]
    TooLarge(usize),
    /// The connection sent more than its rate allows.
    #[error("too many deliveries for this connection; retry after {retry_after_secs} s")]
    RateLimited {
        /// Seconds until a delivery would be accepted.
        retry_after_secs: u64,
    },
    /// The connection's inbox is full of pending deliveries.
    #[error("the connection has {max} pending deliveries; retry after {retry_after_secs} s")]
    InboxFull {
        /// The inbox size.
        max: u64,
        /// Seconds to wait.
        retry_after_secs: u64,
    },
    /// Anything else.
    #[error(transparent)]
    Service(#[from] ServiceError),
}

impl From<crate::store::StoreError> for WebhookError {
    fn from(e: crate::store::StoreError) -> Self {
        WebhookError::Service(e.into())
    }
}

/// How deliveries are signed, as a user asks for it.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "scheme", deny_unknown_fields)]
pub enum SignatureRequest {
    /// Standard Webhooks.
    #[serde(rename = "standard")]
    Standard,
    /// HMAC-SHA256 of the raw body in a header.
    #[serde(rename = "hmac-sha256", rename_all = "camelCase")]
    HmacSha256 {
        /// Header name (default `X-Hub-Signature-256`).
        #[serde(default)]
        header: Option<String>,
        /// Text before the hex digest (default `sha256=`).
        #[serde(default)]
        prefix: Option<String>,
        /// Header with the sender's delivery id (e.g. `X-GitHub-Delivery`).
        #[serde(default)]
        id_header: Option<String>,
    },
    /// No signature.
    #[serde(rename = "none", rename_all = "camelCase")]
    None {
        /// Header with the sender's delivery id.
        #[serde(default)]
        id_header: Option<String>,
    },
}

/// `POST /v1/connect/connections/{id}/webhooks`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WebhookSetupRequest {
    /// Signature settings (default: Standard Webhooks).
    #[serde(default)]
    pub signature: Option<SignatureRequest>,
    /// Replace the delivery URLs that exist (default: make only the missing ones).
    #[serde(default)]
    pub rotate_urls: bool,
}

/// One webhook of a connection; `url` only when it was made by this call (shown once).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookUrl {
    /// Webhook name.
    pub name: String,
    /// Path of the delivery URL (`/v1/connect/webhooks/{token}`), new in this answer.
    pub path: Option<String>,
}

/// The answer of a setup: the URLs made and the new secret, shown once.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookSetup {
    /// The webhooks of the package.
    pub webhooks: Vec<WebhookUrl>,
    /// Scheme in force.
    pub scheme: SignatureScheme,
    /// Signature header (`hmac-sha256`).
    pub signature_header: Option<String>,
    /// Prefix of the digest (`hmac-sha256`).
    pub signature_prefix: Option<String>,
    /// Delivery id header.
    pub id_header: Option<String>,
    /// The new signing secret (none for scheme `none`).
    pub secret: Option<String>,
}

/// A stored (or dropped duplicate) delivery.
#[derive(Debug, Clone)]
pub struct Received {
    /// The delivery.
    pub delivery: Delivery,
    /// Whether it was a replay of a stored one (nothing stored).
    pub duplicate: bool,
}

/// A page of deliveries.
pub type DeliveriesPage = crate::api::Page<Delivery>;

/// One connection's token bucket.
#[derive(Debug)]
pub(super) struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Per-connection token buckets of this node.
pub(super) type Buckets = std::sync::Mutex<HashMap<(String, String), Bucket>>;

fn sha256_hex(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// A header name as HTTP allows it (RFC 9110 token), lower-cased.
fn header_name(name: &str, field: &str) -> Result<String, ServiceError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    if !ok {
        return Err(ServiceError::Invalid(format!(
            "signature.{field} must be a header name"
        )));
    }
    Ok(name.to_ascii_lowercase())
}

/// Whether a header may be passed to the handler: never credentials, cookies or signatures.
fn passed_on(name: &str, settings: &WebhookSettings) -> bool {
    const HIDDEN: [&str; 6] = [
        "authorization",
        "cookie",
        "signature",
        "token",
        "secret",
        "key",
    ];
    if HIDDEN.iter().any(|h| name.contains(h)) || name.starts_with("proxy-") {
        return false;
    }
    if settings.signature_header.as_deref() == Some(name) {
        return false;
    }
    name == "content-type"
        || name == "user-agent"
        || name.starts_with("x-")
        || name.starts_with("webhook-")
}

impl ConnectService {
    /// Makes the missing delivery URLs of a connection's webhooks (all of them with
    /// `rotate_urls`) and a new signing secret; returns them, shown this once.
    pub fn setup_webhooks(
        &self,
        workspace: &str,
        connection_id: &str,
        req: &WebhookSetupRequest,
    ) -> Result<WebhookSetup, ServiceError> {
        let c = self.store.get_connection(workspace, connection_id)?;
        let (_, def, _) = self.built_version(workspace, &c.package, &c.version)?;
        if def.webhooks.is_empty() {
            return Err(ServiceError::Invalid(
                "the connection's package defines no webhooks".into(),
            ));
        }
        let (scheme, signature_header, signature_prefix, id_header) =
            match req.signature.clone().unwrap_or(SignatureRequest::Standard) {
                SignatureRequest::Standard => (SignatureScheme::Standard, None, None, None),
                SignatureRequest::HmacSha256 {
                    header,
                    prefix,
                    id_header,
                } => (
                    SignatureScheme::HmacSha256,
                    Some(header_name(
                        header.as_deref().unwrap_or("X-Hub-Signature-256"),
                        "header",
                    )?),
                    Some(prefix.unwrap_or_else(|| "sha256=".into())),
                    id_header.map(|h| header_name(&h, "idHeader")).transpose()?,
                ),
                SignatureRequest::None { id_header } => (
                    SignatureScheme::None,
                    None,
                    None,
                    id_header.map(|h| header_name(&h, "idHeader")).transpose()?,
                ),
            };
        let key = crate::crypto::random_bytes::<32>()?;
        let secret = match scheme {
            SignatureScheme::Standard => Some(format!("whsec_{}", STANDARD.encode(key))),
            SignatureScheme::HmacSha256 => Some(hex::encode(key)),
            SignatureScheme::None => None,
        };
        let sealed = match &secret {
            Some(s) => self
                .crypto
                .seal(workspace, &secret_scope(connection_id), s.as_bytes())?,
            None => Vec::new(),
        };
        let existing = self.store.webhook_names(workspace, connection_id)?;
        let mut tokens = Vec::new();
        let mut urls = Vec::new();
        for w in &def.webhooks {
            let path = if req.rotate_urls || !existing.contains(&w.name) {
                let token = format!(
                    "whk_{}",
                    URL_SAFE_NO_PAD.encode(crate::crypto::random_bytes::<32>()?)
                );
                tokens.push((w.name.clone(), sha256_hex(&token)));
                Some(format!("{DELIVERY_PATH}{token}"))
            } else {
                None
            };
            urls.push(WebhookUrl {
                name: w.name.clone(),
                path,
            });
        }
        let settings = WebhookSettings {
            scheme,
            signature_header: signature_header.clone(),
            signature_prefix: signature_prefix.clone(),
            id_header: id_header.clone(),
            secret: sealed,
        };
        self.store
            .set_webhooks(workspace, connection_id, &settings, &tokens)?;
        Ok(WebhookSetup {
            webhooks: urls,
            scheme,
            signature_header,
            signature_prefix,
            id_header,
            secret,
        })
    }

    /// Takes one delivery from this node's token bucket of the connection.
    fn take_rate(&self, workspace: &str, connection_id: &str) -> Result<(), WebhookError> {
        let limits = self.limits.webhooks;
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let bucket = buckets
            .entry((workspace.to_string(), connection_id.to_string()))
            .or_insert(Bucket {
                tokens: f64::from(limits.burst),
                at: now,
            });
        let refill = now.duration_since(bucket.at).as_secs_f64() * limits.rate_per_second;
        bucket.tokens = (bucket.tokens + refill).min(f64::from(limits.burst));
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            return Ok(());
        }
        let wait = (1.0 - bucket.tokens) / limits.rate_per_second;
        Err(WebhookError::RateLimited {
            retry_after_secs: wait.ceil().max(1.0) as u64,
        })
    }

    /// The inbound path: finds the webhook of `token` (404 otherwise, without a write),
    /// takes the connection's rate, checks the signature, and stores the delivery (or finds
    /// its duplicate) before the caller answers. `headers` have lower-case names.
    pub fn receive_delivery(
        &self,
        token: &str,
        headers: &BTreeMap<String, String>,
        body: &[u8],
    ) -> Result<Received, WebhookError> {
        let target = self
            .store
            .find_webhook_token(&sha256_hex(token))?
            .ok_or(WebhookError::UnknownToken)?;
        let (ws, conn) = (&target.workspace, &target.connection_id);
        if body.len() > self.limits.webhooks.max_body_bytes {
            return Err(WebhookError::TooLarge(self.limits.webhooks.max_body_bytes));
        }
        self.take_rate(ws, conn)?;
        let settings = self
            .store
            .webhook_settings(ws, conn)?
            .ok_or(WebhookError::UnknownToken)?;
        // A disabled connection takes no deliveries (its sender sees why and retries later).
        if self.store.get_connection(ws, conn)?.status == ConnectionStatus::Disabled {
            return Err(ServiceError::Conflict("the connection is disabled".into()).into());
        }
        let header = |name: &str| headers.get(name).map(String::as_str);
        let own_id = format!("dlv_{}", uuid::Uuid::new_v4().simple());
        let sender_id = match settings.scheme {
            SignatureScheme::Standard => {
                let need = |n: &str| header(n).ok_or_else(|| SignatureError::Missing(n.into()));
                let (id, ts, sig) = (
                    need("webhook-id")?,
                    need("webhook-timestamp")?,
                    need("webhook-signature")?,
                );
                let secret = self.open_secret(ws, conn, &settings)?;
                let key = signature::standard_key(&secret).ok_or(SignatureError::Mismatch)?;
                signature::check_standard(
                    &key,
                    id,
                    ts,
                    sig,
                    body,
                    Utc::now().timestamp(),
                    self.limits.webhooks.timestamp_tolerance.as_secs(),
                )?;
                id.to_string()
            }
            SignatureScheme::HmacSha256 => {
                let name = settings.signature_header.as_deref().unwrap_or_default();
                let value = header(name).ok_or_else(|| SignatureError::Missing(name.into()))?;
                let secret = self.open_secret(ws, conn, &settings)?;
                let prefix = settings.signature_prefix.as_deref().unwrap_or_default();
                signature::check_hmac(secret.as_bytes(), prefix, value, body)?;
                settings
                    .id_header
                    .as_deref()
                    .and_then(header)
                    .map_or(own_id.clone(), str::to_string)
            }
            SignatureScheme::None => settings
                .id_header
                .as_deref()
                .and_then(header)
                .map_or(own_id.clone(), str::to_string),
        };
        if sender_id.is_empty() || sender_id.len() > 256 {
            return Err(
                ServiceError::Invalid("the delivery id must be 1 to 256 bytes".into()).into(),
            );
        }
        let passed: BTreeMap<&String, &String> = headers
            .iter()
            .filter(|(k, v)| passed_on(k, &settings) && v.len() <= 1024)
            .take(64)
            .collect();
        let new = NewDelivery {
            id: own_id,
            connection_id: conn.clone(),
            webhook: target.webhook.clone(),
            sender_id,
            body: body.to_vec(),
            headers: serde_json::to_string(&passed).unwrap_or_else(|_| "{}".into()),
        };
        let max = self.limits.webhooks.max_pending;
        match self.store.insert_delivery(ws, &new, max)? {
            DeliveryInsert::Stored(delivery) => {
                self.deliveries_due.notify_one();
                Ok(Received {
                    delivery,
                    duplicate: false,
                })
            }
            DeliveryInsert::Duplicate(delivery) => Ok(Received {
                delivery,
                duplicate: true,
            }),
            DeliveryInsert::InboxFull => Err(WebhookError::InboxFull {
                max,
                retry_after_secs: 30,
            }),
        }
    }

    fn open_secret(
        &self,
        workspace: &str,
        connection_id: &str,
        settings: &WebhookSettings,
    ) -> Result<String, WebhookError> {
        let bytes = self
            .crypto
            .open(workspace, &secret_scope(connection_id), &settings.secret)
            .map_err(ServiceError::from)?;
        String::from_utf8(bytes)
            .map_err(|_| ServiceError::Crypto(crate::crypto::CryptoError::Open).into())
    }

    /// Deliveries of a connection, newest first, optionally of one status.
    pub fn list_deliveries(
        &self,
        workspace: &str,
        connection_id: &str,
        status: Option<&str>,
        q: &PageQuery,
    ) -> Result<DeliveriesPage, ServiceError> {
        self.store.get_connection(workspace, connection_id)?;
        let status = status.map(DeliveryStatus::parse).transpose().map_err(|_| {
            ServiceError::Invalid("status must be pending, committed or failed".into())
        })?;
        let limit = q.limit();
        let items = self.store.list_deliveries(
            workspace,
            connection_id,
            status,
            q.cursor.as_deref(),
            limit,
        )?;
        let next_cursor = (items.len() as u32 == limit)
            .then(|| items.last().map(|d| d.id.clone()))
            .flatten();
        Ok(crate::api::Page { items, next_cursor })
    }

    /// One delivery of a connection.
    pub fn get_delivery(
        &self,
        workspace: &str,
        connection_id: &str,
        id: &str,
    ) -> Result<Delivery, ServiceError> {
        let d = self.store.get_delivery(workspace, id)?;
        if d.connection_id != connection_id {
            return Err(ServiceError::NotFound("delivery"));
        }
        Ok(d)
    }
}

/// What follows a connection id in the sealing scope of its webhook secret.
pub const WEBHOOK_SECRET_SCOPE: &str = "/webhook-secret";

/// The sealing scope of a connection's webhook secret (apart from its credentials): what
/// key rotation reseals it under, as if it were the credentials of this "connection".
pub fn secret_scope(connection_id: &str) -> String {
    format!("{connection_id}{WEBHOOK_SECRET_SCOPE}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_and_credential_headers_are_not_passed_on() {
        let s = WebhookSettings {
            scheme: SignatureScheme::HmacSha256,
            signature_header: Some("x-hub-signature-256".into()),
            signature_prefix: Some("sha256=".into()),
            id_header: None,
            secret: Vec::new(),
        };
        for hidden in [
            "authorization",
            "cookie",
            "x-hub-signature-256",
            "webhook-signature",
            "x-api-key",
            "x-auth-token",
            "proxy-authorization",
            "host",
        ] {
            assert!(!passed_on(hidden, &s), "{hidden}");
        }
        for shown in ["content-type", "user-agent", "x-github-event", "webhook-id"] {
            assert!(passed_on(shown, &s), "{shown}");
        }
    }
}
