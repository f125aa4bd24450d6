//! Webhook signature checks: Standard Webhooks (`webhook-id`, `webhook-timestamp`,
//! `webhook-signature: v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`) and a plain
//! HMAC-SHA256 of the raw body in a configurable header (GitHub's `X-Hub-Signature-256:
//! sha256=<hex>`). Comparisons are constant-time.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Errors of the signature module: why a delivery was refused (said in the 401's message;
/// none of them says anything about the secret).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// A header the scheme needs is missing.
    #[error("the {0} header is missing")]
    Missing(String),
    /// The timestamp is not a number of seconds.
    #[error("webhook-timestamp is not a Unix time in seconds")]
    BadTimestamp,
    /// The timestamp is outside the tolerance (a replay, or a clock far off).
    #[error("webhook-timestamp is more than {0} s away from now")]
    Stale(u64),
    /// No signature matches.
    #[error("no signature matches the body")]
    Mismatch,
}

/// HMAC-SHA256 (RFC 2104) of `message` under `key`.
pub fn hmac_sha256(key: &[u8], message: &[&[u8]]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut k = [0u8; BLOCK];
    if key.len() > BLOCK {
        k[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let mut inner = Sha256::new();
    inner.update(k.map(|b| b ^ 0x36));
    for part in message {
        inner.update(part);
    }
    let mut outer = Sha256::new();
    outer.update(k.map(|b| b ^ 0x5c));
    outer.update(inner.finalize());
    outer.finalize().into()
}

/// The HMAC key of a Standard Webhooks secret: the base64 after `whsec_`.
pub fn standard_key(secret: &str) -> Option<Vec<u8>> {
    STANDARD.decode(secret.strip_prefix("whsec_")?).ok()
}

/// Checks a Standard Webhooks signature. `signatures` is the `webhook-signature` value:
/// space-separated `v1,<base64>` entries, any of which may match.
pub fn check_standard(
    key: &[u8],
    id: &str,
    timestamp: &str,
    signatures: &str,
    body: &[u8],
    now_secs: i64,
    tolerance_secs: u64,
) -> Result<(), SignatureError> {
    let ts: i64 = timestamp
        .trim()
        .parse()
        .map_err(|_| SignatureError::BadTimestamp)?;
    if now_secs.abs_diff(ts) > tolerance_secs {
        return Err(SignatureError::Stale(tolerance_secs));
    }
    let expected = hmac_sha256(
        key,
        &[id.as_bytes(), b".", timestamp.trim().as_bytes(), b".", body],
    );
    let matched = signatures
        .split(' ')
        .filter_map(|s| s.strip_prefix("v1,"))
        .filter_map(|b| STANDARD.decode(b).ok())
        .any(|given| bool::from(given.ct_eq(&expected)));
    if matched {
        Ok(())
    } else {
        Err(SignatureError::Mismatch)
    }
}

/// Checks `prefix` + lower-case hex HMAC-SHA256 of the raw body, keyed by the secret's bytes.
pub fn check_hmac(
    secret: &[u8],
    prefix: &str,
    header_value: &str,
    body: &[u8],
) -> Result<(), SignatureError> {
    let given = header_value
        .trim()
        .strip_prefix(prefix)
        .and_then(|h| hex::decode(h.to_ascii_lowercase()).ok())
        .ok_or(SignatureError::Mismatch)?;
    let expected = hmac_sha256(secret, &[body]);
    if bool::from(given.ct_eq(&expected)) {
        Ok(())
    } else {
        Err(SignatureError::Mismatch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_matches_rfc_4231_case_2() {
        let mac = hmac_sha256(b"Jefe", &[b"what do ya want ", b"for nothing?"]);
        assert_eq!(
            hex::encode(mac),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn standard_webhooks_example_verifies() {
        // The example of the Standard Webhooks specification's reference libraries.
        let key = standard_key("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").expect("key");
        let id = "msg_p5jXN8AQM9LWM0D4loKWxJek";
        let ts = "1614265330";
        let body = br#"{"test": 2432232314}"#;
        let sig = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
        assert_eq!(
            check_standard(&key, id, ts, sig, body, 1614265330, 300),
            Ok(())
        );
        assert_eq!(
            check_standard(
                &key,
                id,
                ts,
                &format!("v1,bad {sig}"),
                body,
                1614265330,
                300
            ),
            Ok(())
        );
        assert_eq!(
            check_standard(&key, id, ts, sig, b"{}", 1614265330, 300),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            check_standard(&key, id, ts, sig, body, 1614265330 + 301, 300),
            Err(SignatureError::Stale(300))
        );
        assert_eq!(
            check_standard(&key, id, "soon", sig, body, 0, 300),
            Err(SignatureError::BadTimestamp)
        );
    }

    #[test]
    fn github_style_hmac_verifies() {
        // GitHub's documented example: secret "It's a Secret to Everybody", body "Hello, World!".
        let sig = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
        assert_eq!(
            check_hmac(
                b"It's a Secret to Everybody",
                "sha256=",
                sig,
                b"Hello, World!"
            ),
            Ok(())
        );
        assert_eq!(
            check_hmac(b"It's a Secret to Everybody", "sha256=", sig, b"Hello"),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            check_hmac(b"x", "sha256=", "md5=00", b""),
            Err(SignatureError::Mismatch)
        );
    }
}
