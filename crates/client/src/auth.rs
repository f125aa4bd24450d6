//! The bearer token the inngest SDK sends for a signing key (contract §1.3):
//! `<prefix><hex(sha256(hexdecode(rest)))>`, where the prefix is `signkey-<word>-`.

pub use sbx_api_types::signing_key::hashed_signing_key;

/// The `Authorization` header value for a key, or `None` when the key is blank
/// (the SDK leaves the header out when the trimmed value is empty).
pub fn authorization_header(key: &str) -> Option<String> {
    let key = key.trim();
    if key.is_empty() {
        return None;
    }
    Some(format!("Bearer {}", hashed_signing_key(key)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blank_keys_send_no_header() {
        assert_eq!(authorization_header("  "), None);
        assert_eq!(
            authorization_header(" signkey-prod-0123abcd\n").as_deref(),
            Some("Bearer signkey-prod-2647356804523c847ca70dc0f6c66a28d4cec5f53b9119a9022984ceec35e9da")
        );
    }
}
