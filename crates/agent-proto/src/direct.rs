//! Direct uploads: `runsc exec sbx-agent write-file PATH MODE MAX_BYTES`
//! reads the file's bytes on its stdin, followed by a 16-byte trailer
//! (`DIRECT_UPLOAD_MAGIC`, then the byte count as u64 big-endian). Only a
//! stream that ends with a trailer matching what was read is committed; any
//! other end (sbxd gave up, the client went away) removes the temp file. The
//! answer is one JSON line on stdout: a [`DirectUploadResult`].
//!
//! Direct downloads: `runsc exec sbx-agent read-file PATH MAX_BYTES` prints
//! one JSON line (a [`DirectDownloadHeader`]) and, when it is `Ready`,
//! exactly `stat.size` bytes of the file after it. A reader that gets fewer
//! bytes (the file shrank, the process died) knows the download failed.

use crate::{AgentError, FileStat};
use serde::{Deserialize, Serialize};

/// First half of the trailer.
pub const DIRECT_UPLOAD_MAGIC: [u8; 8] = *b"SBXEOF\x00\x01";

/// Length of the trailer.
pub const DIRECT_UPLOAD_TRAILER_BYTES: usize = 16;

/// The trailer for a stream of `len` bytes.
pub fn direct_upload_trailer(len: u64) -> [u8; DIRECT_UPLOAD_TRAILER_BYTES] {
    let mut t = [0u8; DIRECT_UPLOAD_TRAILER_BYTES];
    t[..8].copy_from_slice(&DIRECT_UPLOAD_MAGIC);
    t[8..].copy_from_slice(&len.to_be_bytes());
    t
}

/// Whether `trailer` closes a stream of exactly `len` bytes.
pub fn direct_upload_trailer_matches(trailer: &[u8], len: u64) -> bool {
    trailer == direct_upload_trailer(len)
}

/// What `write-file` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DirectUploadResult {
    /// Committed: the destination now holds the new bytes.
    Written {
        /// Bytes in the file.
        bytes_written: u64,
    },
    /// Nothing changed.
    Failed(AgentError),
}

/// What `read-file` prints before the file's bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DirectDownloadHeader {
    /// `stat.size` bytes follow.
    Ready {
        /// The file being sent.
        stat: FileStat,
    },
    /// Nothing follows.
    Failed(AgentError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trailer_round_trip() {
        let t = direct_upload_trailer(104_857_600);
        assert!(direct_upload_trailer_matches(&t, 104_857_600));
        assert!(!direct_upload_trailer_matches(&t, 104_857_599));
        assert!(!direct_upload_trailer_matches(&t[..15], 104_857_600));
    }
}
