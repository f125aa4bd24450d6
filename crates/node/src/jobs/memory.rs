//! The memory of a job or build sandbox: the size of its fresh `/tmp` (which lives in that
//! memory) and the watchdog that stops it at its first OOM kill.

use crate::runtime::Runtime;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

/// Largest fresh `/tmp` (it lives in the sandbox's memory, so also at most half the budget).
const TMP_MAX_BYTES: u64 = 256 * 1024 * 1024;
/// How often a job sandbox's cgroup is checked for an OOM kill.
const MEMORY_WATCH_INTERVAL: Duration = Duration::from_millis(200);

/// The size of a job's fresh `/tmp`.
pub(super) fn tmp_bytes(memory_mb: u32) -> u64 {
    (u64::from(memory_mb) * 1024 * 1024 / 2).min(TMP_MAX_BYTES)
}

/// Stops the sandbox as soon as its cgroup records an OOM kill: a gVisor sandbox at its
/// memory limit can stall instead of dying, and a job or build must not wait for its deadline.
pub(super) async fn watch_memory(runtime: Arc<dyn Runtime>, id: Uuid, hit: Arc<AtomicBool>) {
    loop {
        tokio::time::sleep(MEMORY_WATCH_INTERVAL).await;
        if runtime.death_reason(id).is_some() {
            hit.store(true, Ordering::SeqCst);
            tracing::info!(sandbox = %id, "job sandbox reached its memory limit; stopping it");
            if let Err(e) = runtime.destroy(id).await {
                tracing::error!(sandbox = %id, error = %e, "stopping a job sandbox at its memory limit");
            }
            return;
        }
    }
}
