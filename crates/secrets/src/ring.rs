//! The key ring and the sealed blob format.

use crate::key::{Key, KeyId};
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Nonce};

/// Bytes of the header: magic (4), format version (1), key id (8).
pub const HEADER_LEN: usize = 13;
/// Bytes of the nonce.
pub const NONCE_LEN: usize = 12;
/// Bytes before the ciphertext in a format-1 blob (header and nonce).
pub const SEALED_PREFIX_LEN: usize = HEADER_LEN + NONCE_LEN;
/// Bytes of the authentication tag at the end of every ciphertext.
const TAG_LEN: usize = 16;
const MAGIC: &[u8; 4] = b"SBXS";
const VERSION: u8 = 1;

/// Errors of sealing and opening.
#[derive(Debug, thiserror::Error)]
pub enum CryptoError {
    /// The system random source failed.
    #[error("random source: {0}")]
    Random(String),
    /// Encryption failed.
    #[error("encryption failed")]
    Seal,
    /// The blob names a key this ring does not hold.
    #[error(
        "the value was sealed with key {key}, which is not among this node's keys ({known}); \
         give that key as --secret-key-file or --previous-secret-key-file"
    )]
    UnknownKey {
        /// The key id in the blob.
        key: KeyId,
        /// The ring's key ids, for the message.
        known: String,
    },
    /// The blob names a key of the ring but does not open with it.
    #[error("the value does not open with its key {key}: it was tampered with or moved from another row")]
    Open {
        /// The key id in the blob.
        key: KeyId,
    },
    /// A blob without header (written before key ids) opens with no key of the ring.
    #[error(
        "the value (written before key ids) opens with none of this node's keys ({known}): \
         it was sealed with another key, tampered with, or moved from another row"
    )]
    OpenLegacy {
        /// The ring's key ids, for the message.
        known: String,
    },
    /// The header names a format this build does not know.
    #[error("the value is in sealed format {0}, which this sbx does not know; upgrade it")]
    UnknownFormat(u8),
    /// Too short to be a sealed value.
    #[error("the value is too short to be sealed ({0} bytes)")]
    Malformed(usize),
}

/// What [`KeyRing::open`] found.
#[derive(Clone, PartialEq, Eq)]
pub struct Opened {
    /// The plaintext.
    pub plaintext: Vec<u8>,
    /// The key that opened it.
    pub key: KeyId,
    /// True for a blob without header (written before key ids).
    pub legacy: bool,
}

impl std::fmt::Debug for Opened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the plaintext.
        f.debug_struct("Opened")
            .field("key", &self.key)
            .field("legacy", &self.legacy)
            .finish_non_exhaustive()
    }
}

/// One current key, which seals, and previous keys, which only open.
/// `Debug` shows key ids only.
#[derive(Clone, Debug)]
pub struct KeyRing {
    /// The current key first, then the previous ones, no id twice.
    keys: Vec<Key>,
}

fn random_nonce() -> Result<[u8; NONCE_LEN], CryptoError> {
    let mut nonce = [0u8; NONCE_LEN];
    getrandom::getrandom(&mut nonce).map_err(|e| CryptoError::Random(e.to_string()))?;
    Ok(nonce)
}

fn cipher(key: &Key) -> ChaCha20Poly1305 {
    ChaCha20Poly1305::new(chacha20poly1305::Key::from_slice(key.bytes()))
}

/// The AEAD's associated data of a format-1 blob: its header, then the caller's
/// AAD, so that neither the key id nor the version can be changed unnoticed.
fn header_aad(header: &[u8], aad: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(header.len() + aad.len());
    out.extend_from_slice(header);
    out.extend_from_slice(aad);
    out
}

impl KeyRing {
    /// A ring of one key.
    pub fn new(current: Key) -> KeyRing {
        KeyRing {
            keys: vec![current],
        }
    }

    /// Adds keys accepted for opening only (a key already in the ring is skipped).
    pub fn with_previous(mut self, previous: impl IntoIterator<Item = Key>) -> KeyRing {
        for key in previous {
            if !self.keys.iter().any(|k| k.id() == key.id()) {
                self.keys.push(key);
            }
        }
        self
    }

    /// A ring whose current key is `current` and whose previous keys are all of
    /// this ring's keys: what a rotation to `current` opens with.
    pub fn rotated_to(&self, current: Key) -> KeyRing {
        KeyRing::new(current).with_previous(self.keys.iter().cloned())
    }

    /// The id of the current key.
    pub fn current_id(&self) -> KeyId {
        self.keys[0].id()
    }

    /// Every key id, the current one first.
    pub fn key_ids(&self) -> Vec<KeyId> {
        self.keys.iter().map(Key::id).collect()
    }

    /// The key ids for messages: `a1b2… (current), c3d4…`.
    fn known(&self) -> String {
        let mut ids: Vec<String> = self.keys.iter().map(|k| k.id().to_string()).collect();
        ids[0].push_str(" (current)");
        ids.join(", ")
    }

    /// Seals `plaintext` with the current key, bound to `aad`: a format-1 blob.
    pub fn seal(&self, aad: &[u8], plaintext: &[u8]) -> Result<Vec<u8>, CryptoError> {
        let key = &self.keys[0];
        let nonce = random_nonce()?;
        let mut out = Vec::with_capacity(SEALED_PREFIX_LEN + plaintext.len() + TAG_LEN);
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        out.extend_from_slice(key.id().as_bytes());
        let ct = cipher(key)
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: plaintext,
                    aad: &header_aad(&out, aad),
                },
            )
            .map_err(|_| CryptoError::Seal)?;
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&ct);
        Ok(out)
    }

    /// Opens a blob sealed for `aad` by [`KeyRing::seal`] with any key of the
    /// ring, or written before key ids (`nonce | ciphertext`).
    pub fn open(&self, aad: &[u8], blob: &[u8]) -> Result<Opened, CryptoError> {
        if blob.len() < NONCE_LEN + TAG_LEN {
            return Err(CryptoError::Malformed(blob.len()));
        }
        let headed = blob.len() >= SEALED_PREFIX_LEN + TAG_LEN && blob.starts_with(MAGIC);
        if !headed {
            return self.open_legacy(aad, blob);
        }
        // A legacy nonce starts with the magic once in 2^32 blobs: whatever the
        // header says, a blob that fails as format 1 is tried as legacy too.
        let first = self.open_headed(aad, blob);
        match first {
            Ok(opened) => Ok(opened),
            Err(e) => self.open_legacy(aad, blob).map_err(|_| e),
        }
    }

    fn open_headed(&self, aad: &[u8], blob: &[u8]) -> Result<Opened, CryptoError> {
        let (header, rest) = blob.split_at(HEADER_LEN);
        if header[4] != VERSION {
            return Err(CryptoError::UnknownFormat(header[4]));
        }
        let mut id = [0u8; 8];
        id.copy_from_slice(&header[5..HEADER_LEN]);
        let id = KeyId(id);
        let key =
            self.keys
                .iter()
                .find(|k| k.id() == id)
                .ok_or_else(|| CryptoError::UnknownKey {
                    key: id,
                    known: self.known(),
                })?;
        let (nonce, ct) = rest.split_at(NONCE_LEN);
        let plaintext = cipher(key)
            .decrypt(
                Nonce::from_slice(nonce),
                Payload {
                    msg: ct,
                    aad: &header_aad(header, aad),
                },
            )
            .map_err(|_| CryptoError::Open { key: id })?;
        Ok(Opened {
            plaintext,
            key: id,
            legacy: false,
        })
    }

    fn open_legacy(&self, aad: &[u8], blob: &[u8]) -> Result<Opened, CryptoError> {
        let (nonce, ct) = blob.split_at(NONCE_LEN);
        for key in &self.keys {
            if let Ok(plaintext) =
                cipher(key).decrypt(Nonce::from_slice(nonce), Payload { msg: ct, aad })
            {
                return Ok(Opened {
                    plaintext,
                    key: key.id(),
                    legacy: true,
                });
            }
        }
        Err(CryptoError::OpenLegacy {
            known: self.known(),
        })
    }

    /// True when `opened` came from a format-1 blob of the current key: a
    /// rotation to this ring's current key has nothing left to do for it.
    pub fn is_current(&self, opened: &Opened) -> bool {
        !opened.legacy && opened.key == self.current_id()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(byte: u8) -> KeyRing {
        KeyRing::new(Key::from_bytes([byte; 32]))
    }

    /// A blob as sbx wrote it before key ids: nonce | ciphertext, AAD alone.
    fn legacy_blob(key: [u8; 32], aad: &[u8], plaintext: &[u8]) -> Vec<u8> {
        let nonce = [9u8; NONCE_LEN];
        let ct = ChaCha20Poly1305::new(chacha20poly1305::Key::from_slice(&key))
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: plaintext,
                    aad,
                },
            )
            .unwrap();
        [nonce.to_vec(), ct].concat()
    }

    #[test]
    fn round_trip_with_a_fresh_nonce_and_the_key_id_in_the_header() {
        let r = ring(1);
        let one = r.seal(b"aad", b"hunter2").unwrap();
        let two = r.seal(b"aad", b"hunter2").unwrap();
        assert_ne!(one, two, "a nonce must never repeat");
        assert!(!one.windows(7).any(|w| w == b"hunter2"));
        assert_eq!(&one[..4], b"SBXS");
        assert_eq!(one[4], 1);
        assert_eq!(&one[5..13], r.current_id().as_bytes());
        assert_eq!(one.len(), SEALED_PREFIX_LEN + 7 + TAG_LEN);
        let opened = r.open(b"aad", &one).unwrap();
        assert_eq!(opened.plaintext, b"hunter2");
        assert_eq!(opened.key, r.current_id());
        assert!(!opened.legacy);
        assert!(r.is_current(&opened));
        assert!(!format!("{opened:?}").contains("hunter2"));
        assert_eq!(
            r.open(b"aad", &r.seal(b"aad", b"").unwrap())
                .unwrap()
                .plaintext,
            b""
        );
    }

    #[test]
    fn wrong_aad_wrong_key_or_tampering_fail() {
        let r = ring(1);
        let blob = r.seal(b"ws\0a", b"x").unwrap();
        assert!(matches!(
            r.open(b"ws\0b", &blob).unwrap_err(),
            CryptoError::Open { .. }
        ));
        let other = ring(2);
        let e = other.open(b"ws\0a", &blob).unwrap_err();
        assert!(
            matches!(e, CryptoError::UnknownKey { key, .. } if key == r.current_id()),
            "{e:?}"
        );
        let msg = e.to_string();
        assert!(msg.contains(&r.current_id().to_string()), "{msg}");
        assert!(
            msg.contains(&format!("{} (current)", other.current_id())),
            "{msg}"
        );
        // Every byte matters: header, key id, nonce, ciphertext and tag.
        for i in 0..blob.len() {
            let mut bad = blob.clone();
            bad[i] ^= 1;
            assert!(
                r.open(b"ws\0a", &bad).is_err(),
                "flipped byte {i} still opened"
            );
        }
        assert!(matches!(
            r.open(b"ws\0a", &blob[..20]).unwrap_err(),
            CryptoError::Malformed(20)
        ));
        assert!(r.open(b"ws\0a", &blob[..blob.len() - 1]).is_err());
    }

    #[test]
    fn a_key_id_changed_to_another_key_of_the_ring_does_not_open() {
        let r = ring(1).with_previous([Key::from_bytes([2; 32])]);
        let mut blob = r.seal(b"a", b"x").unwrap();
        blob[5..13].copy_from_slice(Key::from_bytes([2; 32]).id().as_bytes());
        assert!(matches!(
            r.open(b"a", &blob).unwrap_err(),
            CryptoError::Open { .. }
        ));
    }

    #[test]
    fn blobs_written_before_key_ids_still_open_with_any_key_of_the_ring() {
        let blob = legacy_blob([1; 32], b"sbx-secret\0ws\0TOKEN", b"old value");
        let opened = ring(1).open(b"sbx-secret\0ws\0TOKEN", &blob).unwrap();
        assert_eq!(opened.plaintext, b"old value");
        assert!(opened.legacy);
        assert!(!ring(1).is_current(&opened), "a rotation rewrites it");
        // After a rotation to key 2, key 1 as previous still opens it.
        let rotated = ring(1).rotated_to(Key::from_bytes([2; 32]));
        let opened = rotated.open(b"sbx-secret\0ws\0TOKEN", &blob).unwrap();
        assert_eq!(opened.key, ring(1).current_id());
        assert!(opened.legacy);
        // Another key, or another row, does not.
        assert!(matches!(
            ring(2).open(b"sbx-secret\0ws\0TOKEN", &blob).unwrap_err(),
            CryptoError::OpenLegacy { .. }
        ));
        assert!(ring(1).open(b"sbx-secret\0ws\0OTHER", &blob).is_err());
    }

    #[test]
    fn a_legacy_nonce_that_looks_like_a_header_still_opens() {
        let key = [1u8; 32];
        let nonce = *b"SBXS\x01abcdefg";
        let ct = ChaCha20Poly1305::new(chacha20poly1305::Key::from_slice(&key))
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: b"a value long enough for a header",
                    aad: b"a",
                },
            )
            .unwrap();
        let blob = [nonce.to_vec(), ct].concat();
        let opened = ring(1).open(b"a", &blob).unwrap();
        assert!(opened.legacy);
        assert_eq!(opened.plaintext, b"a value long enough for a header");
    }

    #[test]
    fn the_key_id_selects_the_key_and_previous_keys_only_open() {
        let old = ring(1);
        let old_blob = old.seal(b"a", b"sealed before").unwrap();
        let rotated = old.rotated_to(Key::from_bytes([2; 32]));
        assert_eq!(rotated.current_id(), ring(2).current_id());
        assert_eq!(
            rotated.key_ids(),
            vec![ring(2).current_id(), old.current_id()]
        );
        let opened = rotated.open(b"a", &old_blob).unwrap();
        assert_eq!(opened.key, old.current_id());
        assert!(!rotated.is_current(&opened));
        // New values are sealed with the current key only.
        let new_blob = rotated.seal(b"a", b"sealed after").unwrap();
        assert_eq!(&new_blob[5..13], ring(2).current_id().as_bytes());
        assert!(rotated.is_current(&rotated.open(b"a", &new_blob).unwrap()));
        assert!(old.open(b"a", &new_blob).is_err());
        assert_eq!(
            ring(2).open(b"a", &new_blob).unwrap().plaintext,
            b"sealed after"
        );
        // A key given twice is held once.
        let twice = ring(2).with_previous([Key::from_bytes([2; 32]), Key::from_bytes([1; 32])]);
        assert_eq!(twice.key_ids(), rotated.key_ids());
    }

    #[test]
    fn an_unknown_format_is_reported_as_such() {
        let r = ring(1);
        let mut blob = r.seal(b"a", b"x").unwrap();
        blob[4] = 7;
        assert!(matches!(
            r.open(b"a", &blob).unwrap_err(),
            CryptoError::UnknownFormat(7)
        ));
    }

    #[test]
    fn debug_shows_key_ids_only() {
        let r = ring(0xab).with_previous([Key::from_bytes([0xcd; 32])]);
        let shown = format!("{r:?}");
        assert!(shown.contains(&r.current_id().to_string()), "{shown}");
        assert!(!shown.contains("171"), "{shown}");
        assert!(!shown.contains("205"), "{shown}");
    }
}
