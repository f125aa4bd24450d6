//! Backpressure of a process's output towards its open streams.
//!
//! For a process started with `backpressure`, every open `process_stream`
//! registers the offset it will send next. An output reader (stdout/stderr
//! pipe or pty master) that would push bytes the slowest open stream has not
//! sent out of the ring waits instead of pushing; it stops reading, so the
//! kernel buffer fills and the process blocks in `write`. A stream that sends
//! a chunk, ends, is cancelled or loses its connection wakes the readers.
//! With no stream open the ring drops old output as usual.
//!
//! The first stream is opened by a request of its own, after the start's
//! reply, and a fast process can fill the ring before it arrives. So a
//! process starts with a hold at offset 0, as if a stream were open there:
//! the first stream that opens takes its place, and if none comes within
//! [`START_HOLD_LIMIT`] the hold goes and the ring drops old output.

use crate::table::Table;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use uuid::Uuid;

/// How long a process's output waits for its first stream.
pub const START_HOLD_LIMIT: Duration = Duration::from_secs(10);

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
    /// The token of the hold at offset 0 until the first stream opens.
    start_hold: Option<u64>,
}

impl Flow {
    /// A process's flow, holding its output from offset 0 for the first stream.
    pub(crate) fn new() -> Flow {
        let mut flow = Flow {
            positions: HashMap::new(),
            next_token: 0,
            waiting: 0,
            held: false,
            progressed: false,
            advanced: watch::Sender::new(()),
            start_hold: None,
        };
        flow.start_hold = Some(flow.open(0));
        flow
    }

    /// Ends the start hold (a stream opened, or nobody came in time).
    pub(crate) fn release_start_hold(&mut self) {
        if let Some(token) = self.start_hold.take() {
            self.close(token);
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
        assert_eq!(f.slowest(), Some(0), "held for the first stream");
        f.release_start_hold();
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

    #[test]
    fn the_start_hold_keeps_output_until_released() {
        let mut f = Flow::new();
        let a = f.open(0);
        f.advance(a, 100);
        assert_eq!(f.slowest(), Some(0), "the hold is still at 0");
        f.release_start_hold();
        assert_eq!(f.slowest(), Some(100));
        f.release_start_hold();
        assert_eq!(f.slowest(), Some(100), "releasing twice is harmless");
    }
}
