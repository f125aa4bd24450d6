//! zstd-compressed image layers (`application/vnd.oci.image.layer.v1.tar+zstd`),
//! read with the pure-Rust `ruzstd` decoder. A layer may be several frames
//! back to back (zstd:chunked writes many) with skippable frames between
//! them; each frame's checksum is verified when it has one.

use ruzstd::decoding::{FrameDecoder, StreamingDecoder};
use std::io::{self, Chain, Cursor, Read};

/// Magic number of a zstd frame (little endian).
const FRAME_MAGIC: u32 = 0xFD2F_B528;

/// A frame's source: its magic number, already read, then the stream.
type Source<R> = Chain<Cursor<[u8; 4]>, R>;
/// One frame being decoded.
type Frame<R> = Box<StreamingDecoder<Source<R>, FrameDecoder>>;

/// A reader of every frame of a zstd stream, in order.
pub struct Frames<R: Read> {
    state: State<R>,
}

enum State<R: Read> {
    /// Between frames (or at the start).
    Between(R),
    /// Inside a frame.
    InFrame(Frame<R>),
    /// A failed read leaves nothing to read.
    Broken,
}

impl<R: Read> Frames<R> {
    /// Reads the frames of `source`.
    pub fn new(source: R) -> Frames<R> {
        Frames {
            state: State::Between(source),
        }
    }
}

fn corrupt(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("zstd layer: {e}"))
}

/// Reads a 4-byte little-endian word; `None` at a clean end of stream.
fn read_word<R: Read>(source: &mut R) -> io::Result<Option<[u8; 4]>> {
    let mut word = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match source.read(&mut word[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(corrupt("the stream ends inside a frame header")),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(Some(word))
}

/// Starts the next frame of `source`, skipping skippable frames; `None` at
/// the end of the stream.
fn next_frame<R: Read>(mut source: R) -> io::Result<Option<Frame<R>>> {
    loop {
        let Some(magic) = read_word(&mut source)? else {
            return Ok(None);
        };
        let value = u32::from_le_bytes(magic);
        if (0x184D_2A50..=0x184D_2A5F).contains(&value) {
            let length = read_word(&mut source)?
                .map(u32::from_le_bytes)
                .ok_or_else(|| corrupt("a skippable frame has no length"))?;
            let skipped = io::copy(&mut (&mut source).take(u64::from(length)), &mut io::sink())?;
            if skipped < u64::from(length) {
                return Err(corrupt("a skippable frame is cut short"));
            }
            continue;
        }
        if value != FRAME_MAGIC {
            return Err(corrupt(format!("not a zstd frame (magic {value:#010x})")));
        }
        let decoder = StreamingDecoder::new(Cursor::new(magic).chain(source)).map_err(corrupt)?;
        return Ok(Some(Box::new(decoder)));
    }
}

impl<R: Read> Read for Frames<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            match std::mem::replace(&mut self.state, State::Broken) {
                State::Broken => return Ok(0),
                State::Between(source) => match next_frame(source)? {
                    Some(frame) => self.state = State::InFrame(frame),
                    None => return Ok(0),
                },
                State::InFrame(mut frame) => {
                    let n = frame.read(buf).map_err(corrupt)?;
                    if n > 0 {
                        self.state = State::InFrame(frame);
                        return Ok(n);
                    }
                    // The frame is over: the rest of the stream may hold more.
                    let (_, source) = frame.into_inner().into_inner();
                    self.state = State::Between(source);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ruzstd::encoding::{compress_to_vec, CompressionLevel};

    fn decode(bytes: &[u8]) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        Frames::new(bytes).read_to_end(&mut out)?;
        Ok(out)
    }

    #[test]
    fn frames_and_skippable_frames_decode_in_order() {
        let one: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let mut stream = compress_to_vec(&one[..], CompressionLevel::Fastest);
        // A skippable frame (as zstd:chunked writes its manifest), then a second frame.
        stream.extend_from_slice(&0x184D_2A5Eu32.to_le_bytes());
        stream.extend_from_slice(&5u32.to_le_bytes());
        stream.extend_from_slice(b"skip!");
        stream.extend(compress_to_vec(&b"tail"[..], CompressionLevel::Fastest));
        let mut want = one.clone();
        want.extend_from_slice(b"tail");
        assert_eq!(decode(&stream).unwrap(), want);
        assert_eq!(decode(&[]).unwrap(), Vec::<u8>::new());
    }

    #[test]
    fn damaged_streams_are_errors() {
        let good = compress_to_vec(&[7u8; 4096][..], CompressionLevel::Fastest);
        assert!(decode(&good[..good.len() - 3]).is_err(), "cut short");
        assert!(decode(b"not zstd at all").is_err());
        let mut skip = 0x184D_2A50u32.to_le_bytes().to_vec();
        skip.extend_from_slice(&100u32.to_le_bytes());
        assert!(decode(&skip).is_err(), "a skippable frame cut short");
    }
}
