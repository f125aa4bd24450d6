//! The E2B timeout: each node ends (destroys, or pauses with auto-pause) its
//! own sandboxes past their end time, and any node forgets the records of
//! sandboxes that ended.

use super::records::E2bRecord;
use super::E2b;
use chrono::Utc;
use std::collections::HashSet;
use std::sync::Arc;
use uuid::Uuid;

impl E2b {
    /// Ends (destroys, or pauses with auto-pause) this node's running sandboxes
    /// past their end time; runs every second. Each node sweeps only the
    /// sandboxes it runs (pause and destroy act on its host); a lost node's
    /// sandboxes are failed over by the cluster and their records forgotten.
    /// Each expiry is claimed by a compare-and-set of the record before it is
    /// acted on: a `connect` or a timeout set meanwhile wins over it, or loses
    /// and reads again, never both.
    pub async fn enforce_timeouts(self: &Arc<Self>) {
        let node = self.svc.config().node.id.clone();
        let due = match self.store().e2b_records_due(&node, Utc::now()).await {
            Ok(due) => due,
            Err(e) => {
                tracing::warn!(error = %e, "E2B timeout sweep: reading the store");
                return;
            }
        };
        for record in due {
            let id = record.sandbox_id;
            if !self.lock_ending().insert(id) {
                continue;
            }
            let this = self.clone();
            tokio::spawn(async move {
                this.end_one(record).await;
                this.lock_ending().remove(&id);
            });
        }
    }

    /// Claims one expiry and acts on it.
    async fn end_one(&self, record: E2bRecord) {
        let id = record.sandbox_id;
        let mut claim = record.clone();
        match self.write_record(&mut claim).await {
            Ok(true) => {}
            // Extended (or claimed) by another writer since the sweep read it.
            Ok(false) => return,
            Err(e) => {
                tracing::warn!(sandbox = %id, error = %e, "E2B timeout: claiming the expiry");
                return;
            }
        }
        let done = if record.auto_pause {
            self.svc.pause(&record.workspace, id).await.map(|_| ())
        } else {
            self.svc.destroy(&record.workspace, id).await.map(|_| ())
        };
        match done {
            Ok(()) => {
                tracing::info!(sandbox = %id, paused = record.auto_pause, "E2B timeout reached")
            }
            Err(e) => {
                tracing::warn!(sandbox = %id, error = %e, "E2B timeout: could not end the sandbox")
            }
        }
    }

    /// Deletes the E2B records and preview settings of sandboxes that ended
    /// (any node may: the store decides which, and deleting twice deletes nothing).
    pub async fn forget_ended(&self) {
        match self.store().delete_ended_e2b_records().await {
            Ok(0) => {}
            Ok(n) => tracing::debug!(records = n, "forgot the E2B records of ended sandboxes"),
            Err(e) => tracing::warn!(error = %e, "could not forget E2B records of ended sandboxes"),
        }
        // The preview settings of /v1 sandboxes end with their sandboxes too;
        // this sweep runs on every node, E2B or not.
        match self.store().delete_ended_previews().await {
            Ok(0) => {}
            Ok(n) => tracing::debug!(rows = n, "forgot the preview settings of ended sandboxes"),
            Err(e) => {
                tracing::warn!(error = %e, "could not forget preview settings of ended sandboxes")
            }
        }
    }

    fn lock_ending(&self) -> std::sync::MutexGuard<'_, HashSet<Uuid>> {
        self.ending.lock().unwrap_or_else(|p| p.into_inner())
    }
}
