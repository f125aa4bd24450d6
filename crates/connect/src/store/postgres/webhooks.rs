//! Webhook tokens, settings and the inbox on PostgreSQL.

use super::{opt_time, time, unsigned, PostgresStore};
use crate::model::{Delivery, DeliveryStatus, FailureCategory, SignatureScheme};
use crate::store::webhooks::{
    DeliveryInsert, DeliveryJob, NewDelivery, WebhookSettings, WebhookTarget, Webhooks,
};
use crate::store::StoreError;
use chrono::{DateTime, Utc};
use postgres::{GenericClient, Row};

const DELIVERY_COLUMNS: &str = "id, connection_id, webhook, sender_id, status, attempts, \
     received_at, finished_at, records_committed, failure_category, failure_kind, run_id";

fn delivery(row: &Row) -> Result<Delivery, StoreError> {
    let status: String = row.try_get(4)?;
    let category: Option<String> = row.try_get(9)?;
    Ok(Delivery {
        id: row.try_get(0)?,
        connection_id: row.try_get(1)?,
        webhook: row.try_get(2)?,
        sender_id: row.try_get(3)?,
        status: DeliveryStatus::parse(&status)?,
        attempts: unsigned(row, 5)?.min(u64::from(u32::MAX)) as u32,
        received_at: time(row, 6)?,
        finished_at: opt_time(row, 7)?,
        records_committed: unsigned(row, 8)?,
        failure_category: category
            .as_deref()
            .map(FailureCategory::parse)
            .transpose()?,
        failure_kind: row.try_get(10)?,
        run_id: row.try_get(11)?,
    })
}

fn get(c: &mut impl GenericClient, ws: &str, id: &str) -> Result<Delivery, StoreError> {
    let row = c
        .query_opt(
            &format!(
                "SELECT {DELIVERY_COLUMNS} FROM connect_webhook_deliveries WHERE workspace = $1 AND id = $2"
            ),
            &[&ws, &id],
        )?
        .ok_or(StoreError::NotFound("delivery"))?;
    delivery(&row)
}

impl Webhooks for PostgresStore {
    fn set_webhooks(
        &self,
        workspace: &str,
        connection_id: &str,
        settings: &WebhookSettings,
        tokens: &[(String, String)],
    ) -> Result<(), StoreError> {
        let (ws, conn) = (workspace.to_string(), connection_id.to_string());
        let (s, tokens) = (settings.clone(), tokens.to_vec());
        self.run(move |c| {
            let mut tx = c.transaction()?;
            let now = Utc::now();
            tx.execute(
                "INSERT INTO connect_webhook_settings (workspace, connection_id, scheme, signature_header,
                     signature_prefix, id_header, secret, updated_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                 ON CONFLICT (workspace, connection_id) DO UPDATE SET scheme = EXCLUDED.scheme,
                     signature_header = EXCLUDED.signature_header, signature_prefix = EXCLUDED.signature_prefix,
                     id_header = EXCLUDED.id_header, secret = EXCLUDED.secret, updated_at = EXCLUDED.updated_at",
                &[
                    &ws,
                    &conn,
                    &s.scheme.as_str(),
                    &s.signature_header,
                    &s.signature_prefix,
                    &s.id_header,
                    &s.secret,
                    &now,
                ],
            )?;
            for (webhook, hash) in &tokens {
                tx.execute(
                    "DELETE FROM connect_webhook_tokens WHERE workspace = $1 AND connection_id = $2 AND webhook = $3",
                    &[&ws, &conn, webhook],
                )?;
                tx.execute(
                    "INSERT INTO connect_webhook_tokens (token_hash, workspace, connection_id, webhook, created_at)
                     VALUES ($1, $2, $3, $4, $5)",
                    &[hash, &ws, &conn, webhook, &now],
                )?;
            }
            tx.commit()?;
            Ok(())
        })
    }

    fn webhook_settings(
        &self,
        workspace: &str,
        connection_id: &str,
    ) -> Result<Option<WebhookSettings>, StoreError> {
        let (ws, conn) = (workspace.to_string(), connection_id.to_string());
        self.run(move |c| {
            let Some(r) = c.query_opt(
                "SELECT scheme, signature_header, signature_prefix, id_header, secret
                 FROM connect_webhook_settings WHERE workspace = $1 AND connection_id = $2",
                &[&ws, &conn],
            )?
            else {
                return Ok(None);
            };
            let scheme: String = r.try_get(0)?;
            Ok(Some(WebhookSettings {
                scheme: SignatureScheme::parse(&scheme)?,
                signature_header: r.try_get(1)?,
                signature_prefix: r.try_get(2)?,
                id_header: r.try_get(3)?,
                secret: r.try_get(4)?,
            }))
        })
    }

    fn webhook_names(
        &self,
        workspace: &str,
        connection_id: &str,
    ) -> Result<Vec<String>, StoreError> {
        let (ws, conn) = (workspace.to_string(), connection_id.to_string());
        self.run(move |c| {
            c.query(
                "SELECT webhook FROM connect_webhook_tokens WHERE workspace = $1 AND connection_id = $2 ORDER BY webhook",
                &[&ws, &conn],
            )?
            .iter()
            .map(|r| Ok(r.try_get(0)?))
            .collect()
        })
    }

    fn find_webhook_token(&self, token_hash: &str) -> Result<Option<WebhookTarget>, StoreError> {
        let hash = token_hash.to_string();
        self.run(move |c| {
            c.query_opt(
                "SELECT workspace, connection_id, webhook FROM connect_webhook_tokens WHERE token_hash = $1",
                &[&hash],
            )?
            .map(|r| {
                Ok(WebhookTarget {
                    workspace: r.try_get(0)?,
                    connection_id: r.try_get(1)?,
                    webhook: r.try_get(2)?,
                })
            })
            .transpose()
        })
    }

    fn insert_delivery(
        &self,
        workspace: &str,
        d: &NewDelivery,
        max_pending: u64,
    ) -> Result<DeliveryInsert, StoreError> {
        let (ws, d) = (workspace.to_string(), d.clone());
        self.run(move |c| {
            let mut tx = c.transaction()?;
            // One writer per connection at a time: the duplicate and inbox checks and the
            // insert see the same rows.
            tx.execute(
                "SELECT pg_advisory_xact_lock(hashtext($1 || '/' || $2))",
                &[&ws, &d.connection_id],
            )?;
            let known = tx.query_opt(
                "SELECT id FROM connect_webhook_deliveries WHERE workspace = $1 AND connection_id = $2 AND sender_id = $3",
                &[&ws, &d.connection_id, &d.sender_id],
            )?;
            if let Some(r) = known {
                let id: String = r.try_get(0)?;
                return Ok(DeliveryInsert::Duplicate(get(&mut tx, &ws, &id)?));
            }
            let pending: i64 = tx
                .query_one(
                    "SELECT COUNT(*) FROM connect_webhook_deliveries WHERE workspace = $1 AND connection_id = $2 AND status = 'pending'",
                    &[&ws, &d.connection_id],
                )?
                .try_get(0)?;
            if pending.max(0) as u64 >= max_pending {
                return Ok(DeliveryInsert::InboxFull);
            }
            let now = Utc::now();
            tx.execute(
                "INSERT INTO connect_webhook_deliveries (id, workspace, connection_id, webhook, sender_id,
                     status, body, headers, received_at, next_attempt_at)
                 VALUES ($1, $2, $3, $4, $5, 'pending', $6, $7, $8, $8)",
                &[&d.id, &ws, &d.connection_id, &d.webhook, &d.sender_id, &d.body, &d.headers, &now],
            )?;
            let stored = get(&mut tx, &ws, &d.id)?;
            tx.commit()?;
            Ok(DeliveryInsert::Stored(stored))
        })
    }

    fn get_delivery(&self, workspace: &str, id: &str) -> Result<Delivery, StoreError> {
        let (ws, id) = (workspace.to_string(), id.to_string());
        self.run(move |c| get(c, &ws, &id))
    }

    fn list_deliveries(
        &self,
        workspace: &str,
        connection_id: &str,
        status: Option<DeliveryStatus>,
        before: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Delivery>, StoreError> {
        let (ws, conn) = (workspace.to_string(), connection_id.to_string());
        let status = status.map(|s| s.as_str().to_string());
        let before = before.map(str::to_string);
        self.run(move |c| {
            c.query(
                &format!(
                    "SELECT {DELIVERY_COLUMNS} FROM connect_webhook_deliveries
                     WHERE workspace = $1 AND connection_id = $2 AND ($3::text IS NULL OR status = $3)
                       AND ($4::text IS NULL OR seq < (SELECT seq FROM connect_webhook_deliveries WHERE workspace = $1 AND id = $4))
                     ORDER BY seq DESC LIMIT $5"
                ),
                &[&ws, &conn, &status, &before, &i64::from(limit)],
            )?
            .iter()
            .map(delivery)
            .collect()
        })
    }

    fn due_deliveries(
        &self,
        now: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<(String, String)>, StoreError> {
        self.run(move |c| {
            c.query(
                "SELECT workspace, id FROM connect_webhook_deliveries
                 WHERE status = 'pending' AND next_attempt_at <= $1 ORDER BY next_attempt_at, seq LIMIT $2",
                &[&now, &i64::from(limit)],
            )?
            .iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
            .collect()
        })
    }

    fn claim_delivery(
        &self,
        workspace: &str,
        id: &str,
        run_id: &str,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> Result<Option<DeliveryJob>, StoreError> {
        let (ws, id, run) = (workspace.to_string(), id.to_string(), run_id.to_string());
        self.run(move |c| {
            let mut tx = c.transaction()?;
            let n = tx.execute(
                "UPDATE connect_webhook_deliveries SET attempts = attempts + 1, run_id = $3, next_attempt_at = $5
                 WHERE workspace = $1 AND id = $2 AND status = 'pending' AND next_attempt_at <= $4",
                &[&ws, &id, &run, &now, &lease_until],
            )?;
            if n == 0 {
                return Ok(None);
            }
            let r = tx.query_one(
                "SELECT body, headers FROM connect_webhook_deliveries WHERE workspace = $1 AND id = $2",
                &[&ws, &id],
            )?;
            let (body, headers): (Vec<u8>, String) = (r.try_get(0)?, r.try_get(1)?);
            let delivery = get(&mut tx, &ws, &id)?;
            tx.commit()?;
            Ok(Some(DeliveryJob {
                workspace: ws,
                delivery,
                body,
                headers,
            }))
        })
    }

    fn retry_delivery(
        &self,
        workspace: &str,
        id: &str,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let (ws, id) = (workspace.to_string(), id.to_string());
        self.run(move |c| {
            c.execute(
                "UPDATE connect_webhook_deliveries SET next_attempt_at = $3
                 WHERE workspace = $1 AND id = $2 AND status = 'pending'",
                &[&ws, &id, &at],
            )?;
            Ok(())
        })
    }

    fn release_deliveries(&self, runs: &[String]) -> Result<usize, StoreError> {
        let runs = runs.to_vec();
        self.run(move |c| {
            let n = c.execute(
                "UPDATE connect_webhook_deliveries SET next_attempt_at = $2
                 WHERE run_id = ANY($1) AND status = 'pending'",
                &[&runs, &Utc::now()],
            )?;
            Ok(n as usize)
        })
    }

    fn fail_delivery(
        &self,
        workspace: &str,
        id: &str,
        category: FailureCategory,
        kind: &str,
    ) -> Result<bool, StoreError> {
        let (ws, id, kind) = (workspace.to_string(), id.to_string(), kind.to_string());
        self.run(move |c| {
            let n = c.execute(
                "UPDATE connect_webhook_deliveries SET status = 'failed', failure_category = $3,
                     failure_kind = $4, finished_at = $5, body = ''::bytea
                 WHERE workspace = $1 AND id = $2 AND status = 'pending'",
                &[&ws, &id, &category.as_str(), &kind, &Utc::now()],
            )?;
            Ok(n == 1)
        })
    }

    fn pending_deliveries(&self, workspace: &str, connection_id: &str) -> Result<u64, StoreError> {
        let (ws, conn) = (workspace.to_string(), connection_id.to_string());
        self.run(move |c| {
            let n: i64 = c
                .query_one(
                    "SELECT COUNT(*) FROM connect_webhook_deliveries WHERE workspace = $1 AND connection_id = $2 AND status = 'pending'",
                    &[&ws, &conn],
                )?
                .try_get(0)?;
            Ok(n.max(0) as u64)
        })
    }

    fn webhook_secrets(&self) -> Result<Vec<(String, String, Vec<u8>)>, StoreError> {
        self.run(move |c| {
            c.query(
                "SELECT workspace, connection_id, secret FROM connect_webhook_settings
                 WHERE length(secret) > 0 ORDER BY workspace, connection_id",
                &[],
            )?
            .iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
            .collect()
        })
    }

    fn replace_webhook_secret(
        &self,
        workspace: &str,
        connection_id: &str,
        old: &[u8],
        new: &[u8],
    ) -> Result<bool, StoreError> {
        let (ws, conn, old, new) = (
            workspace.to_string(),
            connection_id.to_string(),
            old.to_vec(),
            new.to_vec(),
        );
        self.run(move |c| {
            let n = c.execute(
                "UPDATE connect_webhook_settings SET secret = $4
                 WHERE workspace = $1 AND connection_id = $2 AND secret = $3",
                &[&ws, &conn, &old, &new],
            )?;
            Ok(n == 1)
        })
    }
}
