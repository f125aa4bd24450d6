//! Input for a process: its stdin pipe or its terminal's master, written by
//! one blocking thread per process.
//!
//! Writes are queued in the order the connection read them and written one
//! after the other, so input is never reordered; each `process_input` is
//! answered once its bytes are written. A process that does not read its
//! input fills the pipe: then the writer thread waits, later input queues
//! up (bounded by [`MAX_QUEUED_INPUT_BYTES`]) and the callers wait for their
//! answers, while the agent's request loop goes on. A blocking thread (not
//! an epoll-registered fd) for the same reason as pipes.rs.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// Most input bytes waiting to be written to one process.
pub const MAX_QUEUED_INPUT_BYTES: usize = 16 * 1024 * 1024;

/// Why input could not be queued.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// More than [`MAX_QUEUED_INPUT_BYTES`] already waiting.
    #[error("more than {MAX_QUEUED_INPUT_BYTES} bytes of input already waiting")]
    Backlog,
    /// The writer is gone (the input was closed).
    #[error("input is closed")]
    Closed,
}

enum Msg {
    Data(Vec<u8>, oneshot::Sender<io::Result<()>>),
    Close(oneshot::Sender<()>),
}

/// The agent's handle on a process's input; dropping it closes the input
/// once the queued bytes are written.
#[derive(Debug)]
pub struct Input {
    tx: mpsc::UnboundedSender<Msg>,
    queued: Arc<AtomicUsize>,
}

impl std::fmt::Debug for Msg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Msg::Data(d, _) => write!(f, "Data({} bytes)", d.len()),
            Msg::Close(_) => write!(f, "Close"),
        }
    }
}

impl Input {
    /// Starts the writer thread for `fd` (a pipe's write end or a terminal master).
    /// Call inside the tokio runtime.
    pub fn spawn(fd: OwnedFd) -> Input {
        let (tx, mut rx) = mpsc::unbounded_channel::<Msg>();
        let queued = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&queued);
        let mut file = File::from(fd);
        tokio::task::spawn_blocking(move || {
            while let Some(msg) = rx.blocking_recv() {
                match msg {
                    Msg::Data(bytes, reply) => {
                        let result = file.write_all(&bytes);
                        counter.fetch_sub(bytes.len(), Ordering::SeqCst);
                        let _ = reply.send(result);
                    }
                    Msg::Close(reply) => {
                        drop(file);
                        let _ = reply.send(());
                        return;
                    }
                }
            }
        });
        Input { tx, queued }
    }

    /// Queues `bytes`; the receiver tells when they were written (or why not).
    pub fn write(&self, bytes: Vec<u8>) -> Result<oneshot::Receiver<io::Result<()>>, InputError> {
        let len = bytes.len();
        let before = self.queued.fetch_add(len, Ordering::SeqCst);
        if before > 0 && before + len > MAX_QUEUED_INPUT_BYTES {
            self.queued.fetch_sub(len, Ordering::SeqCst);
            return Err(InputError::Backlog);
        }
        let (reply, rx) = oneshot::channel();
        if self.tx.send(Msg::Data(bytes, reply)).is_err() {
            self.queued.fetch_sub(len, Ordering::SeqCst);
            return Err(InputError::Closed);
        }
        Ok(rx)
    }

    /// Closes the input after the queued bytes; the receiver fires once closed.
    pub fn close(self) -> oneshot::Receiver<()> {
        let (reply, rx) = oneshot::channel();
        // A writer already gone has closed the fd: the receiver then errs,
        // which callers treat as closed too.
        let _ = self.tx.send(Msg::Close(reply));
        rx
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[tokio::test]
    async fn writes_in_order_then_closes() {
        let (rd, wr) = std::io::pipe().unwrap();
        let input = Input::spawn(OwnedFd::from(wr));
        let reader = std::thread::spawn(move || {
            let mut rd = rd;
            let mut s = String::new();
            rd.read_to_string(&mut s).unwrap();
            s
        });
        let mut pending = Vec::new();
        for i in 0..100 {
            pending.push(input.write(format!("{i},").into_bytes()).unwrap());
        }
        for p in pending {
            p.await.unwrap().unwrap();
        }
        input.close().await.unwrap();
        let expected: String = (0..100).map(|i| format!("{i},")).collect();
        assert_eq!(reader.join().unwrap(), expected);
    }

    #[tokio::test]
    async fn a_full_pipe_bounds_the_backlog_and_a_gone_reader_fails_writes() {
        let (rd, wr) = std::io::pipe().unwrap();
        let input = Input::spawn(OwnedFd::from(wr));
        // Nobody reads: the first write fills the pipe and blocks the thread.
        let first = input.write(vec![0u8; MAX_QUEUED_INPUT_BYTES]).unwrap();
        assert!(matches!(input.write(vec![1]), Err(InputError::Backlog)));
        drop(rd);
        // The reader went away: the blocked write ends with EPIPE.
        let e = first.await.unwrap().unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::BrokenPipe);
    }
}
