//! The webhook part of the store: delivery tokens (hashed), signature settings (sealed
//! secret) and the inbox of deliveries. A delivery's move to committed happens inside
//! [`super::Records::commit`] (with its records); the rest is here.

use super::StoreError;
use crate::model::{Delivery, DeliveryStatus, FailureCategory, SignatureScheme};
use chrono::{DateTime, Utc};

/// A connection's signature settings, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookSettings {
    /// Scheme.
    pub scheme: SignatureScheme,
    /// Header with the signature (`hmac-sha256` only).
    pub signature_header: Option<String>,
    /// Text before the hex digest in that header (`sha256=` for GitHub).
    pub signature_prefix: Option<String>,
    /// Header with the sender's delivery id (`hmac-sha256` and `none`; `standard` uses `webhook-id`).
    pub id_header: Option<String>,
    /// The secret, sealed with the credential keys (empty for `none`).
    pub secret: Vec<u8>,
}

/// Which connection and webhook a delivery token opens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookTarget {
    /// Workspace.
    pub workspace: String,
    /// Connection id.
    pub connection_id: String,
    /// Webhook name.
    pub webhook: String,
}

/// A delivery to store.
#[derive(Debug, Clone)]
pub struct NewDelivery {
    /// sbx's id.
    pub id: String,
    /// Connection id.
    pub connection_id: String,
    /// Webhook name.
    pub webhook: String,
    /// The sender's delivery id (sbx's id when none).
    pub sender_id: String,
    /// The raw body.
    pub body: Vec<u8>,
    /// The headers passed on to the handler, as a JSON object.
    pub headers: String,
}

/// What storing a delivery did.
#[derive(Debug, Clone, PartialEq)]
pub enum DeliveryInsert {
    /// Stored as pending.
    Stored(Delivery),
    /// The connection has a delivery with this sender id already: nothing stored.
    Duplicate(Delivery),
    /// The connection has `max_pending` pending deliveries: nothing stored.
    InboxFull,
}

/// A stored delivery with what its job needs.
#[derive(Debug, Clone)]
pub struct DeliveryJob {
    /// Workspace.
    pub workspace: String,
    /// The delivery.
    pub delivery: Delivery,
    /// The raw body.
    pub body: Vec<u8>,
    /// The headers passed on, a JSON object's text.
    pub headers: String,
}

/// Webhook tokens, settings and the inbox.
pub trait Webhooks {
    /// Replaces a connection's signature settings and, in the same transaction, the tokens of
    /// the webhooks listed (`(webhook, sha256 hex of the token)`); other webhooks keep theirs.
    fn set_webhooks(
        &self,
        workspace: &str,
        connection_id: &str,
        settings: &WebhookSettings,
        tokens: &[(String, String)],
    ) -> Result<(), StoreError>;
    /// A connection's signature settings, if webhooks were set up.
    fn webhook_settings(
        &self,
        workspace: &str,
        connection_id: &str,
    ) -> Result<Option<WebhookSettings>, StoreError>;
    /// Names of the webhooks of a connection that have a token.
    fn webhook_names(
        &self,
        workspace: &str,
        connection_id: &str,
    ) -> Result<Vec<String>, StoreError>;
    /// The connection and webhook of a token hash.
    fn find_webhook_token(&self, token_hash: &str) -> Result<Option<WebhookTarget>, StoreError>;
    /// Stores a pending delivery unless its sender id is known for the connection or the
    /// connection's inbox is full (both checked in the same transaction).
    fn insert_delivery(
        &self,
        workspace: &str,
        d: &NewDelivery,
        max_pending: u64,
    ) -> Result<DeliveryInsert, StoreError>;
    /// One delivery.
    fn get_delivery(&self, workspace: &str, id: &str) -> Result<Delivery, StoreError>;
    /// Deliveries of a connection, newest first; `before` is the id of the last one of the
    /// previous page.
    fn list_deliveries(
        &self,
        workspace: &str,
        connection_id: &str,
        status: Option<DeliveryStatus>,
        before: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Delivery>, StoreError>;
    /// Pending deliveries due at `now` (oldest first): `(workspace, id)`.
    fn due_deliveries(
        &self,
        now: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<(String, String)>, StoreError>;
    /// Claims a due pending delivery for a job: counts the attempt, records the run and
    /// moves its due time to `lease_until` (no other worker takes it meanwhile). `None` when
    /// it is no longer pending or no longer due (another worker took it).
    fn claim_delivery(
        &self,
        workspace: &str,
        id: &str,
        run_id: &str,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> Result<Option<DeliveryJob>, StoreError>;
    /// A pending delivery is due again at `at` (a platform failure's backoff, or a restart).
    fn retry_delivery(
        &self,
        workspace: &str,
        id: &str,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError>;
    /// Pending deliveries whose job ran in one of `runs` are due now (their runs were failed
    /// at a restart: the deliveries need not wait for their lease).
    fn release_deliveries(&self, runs: &[String]) -> Result<usize, StoreError>;
    /// Marks a pending delivery failed (its body is dropped); false if it was not pending.
    fn fail_delivery(
        &self,
        workspace: &str,
        id: &str,
        category: FailureCategory,
        kind: &str,
    ) -> Result<bool, StoreError>;
    /// Pending deliveries of a connection.
    fn pending_deliveries(&self, workspace: &str, connection_id: &str) -> Result<u64, StoreError>;
    /// Every sealed webhook secret (key rotation): (workspace, connection id, blob); none for
    /// scheme `none`.
    fn webhook_secrets(&self) -> Result<Vec<(String, String, Vec<u8>)>, StoreError>;
    /// Writes `new` as a connection's webhook secret only if it is still `old`
    /// (compare-and-set: a setup meanwhile wins); whether it wrote.
    fn replace_webhook_secret(
        &self,
        workspace: &str,
        connection_id: &str,
        old: &[u8],
        new: &[u8],
    ) -> Result<bool, StoreError>;
}
