//! Keys, their ids, and where they come from (key files and environment values).

use base64::Engine;
use sha2::{Digest, Sha256};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Length of a key in bytes.
pub const KEY_LEN: usize = 32;

/// Errors of loading or creating a key.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The key file could not be read or created.
    #[error("{what}: {source}")]
    Io {
        /// The source, e.g. `secret key file /var/lib/sbx/secret.key`.
        what: String,
        /// Cause.
        source: std::io::Error,
    },
    /// An explicitly given key file does not exist (only the default one is created).
    #[error("{what} does not exist (sbxd creates only the default key file, DATA_DIR/secret.key, at its first start)")]
    Missing {
        /// The source.
        what: String,
    },
    /// The source holds neither 32 raw bytes nor base64 text.
    #[error("{what} holds {len} bytes; a key is exactly 32 random bytes, or their base64 (44 characters)")]
    BadLength {
        /// The source.
        what: String,
        /// Bytes found.
        len: usize,
    },
    /// The source looks like text but is not valid base64.
    #[error(
        "{what} is not valid base64 ({reason}); a key is exactly 32 random bytes, or their base64"
    )]
    BadBase64 {
        /// The source.
        what: String,
        /// What the decoder said.
        reason: String,
    },
    /// The base64 text decodes to the wrong number of bytes.
    #[error("{what} decodes to {len} bytes; a key is exactly 32 bytes")]
    BadDecodedLength {
        /// The source.
        what: String,
        /// Bytes decoded.
        len: usize,
    },
    /// The current key was given both as a file and in the environment.
    #[error("the current secret key is given twice (--secret-key-file and SBX_SECRET_KEY); give it one way")]
    TwoSources,
    /// No source was given at all (a caller without a default file).
    #[error("no secret key given: pass --secret-key-file or set SBX_SECRET_KEY")]
    NoSource,
    /// The system random source failed.
    #[error("random source: {0}")]
    Random(String),
}

/// The id of a key: the first 8 bytes of SHA-256 of the key, shown as 16 hex digits.
///
/// An operator can compute it from a raw key file with `sha256sum secret.key | cut -c1-16`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyId(pub(crate) [u8; 8]);

impl KeyId {
    /// The id's 8 bytes, as stored in a blob header.
    pub fn as_bytes(&self) -> &[u8; 8] {
        &self.0
    }
}

impl std::fmt::Display for KeyId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl std::fmt::Debug for KeyId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeyId({self})")
    }
}

/// A 32-byte key and its id. Its `Debug` shows the id only.
#[derive(Clone)]
pub struct Key {
    bytes: [u8; KEY_LEN],
    id: KeyId,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print key material.
        write!(f, "Key({})", self.id)
    }
}

impl Key {
    /// A key from its bytes.
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> Key {
        let digest = Sha256::digest(bytes);
        let mut id = [0u8; 8];
        id.copy_from_slice(&digest[..8]);
        Key {
            bytes,
            id: KeyId(id),
        }
    }

    /// A fresh random key.
    pub fn generate() -> Result<Key, KeyError> {
        let mut bytes = [0u8; KEY_LEN];
        getrandom::getrandom(&mut bytes).map_err(|e| KeyError::Random(e.to_string()))?;
        Ok(Key::from_bytes(bytes))
    }

    /// The key's id.
    pub fn id(&self) -> KeyId {
        self.id
    }

    pub(crate) fn bytes(&self) -> &[u8; KEY_LEN] {
        &self.bytes
    }

    /// A key from base64 text (standard alphabet, padding optional, surrounding
    /// whitespace ignored); `what` names the source in errors.
    pub fn from_base64(what: &str, text: &str) -> Result<Key, KeyError> {
        let text = text.trim();
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(text)
            .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(text))
            .map_err(|e| KeyError::BadBase64 {
                what: what.to_string(),
                reason: e.to_string(),
            })?;
        let bytes: [u8; KEY_LEN] =
            decoded
                .as_slice()
                .try_into()
                .map_err(|_| KeyError::BadDecodedLength {
                    what: what.to_string(),
                    len: decoded.len(),
                })?;
        Ok(Key::from_bytes(bytes))
    }

    /// Reads a key file: exactly 32 raw bytes, or the base64 of 32 bytes (a
    /// trailing newline is fine). A missing file is [`KeyError::Missing`].
    pub fn read_file(path: &Path) -> Result<Key, KeyError> {
        let what = file_what(path);
        let data = std::fs::read(path).map_err(|source| match source.kind() {
            std::io::ErrorKind::NotFound => KeyError::Missing { what: what.clone() },
            _ => KeyError::Io {
                what: what.clone(),
                source,
            },
        })?;
        if let Ok(bytes) = <[u8; KEY_LEN]>::try_from(data.as_slice()) {
            return Ok(Key::from_bytes(bytes));
        }
        // Text of the base64 alphabet is taken for base64; anything else is a
        // raw key of the wrong length, and is reported as such.
        let is_text = data
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"+/=".contains(b) || b.is_ascii_whitespace());
        match std::str::from_utf8(&data) {
            Ok(text) if is_text && !text.trim().is_empty() => Key::from_base64(&what, text),
            _ => Err(KeyError::BadLength {
                what,
                len: data.len(),
            }),
        }
    }

    /// Reads the key file at `path`, first creating it (mode 0600, 32 random
    /// bytes) if it does not exist.
    pub fn read_or_create_file(path: &Path) -> Result<Key, KeyError> {
        if !path.exists() {
            create_file(path)?;
        }
        Key::read_file(path)
    }
}

fn file_what(path: &Path) -> String {
    format!("secret key file {}", path.display())
}

/// Writes a fresh key to `path` unless a file appeared there meanwhile (then that
/// one is kept: two processes starting at once end with one key).
fn create_file(path: &Path) -> Result<(), KeyError> {
    let io = |source| KeyError::Io {
        what: file_what(path),
        source,
    };
    let key = Key::generate()?;
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io)?;
    f.write_all(key.bytes()).map_err(io)?;
    f.sync_all().map_err(io)?;
    drop(f);
    // A hard link, unlike a rename, never replaces a key another process wrote.
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(io(e)),
    }
}

/// Where the keys of a node come from. `Debug` never shows key values.
#[derive(Default, Clone)]
pub struct KeySources {
    /// An explicit key file (`--secret-key-file`); it must exist.
    pub file: Option<PathBuf>,
    /// The base64 key from the environment (`SBX_SECRET_KEY`).
    pub env: Option<String>,
    /// Used when neither is given, created at first use (`<data-dir>/secret.key`).
    pub default_file: Option<PathBuf>,
    /// Keys accepted for opening only (`--previous-secret-key-file`).
    pub previous_files: Vec<PathBuf>,
    /// Base64 keys accepted for opening only (`SBX_PREVIOUS_SECRET_KEYS`).
    pub previous_env: Vec<String>,
}

impl std::fmt::Debug for KeySources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeySources")
            .field("file", &self.file)
            .field("env", &self.env.as_ref().map(|_| "<redacted>"))
            .field("default_file", &self.default_file)
            .field("previous_files", &self.previous_files)
            .field("previous_env", &self.previous_env.len())
            .finish()
    }
}

impl KeySources {
    /// The current key: the explicit file, else the environment, else the
    /// default file, created if `create_default` and it is missing.
    pub fn current(&self, create_default: bool) -> Result<Key, KeyError> {
        let env = self.env.as_deref().filter(|v| !v.trim().is_empty());
        match (&self.file, env, &self.default_file) {
            (Some(_), Some(_), _) => Err(KeyError::TwoSources),
            (Some(path), None, _) => Key::read_file(path),
            (None, Some(text), _) => Key::from_base64("SBX_SECRET_KEY", text),
            (None, None, Some(path)) if create_default => Key::read_or_create_file(path),
            (None, None, Some(path)) => Key::read_file(path),
            (None, None, None) => Err(KeyError::NoSource),
        }
    }

    /// The previous keys, files first, in the order given.
    pub fn previous(&self) -> Result<Vec<Key>, KeyError> {
        let mut keys = Vec::new();
        for path in &self.previous_files {
            keys.push(Key::read_file(path)?);
        }
        for (i, text) in self.previous_env.iter().enumerate() {
            if text.trim().is_empty() {
                continue;
            }
            let what = format!("SBX_PREVIOUS_SECRET_KEYS entry {}", i + 1);
            keys.push(Key::from_base64(&what, text)?);
        }
        Ok(keys)
    }

    /// The key ring: the current key and the previous ones.
    pub fn ring(&self, create_default: bool) -> Result<crate::KeyRing, KeyError> {
        Ok(crate::KeyRing::new(self.current(create_default)?).with_previous(self.previous()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn b64(bytes: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    #[test]
    fn key_id_is_the_sha256_prefix_and_debug_hides_the_key() {
        let key = Key::from_bytes([0x11; 32]);
        let digest = Sha256::digest([0x11u8; 32]);
        assert_eq!(key.id().to_string(), hex::encode(&digest[..8]));
        assert_eq!(key.id().to_string().len(), 16);
        let shown = format!("{key:?}");
        assert_eq!(shown, format!("Key({})", key.id()));
        assert!(!shown.contains("11, 17"), "{shown}");
        assert_ne!(Key::from_bytes([0x12; 32]).id(), key.id());
    }

    #[test]
    fn key_files_hold_raw_bytes_or_base64() {
        let dir = tempfile::tempdir().unwrap();
        let raw = dir.path().join("raw");
        std::fs::write(&raw, [7u8; 32]).unwrap();
        let text = dir.path().join("text");
        std::fs::write(&text, format!("{}\n", b64(&[7u8; 32]))).unwrap();
        let a = Key::read_file(&raw).unwrap();
        let b = Key::read_file(&text).unwrap();
        assert_eq!(a.id(), b.id());
        assert_eq!(a.bytes(), &[7u8; 32]);
    }

    #[test]
    fn bad_key_files_say_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let short = dir.path().join("short");
        std::fs::write(&short, [0xffu8; 31]).unwrap();
        let e = Key::read_file(&short).unwrap_err();
        assert!(matches!(e, KeyError::BadLength { len: 31, .. }), "{e:?}");
        assert!(e.to_string().contains("holds 31 bytes"), "{e}");
        assert!(e.to_string().contains(&short.display().to_string()), "{e}");

        let bad = dir.path().join("bad");
        std::fs::write(&bad, "not*base64*at*all\n").unwrap();
        // '*' is outside the alphabet: taken for a raw key of the wrong length.
        assert!(matches!(
            Key::read_file(&bad).unwrap_err(),
            KeyError::BadLength { len: 18, .. }
        ));
        std::fs::write(&bad, "abc=def=\n").unwrap();
        let e = Key::read_file(&bad).unwrap_err();
        assert!(matches!(e, KeyError::BadBase64 { .. }), "{e:?}");
        assert!(e.to_string().contains("not valid base64"), "{e}");

        std::fs::write(&bad, b64(&[1u8; 16])).unwrap();
        let e = Key::read_file(&bad).unwrap_err();
        assert!(
            matches!(e, KeyError::BadDecodedLength { len: 16, .. }),
            "{e:?}"
        );

        let missing = dir.path().join("missing");
        let e = Key::read_file(&missing).unwrap_err();
        assert!(matches!(e, KeyError::Missing { .. }), "{e:?}");
        assert!(!missing.exists(), "an explicit key file is never created");

        let unreadable = dir.path().join("dir");
        std::fs::create_dir(&unreadable).unwrap();
        let e = Key::read_file(&unreadable).unwrap_err();
        assert!(matches!(e, KeyError::Io { .. }), "{e:?}");
    }

    #[test]
    fn the_default_file_is_created_once_with_mode_0600() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret.key");
        let sources = KeySources {
            default_file: Some(path.clone()),
            ..KeySources::default()
        };
        assert!(matches!(
            sources.current(false).unwrap_err(),
            KeyError::Missing { .. }
        ));
        let first = sources.current(true).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(std::fs::read(&path).unwrap().len(), 32);
        assert_eq!(sources.current(true).unwrap().id(), first.id());
        // Only the key is left behind, no temporary file.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn sources_pick_the_explicit_file_or_the_environment_never_both() {
        let dir = tempfile::tempdir().unwrap();
        let default = dir.path().join("secret.key");
        let explicit = dir.path().join("explicit.key");
        std::fs::write(&explicit, [3u8; 32]).unwrap();
        let file_only = KeySources {
            file: Some(explicit.clone()),
            default_file: Some(default.clone()),
            ..KeySources::default()
        };
        assert_eq!(
            file_only.current(true).unwrap().id(),
            Key::from_bytes([3; 32]).id()
        );
        assert!(
            !default.exists(),
            "the default is not made when a file is given"
        );

        let env_only = KeySources {
            env: Some(b64(&[4u8; 32])),
            default_file: Some(default.clone()),
            ..KeySources::default()
        };
        assert_eq!(
            env_only.current(true).unwrap().id(),
            Key::from_bytes([4; 32]).id()
        );
        assert!(!default.exists());

        let both = KeySources {
            env: Some(b64(&[4u8; 32])),
            ..file_only.clone()
        };
        assert!(matches!(
            both.current(true).unwrap_err(),
            KeyError::TwoSources
        ));

        let bad_env = KeySources {
            env: Some("%%%".into()),
            ..KeySources::default()
        };
        let e = bad_env.current(true).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("SBX_SECRET_KEY is not valid base64"),
            "{e}"
        );
        assert!(
            !format!("{bad_env:?}").contains("%%%"),
            "Debug hides the value"
        );

        let missing = KeySources {
            file: Some(dir.path().join("nope")),
            default_file: Some(default.clone()),
            ..KeySources::default()
        };
        assert!(matches!(
            missing.current(true).unwrap_err(),
            KeyError::Missing { .. }
        ));
        assert!(matches!(
            KeySources::default().current(true).unwrap_err(),
            KeyError::NoSource
        ));
    }

    #[test]
    fn previous_keys_come_from_files_then_the_environment() {
        let dir = tempfile::tempdir().unwrap();
        let old = dir.path().join("old.key");
        std::fs::write(&old, [5u8; 32]).unwrap();
        let sources = KeySources {
            env: Some(b64(&[1u8; 32])),
            previous_files: vec![old.clone()],
            previous_env: vec![b64(&[6u8; 32]), String::new()],
            ..KeySources::default()
        };
        let ring = sources.ring(false).unwrap();
        assert_eq!(ring.current_id(), Key::from_bytes([1; 32]).id());
        assert_eq!(
            ring.key_ids(),
            vec![
                Key::from_bytes([1; 32]).id(),
                Key::from_bytes([5; 32]).id(),
                Key::from_bytes([6; 32]).id()
            ]
        );
        let bad = KeySources {
            previous_env: vec![b64(&[1u8; 31])],
            ..sources.clone()
        };
        let e = bad.ring(false).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("SBX_PREVIOUS_SECRET_KEYS entry 1 decodes to 31 bytes"),
            "{e}"
        );
        let missing = KeySources {
            previous_files: vec![dir.path().join("gone.key")],
            ..sources
        };
        assert!(matches!(
            missing.ring(false).unwrap_err(),
            KeyError::Missing { .. }
        ));
    }
}
