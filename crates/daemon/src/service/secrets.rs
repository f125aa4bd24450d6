//! Workspace secrets: sealed at rest by the key ring of `sbx-secrets`; values
//! leave the store only into a sandbox's environment, never into a response or log.
//!
//! A sealed value is stored as its blob split in two columns: `nonce` holds the
//! blob's header (format and key id) and nonce, `ciphertext` the rest. Rows
//! written before key ids hold a bare 12-byte nonce; both join into a blob that
//! [`KeyRing::open`] reads.

use super::{Result, Service, ServiceError};
use chrono::Utc;
use sbx_api_types::validate::{self, ValidationError};
pub use sbx_secrets::{CryptoError, KeyError};
use sbx_secrets::{Key, KeyRing};
use sbx_store::SecretRecord;
use std::collections::BTreeMap;
use std::path::Path;

/// Largest secret value.
pub const MAX_SECRET_BYTES: usize = 64 * 1024;

/// The (nonce, ciphertext) columns of a sealed secret.
pub type SealedColumns = (Vec<u8>, Vec<u8>);

/// Why a stored secret did not open.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// No key of this node opens it, or it was tampered with or moved.
    #[error(transparent)]
    Crypto(#[from] CryptoError),
    /// It opened but is not text (never written by sbx).
    #[error("the decrypted value is not UTF-8")]
    NotText,
}

impl OpenError {
    /// The key the value names when this node does not have it.
    pub fn needed_key(&self) -> Option<sbx_secrets::KeyId> {
        match self {
            OpenError::Crypto(CryptoError::UnknownKey { key, .. }) => Some(*key),
            _ => None,
        }
    }
}

/// The key ring of the secret store. `Debug` shows key ids only.
#[derive(Debug, Clone)]
pub struct SecretBox {
    keys: KeyRing,
}

impl SecretBox {
    /// Loads the key file, creating it (mode 0600) with a random key at first start.
    pub fn load_or_create(path: &Path) -> Result<Self, KeyError> {
        Ok(SecretBox::new(KeyRing::new(Key::read_or_create_file(
            path,
        )?)))
    }

    /// A box sealing with the ring's current key and opening with any of its keys.
    pub fn new(keys: KeyRing) -> Self {
        SecretBox { keys }
    }

    /// The key ring.
    pub fn keys(&self) -> &KeyRing {
        &self.keys
    }

    fn aad(workspace: &str, name: &str) -> Vec<u8> {
        // Binds a ciphertext to its row: a value copied to another name or workspace will not decrypt.
        format!("sbx-secret\0{workspace}\0{name}").into_bytes()
    }

    /// Encrypts a value for (workspace, name); returns the (nonce, ciphertext) columns.
    pub fn seal(&self, workspace: &str, name: &str, value: &str) -> std::io::Result<SealedColumns> {
        let mut blob = self
            .keys
            .seal(&Self::aad(workspace, name), value.as_bytes())
            .map_err(|e| std::io::Error::other(format!("sealing: {e}")))?;
        let ciphertext = blob.split_off(sbx_secrets::SEALED_PREFIX_LEN);
        Ok((blob, ciphertext))
    }

    /// Opens a stored secret with any key of the ring.
    fn open_blob(&self, record: &SecretRecord) -> Result<sbx_secrets::Opened, CryptoError> {
        let blob = [record.nonce.as_slice(), record.ciphertext.as_slice()].concat();
        self.keys
            .open(&Self::aad(&record.workspace, &record.name), &blob)
            .or_else(|first| {
                // Secrets sealed before tenants existed were bound to the workspace
                // "default", which the tenants migration renamed "default/production".
                if record.workspace != "default/production" {
                    return Err(first);
                }
                self.keys
                    .open(&Self::aad("default", &record.name), &blob)
                    .map_err(|_| first)
            })
    }

    /// Decrypts a stored secret.
    pub fn open(&self, record: &SecretRecord) -> Result<String, OpenError> {
        let opened = self.open_blob(record)?;
        String::from_utf8(opened.plaintext).map_err(|_| OpenError::NotText)
    }

    /// Key rotation: the (nonce, ciphertext) columns sealed again with the
    /// current key for the record's own row, or `None` when they already are.
    pub fn reseal(&self, record: &SecretRecord) -> Result<Option<SealedColumns>, OpenError> {
        let opened = self.open_blob(record)?;
        if self.keys.is_current(&opened) {
            return Ok(None);
        }
        let value = String::from_utf8(opened.plaintext).map_err(|_| OpenError::NotText)?;
        self.seal(&record.workspace, &record.name, &value)
            .map(Some)
            .map_err(|_| OpenError::Crypto(CryptoError::Seal))
    }
}

/// A secret as the API shows it: never its value.
#[derive(Debug, Clone)]
pub struct SecretInfo {
    /// Name.
    pub name: String,
    /// Creation time.
    pub created_at: chrono::DateTime<Utc>,
    /// Last update.
    pub updated_at: chrono::DateTime<Utc>,
}

fn info(r: &SecretRecord) -> SecretInfo {
    SecretInfo {
        name: r.name.clone(),
        created_at: r.created_at,
        updated_at: r.updated_at,
    }
}

impl Service {
    /// `PUT /v1/secrets/{name}`: creates or replaces a secret.
    pub async fn secret_put(
        &self,
        workspace: &str,
        name: &str,
        value: Option<String>,
    ) -> Result<SecretInfo> {
        validate::secret_name(name)?;
        let value = value.ok_or(ValidationError::Missing("value"))?;
        if value.len() > MAX_SECRET_BYTES || value.contains('\0') {
            return Err(ValidationError::Format {
                field: "value",
                reason: "must be at most 65536 bytes without NUL".into(),
            }
            .into());
        }
        let now = Utc::now();
        let created_at = self
            .store
            .get_secret(workspace, name)
            .await?
            .map(|r| r.created_at)
            .unwrap_or(now);
        let (nonce, ciphertext) = self
            .secrets
            .seal(workspace, name, &value)
            .map_err(|e| ServiceError::Internal(format!("sealing secret: {e}")))?;
        let record = SecretRecord {
            workspace: workspace.to_string(),
            name: name.to_string(),
            nonce,
            ciphertext,
            created_at,
            updated_at: now,
        };
        self.store.put_secret(&record).await?;
        Ok(info(&record))
    }

    /// `GET /v1/secrets`.
    pub async fn secret_list(&self, workspace: &str) -> Result<Vec<SecretInfo>> {
        Ok(self
            .store
            .list_secrets(workspace)
            .await?
            .iter()
            .map(info)
            .collect())
    }

    /// `DELETE /v1/secrets/{name}`: safe to repeat. Running sandboxes keep the value they were given.
    pub async fn secret_delete(&self, workspace: &str, name: &str) -> Result<()> {
        validate::secret_name(name)?;
        self.store.delete_secret(workspace, name).await?;
        Ok(())
    }

    /// Checks that every selected secret exists.
    pub(super) async fn check_secrets_exist(
        &self,
        workspace: &str,
        names: &[String],
    ) -> Result<()> {
        for name in names {
            if self.store.get_secret(workspace, name).await?.is_none() {
                return Err(ValidationError::Format {
                    field: "secrets",
                    reason: format!("unknown secret {name:?}"),
                }
                .into());
            }
        }
        Ok(())
    }

    /// Decrypts the selected secrets for delivery into a sandbox.
    pub(super) async fn resolve_secrets(
        &self,
        workspace: &str,
        names: &[String],
    ) -> Result<BTreeMap<String, String>, String> {
        let mut out = BTreeMap::new();
        for name in names {
            let record = self
                .store
                .get_secret(workspace, name)
                .await
                .map_err(|e| format!("secret store unavailable: {e}"))?
                .ok_or_else(|| format!("secret {name:?} was deleted before the sandbox started"))?;
            let value = self.secrets.open(&record).map_err(|e| {
                format!("secret {name:?} could not be decrypted with this node's keys: {e}")
            })?;
            out.insert(name.clone(), value);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chacha20poly1305::aead::{Aead, KeyInit, Payload};
    use chacha20poly1305::{ChaCha20Poly1305, Nonce};

    fn record(
        workspace: &str,
        name: &str,
        (nonce, ciphertext): (Vec<u8>, Vec<u8>),
    ) -> SecretRecord {
        SecretRecord {
            workspace: workspace.into(),
            name: name.into(),
            nonce,
            ciphertext,
            created_at: Utc::now(),
            updated_at: Utc::now(),
        }
    }

    /// A row as sbx wrote it before key ids: a 12-byte nonce and the bare ciphertext.
    fn legacy_columns(
        key: [u8; 32],
        workspace: &str,
        name: &str,
        value: &str,
    ) -> (Vec<u8>, Vec<u8>) {
        let nonce = [5u8; 12];
        let ct = ChaCha20Poly1305::new(chacha20poly1305::Key::from_slice(&key))
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: value.as_bytes(),
                    aad: format!("sbx-secret\0{workspace}\0{name}").as_bytes(),
                },
            )
            .unwrap();
        (nonce.to_vec(), ct)
    }

    fn boxed(byte: u8) -> SecretBox {
        SecretBox::new(KeyRing::new(Key::from_bytes([byte; 32])))
    }

    #[test]
    fn seal_open_round_trip_and_binding() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        let b = SecretBox::load_or_create(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
            0o600
        );
        let (nonce, ciphertext) = b.seal("ws", "TOKEN", "hunter2").unwrap();
        assert!(!ciphertext.windows(7).any(|w| w == b"hunter2"));
        // The nonce column carries the header with the key id.
        assert_eq!(nonce.len(), sbx_secrets::SEALED_PREFIX_LEN);
        assert_eq!(&nonce[5..13], b.keys().current_id().as_bytes());
        let mut r = record("ws", "TOKEN", (nonce, ciphertext));
        assert_eq!(b.open(&r).ok().as_deref(), Some("hunter2"));
        // The same key file loads the same key.
        assert_eq!(
            SecretBox::load_or_create(&path)
                .unwrap()
                .open(&r)
                .ok()
                .as_deref(),
            Some("hunter2")
        );
        r.name = "OTHER".into();
        assert!(
            b.open(&r).is_err(),
            "ciphertext moved to another name must not decrypt"
        );
    }

    #[test]
    fn secrets_sealed_before_tenants_still_open_only_for_default_production() {
        let b = boxed(1);
        let mut r = record(
            "default/production",
            "TOKEN",
            b.seal("default", "TOKEN", "old").unwrap(),
        );
        assert_eq!(b.open(&r).ok().as_deref(), Some("old"));
        r.workspace = "acme/production".into();
        assert!(b.open(&r).is_err(), "another tenant must not decrypt it");
        let mut r = record(
            "acme/production",
            "TOKEN",
            b.seal("acme/production", "TOKEN", "new").unwrap(),
        );
        r.workspace = "acme/staging".into();
        assert!(b.open(&r).is_err(), "bound to its environment too");
    }

    #[test]
    fn rows_written_before_key_ids_open_and_reseal_for_their_own_row() {
        let legacy = record(
            "ws/production",
            "TOKEN",
            legacy_columns([1; 32], "ws/production", "TOKEN", "v1"),
        );
        assert_eq!(boxed(1).open(&legacy).ok().as_deref(), Some("v1"));
        // A ring rotated to key 2 still reads it, and rewrites it under key 2.
        let rotated = SecretBox::new(boxed(1).keys().rotated_to(Key::from_bytes([2; 32])));
        assert_eq!(rotated.open(&legacy).ok().as_deref(), Some("v1"));
        let (nonce, ciphertext) = rotated.reseal(&legacy).unwrap().expect("rewritten");
        let new = record("ws/production", "TOKEN", (nonce, ciphertext));
        assert!(
            rotated.reseal(&new).unwrap().is_none(),
            "nothing left to do"
        );
        assert_eq!(boxed(2).open(&new).ok().as_deref(), Some("v1"));
        assert!(boxed(1).open(&new).is_err());
        // A pre-tenant row in default/production is resealed for its new name.
        let pre_tenant = record(
            "default/production",
            "T",
            legacy_columns([1; 32], "default", "T", "v0"),
        );
        let (nonce, ciphertext) = rotated.reseal(&pre_tenant).unwrap().expect("rewritten");
        let new = record("default/production", "T", (nonce, ciphertext));
        assert_eq!(boxed(2).open(&new).ok().as_deref(), Some("v0"));
    }

    #[test]
    fn a_wrong_key_says_which_key_the_value_needs() {
        let r = record("ws", "TOKEN", boxed(1).seal("ws", "TOKEN", "v").unwrap());
        let e = boxed(2).open(&r).unwrap_err().to_string();
        assert!(e.contains(&boxed(1).keys().current_id().to_string()), "{e}");
        assert!(e.contains("not among this node's keys"), "{e}");
        assert!(
            boxed(2).reseal(&r).is_err(),
            "a rotation never rewrites what it cannot read"
        );
    }
}
