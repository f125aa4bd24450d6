//! Encryption at rest for sbx: the one place that seals and opens stored secrets
//! (workspace secrets, Connect credentials).
//!
//! A [`KeyRing`] holds one current key, which seals, and any number of previous
//! keys, which only open. Every key has a [`KeyId`]. A sealed blob (format 1) is
//!
//! ```text
//! "SBXS" | 0x01 | key id (8 bytes) | nonce (12 bytes) | ChaCha20-Poly1305 ciphertext and tag
//! ```
//!
//! and the 13-byte header is authenticated with the caller's AAD, so the key id
//! travels beside each ciphertext without a schema change. Blobs written before
//! this format (`nonce | ciphertext`, no header) still open: every key of the
//! ring is tried on them.

mod key;
mod ring;

pub use key::{Key, KeyError, KeyId, KeySources, KEY_LEN};
pub use ring::{CryptoError, KeyRing, Opened, HEADER_LEN, NONCE_LEN, SEALED_PREFIX_LEN};
