//! Credentials at rest: ChaCha20-Poly1305 with a 32-byte key and a random nonce per value.

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};

const NONCE_LEN: usize = 12;

/// Errors of the crypto module.
#[derive(Debug, thiserror::Error)]
pub enum CryptoError {
    /// The system random source failed.
    #[error("random source: {0}")]
    Random(String),
    /// Encryption failed.
    #[error("encryption failed")]
    Seal,
    /// The value was tampered with, belongs to another row, or the key changed.
    #[error("stored credentials could not be decrypted")]
    Open,
}

/// Fills a buffer from the operating system's random source.
pub fn random_bytes<const N: usize>() -> Result<[u8; N], CryptoError> {
    let mut buf = [0u8; N];
    getrandom::getrandom(&mut buf).map_err(|e| CryptoError::Random(e.to_string()))?;
    Ok(buf)
}

/// Encrypts and decrypts credential blobs.
#[derive(Clone)]
pub struct CredentialBox {
    cipher: ChaCha20Poly1305,
}

impl std::fmt::Debug for CredentialBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print key material.
        f.write_str("CredentialBox")
    }
}

impl CredentialBox {
    /// A box for this 32-byte key (the daemon's `secret.key`).
    pub fn new(key: &[u8; 32]) -> Self {
        CredentialBox {
            cipher: ChaCha20Poly1305::new(Key::from_slice(key)),
        }
    }

    fn aad(workspace: &str, connection_id: &str) -> Vec<u8> {
        // Binds a ciphertext to its connection: a blob copied to another row will not decrypt.
        format!("sbx-connect-credentials\0{workspace}\0{connection_id}").into_bytes()
    }

    /// Encrypts a value; the result is nonce || ciphertext.
    pub fn seal(
        &self,
        workspace: &str,
        connection_id: &str,
        plaintext: &[u8],
    ) -> Result<Vec<u8>, CryptoError> {
        let nonce = random_bytes::<NONCE_LEN>()?;
        let aad = Self::aad(workspace, connection_id);
        let ct = self
            .cipher
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: plaintext,
                    aad: &aad,
                },
            )
            .map_err(|_| CryptoError::Seal)?;
        let mut out = Vec::with_capacity(NONCE_LEN + ct.len());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&ct);
        Ok(out)
    }

    /// Decrypts a value made by [`CredentialBox::seal`] for the same connection.
    pub fn open(
        &self,
        workspace: &str,
        connection_id: &str,
        blob: &[u8],
    ) -> Result<Vec<u8>, CryptoError> {
        if blob.len() < NONCE_LEN {
            return Err(CryptoError::Open);
        }
        let (nonce, ct) = blob.split_at(NONCE_LEN);
        let aad = Self::aad(workspace, connection_id);
        self.cipher
            .decrypt(Nonce::from_slice(nonce), Payload { msg: ct, aad: &aad })
            .map_err(|_| CryptoError::Open)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_fresh_nonce() {
        let b = CredentialBox::new(&[7u8; 32]);
        let one = b.seal("ws", "c1", b"{\"token\":\"s3cret\"}").expect("seal");
        let two = b.seal("ws", "c1", b"{\"token\":\"s3cret\"}").expect("seal");
        assert_ne!(one, two, "a nonce must never repeat");
        assert!(!one.windows(6).any(|w| w == b"s3cret"));
        assert_eq!(
            b.open("ws", "c1", &one).expect("open"),
            b"{\"token\":\"s3cret\"}"
        );
    }

    #[test]
    fn wrong_row_key_or_tamper_fails() {
        let b = CredentialBox::new(&[7u8; 32]);
        let blob = b.seal("ws", "c1", b"x").expect("seal");
        assert!(b.open("ws", "c2", &blob).is_err());
        assert!(b.open("other", "c1", &blob).is_err());
        assert!(CredentialBox::new(&[8u8; 32])
            .open("ws", "c1", &blob)
            .is_err());
        let mut bad = blob.clone();
        if let Some(last) = bad.last_mut() {
            *last ^= 1;
        }
        assert!(b.open("ws", "c1", &bad).is_err());
        assert!(b.open("ws", "c1", &blob[..5]).is_err());
    }
}
