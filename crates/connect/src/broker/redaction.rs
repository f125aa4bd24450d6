//! Removes the connection's secrets, in every form they take in transit, from the decoded
//! answer the package receives: header names and values and the whole body. The body is
//! buffered and decoded before this runs, so no match is split across chunks.

use super::HttpAnswer;
use crate::secrets::SecretSet;

/// Text with every secret redacted (bytes that are not UTF-8 were already replaced).
fn redact_text(secrets: &SecretSet, text: String) -> String {
    match secrets.redact(text.as_bytes()) {
        Some(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        None => text,
    }
}

/// Removes the secrets from an answer before the package sees it (a redirect that keeps
/// `?api_key=`, an error page quoting the URL, a server echoing request headers).
pub(super) fn redact(answer: HttpAnswer, secrets: &SecretSet) -> HttpAnswer {
    if secrets.is_empty() {
        return answer;
    }
    let HttpAnswer {
        status,
        headers,
        body,
    } = answer;
    let mut clean = std::collections::BTreeMap::new();
    for (name, value) in headers {
        let name = redact_text(secrets, name);
        let value = redact_text(secrets, value);
        // Two names redacted to the same text: keep both values, as repeated headers are kept.
        clean
            .entry(name)
            .and_modify(|v: &mut String| {
                v.push_str(", ");
                v.push_str(&value);
            })
            .or_insert(value);
    }
    let body = secrets.redact(&body).unwrap_or(body);
    HttpAnswer {
        status,
        headers: clean,
        body,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credentials::Credentials;
    use crate::secrets::REDACTED;
    use base64::engine::general_purpose::STANDARD;
    use base64::Engine;
    use std::collections::BTreeMap;

    fn answer(text: &str) -> HttpAnswer {
        HttpAnswer {
            status: 302,
            headers: BTreeMap::from([
                ("location".to_string(), text.to_string()),
                ("x-echo".to_string(), text.to_string()),
            ]),
            body: text.as_bytes().to_vec(),
        }
    }

    fn clean(a: &HttpAnswer, secrets: &[&str]) {
        let body = String::from_utf8_lossy(&a.body).into_owned();
        for s in secrets {
            assert!(!body.contains(s), "body keeps {s}: {body}");
            for v in a.headers.values() {
                assert!(!v.contains(s), "header keeps {s}: {v}");
            }
        }
        assert!(body.contains(REDACTED));
    }

    fn set(c: Credentials) -> SecretSet {
        SecretSet::of_credentials(&c).expect("set")
    }

    #[test]
    fn injected_secrets_are_redacted_from_answers() {
        // API key in the query: raw and percent-encoded.
        let key = "k3y/with+odd=chars&x";
        let enc: String = url::form_urlencoded::byte_serialize(key.as_bytes()).collect();
        let q = set(Credentials::ApiKey { key: key.into() });
        let a = redact(
            answer(&format!("https://a.example/next?api_key={enc} raw={key}")),
            &q,
        );
        clean(&a, &[key, &enc]);
        assert!(a.headers["location"].starts_with("https://a.example/next?api_key=[redacted]"));
        // Bearer token, also when too short to match alone: the header value is.
        let b = set(Credentials::Bearer {
            token: "tok-123".into(),
        });
        let a = redact(answer("got Bearer tok-123"), &b);
        clean(&a, &["Bearer tok-123"]);
        // Basic: base64 of user:pass, the pair and the password.
        let b64 = STANDARD.encode("user:s3cr3t!!");
        let basic = set(Credentials::Basic {
            username: "user".into(),
            password: "s3cr3t!!".into(),
        });
        clean(
            &redact(
                answer(&format!("{b64} user:s3cr3t!! s3cr3t%21%21 s3cr3t!!")),
                &basic,
            ),
            &[&b64, "s3cr3t"],
        );
        // A header whose name carries the secret.
        let mut a = answer("x");
        a.headers.insert("x-plainkey123".into(), "1".into());
        let a = redact(
            a,
            &set(Credentials::ApiKey {
                key: "plainkey123".into(),
            }),
        );
        assert!(a.headers.keys().all(|k| !k.contains("plainkey123")));
        // No credential: untouched.
        let none = set(Credentials::None);
        assert_eq!(redact(answer("x"), &none), answer("x"));
    }
}
