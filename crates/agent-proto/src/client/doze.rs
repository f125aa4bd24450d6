//! Letting an idle sandbox sleep, and waking it before the next frame.
//!
//! An idle gVisor sandbox still burns ~2 % of a host core (systrap's own
//! wake-ups; crates/runsc/NOTES.md §9), so sbxd freezes the host processes of
//! a sandbox that has nothing to do. The connection is where that must be
//! undone: every path to the agent (API requests, the warm pool's handout,
//! snapshots, cancels) writes frames here, so a frame is never written to a
//! frozen agent, where it would wait for an answer that cannot come.
//!
//! The lock is what keeps the two sides apart: a sender checks and marks
//! activity under the read lock; the freezer checks activity under the write
//! lock, so a sender either marked activity before the check (no freeze) or
//! waits until the freeze is done and then thaws.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Undoes a freeze; runs once, before the next frame is written.
pub type Thaw = Box<dyn FnOnce() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// A connection's sleep state and last activity.
pub(super) struct Doze {
    /// `Some` while the sandbox is frozen: how to thaw it.
    thaw: tokio::sync::RwLock<Option<Thaw>>,
    /// Mirrors `thaw.is_some()` for readers that must not wait.
    asleep: AtomicBool,
    /// When a frame last went either way.
    last_active: Mutex<Instant>,
}

impl Doze {
    pub(super) fn new() -> Self {
        Doze {
            thaw: tokio::sync::RwLock::new(None),
            asleep: AtomicBool::new(false),
            last_active: Mutex::new(Instant::now()),
        }
    }

    /// Records activity now.
    pub(super) fn touch(&self) {
        *self.last_active.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    /// Time since the last activity.
    pub(super) fn idle_for(&self) -> Duration {
        self.last_active
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed()
    }

    /// Whether the sandbox is frozen (as far as this connection knows).
    pub(super) fn is_asleep(&self) -> bool {
        self.asleep.load(Ordering::Acquire)
    }

    /// Thaws the sandbox if it sleeps and records activity; returns once a
    /// frame may be written.
    pub(super) async fn wake(&self) {
        loop {
            {
                let state = self.thaw.read().await;
                if state.is_none() {
                    self.touch();
                    return;
                }
            }
            let mut state = self.thaw.write().await;
            if let Some(thaw) = state.take() {
                thaw().await;
                self.asleep.store(false, Ordering::Release);
            }
        }
    }

    /// Runs `freeze` if nothing happened for `idle` and `busy()` is false,
    /// keeping the thaw it returns for the next frame. Ok(false): not idle
    /// (or already asleep); nothing was frozen.
    pub(super) async fn sleep<E>(
        &self,
        idle: Duration,
        busy: impl FnOnce() -> bool,
        freeze: impl Future<Output = Result<Thaw, E>>,
    ) -> Result<bool, E> {
        let mut state = self.thaw.write().await;
        if state.is_some() || self.idle_for() < idle || busy() {
            return Ok(false);
        }
        let thaw = freeze.await?;
        *state = Some(thaw);
        self.asleep.store(true, Ordering::Release);
        Ok(true)
    }
}
