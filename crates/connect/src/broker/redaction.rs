//! Removes the injected credential, in every form it may take, from answers.

use super::auth::AuthValue;
use super::HttpAnswer;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;

/// What replaces an injected credential in an answer handed to the package.
pub const REDACTED: &str = "[redacted]";

/// Secret forms shorter than this are not redacted.
const MIN_REDACTED_LEN: usize = 4;

/// Every form in which the credential of `auth` may come back in an answer: the raw value, the
/// value after its scheme word, for basic auth the base64 `user:pass`, `user:pass` and the
/// password, each also percent-encoded as URLs and forms carry them. Longest first.
fn secret_forms(auth: &AuthValue) -> Vec<String> {
    let mut raw: Vec<String> = Vec::new();
    match auth {
        AuthValue::None => {}
        AuthValue::Query(_, v) => raw.push(v.clone()),
        AuthValue::Header(_, v) => {
            raw.push(v.clone());
            if let Some((scheme, rest)) = v.split_once(' ') {
                let rest = rest.trim();
                raw.push(rest.to_string());
                if scheme.eq_ignore_ascii_case("basic") {
                    if let Ok(pair) = STANDARD.decode(rest) {
                        let pair = String::from_utf8_lossy(&pair).into_owned();
                        if let Some((_, password)) = pair.split_once(':') {
                            raw.push(password.to_string());
                        }
                        raw.push(pair);
                    }
                }
            }
        }
    }
    let mut forms: Vec<String> = Vec::new();
    for r in raw {
        let form: String = url::form_urlencoded::byte_serialize(r.as_bytes()).collect();
        let path: String = form.replace('+', "%20");
        let lower = |s: &str| {
            // %2F and %2f are the same octet.
            let mut out = String::with_capacity(s.len());
            let mut hex = 0;
            for c in s.chars() {
                if c == '%' {
                    hex = 2;
                    out.push(c);
                } else if hex > 0 {
                    hex -= 1;
                    out.push(c.to_ascii_lowercase());
                } else {
                    out.push(c);
                }
            }
            out
        };
        let extra = [lower(&form), lower(&path)];
        for f in [r, form, path].into_iter().chain(extra) {
            // Shorter values would mangle every answer (a 1-character password) and protect
            // nothing a guess would not find.
            if f.len() >= MIN_REDACTED_LEN && !forms.contains(&f) {
                forms.push(f);
            }
        }
    }
    forms.sort_by_key(|f| std::cmp::Reverse(f.len()));
    forms
}

/// Replaces every occurrence of `needle` in `hay`; `None` when there is none.
fn replace_bytes(hay: &[u8], needle: &[u8], with: &[u8]) -> Option<Vec<u8>> {
    let first = hay.windows(needle.len()).position(|w| w == needle)?;
    let mut out = Vec::with_capacity(hay.len());
    out.extend_from_slice(&hay[..first]);
    out.extend_from_slice(with);
    let mut i = first + needle.len();
    while i < hay.len() {
        if hay[i..].starts_with(needle) {
            out.extend_from_slice(with);
            i += needle.len();
        } else {
            out.push(hay[i]);
            i += 1;
        }
    }
    Some(out)
}

/// Removes the injected credential from an answer before the package sees it (a redirect that
/// keeps `?api_key=`, an error page quoting the URL, a server echoing request headers).
pub(super) fn redact(mut answer: HttpAnswer, auth: &AuthValue) -> HttpAnswer {
    let forms = secret_forms(auth);
    if forms.is_empty() {
        return answer;
    }
    for value in answer.headers.values_mut() {
        for f in &forms {
            if value.contains(f.as_str()) {
                *value = value.replace(f.as_str(), REDACTED);
            }
        }
    }
    for f in &forms {
        if let Some(body) = replace_bytes(&answer.body, f.as_bytes(), REDACTED.as_bytes()) {
            answer.body = body;
        }
    }
    answer
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn injected_secrets_are_redacted_from_answers() {
        let answer = |text: &str| HttpAnswer {
            status: 302,
            headers: BTreeMap::from([
                ("location".to_string(), text.to_string()),
                ("x-echo".to_string(), text.to_string()),
            ]),
            body: text.as_bytes().to_vec(),
        };
        let clean = |a: &HttpAnswer, secrets: &[&str]| {
            let body = String::from_utf8_lossy(&a.body).into_owned();
            for s in secrets {
                assert!(!body.contains(s), "body keeps {s}: {body}");
                for v in a.headers.values() {
                    assert!(!v.contains(s), "header keeps {s}: {v}");
                }
            }
            assert!(body.contains(REDACTED));
        };
        // API key in the query: raw and percent-encoded.
        let key = "k3y/with+odd=chars&x";
        let enc: String = url::form_urlencoded::byte_serialize(key.as_bytes()).collect();
        let q = AuthValue::Query("api_key".into(), key.into());
        let a = redact(
            answer(&format!("https://a.example/next?api_key={enc} raw={key}")),
            &q,
        );
        clean(&a, &[key, &enc]);
        assert!(a.headers["location"].starts_with("https://a.example/next?api_key=[redacted]"));
        // API key in a header.
        let h = AuthValue::Header("x-key".into(), "plainkey123".into());
        clean(&redact(answer("echo plainkey123"), &h), &["plainkey123"]);
        // Bearer / OAuth token.
        let b = AuthValue::Header("authorization".into(), "Bearer tok-123".into());
        clean(
            &redact(answer("got Bearer tok-123 / tok-123"), &b),
            &["tok-123"],
        );
        // Basic: base64 of user:pass, the pair and the password.
        let b64 = STANDARD.encode("user:s3cr3t!");
        let basic = AuthValue::Header("authorization".into(), format!("Basic {b64}"));
        clean(
            &redact(
                answer(&format!("{b64} user:s3cr3t! s3cr3t%21 s3cr3t!")),
                &basic,
            ),
            &[&b64, "s3cr3t"],
        );
        // No credential: untouched.
        assert_eq!(redact(answer("x"), &AuthValue::None), answer("x"));
    }
}
