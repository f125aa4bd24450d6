//! Pseudo-terminals for processes started with a `pty`.
//!
//! Both ends are opened close-on-exec (and `O_NOCTTY`, so the agent never
//! acquires a controlling terminal): a slave fd leaking into another child
//! started at the same moment would keep the terminal open after our child
//! exits, and the master would then never report the end (EIO).

use crate::launch::above_stdio;
use nix::fcntl::OFlag;
use sbx_agent_proto::PtySize;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;

/// Both sides of a new pseudo-terminal.
#[derive(Debug)]
pub struct Pty {
    /// The agent's side: output is read and input written here.
    pub master: OwnedFd,
    /// The child's side (its stdin, stdout, stderr and controlling terminal).
    pub slave: OwnedFd,
}

fn nix_err(e: nix::Error) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

/// Opens a pseudo-terminal of `size`.
pub fn open(size: PtySize) -> io::Result<Pty> {
    let flags = OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC;
    let master = nix::pty::posix_openpt(flags).map_err(nix_err)?;
    nix::pty::grantpt(&master).map_err(nix_err)?;
    nix::pty::unlockpt(&master).map_err(nix_err)?;
    let name = nix::pty::ptsname_r(&master).map_err(nix_err)?;
    // SAFETY: into_raw_fd hands over ownership of a valid fd.
    let master = unsafe { OwnedFd::from_raw_fd(master.into_raw_fd()) };
    let slave = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOCTTY)
        .open(&name)?;
    let pty = Pty {
        master: above_stdio(master)?,
        slave: above_stdio(OwnedFd::from(slave))?,
    };
    resize(pty.master.as_fd(), size)?;
    Ok(pty)
}

/// Sets the terminal size (`TIOCSWINSZ`); the foreground group gets SIGWINCH.
pub fn resize(master: BorrowedFd<'_>, size: PtySize) -> io::Result<()> {
    let ws = libc::winsize {
        ws_row: size.rows,
        ws_col: size.cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads a winsize from the valid pointer.
    if unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSWINSZ, &ws) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn size_of(fd: BorrowedFd<'_>) -> (u16, u16) {
        // SAFETY: TIOCGWINSZ writes a winsize into the valid pointer.
        unsafe {
            let mut ws: libc::winsize = std::mem::zeroed();
            assert_eq!(libc::ioctl(fd.as_raw_fd(), libc::TIOCGWINSZ, &mut ws), 0);
            (ws.ws_col, ws.ws_row)
        }
    }

    #[test]
    fn opens_with_size_and_resizes() {
        let pty = open(PtySize { cols: 91, rows: 17 }).unwrap();
        assert!(pty.master.as_raw_fd() > 2 && pty.slave.as_raw_fd() > 2);
        assert_eq!(size_of(pty.slave.as_fd()), (91, 17));
        resize(
            pty.master.as_fd(),
            PtySize {
                cols: 120,
                rows: 40,
            },
        )
        .unwrap();
        assert_eq!(size_of(pty.slave.as_fd()), (120, 40));
        // SAFETY: fcntl F_GETFD on fds we own.
        let cloexec = |fd: &OwnedFd| unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFD) };
        assert_ne!(cloexec(&pty.master) & libc::FD_CLOEXEC, 0);
        assert_ne!(cloexec(&pty.slave) & libc::FD_CLOEXEC, 0);
    }
}
