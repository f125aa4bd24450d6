//! The bearer token the inngest SDK sends for a signing key (contract §1.3):
//! `<prefix><hex(sha256(hexdecode(rest)))>`, where the prefix is `signkey-<word>-`.
//! Shared by the server (to compare) and the Rust client (to send).

use sha2::{Digest, Sha256};

/// What the SDK sends as the bearer token for a signing key.
pub fn hashed_signing_key(key: &str) -> String {
    let (prefix, rest) = split_prefix(key);
    let decoded = hex::decode(rest).unwrap_or_else(|_| rest.as_bytes().to_vec());
    format!("{prefix}{}", hex::encode(Sha256::digest(decoded)))
}

/// Splits `signkey-<word>-` off the key, as the SDK's `^signkey-\w+-` does.
fn split_prefix(key: &str) -> (&str, &str) {
    if let Some(after) = key.strip_prefix("signkey-") {
        let word_len = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(after.len());
        if word_len > 0 && after[word_len..].starts_with('-') {
            let cut = "signkey-".len() + word_len + 1;
            return (&key[..cut], &key[cut..]);
        }
    }
    ("", key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_sdk_example() {
        assert_eq!(
            hashed_signing_key("signkey-prod-0123abcd"),
            "signkey-prod-2647356804523c847ca70dc0f6c66a28d4cec5f53b9119a9022984ceec35e9da"
        );
        assert_eq!(split_prefix("plainhex"), ("", "plainhex"));
        assert_eq!(split_prefix("signkey--00"), ("", "signkey--00"));
    }
}
