//! Pre-signed `/files` URLs (contract §3.6): the SDK signs
//! `{path}:{op}:{user}:{token}[:{expiration}]` with SHA-256 and sends
//! `v1_` + unpadded standard base64.

use super::EnvdError;
use base64::Engine;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// What a signature allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileOp {
    /// Download (`GET /files`).
    Read,
    /// Upload (`POST /files`).
    Write,
}

impl FileOp {
    fn as_str(self) -> &'static str {
        match self {
            FileOp::Read => "read",
            FileOp::Write => "write",
        }
    }
}

/// The signature the SDK computes for these inputs.
pub fn sign(
    path: &str,
    op: FileOp,
    user: Option<&str>,
    token: &str,
    expiration: Option<i64>,
) -> String {
    let mut text = format!("{path}:{}:{}:{token}", op.as_str(), user.unwrap_or(""));
    if let Some(exp) = expiration {
        text.push_str(&format!(":{exp}"));
    }
    let digest = Sha256::digest(text.as_bytes());
    let b64 = base64::engine::general_purpose::STANDARD.encode(digest);
    format!("v1_{}", b64.trim_end_matches('='))
}

/// Whether `signature` was made with `token` for these inputs (constant time).
pub fn matches(
    signature: &str,
    path: &str,
    op: FileOp,
    user: Option<&str>,
    token: &str,
    expiration: Option<i64>,
) -> bool {
    let expected = sign(path, op, user, token, expiration);
    bool::from(expected.as_bytes().ct_eq(signature.as_bytes()))
}

/// An expired signature is refused before any sandbox is looked at.
pub fn check_expiry(expiration: Option<i64>) -> Result<(), EnvdError> {
    match expiration {
        Some(exp) if exp < chrono::Utc::now().timestamp() => Err(EnvdError::Unauthenticated(
            "the signature has expired".into(),
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_matches_the_captured_sdk_shape() {
        let sig = sign("/home/user/a.txt", FileOp::Read, None, "tok", None);
        assert!(sig.starts_with("v1_") && !sig.ends_with('='), "{sig}");
        // Every input is covered.
        assert!(matches(
            &sig,
            "/home/user/a.txt",
            FileOp::Read,
            None,
            "tok",
            None
        ));
        assert!(!matches(
            &sig,
            "/home/user/a.txt",
            FileOp::Write,
            None,
            "tok",
            None
        ));
        assert!(!matches(
            &sig,
            "/home/user/b.txt",
            FileOp::Read,
            None,
            "tok",
            None
        ));
        assert!(!matches(
            &sig,
            "/home/user/a.txt",
            FileOp::Read,
            Some("root"),
            "tok",
            None
        ));
        assert!(!matches(
            &sig,
            "/home/user/a.txt",
            FileOp::Read,
            None,
            "other",
            None
        ));
        assert!(!matches(
            &sig,
            "/home/user/a.txt",
            FileOp::Read,
            None,
            "tok",
            Some(1)
        ));
        // An empty user signs as "" (the SDK's `username or ''`).
        assert_eq!(
            sig,
            sign("/home/user/a.txt", FileOp::Read, Some(""), "tok", None)
        );
    }

    #[test]
    fn expired_signatures_are_refused() {
        assert!(check_expiry(Some(0)).is_err());
        assert!(check_expiry(Some(chrono::Utc::now().timestamp() + 60)).is_ok());
        assert!(check_expiry(None).is_ok());
    }
}
