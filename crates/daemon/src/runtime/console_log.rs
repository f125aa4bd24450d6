//! Bounds a sandbox's `console.log` on the host disk.
//!
//! The console log is PID 1's stdout/stderr, a host file the Sentry appends
//! to. Anything in the sandbox can write to it (`/proc/1/fd/1`), at about
//! 215 MB/s measured, and it lives in the data dir, outside the sandbox's disk
//! cap: without a bound one sandbox could fill the host's disk. sbxd trims it
//! twice a second. Trimming punches a hole over the oldest bytes instead of
//! rewriting the file: the Sentry keeps appending through its `O_APPEND`
//! descriptor, and byte offsets stay valid for readers that follow the log
//! (they skip the hole with `SEEK_DATA`, see [`next_data`]).

use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Punches are aligned to this (the file system block size everywhere we run).
const BLOCK: u64 = 4096;

/// Console log failures.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleLogError {
    /// The file could not be inspected or trimmed.
    #[error("console log {path}: {source}")]
    Io {
        /// The console log.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
}

/// What one trim did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trimmed {
    /// The log holds at most `max_bytes` on disk: nothing to do.
    Within,
    /// The oldest bytes up to this offset were dropped (a hole now).
    HoleUpTo(u64),
    /// The file system cannot punch holes: the log was emptied instead.
    Emptied,
}

/// Keeps `path` at most `max_bytes` on disk: once it uses more, everything
/// but the newest `max_bytes / 2` is dropped. A missing file is `Within`.
pub fn trim(path: &Path, max_bytes: u64) -> Result<Trimmed, ConsoleLogError> {
    let io = |source| ConsoleLogError::Io {
        path: path.display().to_string(),
        source,
    };
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Trimmed::Within),
        Err(e) => return Err(io(e)),
    };
    // st_blocks counts 512-byte units actually allocated: holes are free.
    if meta.blocks() * 512 <= max_bytes {
        return Ok(Trimmed::Within);
    }
    let end = meta.len().saturating_sub(max_bytes / 2) / BLOCK * BLOCK;
    if end == 0 {
        return Ok(Trimmed::Within);
    }
    let file = OpenOptions::new().write(true).open(path).map_err(io)?;
    match punch_hole(&file, end) {
        Ok(()) => Ok(Trimmed::HoleUpTo(end)),
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
            // The writer appends, so it simply continues at the new end.
            file.set_len(0).map_err(io)?;
            Ok(Trimmed::Emptied)
        }
        Err(e) => Err(io(e)),
    }
}

fn punch_hole(file: &File, len: u64) -> std::io::Result<()> {
    let len = libc::off_t::try_from(len).map_err(|_| ErrorKind::InvalidInput)?;
    // SAFETY: plain syscall on a descriptor we own.
    let rc = unsafe {
        libc::fallocate(
            file.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            0,
            len,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Where a reader at `pos` should read next: `pos` itself, the first byte
/// after a trimmed hole, or 0 when the file was emptied under the reader.
pub fn next_data(file: &impl AsRawFd, pos: u64) -> u64 {
    let fd = file.as_raw_fd();
    let Ok(at) = libc::off_t::try_from(pos) else {
        return pos;
    };
    // SAFETY: lseek on a descriptor the caller holds open.
    let len = unsafe { libc::lseek(fd, 0, libc::SEEK_END) };
    if len >= 0 && (len as u64) < pos {
        return next_data(file, 0);
    }
    // SAFETY: as above.
    let data = unsafe { libc::lseek(fd, at, libc::SEEK_DATA) };
    // ENXIO: no data at or after `pos` (the reader is at the end).
    if data < 0 {
        pos
    } else {
        data as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, SeekFrom, Write};

    fn allocated(path: &Path) -> u64 {
        std::fs::metadata(path)
            .map(|m| m.blocks() * 512)
            .unwrap_or(0)
    }

    #[test]
    fn trimming_keeps_the_newest_bytes_and_appends_continue_at_the_end() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("console.log");
        let mut writer = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .expect("open");
        let mib = vec![b'x'; 1 << 20];
        for _ in 0..8 {
            writer.write_all(&mib).expect("write");
        }
        writer.write_all(b"newest line\n").expect("write");
        assert_eq!(trim(&path, 16 << 20).expect("trim"), Trimmed::Within);

        let before = std::fs::metadata(&path).expect("meta").len();
        let hole = match trim(&path, 2 << 20).expect("trim") {
            Trimmed::HoleUpTo(end) => end,
            other => panic!("expected a hole on this file system, got {other:?}"),
        };
        assert_eq!(hole % BLOCK, 0);
        assert!(hole >= before - (1 << 20) - BLOCK && hole <= before - (1 << 20));
        assert!(
            allocated(&path) <= (1 << 20) + 2 * BLOCK,
            "{}",
            allocated(&path)
        );
        assert_eq!(std::fs::metadata(&path).expect("meta").len(), before);
        assert_eq!(trim(&path, 2 << 20).expect("trim"), Trimmed::Within);

        writer.write_all(b"after the trim\n").expect("write");
        let mut reader = File::open(&path).expect("open");
        let from = next_data(&reader, 0);
        assert_eq!(from, hole);
        reader.seek(SeekFrom::Start(from)).expect("seek");
        let mut rest = Vec::new();
        reader.read_to_end(&mut rest).expect("read");
        assert!(!rest.contains(&0), "the hole must not be read as zeros");
        assert!(rest.ends_with(b"newest line\nafter the trim\n"));
        // A reader already past the hole keeps its place.
        assert_eq!(next_data(&reader, before), before);
    }

    #[test]
    fn a_reader_past_the_end_of_an_emptied_log_starts_over() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("console.log");
        std::fs::write(&path, b"0123456789").expect("write");
        let reader = File::open(&path).expect("open");
        assert_eq!(next_data(&reader, 4), 4);
        std::fs::write(&path, b"abc").expect("rewrite");
        assert_eq!(next_data(&reader, 8), 0);
        assert_eq!(
            trim(&dir.path().join("missing"), 1).expect("trim"),
            Trimmed::Within
        );
    }
}
