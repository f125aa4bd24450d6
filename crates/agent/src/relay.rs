//! `sbx-agent relay`: bridges stdin/stdout to the agent's unix socket.
//!
//! The daemon runs `runsc exec <sandbox> /.sbx/sbx-agent relay` and talks
//! frames over the relay's stdio. Bytes are copied unchanged in both
//! directions with large buffers; when either side closes, the relay exits
//! (closing the socket, which cancels that connection's requests in the agent).

use crate::server::ListenAddr;
use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Copy buffer size per direction.
pub const RELAY_BUFFER_BYTES: usize = 256 * 1024;

/// How long the relay keeps retrying to connect while the agent starts.
pub const CONNECT_WAIT: Duration = Duration::from_secs(10);

/// Relay failures.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// Could not connect to the agent socket.
    #[error("cannot connect to {path}: {source}")]
    Connect {
        /// Socket path.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// Could not set up stdio or the socket.
    #[error("relay setup: {0}")]
    Setup(#[from] std::io::Error),
}

fn connect_once(addr: &ListenAddr) -> std::io::Result<UnixStream> {
    match addr {
        ListenAddr::Path(path) => UnixStream::connect(path),
        ListenAddr::Abstract(name) => {
            use std::os::linux::net::SocketAddrExt;
            let sa = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
            UnixStream::connect_addr(&sa)
        }
    }
}

fn connect(addr: &ListenAddr) -> Result<UnixStream, RelayError> {
    let deadline = Instant::now() + CONNECT_WAIT;
    loop {
        match connect_once(addr) {
            Ok(s) => return Ok(s),
            Err(e)
                if Instant::now() < deadline
                    && matches!(e.kind(), ErrorKind::NotFound | ErrorKind::ConnectionRefused) =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(source) => {
                return Err(RelayError::Connect {
                    path: addr.to_string(),
                    source,
                })
            }
        }
    }
}

/// Copies until EOF or an error on either side.
fn pump(mut from: impl Read, mut to: impl Write) {
    let mut buf = vec![0u8; RELAY_BUFFER_BYTES];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        if to.write_all(&buf[..n]).is_err() || to.flush().is_err() {
            return;
        }
    }
}

/// Runs the relay until either direction ends.
pub fn relay(addr: &ListenAddr) -> Result<(), RelayError> {
    let sock = connect(addr)?;
    let sock_out = sock.try_clone()?;
    // Unbuffered handles on fds 0 and 1 (dups, so no std buffering applies).
    let stdin = File::from(std::io::stdin().as_fd().try_clone_to_owned()?);
    let stdout = File::from(std::io::stdout().as_fd().try_clone_to_owned()?);
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let tx = done_tx.clone();
    std::thread::spawn(move || {
        pump(stdin, &sock_out);
        let _ = tx.send(());
    });
    std::thread::spawn(move || {
        pump(&sock, stdout);
        let _ = done_tx.send(());
    });
    let _ = done_rx.recv();
    Ok(())
}
