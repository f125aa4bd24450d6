//! Bounds a sandbox's `console.log` on the host, in apparent size as well as
//! in disk blocks, and reads it for followers that must keep their place.
//!
//! The console log is PID 1's stdout/stderr, a host file the Sentry appends
//! to. Anything in the sandbox can write to it (`/proc/1/fd/1`), at about
//! 215 MB/s measured, and it lives in the data dir, outside the sandbox's disk
//! cap: without a bound one sandbox could fill the host's disk. sbxd trims it
//! twice a second. A trim removes the oldest bytes from the front of the file
//! (`FALLOC_FL_COLLAPSE_RANGE`, which shifts the rest down in place), so both
//! the length and the blocks used stay bounded; punching a hole bounded only
//! the blocks, and the apparent size grew without end (2.6 GiB after an 8 s
//! flood), which sparse-unaware backups copy in full. Where collapsing is not
//! supported the newest bytes are copied to the front and the file truncated.
//!
//! Both work while the sandbox writes because the Sentry's descriptor is
//! `O_APPEND` (runsc inherits the one `sbx_runsc` opens with `append(true)`;
//! seen on the sandbox process as flags `02102001`): its next write lands at
//! the new end, not at its old offset. Collapsing takes the inode lock that
//! appends take, so no byte is lost; the copy fallback can lose what is
//! appended between its last look at the length and the truncate.
//!
//! Byte offsets shift by what a trim drops. A [`Reader`] (the logs API)
//! counts in offsets that never shift: sbxd remembers, per file, how many
//! bytes it dropped from the front, and a trim and a read of the same file
//! exclude each other. A reader that was overtaken learns how many bytes it
//! missed ([`Gap`]) and continues at the oldest byte still kept.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// Console log failures.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleLogError {
    /// The file could not be inspected, trimmed or read.
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
    /// The log is at most `max_bytes` long and on disk: nothing to do.
    Within,
    /// This many of the oldest bytes were collapsed out of the file.
    Collapsed(u64),
    /// The file system cannot collapse: the newest bytes were copied to the
    /// front and the file truncated, dropping this many bytes.
    Rewritten(u64),
}

/// What a reader missed just before the bytes of one read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Gap {
    /// Nothing: the bytes follow the previous read.
    #[default]
    None,
    /// The reader fell behind a trim: this many bytes were dropped unread.
    Trimmed(u64),
    /// The file got shorter than the reader's place without a trim by sbxd
    /// (replaced or emptied behind its back): reading starts over at its first byte.
    Restarted,
}

impl Gap {
    /// Both gaps, the earlier one first.
    fn then(self, later: Gap) -> Gap {
        match (self, later) {
            (Gap::Restarted, _) | (_, Gap::Restarted) => Gap::Restarted,
            (Gap::Trimmed(a), Gap::Trimmed(b)) => Gap::Trimmed(a.saturating_add(b)),
            (Gap::None, g) | (g, Gap::None) => g,
        }
    }
}

/// Bytes sbxd has dropped from the front of one log since it started; its
/// lock is held across a trim and across a read, so neither sees the other
/// half done.
#[derive(Debug, Default)]
struct Shift {
    dropped: Mutex<u64>,
}

impl Shift {
    fn lock(&self) -> MutexGuard<'_, u64> {
        // A panic while holding it leaves a plain counter: still usable.
        self.dropped.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Shifts of the logs being trimmed or read, by (device, inode). Weak: a
/// log nobody reads needs no count, since a new reader starts at its first byte.
static SHIFTS: Mutex<BTreeMap<(u64, u64), Weak<Shift>>> = Mutex::new(BTreeMap::new());

/// The shift of the file `meta` describes, shared with every other user of it.
fn shift_of(meta: &std::fs::Metadata) -> Arc<Shift> {
    let mut shifts = SHIFTS.lock().unwrap_or_else(|e| e.into_inner());
    shifts.retain(|_, w| w.strong_count() > 0);
    let key = (meta.dev(), meta.ino());
    if let Some(shift) = shifts.get(&key).and_then(Weak::upgrade) {
        return shift;
    }
    let shift = Arc::new(Shift::default());
    shifts.insert(key, Arc::downgrade(&shift));
    shift
}

/// Keeps `path` at most `max_bytes` long and on disk: once either is over,
/// everything but the newest `max_bytes / 2` is dropped from the front. A
/// missing file is `Within`.
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
    // st_blocks counts 512-byte units allocated: a log from an older sbxd
    // may be mostly hole (long but small), a preallocated one the reverse.
    if meta.len().max(meta.blocks() * 512) <= max_bytes {
        return Ok(Trimmed::Within);
    }
    // Not O_APPEND: the fallback writes at chosen offsets.
    let file = match OpenOptions::new().read(true).write(true).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Trimmed::Within),
        Err(e) => return Err(io(e)),
    };
    let meta = file.metadata().map_err(io)?;
    let shift = shift_of(&meta);
    let mut dropped = shift.lock();
    // Measured under the lock; appends only make the file longer from here.
    let len = meta.len();
    let keep = (max_bytes / 2).max(1);
    // Collapsing works in whole file system blocks, and must leave at least
    // one byte (a range reaching the end is refused): `end < len` as `keep >= 1`.
    let block = meta.blksize().max(1);
    let end = len.saturating_sub(keep) / block * block;
    if end == 0 {
        return Ok(Trimmed::Within);
    }
    // Punching first drops the range's dirty pages unwritten; collapsing
    // alone writes the whole file back first (a flood's hundreds of MB on
    // each pass), which made the trims lag behind the writer.
    if let Err(e) = fallocate(
        &file,
        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
        end,
    ) {
        if e.raw_os_error() != Some(libc::EOPNOTSUPP) {
            return Err(io(e));
        }
    }
    match fallocate(&file, libc::FALLOC_FL_COLLAPSE_RANGE, end) {
        Ok(()) => {
            *dropped += end;
            Ok(Trimmed::Collapsed(end))
        }
        // EOPNOTSUPP: tmpfs, btrfs, ext4 without extents or with data=journal.
        // EINVAL: an alignment other than st_blksize (ext4 bigalloc clusters).
        Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL)) => {
            let gone = rewrite(&file, len, keep).map_err(io)?;
            *dropped += gone;
            Ok(Trimmed::Rewritten(gone))
        }
        Err(e) => Err(io(e)),
    }
}

/// `fallocate(mode)` over bytes `0..len`: with `FALLOC_FL_COLLAPSE_RANGE`
/// they are removed and the rest moves to the front.
fn fallocate(file: &File, mode: libc::c_int, len: u64) -> std::io::Result<()> {
    let len = libc::off_t::try_from(len).map_err(|_| ErrorKind::InvalidInput)?;
    // SAFETY: plain syscall on a descriptor we own.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), mode, 0, len) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Copies the newest `keep` bytes of a `len`-byte file (and what is appended
/// meanwhile) to its front and truncates after them. Returns how many bytes
/// were dropped from the front.
fn rewrite(file: &File, len: u64, keep: u64) -> std::io::Result<u64> {
    /// Passes that catch up with appends made during the copy; bounded so a
    /// flooding writer cannot keep the trimmer here.
    const CATCH_UP_PASSES: usize = 4;
    let from = len.saturating_sub(keep);
    let mut buf = vec![0u8; 1 << 20];
    let mut copied = from;
    let mut end = len;
    for _ in 0..CATCH_UP_PASSES {
        // The destination stays `from` bytes behind the source: a forward
        // copy never overwrites a byte it has yet to read.
        while copied < end {
            let want = usize::try_from(end - copied).map_or(buf.len(), |n| n.min(buf.len()));
            let n = file.read_at(&mut buf[..want], copied)?;
            if n == 0 {
                break;
            }
            file.write_all_at(&buf[..n], copied - from)?;
            copied += n as u64;
        }
        let now = file.metadata()?.len();
        if now <= end {
            break;
        }
        end = now;
    }
    file.set_len(copied - from)?;
    Ok(from)
}

/// Result of one [`Reader::read`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadOutcome {
    /// Bytes read into the buffer; 0 at the end of the log.
    pub len: usize,
    /// What was missed just before them (reported with the first bytes after it).
    pub gap: Gap,
}

/// A follower of one console log that keeps its place across trims.
#[derive(Debug)]
pub struct Reader {
    file: File,
    path: String,
    shift: Arc<Shift>,
    /// The next byte, counted from the first byte the log ever had while this
    /// sbxd ran: the file offset plus what trims dropped before it.
    next: u64,
    /// A gap not yet reported (seen by a read that found no bytes).
    pending: Gap,
}

impl Reader {
    /// Opens `path` at its first byte (blocking).
    pub fn open(path: &Path) -> Result<Reader, ConsoleLogError> {
        let io = |source| ConsoleLogError::Io {
            path: path.display().to_string(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        let meta = file.metadata().map_err(io)?;
        let shift = shift_of(&meta);
        let next = *shift.lock();
        Ok(Reader {
            file,
            path: path.display().to_string(),
            shift,
            next,
            pending: Gap::None,
        })
    }

    /// Reads the next bytes into `buf` (blocking). After a trim overtook the
    /// reader it continues at the oldest byte still kept and reports the gap.
    pub fn read(&mut self, buf: &mut [u8]) -> Result<ReadOutcome, ConsoleLogError> {
        let io = |source| ConsoleLogError::Io {
            path: self.path.clone(),
            source,
        };
        let dropped = self.shift.lock();
        let mut gap = Gap::None;
        if self.next < *dropped {
            gap = Gap::Trimmed(*dropped - self.next);
            self.next = *dropped;
        }
        let mut at = self.next - *dropped;
        let len = self.file.metadata().map_err(io)?.len();
        if at > len {
            gap = Gap::Restarted;
            self.next = *dropped;
            at = 0;
        }
        let n = self.file.read_at(buf, at).map_err(io)?;
        drop(dropped);
        self.next += n as u64;
        let gap = self.pending.then(gap);
        if n == 0 {
            self.pending = gap;
            return Ok(ReadOutcome {
                len: 0,
                gap: Gap::None,
            });
        }
        self.pending = Gap::None;
        Ok(ReadOutcome { len: n, gap })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn allocated(path: &Path) -> u64 {
        std::fs::metadata(path)
            .map(|m| m.blocks() * 512)
            .unwrap_or(0)
    }

    fn apparent(path: &Path) -> u64 {
        std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
    }

    /// Everything `reader` returns until the end, and the gaps it reported.
    fn read_all(reader: &mut Reader) -> (Vec<u8>, Vec<Gap>) {
        let mut out = Vec::new();
        let mut gaps = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let r = reader.read(&mut buf).expect("read");
            if r.len == 0 {
                return (out, gaps);
            }
            if r.gap != Gap::None {
                gaps.push(r.gap);
            }
            out.extend_from_slice(&buf[..r.len]);
        }
    }

    /// `n` numbered lines, `width` bytes each: a reader can check it saw a
    /// run of consecutive lines, not garbage.
    fn lines(from: usize, n: usize) -> Vec<u8> {
        (from..from + n)
            .flat_map(|i| format!("{i:015}\n").into_bytes())
            .collect()
    }

    fn assert_consecutive(bytes: &[u8]) -> (usize, usize) {
        let text = std::str::from_utf8(bytes).expect("utf8");
        let nums: Vec<usize> = text
            .lines()
            .map(|l| l.parse().unwrap_or_else(|_| panic!("garbage line {l:?}")))
            .collect();
        assert!(!nums.is_empty());
        for w in nums.windows(2) {
            assert_eq!(w[1], w[0] + 1, "lines not consecutive");
        }
        (nums[0], nums[nums.len() - 1])
    }

    #[test]
    fn trimming_bounds_the_length_keeps_the_newest_bytes_and_appends_continue_at_the_end() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("console.log");
        let mut writer = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .expect("open");
        // 8 MiB of 16-byte lines.
        writer.write_all(&lines(0, 1 << 19)).expect("write");
        assert_eq!(trim(&path, 16 << 20).expect("trim"), Trimmed::Within);

        let before = apparent(&path);
        let dropped = match trim(&path, 2 << 20).expect("trim") {
            Trimmed::Collapsed(n) | Trimmed::Rewritten(n) => n,
            Trimmed::Within => panic!("an 8 MiB log was not trimmed to 2 MiB"),
        };
        assert!(apparent(&path) <= 2 << 20, "length {}", apparent(&path));
        assert!(allocated(&path) <= (2 << 20) + 8192, "{}", allocated(&path));
        assert_eq!(apparent(&path), before - dropped);
        assert_eq!(trim(&path, 2 << 20).expect("trim"), Trimmed::Within);

        // The writer's O_APPEND descriptor continues at the new end.
        writer.write_all(b"after the trim\n").expect("write");
        let text = std::fs::read(&path).expect("read");
        assert_eq!(text.len() as u64, before - dropped + 15);
        assert!(text.ends_with(b"000000000524287\nafter the trim\n"));
    }

    #[test]
    fn the_copy_fallback_keeps_the_newest_bytes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("console.log");
        std::fs::write(&path, lines(0, 1000)).expect("write");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .expect("open");
        let gone = rewrite(&file, 16_000, 1_600).expect("rewrite");
        assert_eq!(gone, 14_400);
        let text = std::fs::read(&path).expect("read");
        assert_eq!(text, lines(900, 100));
    }

    #[test]
    fn a_reader_keeps_its_place_across_trims_and_reports_what_it_missed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("console.log");
        let mut writer = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .expect("open");
        writer.write_all(&lines(0, 4096)).expect("write");
        let mut reader = Reader::open(&path).expect("reader");
        let (first, gaps) = read_all(&mut reader);
        assert!(gaps.is_empty());
        assert_eq!(assert_consecutive(&first), (0, 4095));

        // Caught up, then the log grows a little and is trimmed behind the
        // reader's place: it continues exactly where it was, with no gap.
        writer.write_all(&lines(4096, 1 << 16)).expect("write");
        let (second, gaps) = read_all(&mut reader);
        assert!(gaps.is_empty(), "{gaps:?}");
        assert_eq!(assert_consecutive(&second), (4096, 4096 + (1 << 16) - 1));
        writer.write_all(&lines(70_000, 1000)).expect("write");
        assert_ne!(trim(&path, 512 << 10).expect("trim"), Trimmed::Within);
        let (after, gaps) = read_all(&mut reader);
        assert!(gaps.is_empty(), "{gaps:?}");
        assert_eq!(assert_consecutive(&after), (70_000, 70_999));

        // Now it falls behind: a trim drops bytes it never read. It reports
        // how many and continues at the oldest byte kept, on a line boundary.
        let batch_at = apparent(&path);
        writer.write_all(&lines(100_000, 1 << 16)).expect("write");
        let mut buf = vec![0u8; 16 * 100];
        let r = reader.read(&mut buf).expect("read");
        assert_eq!((r.len, r.gap), (1600, Gap::None));
        assert_eq!(assert_consecutive(&buf), (100_000, 100_099));
        let kept_from = apparent(&path);
        assert_ne!(trim(&path, 256 << 10).expect("trim"), Trimmed::Within);
        let dropped_now = kept_from - apparent(&path);
        let (third, gaps) = read_all(&mut reader);
        assert_eq!(gaps, vec![Gap::Trimmed(dropped_now - batch_at - 1600)]);
        let (from, to) = assert_consecutive(&third);
        assert_eq!(from as u64, 100_000 + (dropped_now - batch_at) / 16);
        assert_eq!(to, 100_000 + (1 << 16) - 1);

        // A new reader starts at the first byte kept.
        let mut fresh = Reader::open(&path).expect("reader");
        let (all, gaps) = read_all(&mut fresh);
        assert!(gaps.is_empty());
        assert_eq!(all, third);
    }

    #[test]
    fn trims_under_a_concurrent_writer_and_reader_lose_nothing_unreported() {
        const LINES: usize = 300_000;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("console.log");
        std::fs::write(&path, b"").expect("create");
        let mut reader = Reader::open(&path).expect("reader");
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let path = path.clone();
            let done = done.clone();
            std::thread::spawn(move || {
                let mut w = OpenOptions::new().append(true).open(&path).expect("open");
                for i in 0..LINES {
                    // One write per line: each lands whole at the end.
                    w.write_all(format!("{i:015}\n").as_bytes()).expect("write");
                }
                done.store(true, std::sync::atomic::Ordering::SeqCst);
            })
        };
        let trimmer = {
            let path = path.clone();
            let done = done.clone();
            std::thread::spawn(move || {
                let mut trims = 0;
                while !done.load(std::sync::atomic::Ordering::SeqCst) {
                    if trim(&path, 256 << 10).expect("trim") != Trimmed::Within {
                        trims += 1;
                    }
                    std::thread::yield_now();
                }
                trims
            })
        };
        // One line per read (three syscalls to the writer's one): slow enough to be overtaken.
        let mut expected = 0u64;
        let mut gaps = 0;
        let mut buf = vec![0u8; 16];
        loop {
            // Loaded before the read: a read at the end after the writer
            // finished means everything has been seen.
            let finished = done.load(std::sync::atomic::Ordering::SeqCst);
            let r = reader.read(&mut buf).expect("read");
            if r.len == 0 {
                if finished {
                    break;
                }
                std::thread::yield_now();
                continue;
            }
            match r.gap {
                Gap::None => {}
                Gap::Trimmed(n) => {
                    assert_eq!(n % 16, 0, "a gap splits a line");
                    expected += n / 16;
                    gaps += 1;
                }
                Gap::Restarted => panic!("restart without an outside truncation"),
            }
            assert_eq!(r.len % 16, 0);
            let (first, last) = assert_consecutive(&buf[..r.len]);
            assert_eq!(
                first as u64, expected,
                "bytes missed without a gap, or read twice"
            );
            expected = last as u64 + 1;
        }
        writer.join().expect("writer");
        let trims = trimmer.join().expect("trimmer");
        assert!(trims > 0, "never trimmed");
        assert!(
            gaps > 0,
            "the reader was never overtaken: the test proves little"
        );
        assert_eq!(expected, LINES as u64, "the last line was not read");
        trim(&path, 256 << 10).expect("trim");
        assert!(apparent(&path) <= 256 << 10, "{}", apparent(&path));
        eprintln!("{trims} trims, {gaps} gaps reported");
    }

    #[test]
    fn a_reader_past_the_end_of_a_log_emptied_behind_its_back_starts_over() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("console.log");
        std::fs::write(&path, b"0123456789").expect("write");
        let mut reader = Reader::open(&path).expect("reader");
        let (all, _) = read_all(&mut reader);
        assert_eq!(all, b"0123456789");
        // Truncated in place (same inode), not by `trim`.
        std::fs::write(&path, b"abc").expect("rewrite");
        let (all, gaps) = read_all(&mut reader);
        assert_eq!(all, b"abc");
        assert_eq!(gaps, vec![Gap::Restarted]);
        assert_eq!(
            trim(&dir.path().join("missing"), 1).expect("trim"),
            Trimmed::Within
        );
    }

    #[test]
    fn a_sparse_log_from_hole_punching_is_collapsed_to_its_data() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("console.log");
        let file = OpenOptions::new()
            .create_new(true)
            .write(true)
            .open(&path)
            .expect("open");
        // 1 GiB apparent, 4 KiB of data at the end: what the old trimmer left.
        file.write_all_at(&lines(0, 256), (1 << 30) - 4096)
            .expect("write");
        assert!(allocated(&path) <= 64 << 10);
        assert_ne!(trim(&path, 1 << 20).expect("trim"), Trimmed::Within);
        assert!(apparent(&path) <= 1 << 20, "{}", apparent(&path));
        assert!(std::fs::read(&path)
            .expect("read")
            .ends_with(&lines(0, 256)));
    }
}
