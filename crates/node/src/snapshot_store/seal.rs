//! Encryption of snapshot objects: a snapshot is the sandbox's memory and
//! holds its secret values in clear, and the object store is not trusted
//! with plaintext (DESIGN.md, "Beyond one machine").
//!
//! Each snapshot gets a fresh 32-byte data key. The manifest carries it
//! sealed by the node's key ring (`sbx-secrets`: the secret key, shared by
//! the nodes of a cluster; previous keys still open it). Each file is cut
//! into chunks of [`super::s3::PART`] bytes, each sealed with
//! ChaCha20-Poly1305 under the data key with the nonce `file index (u32 BE)
//! | chunk index (u64 BE)` (unique within the snapshot, whose key is used for
//! nothing else) and the associated data `snapshot id | last-chunk flag`, so
//! chunks cannot be reordered, moved between files or snapshots, dropped from
//! the end or appended to without the open failing.

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Nonce};
use uuid::Uuid;

/// Bytes the AEAD adds to each chunk.
pub(crate) const TAG: usize = 16;

/// Why sealing or opening failed (the caller words it for its snapshot).
#[derive(Debug, thiserror::Error)]
pub(crate) enum SealError {
    /// The system random source failed.
    #[error("random source: {0}")]
    Random(String),
    /// The data key does not open with any key of the ring.
    #[error("the snapshot's data key does not open: {0}")]
    Key(#[source] sbx_secrets::CryptoError),
    /// A chunk does not open: changed, moved, truncated or extended.
    #[error("chunk {chunk} of file {file} does not decrypt (changed, moved or truncated)")]
    Chunk {
        /// File index in the manifest.
        file: u32,
        /// Chunk index in the file.
        chunk: u64,
    },
    /// Encryption itself failed.
    #[error("encryption failed")]
    Seal,
}

/// A snapshot's data key.
pub(crate) struct DataKey {
    snapshot: Uuid,
    cipher: ChaCha20Poly1305,
    bytes: [u8; 32],
}

fn key_aad(snapshot: Uuid) -> Vec<u8> {
    let mut aad = b"sbx snapshot data key\0".to_vec();
    aad.extend_from_slice(snapshot.as_bytes());
    aad
}

impl DataKey {
    /// A fresh random key for `snapshot`.
    pub(crate) fn generate(snapshot: Uuid) -> Result<DataKey, SealError> {
        let mut bytes = [0u8; 32];
        getrandom::getrandom(&mut bytes).map_err(|e| SealError::Random(e.to_string()))?;
        Ok(DataKey::from_bytes(snapshot, bytes))
    }

    fn from_bytes(snapshot: Uuid, bytes: [u8; 32]) -> DataKey {
        DataKey {
            snapshot,
            cipher: ChaCha20Poly1305::new(chacha20poly1305::Key::from_slice(&bytes)),
            bytes,
        }
    }

    /// The key sealed by the ring's current key, for the manifest (hex).
    pub(crate) fn wrap(&self, ring: &sbx_secrets::KeyRing) -> Result<String, SealError> {
        let sealed = ring
            .seal(&key_aad(self.snapshot), &self.bytes)
            .map_err(SealError::Key)?;
        Ok(hex::encode(sealed))
    }

    /// The key from the manifest's `wrapped` (hex), opened by any key of the ring.
    pub(crate) fn unwrap(
        snapshot: Uuid,
        wrapped: &str,
        ring: &sbx_secrets::KeyRing,
    ) -> Result<DataKey, SealError> {
        let blob = hex::decode(wrapped).map_err(|_| SealError::Chunk { file: 0, chunk: 0 })?;
        let opened = ring
            .open(&key_aad(snapshot), &blob)
            .map_err(SealError::Key)?;
        let bytes: [u8; 32] = opened
            .plaintext
            .as_slice()
            .try_into()
            .map_err(|_| SealError::Chunk { file: 0, chunk: 0 })?;
        Ok(DataKey::from_bytes(snapshot, bytes))
    }

    fn nonce(file: u32, chunk: u64) -> [u8; 12] {
        let mut n = [0u8; 12];
        n[..4].copy_from_slice(&file.to_be_bytes());
        n[4..].copy_from_slice(&chunk.to_be_bytes());
        n
    }

    fn aad(&self, last: bool) -> Vec<u8> {
        let mut aad = self.snapshot.as_bytes().to_vec();
        aad.push(u8::from(last));
        aad
    }

    /// Seals one chunk of file `file`.
    pub(crate) fn seal(
        &self,
        file: u32,
        chunk: u64,
        last: bool,
        plain: &[u8],
    ) -> Result<Vec<u8>, SealError> {
        self.cipher
            .encrypt(
                Nonce::from_slice(&Self::nonce(file, chunk)),
                Payload {
                    msg: plain,
                    aad: &self.aad(last),
                },
            )
            .map_err(|_| SealError::Seal)
    }

    /// Opens one chunk sealed by [`DataKey::seal`] with the same coordinates.
    pub(crate) fn open(
        &self,
        file: u32,
        chunk: u64,
        last: bool,
        sealed: &[u8],
    ) -> Result<Vec<u8>, SealError> {
        self.cipher
            .decrypt(
                Nonce::from_slice(&Self::nonce(file, chunk)),
                Payload {
                    msg: sealed,
                    aad: &self.aad(last),
                },
            )
            .map_err(|_| SealError::Chunk { file, chunk })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sbx_secrets::{Key, KeyRing};

    #[test]
    fn chunks_open_only_where_they_were_sealed() {
        let ring = KeyRing::new(Key::from_bytes([7; 32]));
        let id = Uuid::new_v4();
        let key = DataKey::generate(id).unwrap();
        let wrapped = key.wrap(&ring).unwrap();
        assert!(
            !wrapped.contains(&hex::encode(key.bytes)),
            "the key is sealed"
        );
        let again = DataKey::unwrap(id, &wrapped, &ring).unwrap();
        let sealed = key.seal(1, 2, false, b"memory").unwrap();
        assert_eq!(again.open(1, 2, false, &sealed).unwrap(), b"memory");
        assert!(
            again.open(1, 2, true, &sealed).is_err(),
            "not the last chunk"
        );
        assert!(again.open(1, 3, false, &sealed).is_err(), "another chunk");
        assert!(again.open(0, 2, false, &sealed).is_err(), "another file");
        // Another snapshot's key, or another cluster's ring, does not open it.
        assert!(DataKey::unwrap(Uuid::new_v4(), &wrapped, &ring).is_err());
        let other = KeyRing::new(Key::from_bytes([8; 32]));
        assert!(DataKey::unwrap(id, &wrapped, &other).is_err());
        // A rotated ring still opens it.
        let rotated = ring.rotated_to(Key::from_bytes([9; 32]));
        assert!(DataKey::unwrap(id, &wrapped, &rotated).is_ok());
    }
}
