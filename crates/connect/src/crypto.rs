//! Credentials at rest, sealed by the key ring of `sbx-secrets` and bound to
//! their connection (workspace and connection id).

use sbx_secrets::KeyRing;

/// Errors of the crypto module.
#[derive(Debug, thiserror::Error)]
pub enum CryptoError {
    /// The system random source failed.
    #[error("random source: {0}")]
    Random(String),
    /// Encryption failed.
    #[error("encryption failed")]
    Seal,
    /// The decrypted value is not credentials.
    #[error("stored credentials could not be decrypted")]
    Open,
    /// The value was tampered with, belongs to another row, or no key of this node opens it.
    #[error("stored credentials could not be decrypted: {0}")]
    Unreadable(#[source] sbx_secrets::CryptoError),
}

/// Fills a buffer from the operating system's random source.
pub fn random_bytes<const N: usize>() -> Result<[u8; N], CryptoError> {
    let mut buf = [0u8; N];
    getrandom::getrandom(&mut buf).map_err(|e| CryptoError::Random(e.to_string()))?;
    Ok(buf)
}

/// Encrypts and decrypts credential blobs. `Debug` shows key ids only.
#[derive(Clone, Debug)]
pub struct CredentialBox {
    keys: KeyRing,
}

fn aad(workspace: &str, connection_id: &str) -> Vec<u8> {
    // Binds a ciphertext to its connection: a blob copied to another row will not decrypt.
    format!("sbx-connect-credentials\0{workspace}\0{connection_id}").into_bytes()
}

fn seal_error(e: sbx_secrets::CryptoError) -> CryptoError {
    match e {
        sbx_secrets::CryptoError::Random(r) => CryptoError::Random(r),
        _ => CryptoError::Seal,
    }
}

impl CredentialBox {
    /// A box of one 32-byte key.
    pub fn new(key: &[u8; 32]) -> Self {
        CredentialBox::from_ring(KeyRing::new(sbx_secrets::Key::from_bytes(*key)))
    }

    /// A box sealing with the ring's current key and opening with any of its keys.
    pub fn from_ring(keys: KeyRing) -> Self {
        CredentialBox { keys }
    }

    /// Encrypts a value for one connection (a blob of the `sbx-secrets` format).
    pub fn seal(
        &self,
        workspace: &str,
        connection_id: &str,
        plaintext: &[u8],
    ) -> Result<Vec<u8>, CryptoError> {
        self.keys
            .seal(&aad(workspace, connection_id), plaintext)
            .map_err(seal_error)
    }

    /// Decrypts a value made by [`CredentialBox::seal`] (or by sbx before key
    /// ids) for the same connection.
    pub fn open(
        &self,
        workspace: &str,
        connection_id: &str,
        blob: &[u8],
    ) -> Result<Vec<u8>, CryptoError> {
        self.keys
            .open(&aad(workspace, connection_id), blob)
            .map(|o| o.plaintext)
            .map_err(CryptoError::Unreadable)
    }

    /// Key rotation: the blob sealed again with the current key, or `None` when
    /// it already is.
    pub fn reseal(
        &self,
        workspace: &str,
        connection_id: &str,
        blob: &[u8],
    ) -> Result<Option<Vec<u8>>, CryptoError> {
        let aad = aad(workspace, connection_id);
        let opened = self
            .keys
            .open(&aad, blob)
            .map_err(CryptoError::Unreadable)?;
        if self.keys.is_current(&opened) {
            return Ok(None);
        }
        self.keys
            .seal(&aad, &opened.plaintext)
            .map(Some)
            .map_err(seal_error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chacha20poly1305::aead::{Aead, KeyInit, Payload};
    use chacha20poly1305::{ChaCha20Poly1305, Nonce};

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
        assert!(!format!("{b:?}").contains("7, 7"));
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

    #[test]
    fn credentials_sealed_before_key_ids_open_and_reseal_under_the_new_key() {
        // nonce || ciphertext with the AAD alone: what this module wrote before.
        let nonce = [3u8; 12];
        let ct = ChaCha20Poly1305::new(chacha20poly1305::Key::from_slice(&[7u8; 32]))
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: b"old",
                    aad: b"sbx-connect-credentials\0ws\0c1",
                },
            )
            .expect("encrypt");
        let old = [nonce.to_vec(), ct].concat();
        assert_eq!(
            CredentialBox::new(&[7u8; 32])
                .open("ws", "c1", &old)
                .expect("open"),
            b"old"
        );
        let old_ring = KeyRing::new(sbx_secrets::Key::from_bytes([7u8; 32]));
        let rotated =
            CredentialBox::from_ring(old_ring.rotated_to(sbx_secrets::Key::from_bytes([8u8; 32])));
        let new = rotated
            .reseal("ws", "c1", &old)
            .expect("reseal")
            .expect("rewritten");
        assert_eq!(rotated.reseal("ws", "c1", &new).expect("reseal"), None);
        let new_only = CredentialBox::new(&[8u8; 32]);
        assert_eq!(new_only.open("ws", "c1", &new).expect("open"), b"old");
        assert!(new_only.open("ws", "c1", &old).is_err());
    }
}
