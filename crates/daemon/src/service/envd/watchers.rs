//! Buffered watches (`CreateWatcher` / `GetWatcherEvents` / `RemoveWatcher`,
//! used by the Python sync client): a task moves a watch's events into a
//! bounded buffer that the caller drains by id.

use super::fs::{FsEvent, FsEvents};
use super::{EnvdError, Result};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use tokio::task::AbortHandle;
use uuid::Uuid;

/// Most live watchers per sandbox.
pub const MAX_WATCHERS_PER_SANDBOX: usize = 32;
/// Most undrained events a watcher keeps; older ones are dropped first.
pub const MAX_BUFFERED_EVENTS: usize = 10_000;

#[derive(Default)]
struct Buffer {
    events: VecDeque<FsEvent>,
    /// Why the watch ended, reported once by the next drain.
    ended: Option<String>,
}

/// One buffered watch.
pub struct Watcher {
    buffer: Arc<Mutex<Buffer>>,
    task: AbortHandle,
}

impl Watcher {
    /// Starts moving `events` into a buffer.
    pub fn start(mut events: FsEvents) -> Watcher {
        let buffer = Arc::new(Mutex::new(Buffer::default()));
        let sink = Arc::clone(&buffer);
        let task = tokio::spawn(async move {
            while let Some(event) = events.recv().await {
                let mut b = sink.lock().unwrap_or_else(|p| p.into_inner());
                match event {
                    Ok(e) => {
                        if b.events.len() == MAX_BUFFERED_EVENTS {
                            b.events.pop_front();
                        }
                        b.events.push_back(e);
                    }
                    Err(e) => {
                        b.ended = Some(e.to_string());
                        return;
                    }
                }
            }
        });
        Watcher {
            buffer,
            task: task.abort_handle(),
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        // Ending the task drops the watch's receiver, which cancels it in the agent.
        self.task.abort();
    }
}

/// Every buffered watch, by sandbox and id.
#[derive(Default)]
pub struct Watchers {
    all: Mutex<HashMap<Uuid, HashMap<String, Watcher>>>,
}

impl Watchers {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, HashMap<String, Watcher>>> {
        self.all.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps a watcher; answers its id.
    pub fn add(&self, sandbox: Uuid, watcher: Watcher) -> Result<String> {
        let mut all = self.lock();
        let mine = all.entry(sandbox).or_default();
        if mine.len() >= MAX_WATCHERS_PER_SANDBOX {
            return Err(EnvdError::ResourceExhausted(format!(
                "at most {MAX_WATCHERS_PER_SANDBOX} watchers per sandbox; remove one first"
            )));
        }
        let id = Uuid::new_v4().simple().to_string();
        mine.insert(id.clone(), watcher);
        Ok(id)
    }

    /// The events buffered since the last drain; a watch that ended answers
    /// its reason once and is forgotten.
    pub fn drain(&self, sandbox: Uuid, id: &str) -> Result<Vec<FsEvent>> {
        let mut all = self.lock();
        let Some(watcher) = all.get_mut(&sandbox).and_then(|m| m.get_mut(id)) else {
            return Err(not_found(id));
        };
        let mut b = watcher.buffer.lock().unwrap_or_else(|p| p.into_inner());
        let events: Vec<FsEvent> = b.events.drain(..).collect();
        if let Some(why) = b.ended.take() {
            drop(b);
            if let Some(m) = all.get_mut(&sandbox) {
                m.remove(id);
            }
            if events.is_empty() {
                return Err(EnvdError::Unavailable(format!("the watcher ended: {why}")));
            }
        }
        Ok(events)
    }

    /// Stops a watcher.
    pub fn remove(&self, sandbox: Uuid, id: &str) -> Result<()> {
        let mut all = self.lock();
        let removed = all.get_mut(&sandbox).and_then(|m| m.remove(id));
        if all.get(&sandbox).is_some_and(|m| m.is_empty()) {
            all.remove(&sandbox);
        }
        removed.map(|_| ()).ok_or_else(|| not_found(id))
    }
}

fn not_found(id: &str) -> EnvdError {
    EnvdError::NotFound(format!("watcher '{id}' not found"))
}
