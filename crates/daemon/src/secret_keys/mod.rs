//! The node's secret keys: where they come from (flags, environment, the data
//! dir's default file), the start-up check that they open what the store holds,
//! and `sbxd rotate-secret-key` ([`rotate`]).

pub mod rotate;

use crate::service::SecretBox;
use sbx_secrets::{KeyError, KeyRing, KeySources};
use sbx_store::{Store, StoreError};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Errors of the node's secret keys.
#[derive(Debug, thiserror::Error)]
pub enum SecretKeysError {
    /// A key could not be loaded.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// The store could not be read or written.
    #[error("secret store: {0}")]
    Store(#[from] StoreError),
    /// Not one stored secret opens with this node's keys: the wrong key was given.
    #[error(
        "none of the {count} stored secrets opens with this node's keys ({have}); they need key {needed}. \
         Start sbxd with the key the other nodes use (--secret-key-file or SBX_SECRET_KEY), \
         and during a rotation the old one as --previous-secret-key-file"
    )]
    WrongKey {
        /// Stored secrets.
        count: usize,
        /// Key ids this node has.
        have: String,
        /// Key ids named by the stored secrets (or "unknown" for ones written before key ids).
        needed: String,
    },
    /// Some values could not be re-encrypted by a rotation.
    #[error("{0}")]
    Rotation(String),
}

/// The key flags of sbxd (and of `sbxd rotate-secret-key`, for the keys values are sealed with now).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct SecretKeyArgs {
    /// The key that seals workspace secrets and Connect credentials: a file of 32
    /// random bytes or their base64. Default: DATA_DIR/secret.key, created at first
    /// start; a file given here must exist. Or give the key itself, base64, in
    /// SBX_SECRET_KEY. Every node sharing one database needs the same key.
    #[arg(long, env = "SBX_SECRET_KEY_FILE")]
    pub secret_key_file: Option<PathBuf>,
    /// A previous key, accepted for decryption only, during a key rotation
    /// (repeatable; comma-separated in SBX_PREVIOUS_SECRET_KEY_FILES; base64 keys,
    /// comma-separated, in SBX_PREVIOUS_SECRET_KEYS).
    #[arg(
        long = "previous-secret-key-file",
        env = "SBX_PREVIOUS_SECRET_KEY_FILES",
        value_delimiter = ','
    )]
    pub previous_secret_key_files: Vec<PathBuf>,
}

impl SecretKeyArgs {
    /// The key sources, with the key values of the process environment.
    pub fn sources(&self, data_dir: &Path) -> KeySources {
        self.sources_with_env(data_dir, |name| std::env::var(name).ok())
    }

    /// The key sources, with key values from `env` (tests pass their own).
    pub fn sources_with_env(
        &self,
        data_dir: &Path,
        env: impl Fn(&str) -> Option<String>,
    ) -> KeySources {
        // Key values come from the environment only, never from a flag, so
        // that they do not show in the process list.
        KeySources {
            file: self.secret_key_file.clone(),
            env: env("SBX_SECRET_KEY"),
            default_file: Some(data_dir.join("secret.key")),
            previous_files: self.previous_secret_key_files.clone(),
            previous_env: env("SBX_PREVIOUS_SECRET_KEYS")
                .map(|v| v.split(',').map(str::to_string).collect())
                .unwrap_or_default(),
        }
    }

    /// The node's key ring; the default key file is created if it is used and missing.
    pub fn load(&self, data_dir: &Path) -> Result<KeyRing, KeyError> {
        self.sources(data_dir).ring(true)
    }
}

/// What the start-up check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSecrets {
    /// Stored secrets.
    pub total: usize,
    /// Those no key of the node opens.
    pub unreadable: usize,
    /// Those sealed with a previous key (or before key ids): a rotation rewrites them.
    pub not_current: usize,
}

/// Checks that this node's keys open the stored secrets. Not one opening (and
/// at least one stored) is a wrong key: [`SecretKeysError::WrongKey`], so that
/// such a node stops at start instead of failing every sandbox that asks for one.
/// Some not opening is only logged, since one damaged row must not stop a node.
pub fn check_stored_secrets(
    store: &dyn Store,
    secrets: &SecretBox,
) -> Result<StoredSecrets, SecretKeysError> {
    let records = store.list_all_secrets()?;
    let mut found = StoredSecrets {
        total: records.len(),
        unreadable: 0,
        not_current: 0,
    };
    let mut needed = BTreeSet::new();
    for r in &records {
        match secrets.reseal(r) {
            Ok(None) => {}
            Ok(Some(_)) => found.not_current += 1,
            Err(e) => {
                found.unreadable += 1;
                needed.insert(match e.needed_key() {
                    Some(key) => key.to_string(),
                    None => "unknown (written before key ids)".to_string(),
                });
                tracing::warn!(workspace = %r.workspace, name = %r.name, error = %e, "stored secret does not open with this node's keys");
            }
        }
    }
    let have: Vec<String> = secrets
        .keys()
        .key_ids()
        .iter()
        .map(|k| k.to_string())
        .collect();
    if found.total > 0 && found.unreadable == found.total {
        return Err(SecretKeysError::WrongKey {
            count: found.total,
            have: have.join(", "),
            needed: needed.into_iter().collect::<Vec<_>>().join(", "),
        });
    }
    tracing::info!(
        current_key = %secrets.keys().current_id(),
        keys = %have.join(", "),
        secrets = found.total,
        unreadable = found.unreadable,
        under_older_keys = found.not_current,
        "secret keys"
    );
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;
    use chrono::Utc;
    use sbx_secrets::Key;
    use sbx_store::{SecretRecord, SqliteStore};

    fn put(store: &dyn Store, b: &SecretBox, workspace: &str, name: &str, value: &str) {
        let (nonce, ciphertext) = b.seal(workspace, name, value).expect("seal");
        store
            .put_secret(&SecretRecord {
                workspace: workspace.into(),
                name: name.into(),
                nonce,
                ciphertext,
                created_at: Utc::now(),
                updated_at: Utc::now(),
            })
            .expect("put");
    }

    fn boxed(byte: u8) -> SecretBox {
        SecretBox::new(KeyRing::new(Key::from_bytes([byte; 32])))
    }

    #[test]
    fn flags_and_environment_make_the_key_sources() {
        let dir = tempfile::tempdir().unwrap();
        let b64 = |b: u8| base64::engine::general_purpose::STANDARD.encode([b; 32]);
        let args = SecretKeyArgs::default();
        let (one, two) = (b64(1), b64(2));
        let env = |name: &str| match name {
            "SBX_SECRET_KEY" => Some(one.clone()),
            "SBX_PREVIOUS_SECRET_KEYS" => Some(format!("{two},")),
            _ => None,
        };
        let ring = args.sources_with_env(dir.path(), env).ring(true).unwrap();
        assert_eq!(
            ring.key_ids(),
            vec![Key::from_bytes([1; 32]).id(), Key::from_bytes([2; 32]).id()]
        );
        assert!(!dir.path().join("secret.key").exists());
        // Nothing given: the data dir's default file, created once.
        let ring = args
            .sources_with_env(dir.path(), |_| None)
            .ring(true)
            .unwrap();
        assert!(dir.path().join("secret.key").exists());
        assert_eq!(
            args.load(dir.path()).unwrap().current_id(),
            ring.current_id()
        );
        // A file flag and the environment at once is refused.
        let both = SecretKeyArgs {
            secret_key_file: Some(dir.path().join("secret.key")),
            ..SecretKeyArgs::default()
        };
        let e = both
            .sources_with_env(dir.path(), |n| (n == "SBX_SECRET_KEY").then(|| b64(1)))
            .ring(true)
            .unwrap_err();
        assert!(matches!(e, KeyError::TwoSources), "{e:?}");
    }

    #[test]
    fn a_node_whose_keys_open_no_stored_secret_is_refused() {
        let store = SqliteStore::in_memory().unwrap();
        // An empty store: any key will do.
        assert_eq!(
            check_stored_secrets(&store, &boxed(2)).unwrap(),
            StoredSecrets {
                total: 0,
                unreadable: 0,
                not_current: 0
            }
        );
        put(&store, &boxed(1), "ws/production", "A", "a");
        put(&store, &boxed(1), "ws/production", "B", "b");
        let e = check_stored_secrets(&store, &boxed(2)).unwrap_err();
        let msg = e.to_string();
        assert!(
            matches!(e, SecretKeysError::WrongKey { count: 2, .. }),
            "{msg}"
        );
        assert!(
            msg.contains(&boxed(1).keys().current_id().to_string()),
            "{msg}"
        );
        assert!(
            msg.contains(&boxed(2).keys().current_id().to_string()),
            "{msg}"
        );
        // The right key, or the old one as previous, passes.
        assert_eq!(
            check_stored_secrets(&store, &boxed(1)).unwrap().unreadable,
            0
        );
        let rotated = SecretBox::new(boxed(1).keys().rotated_to(Key::from_bytes([2; 32])));
        assert_eq!(
            check_stored_secrets(&store, &rotated).unwrap(),
            StoredSecrets {
                total: 2,
                unreadable: 0,
                not_current: 2
            }
        );
        // One row under another key is reported, not fatal.
        put(&store, &boxed(3), "ws/production", "C", "c");
        assert_eq!(
            check_stored_secrets(&store, &boxed(1)).unwrap().unreadable,
            1
        );
    }
}
