use super::*;
use base64::engine::general_purpose::{URL_SAFE, URL_SAFE_NO_PAD};

const TOKEN: &str = "tok/En+9_x";

fn set() -> SecretSet {
    SecretSet::of_credentials(&Credentials::Bearer {
        token: TOKEN.into(),
    })
    .expect("set")
}

fn percent_all(s: &str) -> String {
    s.bytes().map(|b| format!("%{b:02X}")).collect()
}

/// Every form a test origin may echo `secret` in.
pub(crate) fn echo_forms(secret: &str) -> Vec<String> {
    let b = secret.as_bytes();
    let component: String = url::form_urlencoded::byte_serialize(b).collect();
    vec![
        secret.to_string(),
        secret.to_ascii_uppercase(),
        secret.to_ascii_lowercase(),
        STANDARD.encode(b),
        STANDARD_NO_PAD.encode(b),
        URL_SAFE.encode(b),
        URL_SAFE_NO_PAD.encode(b),
        STANDARD.encode(b).to_ascii_lowercase(),
        hex::encode(b),
        hex::encode_upper(b),
        component.clone(),
        component.replace('+', "%20"),
        percent_all(secret),
        percent_all(secret).to_ascii_lowercase(),
        component.replace('%', "%25"),
        serde_json::to_string(secret).unwrap_or_default(),
        secret.replace('/', "\\/"),
        secret
            .chars()
            .map(|c| format!("\\u{:04x}", c as u32))
            .collect(),
        secret.chars().map(|c| format!("&#{};", c as u32)).collect(),
        secret
            .chars()
            .map(|c| format!("&#x{:x};", c as u32))
            .collect(),
    ]
}

#[test]
fn every_form_of_the_token_and_header_is_found_and_redacted() {
    let s = set();
    for secret in [TOKEN.to_string(), format!("Bearer {TOKEN}")] {
        for form in echo_forms(&secret) {
            let hay = format!("before {form} after");
            let out = s
                .redact(hay.as_bytes())
                .unwrap_or_else(|| panic!("missed {form:?}"));
            let out = String::from_utf8_lossy(&out).into_owned();
            assert!(out.starts_with("before "), "{form:?} -> {out}");
            assert!(out.ends_with(" after"), "{form:?} -> {out}");
            assert!(out.contains(REDACTED), "{form:?} -> {out}");
            assert!(!out.contains("En+9"), "{form:?} -> {out}");
        }
    }
}

#[test]
fn base64_inside_longer_base64_is_found_at_every_alignment() {
    let s = set();
    for prefix in ["", "a", "ab", "abc", "{\"authorization\":\""] {
        let text = format!("{prefix}{TOKEN}\"}}");
        for enc in [STANDARD.encode(&text), URL_SAFE_NO_PAD.encode(&text)] {
            assert!(s.contains(enc.as_bytes()), "{prefix:?}: {enc}");
        }
    }
}

#[test]
fn short_secrets_are_matched_only_inside_longer_forms() {
    let s = SecretSet::of_credentials(&Credentials::Basic {
        username: "u".into(),
        password: "p".into(),
    })
    .expect("set");
    // "p", "u:p" and their encodings are too short; the header value is not.
    assert!(!s.contains(b"plain text with u:p and dTpw"));
    assert!(s.contains(b"echo: Basic dTpw"));
    assert!(s.contains(STANDARD.encode("Basic dTpw").as_bytes()));
    assert!(SecretSet::of_credentials(&Credentials::None)
        .expect("set")
        .is_empty());
}

#[test]
fn oauth_secrets_include_tokens_and_client_secret_not_client_id() {
    let s = SecretSet::of_credentials(&Credentials::Oauth2 {
        client_id: "public-client-id".into(),
        client_secret: Some("client-secret-1".into()),
        access_token: Some("access-token-1".into()),
        refresh_token: Some("refresh-token-1".into()),
        expires_at: None,
    })
    .expect("set");
    for v in ["client-secret-1", "access-token-1", "refresh-token-1"] {
        assert!(s.contains(v.as_bytes()), "{v}");
    }
    assert!(!s.contains(b"public-client-id"));
    let more = s.with(vec!["new-access-token".into()]).expect("with");
    assert!(more.contains(b"new-access-token") && more.contains(b"access-token-1"));
}

#[test]
fn redaction_replaces_only_the_secret_bytes() {
    let s = set();
    let hay = format!("a {} b %{}% c", percent_all(TOKEN), TOKEN);
    let out = s.redact(hay.as_bytes()).expect("found");
    assert_eq!(
        String::from_utf8_lossy(&out),
        format!("a {REDACTED} b %{REDACTED}% c")
    );
    assert_eq!(s.redact(b"nothing here %41 \\n &amp; + x"), None);
}

#[test]
#[allow(clippy::single_range_in_vec_init)] // one range of offsets, not a Vec of its elements
fn map_back_covers_whole_escapes() {
    // "%41%42c" unescapes to "ABc"; output range 1..3 ("Bc") comes from input 3..7.
    assert_eq!(map_back(b"%41%42c", false, &[1..3]), vec![3..7]);
    assert_eq!(map_back(b"x\\u00e9y", false, &[1..2]), vec![1..7]);
    assert_eq!(unescape(b"a+b%2B\\/&#47;&amp;", true), b"a b+//&".to_vec());
    assert_eq!(unescape(b"a+b", false), b"a+b".to_vec());
}
