//! Attaching to the agent over PID 1's stdio.
//!
//! sbxd hands the sandbox one end of a host socket pair as PID 1's stdin and
//! stdout (no relay process). That channel outlives any one session: after a
//! checkpoint the source keeps it, and a restored copy gets a new socket
//! behind the same guest file, with whatever the agent held in memory at the
//! checkpoint (a half-written frame, replies of the source's requests). So a
//! session starts with markers both ways:
//!
//! - sbxd writes [`attach_bytes`] (a fresh random nonce) where a frame could
//!   start; its first four bytes, read as a frame length, exceed
//!   [`crate::MAX_FRAME_BYTES`], so the agent cannot mistake it for a frame.
//!   The agent ends the previous session (its requests are cancelled) and
//!   answers [`attached_bytes`] with the same nonce.
//! - sbxd discards everything the agent sent before that answer (old frames,
//!   a partial frame): only the agent, which read the nonce, can write it.
//!
//! After a broken frame the agent scans for the next attach marker the same way.

/// The first four bytes of both markers: as a big-endian frame length,
/// larger than any frame.
pub const MARKER_PREFIX: [u8; 4] = *b"SBX\xff";
/// Random bytes that make each attach unique.
pub const NONCE_BYTES: usize = 16;
/// What follows [`MARKER_PREFIX`] in sbxd's marker.
const ATTACH_WORD: &[u8] = b"attach:";
/// What follows [`MARKER_PREFIX`] in the agent's answer.
const ATTACHED_WORD: &[u8] = b"attached:";

/// A session's nonce.
pub type Nonce = [u8; NONCE_BYTES];

/// sbxd's marker without the nonce: what the agent looks for.
pub fn attach_needle() -> Vec<u8> {
    [&MARKER_PREFIX[..], ATTACH_WORD].concat()
}

/// The bytes that follow [`MARKER_PREFIX`] in sbxd's marker, nonce excluded.
pub fn attach_word() -> &'static [u8] {
    ATTACH_WORD
}

/// sbxd's whole marker for `nonce`.
pub fn attach_bytes(nonce: &Nonce) -> Vec<u8> {
    [&attach_needle()[..], &nonce[..]].concat()
}

/// The agent's whole answer for `nonce`: what sbxd looks for.
pub fn attached_bytes(nonce: &Nonce) -> Vec<u8> {
    [&MARKER_PREFIX[..], ATTACHED_WORD, &nonce[..]].concat()
}

/// Finds a byte string in a stream fed piece by piece, across piece borders.
#[derive(Debug, Clone)]
pub struct Scanner {
    needle: Vec<u8>,
    /// The last `needle.len() - 1` bytes seen, which may start a match.
    tail: Vec<u8>,
}

impl Scanner {
    /// A scanner for `needle` (not empty).
    pub fn new(needle: Vec<u8>) -> Self {
        Scanner {
            needle,
            tail: Vec::new(),
        }
    }

    /// Feeds the next piece; `Some(n)`: the needle ends after `piece[..n]`.
    pub fn feed(&mut self, piece: &[u8]) -> Option<usize> {
        let keep = self.needle.len().saturating_sub(1);
        let mut window = std::mem::take(&mut self.tail);
        let carried = window.len();
        window.extend_from_slice(piece);
        if let Some(at) = window
            .windows(self.needle.len())
            .position(|w| w == self.needle.as_slice())
        {
            return Some(at + self.needle.len() - carried);
        }
        let start = window.len().saturating_sub(keep);
        self.tail = window.split_off(start);
        None
    }
}

/// Reads `reader` until `needle` has passed, discarding what came before;
/// returns the bytes read after it. Fails on EOF or after `limit` bytes.
pub async fn skip_past<R: tokio::io::AsyncRead + Unpin>(
    reader: &mut R,
    needle: Vec<u8>,
    limit: u64,
) -> std::io::Result<Vec<u8>> {
    use tokio::io::AsyncReadExt;
    let mut scanner = Scanner::new(needle);
    let mut buf = vec![0u8; 64 * 1024];
    let mut seen: u64 = 0;
    loop {
        let n = reader.read(&mut buf).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        if let Some(end) = scanner.feed(&buf[..n]) {
            return Ok(buf[end..n].to_vec());
        }
        seen += n as u64;
        if seen > limit {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("no attach answer in the first {limit} bytes"),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_cannot_be_read_as_a_frame_length() {
        assert!(u32::from_be_bytes(MARKER_PREFIX) as usize > crate::MAX_FRAME_BYTES);
        let nonce = [7u8; NONCE_BYTES];
        assert!(attach_bytes(&nonce).starts_with(&attach_needle()));
        assert_ne!(attach_bytes(&nonce), attached_bytes(&nonce));
    }

    #[test]
    fn the_scanner_finds_a_needle_split_across_pieces() {
        let needle = attached_bytes(&[1u8; NONCE_BYTES]);
        for split in 0..needle.len() {
            let mut stream = b"old frame bytes SBX\xffatt".to_vec();
            stream.extend_from_slice(&needle);
            stream.extend_from_slice(b"NEXT");
            let cut = 20 + split;
            let mut s = Scanner::new(needle.clone());
            let first = s.feed(&stream[..cut]);
            let at = match first {
                Some(n) => n,
                None => cut + s.feed(&stream[cut..]).expect("found in the second piece"),
            };
            assert_eq!(&stream[at..], b"NEXT", "split at {split}");
        }
    }

    #[test]
    fn a_different_nonce_is_not_a_match() {
        let mut s = Scanner::new(attached_bytes(&[1u8; NONCE_BYTES]));
        assert_eq!(s.feed(&attached_bytes(&[2u8; NONCE_BYTES])), None);
    }

    #[tokio::test]
    async fn skip_past_returns_what_follows_and_fails_on_eof() {
        let needle = attached_bytes(&[3u8; NONCE_BYTES]);
        let mut data = vec![0xAAu8; 100_000];
        data.extend_from_slice(&needle);
        data.extend_from_slice(b"frame");
        let mut r = &data[..];
        let rest = skip_past(&mut r, needle.clone(), 1 << 20).await.unwrap();
        let mut after = rest;
        tokio::io::AsyncReadExt::read_to_end(&mut r, &mut after)
            .await
            .unwrap();
        assert_eq!(after, b"frame");
        let mut none = &b"no marker here"[..];
        assert!(skip_past(&mut none, needle, 1 << 20).await.is_err());
    }
}
