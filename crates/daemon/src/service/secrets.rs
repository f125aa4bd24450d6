//! Workspace secrets: encrypted at rest with ChaCha20-Poly1305; values leave
//! the store only into a sandbox's environment, never into a response or log.

use super::{Result, Service, ServiceError};
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use chrono::Utc;
use sbx_api_types::validate::{self, ValidationError};
use sbx_store::SecretRecord;
use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Largest secret value.
pub const MAX_SECRET_BYTES: usize = 64 * 1024;

/// Errors of the key file.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The key file could not be read or created.
    #[error("secret key file {path}: {source}")]
    Io {
        /// Key file path.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// The key file has the wrong size.
    #[error("secret key file {0} must hold exactly 32 bytes")]
    BadLength(String),
}

/// The AEAD key of the secret store.
pub struct SecretBox {
    cipher: ChaCha20Poly1305,
}

fn random_bytes<const N: usize>() -> std::io::Result<[u8; N]> {
    let mut buf = [0u8; N];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut buf)?;
    Ok(buf)
}

impl SecretBox {
    /// Loads the key file, creating it (mode 0600) with a random key at first start.
    pub fn load_or_create(path: &Path) -> Result<Self, KeyError> {
        let io = |source| KeyError::Io {
            path: path.display().to_string(),
            source,
        };
        if !path.exists() {
            let key = random_bytes::<32>().map_err(io)?;
            let tmp = path.with_extension("tmp");
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)
                .map_err(io)?;
            std::io::Write::write_all(&mut f, &key).map_err(io)?;
            f.sync_all().map_err(io)?;
            std::fs::rename(&tmp, path).map_err(io)?;
        }
        let key = std::fs::read(path).map_err(io)?;
        if key.len() != 32 {
            return Err(KeyError::BadLength(path.display().to_string()));
        }
        Ok(SecretBox {
            cipher: ChaCha20Poly1305::new(Key::from_slice(&key)),
        })
    }

    fn aad(workspace: &str, name: &str) -> Vec<u8> {
        // Binds a ciphertext to its row: a value copied to another name or workspace will not decrypt.
        format!("sbx-secret\0{workspace}\0{name}").into_bytes()
    }

    /// Encrypts a value for (workspace, name); returns (nonce, ciphertext).
    pub fn seal(
        &self,
        workspace: &str,
        name: &str,
        value: &str,
    ) -> std::io::Result<(Vec<u8>, Vec<u8>)> {
        let nonce = random_bytes::<12>()?;
        let aad = Self::aad(workspace, name);
        let ct = self
            .cipher
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: value.as_bytes(),
                    aad: &aad,
                },
            )
            .map_err(|_| std::io::Error::other("encryption failed"))?;
        Ok((nonce.to_vec(), ct))
    }

    /// Decrypts a stored secret.
    pub fn open(&self, record: &SecretRecord) -> Option<String> {
        if record.nonce.len() != 12 {
            return None;
        }
        let decrypt = |workspace: &str| {
            let aad = Self::aad(workspace, &record.name);
            self.cipher
                .decrypt(
                    Nonce::from_slice(&record.nonce),
                    Payload {
                        msg: &record.ciphertext,
                        aad: &aad,
                    },
                )
                .ok()
        };
        // Secrets sealed before tenants existed were bound to the workspace
        // "default", which the tenants migration renamed "default/production".
        let pt = decrypt(&record.workspace).or_else(|| {
            (record.workspace == "default/production")
                .then(|| decrypt("default"))
                .flatten()
        })?;
        String::from_utf8(pt).ok()
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
            let value = self.secrets.open(&record).ok_or_else(|| {
                format!("secret {name:?} could not be decrypted with this node's key")
            })?;
            out.insert(name.clone(), value);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let mut r = SecretRecord {
            workspace: "ws".into(),
            name: "TOKEN".into(),
            nonce,
            ciphertext,
            created_at: Utc::now(),
            updated_at: Utc::now(),
        };
        assert_eq!(b.open(&r).as_deref(), Some("hunter2"));
        // The same key file loads the same key.
        assert_eq!(
            SecretBox::load_or_create(&path)
                .unwrap()
                .open(&r)
                .as_deref(),
            Some("hunter2")
        );
        r.name = "OTHER".into();
        assert_eq!(
            b.open(&r),
            None,
            "ciphertext moved to another name must not decrypt"
        );
    }

    #[test]
    fn secrets_sealed_before_tenants_still_open_only_for_default_production() {
        let dir = tempfile::tempdir().unwrap();
        let b = SecretBox::load_or_create(&dir.path().join("key")).unwrap();
        let (nonce, ciphertext) = b.seal("default", "TOKEN", "old").unwrap();
        let mut r = SecretRecord {
            workspace: "default/production".into(),
            name: "TOKEN".into(),
            nonce,
            ciphertext,
            created_at: Utc::now(),
            updated_at: Utc::now(),
        };
        assert_eq!(b.open(&r).as_deref(), Some("old"));
        r.workspace = "acme/production".into();
        assert_eq!(b.open(&r), None, "another tenant must not decrypt it");
        let (nonce, ciphertext) = b.seal("acme/production", "TOKEN", "new").unwrap();
        r.nonce = nonce;
        r.ciphertext = ciphertext;
        r.workspace = "acme/staging".into();
        assert_eq!(b.open(&r), None, "bound to its environment too");
    }
}
