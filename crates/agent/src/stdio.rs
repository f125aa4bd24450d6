//! The stdio channel: sbxd's end of a host socket pair is PID 1's stdin and
//! stdout, so sbxd reaches the agent with no relay process in between.
//!
//! The channel outlives sessions (see `sbx_agent_proto::attach`): each attach
//! marker from sbxd ends the current session, cancelling its requests, and
//! starts a new one whose frames are the only ones written after the
//! answering marker. Plain blocking threads read and write the two host
//! files: nothing here is registered with epoll (restored copies of an agent
//! holding host fds in epoll were not trusted; see crates/runsc/NOTES.md §8).

use crate::server::{decode_lenient, encode_or_error, Connection, ServerError};
use crate::{console, Agent};
use sbx_agent_proto::attach::{self, Nonce, Scanner};
use sbx_agent_proto::{CodecError, Frame, MAX_FRAME_BYTES};
use std::fs::File;
use std::io::{BufReader, BufWriter, ErrorKind, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Frames queued towards the writer thread.
const OUTBOUND_QUEUE: usize = 8;
/// The writer's buffer: only the bytes written into it are ever touched.
const WRITE_BUFFER_BYTES: usize = 256 * 1024;
/// The reader's buffer. std's `BufReader` zeroes all of it on the first read
/// (`File`-like readers get no uninitialised reads on stable Rust), so every
/// sandbox holds this much of its memory for good; frames larger than it are
/// read straight into their own buffer, so a small one costs no throughput
/// (crates/runsc/NOTES.md section 12: at 256 KiB, 0.6 MiB more per idle
/// sandbox on the host).
const READ_BUFFER_BYTES: usize = 32 * 1024;
/// After EOF (the sbxd that held the other end is gone), how often the
/// reader tries again: a restore gives the same guest file a new peer.
const EOF_RETRY: Duration = Duration::from_secs(1);

/// What the reader thread saw.
enum Incoming {
    Attach(Nonce),
    Frame(Box<Frame>),
    BadMessage {
        id: u64,
        message: String,
    },
    /// The peer is gone (or the stream broke); the session ends.
    Lost,
}

/// Takes PID 1's stdin and stdout for the channel when stdin is a socket
/// (sbxd's pair), as close-on-exec copies; fd 0 becomes `/dev/null` and
/// fd 1 the console (fd 2), so nothing a guest process could inherit
/// reaches the channel. `None`: stdin is not a socket (no channel).
pub fn take() -> std::io::Result<Option<(File, File)>> {
    // SAFETY: fstat into a zeroed stat buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(0, &mut st) } != 0 || st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Ok(None);
    }
    let dup = |fd: i32| -> std::io::Result<File> {
        // SAFETY: F_DUPFD_CLOEXEC returns a new fd we own.
        let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
        if new < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `new` is a fresh fd owned by nobody else.
        Ok(unsafe { File::from_raw_fd(new) })
    };
    let input = dup(0)?;
    let output = dup(1)?;
    // gVisor may import the host socket non-blocking (fds 0 and 1 share its
    // file description): the threads below want plain blocking I/O.
    for f in [&input, &output] {
        set_blocking(f.as_raw_fd());
    }
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")?;
    // SAFETY: dup2 onto the standard fds, from fds we hold.
    if unsafe { libc::dup2(null.as_raw_fd(), 0) } < 0 || unsafe { libc::dup2(2, 1) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(Some((input, output)))
}

fn set_blocking(fd: i32) {
    // SAFETY: fcntl on a descriptor this process owns.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 && flags & libc::O_NONBLOCK != 0 {
            libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK);
        }
    }
}

/// A descriptor read and written as if blocking: should it be (or become)
/// non-blocking, `EAGAIN` waits in `poll` instead of failing.
struct Blocking(File);

impl Blocking {
    fn wait(&self, events: libc::c_short) {
        let mut p = libc::pollfd {
            fd: self.0.as_raw_fd(),
            events,
            revents: 0,
        };
        // SAFETY: one pollfd of ours; an error or EINTR just retries the I/O.
        unsafe { libc::poll(&mut p, 1, -1) };
    }
}

impl Read for Blocking {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            match self.0.read(buf) {
                Err(e) if e.kind() == ErrorKind::WouldBlock => self.wait(libc::POLLIN),
                other => return other,
            }
        }
    }
}

impl Write for Blocking {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        loop {
            match self.0.write(buf) {
                Err(e) if e.kind() == ErrorKind::WouldBlock => self.wait(libc::POLLOUT),
                other => return other,
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// Serves the channel forever: a reader thread, a writer thread, and one
/// session per attach.
pub async fn serve(agent: Arc<Agent>, input: File, output: File) {
    let (in_tx, mut in_rx) = mpsc::channel::<Incoming>(OUTBOUND_QUEUE);
    let (out_tx, out_rx) = mpsc::channel::<(u64, Vec<u8>)>(OUTBOUND_QUEUE);
    let epoch = Arc::new(AtomicU64::new(0));
    std::thread::spawn(move || read_loop(input, in_tx));
    let writer_epoch = Arc::clone(&epoch);
    std::thread::spawn(move || write_loop(output, out_rx, writer_epoch));
    let mut session: Option<Session> = None;
    while let Some(item) = in_rx.recv().await {
        match item {
            Incoming::Attach(nonce) => {
                if let Some(old) = session.take() {
                    old.end();
                }
                // Frames of older sessions still queued are dropped from here on.
                let now = epoch.fetch_add(1, Ordering::SeqCst) + 1;
                if out_tx
                    .send((now, attach::attached_bytes(&nonce)))
                    .await
                    .is_err()
                {
                    return;
                }
                console!("stdio channel: session {now} attached");
                session = Some(Session::start(Arc::clone(&agent), out_tx.clone(), now));
            }
            Incoming::Frame(frame) => match session.as_mut() {
                Some(s) => s.conn.handle(*frame).await,
                None => console!("stdio channel: a frame before any attach, ignored"),
            },
            Incoming::BadMessage { id, message } => {
                if let Some(s) = session.as_ref() {
                    s.conn.unknown_message(id, message).await;
                }
            }
            Incoming::Lost => {
                if let Some(old) = session.take() {
                    old.end();
                }
            }
        }
    }
}

/// One attach's requests, and the task that stamps its frames with its epoch.
struct Session {
    conn: Connection,
    forward: tokio::task::JoinHandle<()>,
}

impl Session {
    fn start(agent: Arc<Agent>, out: mpsc::Sender<(u64, Vec<u8>)>, epoch: u64) -> Self {
        let (tx, mut rx) = mpsc::channel::<Frame>(OUTBOUND_QUEUE);
        let forward = tokio::spawn(async move {
            while let Some(frame) = rx.recv().await {
                let Some(bytes) = encode_or_error(&frame) else {
                    continue;
                };
                if out.send((epoch, bytes)).await.is_err() {
                    return;
                }
            }
        });
        Session {
            conn: Connection::new(agent, tx),
            forward,
        }
    }

    fn end(self) {
        self.conn.close();
        self.forward.abort();
    }
}

/// Writes queued bytes of the current epoch; flushes when the queue is empty.
fn write_loop(output: File, mut rx: mpsc::Receiver<(u64, Vec<u8>)>, epoch: Arc<AtomicU64>) {
    let mut out = BufWriter::with_capacity(WRITE_BUFFER_BYTES, Blocking(output));
    while let Some((first_epoch, first)) = rx.blocking_recv() {
        let mut next = Some((first_epoch, first));
        while let Some((e, bytes)) = next.take() {
            // A write error (no peer) drops the bytes: the next attach starts clean.
            if e == epoch.load(Ordering::SeqCst) && out.write_all(&bytes).is_err() {
                out = BufWriter::with_capacity(WRITE_BUFFER_BYTES, out.into_parts().0);
            }
            next = rx.try_recv().ok();
        }
        if out.flush().is_err() {
            out = BufWriter::with_capacity(WRITE_BUFFER_BYTES, out.into_parts().0);
        }
    }
}

/// Reads frames and attach markers; after a broken stream, scans for the
/// next attach; after EOF, tries again every [`EOF_RETRY`].
fn read_loop(input: File, tx: mpsc::Sender<Incoming>) {
    let mut r = BufReader::with_capacity(READ_BUFFER_BYTES, Blocking(input));
    let mut scanning = false;
    loop {
        let item = if scanning {
            scan_for_attach(&mut r)
        } else {
            read_item(&mut r)
        };
        let item = match item {
            Ok(item) => {
                scanning = false;
                item
            }
            Err(ServerError::BadMessage { id, message }) => Incoming::BadMessage { id, message },
            Err(ServerError::Frame(CodecError::Closed)) => {
                if tx.blocking_send(Incoming::Lost).is_err() {
                    return;
                }
                std::thread::sleep(EOF_RETRY);
                continue;
            }
            Err(ServerError::Frame(CodecError::Io(e))) => {
                // Where the stream stands is unknown: resynchronise, without spinning.
                console!("stdio channel: read failed: {e}; waiting for the next attach");
                scanning = true;
                if tx.blocking_send(Incoming::Lost).is_err() {
                    return;
                }
                std::thread::sleep(EOF_RETRY);
                continue;
            }
            Err(e) => {
                console!("stdio channel: {e}; waiting for the next attach");
                scanning = true;
                Incoming::Lost
            }
        };
        if tx.blocking_send(item).is_err() {
            return;
        }
    }
}

/// Reads exactly `buf.len()` bytes; EOF before the first byte is `Closed`.
fn fill(r: &mut impl Read, buf: &mut [u8]) -> Result<(), CodecError> {
    let mut filled = 0;
    while filled < buf.len() {
        match r.read(&mut buf[filled..]) {
            Ok(0) if filled == 0 => return Err(CodecError::Closed),
            Ok(0) => return Err(CodecError::Truncated),
            Ok(n) => filled += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(CodecError::Io(e)),
        }
    }
    Ok(())
}

/// The next frame or attach marker, read from a frame boundary.
fn read_item(r: &mut impl Read) -> Result<Incoming, ServerError> {
    let mut len = [0u8; 4];
    fill(r, &mut len)?;
    if len == attach::MARKER_PREFIX {
        let word = attach::attach_word();
        let mut rest = vec![0u8; word.len() + attach::NONCE_BYTES];
        fill(r, &mut rest).map_err(truncated_if_closed)?;
        if &rest[..word.len()] != word {
            return Err(CodecError::Truncated.into());
        }
        let mut nonce: Nonce = [0; attach::NONCE_BYTES];
        nonce.copy_from_slice(&rest[word.len()..]);
        return Ok(Incoming::Attach(nonce));
    }
    let total = u32::from_be_bytes(len) as usize;
    if total > MAX_FRAME_BYTES {
        return Err(CodecError::FrameTooLarge(total).into());
    }
    let mut body = vec![0u8; total];
    fill(r, &mut body).map_err(truncated_if_closed)?;
    decode_lenient(&body).map(|f| Incoming::Frame(Box::new(f)))
}

/// EOF inside a frame or marker is a broken stream, not a clean close.
fn truncated_if_closed(e: CodecError) -> CodecError {
    match e {
        CodecError::Closed => CodecError::Truncated,
        other => other,
    }
}

/// Discards bytes up to the next attach marker and returns it.
fn scan_for_attach(r: &mut impl Read) -> Result<Incoming, ServerError> {
    let mut scanner = Scanner::new(attach::attach_needle());
    let mut byte = [0u8; 1];
    // One byte at a time through the BufReader: what follows the marker stays unread.
    loop {
        fill(r, &mut byte)?;
        if scanner.feed(&byte).is_some() {
            let mut nonce: Nonce = [0; attach::NONCE_BYTES];
            fill(r, &mut nonce).map_err(truncated_if_closed)?;
            return Ok(Incoming::Attach(nonce));
        }
    }
}
