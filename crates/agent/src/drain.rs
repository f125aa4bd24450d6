//! After a managed process exits: when its output is complete.
//!
//! The process is terminal once both output pipes reached end of file. A
//! descendant can hold a pipe open long after the process exited (`cmd &`),
//! so the process is also declared terminal when its pipes stay quiet, and
//! then output still arriving is dropped. "Quiet" must not be mistaken for a
//! reader that is merely slow: on a loaded machine the reader thread can go
//! without running for longer than [`PIPE_GRACE`] while the pipe still holds
//! the process's last bytes. So:
//! - output held back for a stream (backpressure) keeps the process open while
//!   some stream keeps sending ([`EXIT_STALL_LIMIT`]);
//! - output still being pushed keeps it open (up to [`EXIT_DRAIN_LIMIT`] for a
//!   descendant that writes on and on);
//! - when no member of the process group is left, nobody can be holding the
//!   pipes but a detached daemon, end of file is due, and the pipes get
//!   [`ORPHAN_PIPE_GRACE`] of quiet instead of [`PIPE_GRACE`].

use crate::table::Table;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use uuid::Uuid;

/// How long output pipes may stay open and quiet after the process exited,
/// while members of its process group (which may hold them) are alive.
pub const PIPE_GRACE: Duration = Duration::from_millis(100);
/// The same, once the process group is empty.
pub const ORPHAN_PIPE_GRACE: Duration = Duration::from_secs(2);
/// After the exit, output held back for an open stream (backpressure) keeps
/// the process non-terminal only while some stream sent something within
/// this long; a stalled stream then no longer holds the process's end.
pub const EXIT_STALL_LIMIT: Duration = Duration::from_secs(5);
/// Output that keeps arriving after the exit (a descendant writing) holds
/// the process's end at most this long.
pub const EXIT_DRAIN_LIMIT: Duration = Duration::from_secs(10);

/// Watches the process `id` (leader `pid`), which exited with its output
/// pipes still open, and finalizes it once its output is complete or the
/// limits above say to stop waiting.
pub(crate) fn spawn(table: Arc<Table>, id: Uuid, pid: Option<i32>) {
    tokio::spawn(async move {
        let exited = Instant::now();
        let mut stalled = Duration::ZERO;
        let mut quiet = Duration::ZERO;
        loop {
            tokio::time::sleep(PIPE_GRACE).await;
            let mut inner = table.lock();
            let Some(p) = inner.procs.get_mut(&id) else {
                return;
            };
            if p.info.state.is_terminal() {
                return;
            }
            quiet = match std::mem::take(&mut p.pushed) {
                true => Duration::ZERO,
                false => quiet + PIPE_GRACE,
            };
            if let Some(flow) = p.flow.as_mut() {
                let held = flow.waiting > 0 || flow.held;
                flow.held = false;
                stalled = match std::mem::take(&mut flow.progressed) {
                    true => Duration::ZERO,
                    false => stalled + PIPE_GRACE,
                };
                if held && stalled < EXIT_STALL_LIMIT {
                    continue;
                }
            }
            let grace = pid.map_or(PIPE_GRACE, quiet_grace);
            if quiet < grace && exited.elapsed() < EXIT_DRAIN_LIMIT {
                continue;
            }
            inner.finalize(id);
            return;
        }
    });
}

/// How long the pipes of the exited leader `pgid` may stay quiet before its
/// output counts as complete: [`PIPE_GRACE`] while members of its process
/// group live, [`ORPHAN_PIPE_GRACE`] once none does.
pub(crate) fn quiet_grace(pgid: i32) -> Duration {
    match group_alive(pgid) {
        true => PIPE_GRACE,
        false => ORPHAN_PIPE_GRACE,
    }
}

/// Whether any process of the group `pgid` still lives. The leader was
/// reaped, but its pid stays the group's id while a member lives, so it
/// cannot have been reused for another process.
fn group_alive(pgid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    unsafe { libc::kill(-pgid, 0) == 0 }
}
