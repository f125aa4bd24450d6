//! Idle sandboxes sleep: one task of this node freezes the host processes
//! of every sandbox (and warm pool member) of the node that has had no
//! request for `--freeze-idle-after-secs` and runs nothing but its agent.
//!
//! Why: an idle gVisor sandbox burns ~2 % of a host core in systrap's own
//! wake-ups, even paused (crates/runsc/NOTES.md §10); 100 idle sandboxes
//! took two cores. Frozen, it burns none and keeps its memory, and the next
//! frame sbxd writes to its agent thaws it first (`client::doze`), so no API
//! call can tell, except for the thaw's millisecond on the first request.
//!
//! "Runs nothing" is the guest listing only PID 1 as its processes: a
//! process the guest started in the background (a server waiting for
//! connections, a `sleep`) keeps the sandbox awake, because freezing it
//! would stop its clocks from the guest's point of view. The relay sbxd
//! reaches a sandbox through after a restart is not the guest's and does not
//! count. The count is a quiet call: it neither wakes a sleeping sandbox nor
//! counts as a request.

use super::Service;
use crate::runtime::{AgentCallError, AgentConn, Runtime};
use futures::StreamExt;
use sbx_agent_proto::client::Thaw;
use sbx_agent_proto::{Reply, Request};
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

/// How long the agent gets to count its processes.
const COUNT_WAIT: Duration = Duration::from_secs(1);

/// How many sandboxes one round asks and freezes at once.
const FREEZE_CONCURRENCY: usize = 8;

/// The number of processes in the guest, PID 1 included and sbxd's relays
/// not, asked quietly: `Asleep` when the sandbox sleeps (it was not woken).
pub(super) async fn guest_processes(conn: &AgentConn) -> Result<u64, AgentCallError> {
    match conn.call_quietly(Request::GuestProcesses, COUNT_WAIT).await {
        Ok((Reply::GuestProcesses { count }, _)) => Ok(count),
        Ok((other, _)) => Err(AgentCallError::Unexpected(format!("{other:?}"))),
        // An agent older than `guest_processes` (a sandbox booted before an
        // upgrade of sbxd) answers it with an error: count its `/proc`
        // instead, relays included.
        Err(AgentCallError::Agent(_)) => proc_entries(conn).await,
        Err(e) => Err(e),
    }
}

/// The pids in the guest's `/proc`, every process counted.
async fn proc_entries(conn: &AgentConn) -> Result<u64, AgentCallError> {
    let request = Request::ListDir {
        path: "/proc".into(),
        depth: 1,
    };
    match conn.call_quietly(request, COUNT_WAIT).await? {
        (Reply::Dir { entries }, _) => Ok(entries
            .iter()
            .filter(|e| !e.name.is_empty() && e.name.bytes().all(|b| b.is_ascii_digit()))
            .count() as u64),
        (other, _) => Err(AgentCallError::Unexpected(format!("{other:?}"))),
    }
}

impl Service {
    /// How many sandboxes and warm pool members of this node sleep now.
    pub(super) fn asleep_count(&self) -> usize {
        let sandboxes = self
            .agents
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter(|c| c.is_asleep())
            .count();
        let members = self
            .pool_members()
            .iter()
            .filter(|(_, c)| c.is_asleep())
            .count();
        sandboxes + members
    }

    /// Freezes each sandbox of this node that has been idle for the
    /// configured time with only its agent running. Returns how many it froze.
    pub async fn freeze_idle(self: &Arc<Self>) -> usize {
        let after = self.config.limits.freeze_idle_after;
        if after.is_zero() {
            return 0;
        }
        let mut candidates: Vec<(Uuid, AgentConn)> = self
            .agents
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(id, conn)| (*id, conn.clone()))
            .collect();
        candidates.extend(self.pool_members());
        // A few at a time: a guest that does not answer its count costs the
        // round its own second, not one second per sandbox after it.
        futures::stream::iter(candidates)
            .map(|(id, conn)| self.freeze_if_idle(id, conn, after))
            .buffer_unordered(FREEZE_CONCURRENCY)
            .filter(|frozen| futures::future::ready(*frozen))
            .count()
            .await
    }

    /// Freezes one sandbox if it is idle; whether it did.
    async fn freeze_if_idle(&self, id: Uuid, conn: AgentConn, after: Duration) -> bool {
        if conn.is_asleep() && !self.runtime.is_frozen(id) {
            // Thawed behind the connection's back (a runsc call for a
            // direct transfer, an operator): mark it awake so that it can
            // sleep again instead of burning CPU while counted asleep.
            conn.wake().await;
            return false;
        }
        if conn.is_closed() || conn.is_asleep() || conn.idle_for() < after {
            return false;
        }
        // Only PID 1: anything else (and any failure to tell) keeps it awake.
        if !matches!(guest_processes(&conn).await, Ok(1)) {
            return false;
        }
        let freeze = freeze(self.runtime.clone(), id);
        match conn.sleep_if_idle(after, freeze).await {
            Ok(true) => {
                tracing::debug!(sandbox = %id, "idle sandbox frozen");
                true
            }
            Ok(false) => false,
            Err(e) => {
                tracing::warn!(sandbox = %id, error = %e, "cannot freeze an idle sandbox");
                false
            }
        }
    }
}

/// Freezes sandbox `id`; the returned [`Thaw`] undoes it.
async fn freeze(runtime: Arc<dyn Runtime>, id: Uuid) -> Result<Thaw, crate::runtime::RuntimeError> {
    runtime.freeze(id).await?;
    Ok(Box::new(move || {
        Box::pin(async move {
            if let Err(e) = runtime.thaw(id).await {
                tracing::warn!(sandbox = %id, error = %e, "cannot thaw a sleeping sandbox");
            }
        })
    }))
}
