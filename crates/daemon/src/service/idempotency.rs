//! `Idempotency-Key` claims: a repeat of exec, process start, signal or
//! snapshot create with the same key (per tenant, path and key) gets the
//! first response instead of running twice.
//!
//! A claim is written to the store before the request runs and its response
//! after. It names its owner (the boot id of the sbxd running it) and carries
//! a lease that the owner renews while it is alive. A claim still running, in
//! this process or in another sbxd on the same database (its lease is live),
//! is waited for. A claim left unfinished by a process that stopped (a crash
//! or restart mid-request: its lease ran out) is never run again: it answers
//! `operation_ambiguous`. On embedded SQLite no other process can hold a
//! claim, so the leases of earlier runs end at start instead of running out.

use super::{Result, Service, ServiceError};
use chrono::Utc;
use sbx_store::{IdempotencyBegin, IdempotencyRecord, StoreError};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// How often a repeat polls a claim that is still running.
const POLL: Duration = Duration::from_millis(100);
/// Longest a repeat waits for the first request (exec may take 5 minutes).
const MAX_WAIT: Duration = Duration::from_secs(330);
/// How long a claim's owner counts as alive without renewing its lease.
pub const CLAIM_LEASE: Duration = Duration::from_secs(30);
/// How often an sbxd renews the leases of the claims it runs: well inside
/// [`CLAIM_LEASE`], so that a slow database or a busy runtime does not let a
/// live claim pass for an interrupted one.
pub const LEASE_RENEWAL: Duration = Duration::from_secs(10);

fn chrono_duration(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}

/// What to do with a request that carries an `Idempotency-Key`.
#[derive(Debug, Clone, PartialEq)]
pub enum Claim {
    /// The key is ours: run the request, then call `idempotency_finish` or `idempotency_forget`.
    Run,
    /// The first request finished: send its response again (status, body).
    Replay(u16, Vec<u8>),
}

/// Identifies one claim.
#[derive(Debug, Clone)]
pub struct ClaimKey {
    /// Tenant scope.
    pub tenant: String,
    /// Request path (holds the sandbox and process ids).
    pub path: String,
    /// The client's key.
    pub key: String,
}

/// The end of a claimed request that the store refused to record (full disk).
#[derive(Debug, Clone)]
enum Outcome {
    /// The request ran: its response.
    Finished(u16, Vec<u8>),
    /// The request did nothing: the claim is to be released.
    Released,
}

/// Ends of claims waiting for the store to take them, by (tenant, path, key).
/// Without them a repeat would wait for a claim that nobody will finish.
#[derive(Debug, Default)]
pub(super) struct Unrecorded(Mutex<HashMap<(String, String, String), Outcome>>);

impl Unrecorded {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String, String), Outcome>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn id(key: &ClaimKey) -> (String, String, String) {
    (key.tenant.clone(), key.path.clone(), key.key.clone())
}

impl Service {
    /// Claims `key` for a request with `fingerprint`, waiting for a first request still running here.
    pub async fn idempotency_claim(&self, key: &ClaimKey, fingerprint: &str) -> Result<Claim> {
        let started = tokio::time::Instant::now();
        loop {
            let now = Utc::now();
            let ttl = chrono::Duration::from_std(self.config.limits.idempotency_ttl)
                .unwrap_or(chrono::Duration::hours(24));
            let record = IdempotencyRecord {
                tenant: key.tenant.clone(),
                path: key.path.clone(),
                key: key.key.clone(),
                fingerprint: fingerprint.to_string(),
                owner: self.boot_id,
                created_at: now,
                expires_at: now + ttl,
                lease_until: now + chrono_duration(CLAIM_LEASE),
                response: None,
            };
            let existing = match self.store.idempotency_begin(&record, now).await? {
                IdempotencyBegin::Started => return Ok(Claim::Run),
                IdempotencyBegin::Existing(e) => e,
            };
            if existing.fingerprint != fingerprint {
                return Err(ServiceError::IdempotencyKeyReused(format!(
                    "Idempotency-Key {:?} was first used with a different request to {}; use a new key for a new request",
                    key.key, key.path
                )));
            }
            if let Some((status, body)) = existing.response {
                return Ok(Claim::Replay(status, body));
            }
            if existing.owner == self.boot_id {
                // Bound first: the lock must not be held across the match (its arms take it).
                let unrecorded = self.unrecorded.lock().get(&id(key)).cloned();
                match unrecorded {
                    // The first request's response is here, only not stored yet.
                    Some(Outcome::Finished(status, body)) => {
                        self.idempotency_finish(key, status, &body).await;
                        return Ok(Claim::Replay(status, body));
                    }
                    // The first request did nothing: release the claim, then claim it afresh.
                    Some(Outcome::Released) => {
                        self.store
                            .idempotency_forget(&key.tenant, &key.path, &key.key)
                            .await?;
                        self.unrecorded.lock().remove(&id(key));
                        continue;
                    }
                    None => {}
                }
            }
            if existing.owner != self.boot_id && existing.lease_until <= now {
                return Err(ServiceError::Ambiguous(format!(
                    "the first request with Idempotency-Key {:?} was interrupted: the sbxd running it \
                     stopped (a restart or crash); it may or may not have happened, and it will not \
                     be run again",
                    key.key
                )));
            }
            if started.elapsed() > MAX_WAIT {
                return Err(ServiceError::Ambiguous(format!(
                    "the first request with Idempotency-Key {:?} is still running",
                    key.key
                )));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Renews the leases of the claims this process is running (call every [`LEASE_RENEWAL`]).
    pub async fn renew_idempotency_leases(&self) {
        let until = Utc::now() + chrono_duration(CLAIM_LEASE);
        if let Err(e) = self.store.idempotency_renew(self.boot_id, until).await {
            // Repeats of these requests may answer operation_ambiguous once the leases run out.
            tracing::warn!(error = %e, "renewing idempotency claim leases");
        }
    }

    /// On a database this process holds alone, ends the leases of claims left by earlier
    /// runs at once, so that their repeats answer without waiting for them to run out.
    pub(super) async fn abandon_earlier_claims(&self) -> Result<()> {
        if !self.store.is_shared() {
            let n = self.store.idempotency_abandon_others(self.boot_id).await?;
            if n > 0 {
                tracing::info!(n, "idempotency claims interrupted by the last stop");
            }
        }
        Ok(())
    }

    /// Stores the response of a claimed request.
    pub async fn idempotency_finish(&self, key: &ClaimKey, status: u16, body: &[u8]) {
        match self
            .store
            .idempotency_finish(&key.tenant, &key.path, &key.key, status, body)
            .await
        {
            Ok(()) => {
                self.unrecorded.lock().remove(&id(key));
            }
            // Kept here: a repeat gets it from memory, the janitor stores it later.
            Err(StoreError::Full(_)) => {
                tracing::warn!(path = %key.path, "data disk full: idempotent response kept in memory until it can be stored");
                self.unrecorded
                    .lock()
                    .insert(id(key), Outcome::Finished(status, body.to_vec()));
            }
            // The claim stays unfinished: a repeat waits, then answers operation_ambiguous.
            Err(e) => {
                tracing::error!(error = %e, path = %key.path, "storing an idempotent response")
            }
        }
    }

    /// Releases a claim whose request did nothing, so that a repeat runs it.
    pub async fn idempotency_forget(&self, key: &ClaimKey) {
        match self
            .store
            .idempotency_forget(&key.tenant, &key.path, &key.key)
            .await
        {
            Ok(()) => {}
            // A repeat releases it itself once the store takes writes again.
            Err(StoreError::Full(_)) => {
                self.unrecorded.lock().insert(id(key), Outcome::Released);
            }
            Err(e) => {
                tracing::error!(error = %e, path = %key.path, "releasing an idempotency claim")
            }
        }
    }

    /// Writes the claim ends that a full disk kept in memory (the janitor calls this).
    async fn flush_unrecorded(&self) {
        let pending: Vec<_> = self
            .unrecorded
            .lock()
            .iter()
            .map(|(k, o)| (k.clone(), o.clone()))
            .collect();
        for ((tenant, path, key), outcome) in pending {
            let written = match &outcome {
                Outcome::Finished(status, body) => {
                    self.store
                        .idempotency_finish(&tenant, &path, &key, *status, body)
                        .await
                }
                Outcome::Released => self.store.idempotency_forget(&tenant, &path, &key).await,
            };
            if written.is_err() {
                return;
            }
            self.unrecorded.lock().remove(&(tenant, path, key));
        }
    }

    /// Deletes expired claims and stores what a full disk kept in memory (the sweeper calls this).
    pub async fn idempotency_janitor(&self) {
        self.flush_unrecorded().await;
        match self.store.idempotency_expire(Utc::now()).await {
            Ok(0) => {}
            Ok(n) => tracing::debug!(n, "expired idempotency keys removed"),
            Err(e) => tracing::warn!(error = %e, "expiring idempotency keys"),
        }
    }
}
