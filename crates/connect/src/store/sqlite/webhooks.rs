//! Webhook tokens, settings and the inbox on SQLite.

use super::{ms, now_ms, opt_time, time, SqliteStore};
use crate::model::{Delivery, DeliveryStatus, FailureCategory, SignatureScheme};
use crate::store::webhooks::{
    DeliveryInsert, DeliveryJob, NewDelivery, WebhookSettings, WebhookTarget, Webhooks,
};
use crate::store::StoreError;
use chrono::{DateTime, Utc};
use rusqlite::{params, OptionalExtension, Row, Transaction};

/// The columns [`delivery`] reads, in its order.
pub(super) const DELIVERY_COLUMNS: &str =
    "id, connection_id, webhook, sender_id, status, attempts, \
     received_at, finished_at, records_committed, failure_category, failure_kind, run_id";

/// A delivery row (columns as [`DELIVERY_COLUMNS`]).
fn delivery(row: &Row<'_>) -> rusqlite::Result<Result<Delivery, StoreError>> {
    let status: String = row.get(4)?;
    let category: Option<String> = row.get(9)?;
    let attempts: i64 = row.get(5)?;
    let records: i64 = row.get(8)?;
    let base = (
        row.get::<_, String>(0)?,
        row.get::<_, String>(1)?,
        row.get::<_, String>(2)?,
        row.get::<_, String>(3)?,
        time(row, 6)?,
        opt_time(row, 7)?,
        row.get::<_, Option<String>>(10)?,
        row.get::<_, Option<String>>(11)?,
    );
    Ok((|| {
        Ok(Delivery {
            id: base.0,
            connection_id: base.1,
            webhook: base.2,
            sender_id: base.3,
            status: DeliveryStatus::parse(&status)?,
            attempts: attempts.max(0) as u32,
            received_at: base.4,
            finished_at: base.5,
            records_committed: records.max(0) as u64,
            failure_category: category
                .as_deref()
                .map(FailureCategory::parse)
                .transpose()?,
            failure_kind: base.6,
            run_id: base.7,
        })
    })())
}

fn get(tx: &rusqlite::Connection, workspace: &str, id: &str) -> Result<Delivery, StoreError> {
    tx.query_row(
        &format!(
            "SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries WHERE workspace = ?1 AND id = ?2"
        ),
        params![workspace, id],
        delivery,
    )
    .optional()?
    .ok_or(StoreError::NotFound("delivery"))?
}

/// Moves a pending delivery to committed inside a sync commit's transaction.
pub(super) fn settle_committed(
    tx: &Transaction<'_>,
    workspace: &str,
    id: &str,
    records: u64,
) -> Result<bool, StoreError> {
    let n = tx.execute(
        "UPDATE webhook_deliveries SET status = 'committed', records_committed = ?3,
             finished_at = ?4, body = X'' WHERE workspace = ?1 AND id = ?2 AND status = 'pending'",
        params![workspace, id, records as i64, now_ms()],
    )?;
    Ok(n == 1)
}

impl Webhooks for SqliteStore {
    fn set_webhooks(
        &self,
        workspace: &str,
        connection_id: &str,
        settings: &WebhookSettings,
        tokens: &[(String, String)],
    ) -> Result<(), StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        let now = now_ms();
        tx.execute(
            "INSERT INTO webhook_settings (workspace, connection_id, scheme, signature_header,
                 signature_prefix, id_header, secret, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
             ON CONFLICT (workspace, connection_id) DO UPDATE SET scheme = excluded.scheme,
                 signature_header = excluded.signature_header, signature_prefix = excluded.signature_prefix,
                 id_header = excluded.id_header, secret = excluded.secret, updated_at = excluded.updated_at",
            params![
                workspace,
                connection_id,
                settings.scheme.as_str(),
                settings.signature_header,
                settings.signature_prefix,
                settings.id_header,
                settings.secret,
                now
            ],
        )?;
        for (webhook, hash) in tokens {
            tx.execute(
                "DELETE FROM webhook_tokens WHERE workspace = ?1 AND connection_id = ?2 AND webhook = ?3",
                params![workspace, connection_id, webhook],
            )?;
            tx.execute(
                "INSERT INTO webhook_tokens (token_hash, workspace, connection_id, webhook, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![hash, workspace, connection_id, webhook, now],
            )?;
        }
        tx.commit()?;
        Ok(())
    }

    fn webhook_settings(
        &self,
        workspace: &str,
        connection_id: &str,
    ) -> Result<Option<WebhookSettings>, StoreError> {
        let row = self
            .lock()
            .query_row(
                "SELECT scheme, signature_header, signature_prefix, id_header, secret
                 FROM webhook_settings WHERE workspace = ?1 AND connection_id = ?2",
                params![workspace, connection_id],
                |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                    ))
                },
            )
            .optional()?;
        row.map(
            |(scheme, signature_header, signature_prefix, id_header, secret)| {
                Ok(WebhookSettings {
                    scheme: SignatureScheme::parse(&scheme)?,
                    signature_header,
                    signature_prefix,
                    id_header,
                    secret,
                })
            },
        )
        .transpose()
    }

    fn webhook_names(
        &self,
        workspace: &str,
        connection_id: &str,
    ) -> Result<Vec<String>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare(
            "SELECT webhook FROM webhook_tokens WHERE workspace = ?1 AND connection_id = ?2 ORDER BY webhook",
        )?;
        let names = stmt
            .query_map(params![workspace, connection_id], |r| r.get(0))?
            .collect::<Result<Vec<String>, _>>()?;
        Ok(names)
    }

    fn find_webhook_token(&self, token_hash: &str) -> Result<Option<WebhookTarget>, StoreError> {
        Ok(self
            .lock()
            .query_row(
                "SELECT workspace, connection_id, webhook FROM webhook_tokens WHERE token_hash = ?1",
                [token_hash],
                |r| {
                    Ok(WebhookTarget {
                        workspace: r.get(0)?,
                        connection_id: r.get(1)?,
                        webhook: r.get(2)?,
                    })
                },
            )
            .optional()?)
    }

    fn insert_delivery(
        &self,
        workspace: &str,
        d: &NewDelivery,
        max_pending: u64,
    ) -> Result<DeliveryInsert, StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let known: Option<String> = tx
            .query_row(
                "SELECT id FROM webhook_deliveries WHERE workspace = ?1 AND connection_id = ?2 AND sender_id = ?3",
                params![workspace, d.connection_id, d.sender_id],
                |r| r.get(0),
            )
            .optional()?;
        if let Some(id) = known {
            return Ok(DeliveryInsert::Duplicate(get(&tx, workspace, &id)?));
        }
        let pending: i64 = tx.query_row(
            "SELECT COUNT(*) FROM webhook_deliveries WHERE workspace = ?1 AND connection_id = ?2 AND status = 'pending'",
            params![workspace, d.connection_id],
            |r| r.get(0),
        )?;
        if pending.max(0) as u64 >= max_pending {
            return Ok(DeliveryInsert::InboxFull);
        }
        let now = now_ms();
        tx.execute(
            "INSERT INTO webhook_deliveries (id, workspace, connection_id, webhook, sender_id, status,
                 body, headers, received_at, next_attempt_at)
             VALUES (?1, ?2, ?3, ?4, ?5, 'pending', ?6, ?7, ?8, ?8)",
            params![d.id, workspace, d.connection_id, d.webhook, d.sender_id, d.body, d.headers, now],
        )?;
        let stored = get(&tx, workspace, &d.id)?;
        tx.commit()?;
        Ok(DeliveryInsert::Stored(stored))
    }

    fn get_delivery(&self, workspace: &str, id: &str) -> Result<Delivery, StoreError> {
        get(&self.lock(), workspace, id)
    }

    fn list_deliveries(
        &self,
        workspace: &str,
        connection_id: &str,
        status: Option<DeliveryStatus>,
        before: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Delivery>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare(&format!(
            "SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries
             WHERE workspace = ?1 AND connection_id = ?2 AND (?3 IS NULL OR status = ?3)
               AND (?4 IS NULL OR seq < (SELECT seq FROM webhook_deliveries WHERE workspace = ?1 AND id = ?4))
             ORDER BY seq DESC LIMIT ?5"
        ))?;
        let rows = stmt
            .query_map(
                params![
                    workspace,
                    connection_id,
                    status.map(|s| s.as_str()),
                    before,
                    limit
                ],
                delivery,
            )?
            .collect::<Result<Vec<_>, _>>()?;
        rows.into_iter().collect()
    }

    fn due_deliveries(
        &self,
        now: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<(String, String)>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare(
            "SELECT workspace, id FROM webhook_deliveries WHERE status = 'pending' AND next_attempt_at <= ?1
             ORDER BY next_attempt_at, seq LIMIT ?2",
        )?;
        let rows = stmt
            .query_map(params![ms(now), limit], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    fn claim_delivery(
        &self,
        workspace: &str,
        id: &str,
        run_id: &str,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> Result<Option<DeliveryJob>, StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let n = tx.execute(
            "UPDATE webhook_deliveries SET attempts = attempts + 1, run_id = ?3, next_attempt_at = ?5
             WHERE workspace = ?1 AND id = ?2 AND status = 'pending' AND next_attempt_at <= ?4",
            params![workspace, id, run_id, ms(now), ms(lease_until)],
        )?;
        if n == 0 {
            return Ok(None);
        }
        let (body, headers): (Vec<u8>, String) = tx.query_row(
            "SELECT body, headers FROM webhook_deliveries WHERE workspace = ?1 AND id = ?2",
            params![workspace, id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        let delivery = get(&tx, workspace, id)?;
        tx.commit()?;
        Ok(Some(DeliveryJob {
            workspace: workspace.to_string(),
            delivery,
            body,
            headers,
        }))
    }

    fn retry_delivery(
        &self,
        workspace: &str,
        id: &str,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        self.lock().execute(
            "UPDATE webhook_deliveries SET next_attempt_at = ?3
             WHERE workspace = ?1 AND id = ?2 AND status = 'pending'",
            params![workspace, id, ms(at)],
        )?;
        Ok(())
    }

    fn release_deliveries(&self, runs: &[String]) -> Result<usize, StoreError> {
        let conn = self.lock();
        let mut n = 0;
        for run in runs {
            n += conn.execute(
                "UPDATE webhook_deliveries SET next_attempt_at = ?2 WHERE run_id = ?1 AND status = 'pending'",
                params![run, now_ms()],
            )?;
        }
        Ok(n)
    }

    fn fail_delivery(
        &self,
        workspace: &str,
        id: &str,
        category: FailureCategory,
        kind: &str,
    ) -> Result<bool, StoreError> {
        let n = self.lock().execute(
            "UPDATE webhook_deliveries SET status = 'failed', failure_category = ?3, failure_kind = ?4,
                 finished_at = ?5, body = X'' WHERE workspace = ?1 AND id = ?2 AND status = 'pending'",
            params![workspace, id, category.as_str(), kind, now_ms()],
        )?;
        Ok(n == 1)
    }

    fn pending_deliveries(&self, workspace: &str, connection_id: &str) -> Result<u64, StoreError> {
        let n: i64 = self.lock().query_row(
            "SELECT COUNT(*) FROM webhook_deliveries WHERE workspace = ?1 AND connection_id = ?2 AND status = 'pending'",
            params![workspace, connection_id],
            |r| r.get(0),
        )?;
        Ok(n.max(0) as u64)
    }

    fn webhook_secrets(&self) -> Result<Vec<(String, String, Vec<u8>)>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare(
            "SELECT workspace, connection_id, secret FROM webhook_settings
             WHERE length(secret) > 0 ORDER BY workspace, connection_id",
        )?;
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    fn replace_webhook_secret(
        &self,
        workspace: &str,
        connection_id: &str,
        old: &[u8],
        new: &[u8],
    ) -> Result<bool, StoreError> {
        let n = self.lock().execute(
            "UPDATE webhook_settings SET secret = ?4
             WHERE workspace = ?1 AND connection_id = ?2 AND secret = ?3",
            params![workspace, connection_id, old, new],
        )?;
        Ok(n == 1)
    }
}
