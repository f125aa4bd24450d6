//! User metadata on files: E2B's `X-Metadata-<key>` upload headers, kept in
//! the guest as `user.e2b.<key>` extended attributes (contract §3.5). The
//! rules live here because both ends check them: sbxd to answer `400`, the
//! agent because it must not trust what reaches it.

use std::collections::BTreeMap;

/// A file's metadata: lower-case keys to printable-ASCII values.
pub type FileMetadata = BTreeMap<String, String>;

/// Extended-attribute namespace of the metadata (`user.e2b.<key>`).
pub const XATTR_PREFIX: &str = "user.e2b.";

/// Longest key: Linux's 255-byte xattr name less [`XATTR_PREFIX`].
pub const MAX_KEY_BYTES: usize = 246;

/// Budget of one file's metadata: every key with its prefix plus every value
/// (what fits an inode's xattr space on common filesystems), as upstream envd.
pub const MAX_TOTAL_BYTES: usize = 4096;

/// Why a metadata map is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetadataError {
    /// Keys (with their prefix) and values over [`MAX_TOTAL_BYTES`].
    #[error("a file's metadata is at most {MAX_TOTAL_BYTES} bytes (keys with the user.e2b. prefix, plus values)")]
    TooLarge,
    /// A key that is empty, too long, or not an HTTP token.
    #[error("invalid metadata key {0:?}: 1-{MAX_KEY_BYTES} HTTP token characters (letters, digits and !#$%&'*+-.^_`|~)")]
    Key(String),
    /// A value that is not printable US-ASCII.
    #[error("invalid metadata value for key {0:?}: printable US-ASCII only")]
    Value(String),
}

/// HTTP token characters (RFC 9110 `tchar`), what a header name allows.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Checks a key as it arrives (any case); [`normalize`] lower-cases it.
pub fn check_key(key: &str) -> Result<(), MetadataError> {
    if key.is_empty() || key.len() > MAX_KEY_BYTES || !key.bytes().all(is_tchar) {
        return Err(MetadataError::Key(key.to_string()));
    }
    Ok(())
}

/// Checks a value: printable US-ASCII (space through `~`).
pub fn check_value(key: &str, value: &str) -> Result<(), MetadataError> {
    if !value.bytes().all(|b| (0x20..=0x7e).contains(&b)) {
        return Err(MetadataError::Value(key.to_string()));
    }
    Ok(())
}

/// Validates pairs and folds them into a map with lower-case keys; a key
/// sent twice keeps its first value, as upstream envd does.
pub fn normalize<'a>(
    pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<FileMetadata, MetadataError> {
    let mut out = FileMetadata::new();
    let mut total = 0usize;
    for (key, value) in pairs {
        check_key(key)?;
        check_value(key, value)?;
        let key = key.to_ascii_lowercase();
        if out.contains_key(&key) {
            continue;
        }
        total += XATTR_PREFIX.len() + key.len() + value.len();
        if total > MAX_TOTAL_BYTES {
            return Err(MetadataError::TooLarge);
        }
        out.insert(key, value.to_string());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_lower_cased_and_checked() {
        let m = normalize([("Owner", "me"), ("x.y-z", "a b=c")]).unwrap();
        assert_eq!(m.get("owner").map(String::as_str), Some("me"));
        assert_eq!(m.get("x.y-z").map(String::as_str), Some("a b=c"));
        for bad in [
            "",
            "a b",
            "a=b",
            "a/b",
            "é",
            "a\0b",
            &"k".repeat(MAX_KEY_BYTES + 1),
        ] {
            assert_eq!(
                normalize([(bad, "v")]),
                Err(MetadataError::Key(bad.to_string())),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn values_are_printable_ascii() {
        for bad in ["a\nb", "tab\there", "\u{7f}", "ü"] {
            assert_eq!(
                normalize([("k", bad)]),
                Err(MetadataError::Value("k".into())),
                "{bad:?}"
            );
        }
        assert!(normalize([("k", "")]).is_ok());
    }

    #[test]
    fn the_first_of_a_repeated_key_wins() {
        let m = normalize([("Owner", "first"), ("owner", "second")]).unwrap();
        assert_eq!(m.get("owner").map(String::as_str), Some("first"));
    }

    #[test]
    fn the_total_is_bounded() {
        let just = "v".repeat(MAX_TOTAL_BYTES - XATTR_PREFIX.len() - 1);
        assert!(normalize([("k", just.as_str())]).is_ok());
        let over = format!("{just}v");
        assert_eq!(
            normalize([("k", over.as_str())]),
            Err(MetadataError::TooLarge)
        );
        let keys: Vec<String> = (0..400).map(|i| format!("key{i}")).collect();
        let pairs = keys.iter().map(|k| (k.as_str(), "value"));
        assert_eq!(normalize(pairs), Err(MetadataError::TooLarge));
    }
}
