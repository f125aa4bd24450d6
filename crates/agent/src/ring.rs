//! Bounded per-process output buffer: a ring of chunks with monotonic offsets.
//!
//! Offsets count bytes across stdout and stderr combined, in the order the
//! agent read them; they are never reused, so a reader that remembers the
//! offset it stopped at can resume without duplicates and can see a gap when
//! the ring dropped bytes it had not read yet.

use sbx_agent_proto::{ChunkMeta, StreamKind};
use std::collections::VecDeque;

/// Most output bytes a process keeps; older whole chunks are dropped past this.
pub const RING_CAPACITY_BYTES: usize = 512 * 1024;

/// Consecutive reads from one stream are merged into one chunk while the
/// result stays at or under this size (bounds per-chunk overhead for chatty
/// writers). `at_ms` of a merged chunk is the time of its first read.
pub const MERGE_LIMIT_BYTES: usize = 4096;

/// Most chunks a ring keeps (bounds bookkeeping and reply headers when a
/// process alternates tiny writes between stdout and stderr).
pub const MAX_RING_CHUNKS: usize = 8192;

/// One retained run of output bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct Chunk {
    /// stdout or stderr.
    pub stream: StreamKind,
    /// Offset of the first byte in the combined output.
    pub offset: u64,
    /// When the first byte was read, ms since the epoch.
    pub at_ms: u64,
    /// The bytes.
    pub bytes: Vec<u8>,
}

impl Chunk {
    /// Wire metadata of the chunk.
    pub fn meta(&self) -> ChunkMeta {
        ChunkMeta {
            stream: self.stream,
            offset: self.offset,
            len: self.bytes.len() as u64,
            at_ms: self.at_ms,
        }
    }

    /// Offset just past the chunk.
    pub fn end(&self) -> u64 {
        self.offset + self.bytes.len() as u64
    }
}

/// The output ring of one process.
#[derive(Debug, Default)]
pub struct Ring {
    chunks: VecDeque<Chunk>,
    bytes: usize,
    next_offset: u64,
    capacity: usize,
}

impl Ring {
    /// An empty ring holding at most [`RING_CAPACITY_BYTES`].
    pub fn new() -> Self {
        Self::with_capacity(RING_CAPACITY_BYTES)
    }

    /// An empty ring with a custom byte capacity (tests).
    pub fn with_capacity(capacity: usize) -> Self {
        Ring {
            chunks: VecDeque::new(),
            bytes: 0,
            next_offset: 0,
            capacity,
        }
    }

    /// Offset the next byte will get (= total bytes ever appended).
    pub fn next_offset(&self) -> u64 {
        self.next_offset
    }

    /// Bytes currently retained.
    pub fn retained_bytes(&self) -> usize {
        self.bytes
    }

    /// Offset of the oldest retained byte (= `next_offset` when empty).
    pub fn oldest_offset(&self) -> u64 {
        self.chunks
            .front()
            .map(|c| c.offset)
            .unwrap_or(self.next_offset)
    }

    /// Appends bytes read from `stream` at `at_ms`, dropping the oldest whole
    /// chunks while over capacity.
    pub fn push(&mut self, stream: StreamKind, at_ms: u64, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        self.next_offset += data.len() as u64;
        self.bytes += data.len();
        match self.chunks.back_mut() {
            Some(last)
                if last.stream == stream && last.bytes.len() + data.len() <= MERGE_LIMIT_BYTES =>
            {
                last.bytes.extend_from_slice(data);
            }
            _ => self.chunks.push_back(Chunk {
                stream,
                offset: self.next_offset - data.len() as u64,
                at_ms,
                bytes: data.to_vec(),
            }),
        }
        while self.bytes > self.capacity || self.chunks.len() > MAX_RING_CHUNKS {
            match self.chunks.pop_front() {
                Some(old) => self.bytes -= old.bytes.len(),
                None => break,
            }
        }
    }

    /// Offset of the oldest retained byte after a [`Ring::push`] of `len`
    /// bytes from `stream` (what that push would evict, without pushing).
    pub fn oldest_after_push(&self, stream: StreamKind, len: usize) -> u64 {
        if len == 0 {
            return self.oldest_offset();
        }
        let merges = self.chunks.back().is_some_and(|last| {
            last.stream == stream && last.bytes.len() + len <= MERGE_LIMIT_BYTES
        });
        let mut bytes = self.bytes + len;
        let mut count = self.chunks.len() + usize::from(!merges);
        let mut evicted = 0;
        while (bytes > self.capacity || count > MAX_RING_CHUNKS) && evicted < self.chunks.len() {
            bytes -= self.chunks[evicted].bytes.len();
            count -= 1;
            evicted += 1;
        }
        if evicted < self.chunks.len() {
            self.chunks[evicted].offset
        } else if merges || bytes > self.capacity {
            // The chunk holding the new bytes went too.
            self.next_offset + len as u64
        } else {
            self.next_offset
        }
    }

    /// All retained chunks, oldest first.
    pub fn chunks(&self) -> impl Iterator<Item = &Chunk> {
        self.chunks.iter()
    }

    /// Whole chunks from the newest backwards until at least `tail_bytes` are
    /// covered (all of them when `tail_bytes` is 0), oldest first.
    pub fn tail(&self, tail_bytes: u64) -> Vec<Chunk> {
        if tail_bytes == 0 {
            return self.chunks.iter().cloned().collect();
        }
        let mut covered = 0u64;
        let mut start = self.chunks.len();
        while start > 0 && covered < tail_bytes {
            start -= 1;
            covered += self.chunks[start].bytes.len() as u64;
        }
        self.chunks.range(start..).cloned().collect()
    }

    /// Retained bytes at or after `from`, as chunks (a chunk straddling `from`
    /// is trimmed so nothing before `from` is returned). When `from` is older
    /// than the ring, starts at the oldest retained chunk.
    pub fn since(&self, from: u64) -> Vec<Chunk> {
        let mut out = Vec::new();
        for c in self.chunks.iter().rev() {
            if c.end() <= from {
                break;
            }
            if c.offset >= from {
                out.push(c.clone());
            } else {
                let skip = (from - c.offset) as usize;
                out.push(Chunk {
                    stream: c.stream,
                    offset: from,
                    at_ms: c.at_ms,
                    bytes: c.bytes[skip..].to_vec(),
                });
            }
        }
        out.reverse();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_monotonic_across_streams() {
        let mut r = Ring::new();
        r.push(StreamKind::Stdout, 1, b"ab");
        r.push(StreamKind::Stderr, 2, b"cde");
        r.push(StreamKind::Stdout, 3, b"f");
        let c: Vec<_> = r
            .chunks()
            .map(|c| (c.stream, c.offset, c.bytes.clone()))
            .collect();
        assert_eq!(
            c,
            vec![
                (StreamKind::Stdout, 0, b"ab".to_vec()),
                (StreamKind::Stderr, 2, b"cde".to_vec()),
                (StreamKind::Stdout, 5, b"f".to_vec()),
            ]
        );
        assert_eq!(r.next_offset(), 6);
    }

    #[test]
    fn small_reads_of_one_stream_merge() {
        let mut r = Ring::new();
        for _ in 0..10 {
            r.push(StreamKind::Stdout, 1, b"x");
        }
        assert_eq!(r.chunks().count(), 1);
        assert_eq!(r.tail(0)[0].bytes.len(), 10);
    }

    #[test]
    fn evicts_oldest_whole_chunks() {
        let mut r = Ring::with_capacity(10);
        r.push(StreamKind::Stdout, 1, &[b'a'; 6]);
        r.push(StreamKind::Stderr, 1, &[b'b'; 6]);
        assert_eq!(r.retained_bytes(), 6);
        assert_eq!(r.oldest_offset(), 6);
        assert_eq!(r.next_offset(), 12);
    }

    #[test]
    fn oldest_after_push_predicts_eviction() {
        for (cap, pushes) in [
            (
                10usize,
                vec![(StreamKind::Stdout, 6), (StreamKind::Stderr, 6)],
            ),
            (10, vec![(StreamKind::Stdout, 3), (StreamKind::Stdout, 3)]),
            (
                10,
                vec![
                    (StreamKind::Stdout, 4),
                    (StreamKind::Stderr, 4),
                    (StreamKind::Stdout, 2),
                ],
            ),
            (8, vec![(StreamKind::Stdout, 5), (StreamKind::Stdout, 5)]),
            (100, vec![(StreamKind::Stdout, 7); 20]),
            (4, vec![(StreamKind::Stdout, 2), (StreamKind::Stderr, 6)]),
        ] {
            let mut r = Ring::with_capacity(cap);
            for (stream, len) in pushes {
                let predicted = r.oldest_after_push(stream, len);
                r.push(stream, 1, &vec![b'x'; len]);
                assert_eq!(predicted, r.oldest_offset(), "cap {cap}");
            }
        }
    }

    #[test]
    fn tail_and_since() {
        let mut r = Ring::new();
        r.push(StreamKind::Stdout, 1, b"aaaa");
        r.push(StreamKind::Stderr, 1, b"bbbb");
        r.push(StreamKind::Stdout, 1, b"cccc");
        assert_eq!(r.tail(1).len(), 1);
        assert_eq!(r.tail(5).len(), 2);
        assert_eq!(r.tail(100).len(), 3);
        let s = r.since(6);
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].offset, s[0].bytes.as_slice()), (6, &b"bb"[..]));
        assert_eq!(s[1].offset, 8);
        assert!(r.since(12).is_empty());
        assert_eq!(r.since(0).len(), 3);
    }
}
