//! Backpressure of a process's output towards its open streams.
//!
//! For a process started with `backpressure`, every open `process_stream`
//! registers the offset it will send next. An output reader (stdout/stderr
//! pipe or pty master) that would push bytes the slowest open stream has not
//! sent out of the ring waits instead of pushing; it stops reading, so the
//! kernel buffer fills and the process blocks in `write`. A stream that sends
//! a chunk, ends, is cancelled or loses its connection wakes the readers.
//! With no stream open the ring drops old output as usual.

use crate::table::Table;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::watch;
use uuid::Uuid;

/// Stream positions of one process started with `backpressure`.
pub(crate) struct Flow {
    positions: HashMap<u64, u64>,
    next_token: u64,
    /// Output readers currently holding back a read.
    pub(crate) waiting: u8,
    /// Set whenever a reader had to wait; cleared by the exit grace check.
    pub(crate) held: bool,
    /// Set whenever a stream advanced or closed; cleared by the exit grace check.
    pub(crate) progressed: bool,
    advanced: watch::Sender<()>,
}

impl Flow {
    pub(crate) fn new() -> Flow {
        Flow {
            positions: HashMap::new(),
            next_token: 0,
            waiting: 0,
            held: false,
            progressed: false,
            advanced: watch::Sender::new(()),
        }
    }

    /// Registers a stream about to send from `position`; returns its token.
    pub(crate) fn open(&mut self, position: u64) -> u64 {
        let token = self.next_token;
        self.next_token += 1;
        self.positions.insert(token, position);
        token
    }

    /// The stream `token` has sent everything before `position`.
    pub(crate) fn advance(&mut self, token: u64, position: u64) {
        if let Some(p) = self.positions.get_mut(&token) {
            if position > *p {
                *p = position;
                self.progressed = true;
                self.advanced.send_replace(());
            }
        }
    }

    /// The stream `token` is gone.
    pub(crate) fn close(&mut self, token: u64) {
        if self.positions.remove(&token).is_some() {
            self.progressed = true;
            self.advanced.send_replace(());
        }
    }

    /// Position of the slowest open stream, if any is open.
    pub(crate) fn slowest(&self) -> Option<u64> {
        self.positions.values().copied().min()
    }

    /// Changes whenever a stream advances or closes.
    pub(crate) fn subscribe(&self) -> watch::Receiver<()> {
        self.advanced.subscribe()
    }
}

/// An open stream's registration; dropping it (stream finished, failed,
/// cancelled or its connection gone) unregisters it and wakes the readers.
pub struct StreamSlot {
    pub(crate) table: Arc<Table>,
    pub(crate) id: Uuid,
    pub(crate) token: u64,
}

impl StreamSlot {
    /// Everything before `position` was handed to the connection.
    pub fn advance(&self, position: u64) {
        self.table
            .with_flow(self.id, |f| f.advance(self.token, position));
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.table.with_flow(self.id, |f| f.close(self.token));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slowest_tracks_open_streams() {
        let mut f = Flow::new();
        let mut rx = f.subscribe();
        assert_eq!(f.slowest(), None);
        let a = f.open(10);
        let b = f.open(5);
        assert_eq!(f.slowest(), Some(5));
        rx.borrow_and_update();
        f.advance(b, 20);
        assert!(rx.has_changed().unwrap());
        assert_eq!(f.slowest(), Some(10));
        rx.borrow_and_update();
        f.advance(a, 3);
        assert!(!rx.has_changed().unwrap());
        f.close(a);
        assert!(rx.has_changed().unwrap());
        assert_eq!(f.slowest(), Some(20));
        f.close(b);
        assert_eq!(f.slowest(), None);
    }
}
