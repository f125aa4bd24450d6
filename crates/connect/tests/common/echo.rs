//! An origin that reflects the credentials it receives in every form listed in
//! [`echo_forms`], in headers and in a body compressed with the asked-for content coding and
//! cut into chunked-transfer chunks of the asked-for size.
//!
//! `GET /echo-forms?enc=E&chunk=N` or `?enc=E&split=I`, optionally `&only=header-value`:
//! * `E`: `identity`, `gzip`, `deflate` (zlib), `deflate-raw` (sent as `deflate`), `br`,
//!   `gzip-br` (`gzip, br`), or any other word, sent as that coding unencoded.
//! * `N`: chunk size in bytes (1 puts a chunk boundary at every offset); `I`: two chunks cut at
//!   byte I.

use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use base64::Engine;
use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::Response;
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::io::Write;

fn percent_all(s: &str) -> String {
    s.bytes().map(|b| format!("%{b:02X}")).collect()
}

/// Every form the origin echoes a secret in: raw, case variants, base64 (standard and URL-safe,
/// padded or not), hex, percent-encodings (form, path, every byte, double), JSON and HTML
/// escapes.
pub fn echo_forms(secret: &str) -> Vec<String> {
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
        STANDARD.encode(b).to_ascii_uppercase(),
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

/// The secrets in a request: the `Authorization` value, its credential part, for basic auth
/// `user:pass` and the password; an `x-api-key` header; an `api_key` query parameter.
pub fn received_secrets(headers: &BTreeMap<String, String>, query: &str) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(a) = headers.get("authorization") {
        out.push(a.clone());
        if let Some((scheme, rest)) = a.split_once(' ') {
            out.push(rest.to_string());
            if scheme.eq_ignore_ascii_case("basic") {
                if let Ok(pair) = STANDARD.decode(rest) {
                    let pair = String::from_utf8_lossy(&pair).into_owned();
                    if let Some((_, password)) = pair.split_once(':') {
                        out.push(password.to_string());
                    }
                    out.push(pair);
                }
            }
        }
    }
    if let Some(k) = headers.get("x-api-key") {
        out.push(k.clone());
    }
    for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
        if k == "api_key" {
            out.push(v.into_owned());
        }
    }
    out
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let _ = e.write_all(data);
    e.finish().unwrap_or_default()
}

fn zlib(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    let _ = e.write_all(data);
    e.finish().unwrap_or_default()
}

fn raw_deflate(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
    let _ = e.write_all(data);
    e.finish().unwrap_or_default()
}

fn br(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    {
        let mut w = brotli::CompressorWriter::new(&mut out, 4096, 5, 22);
        let _ = w.write_all(data);
    }
    out
}

/// (content-encoding header, encoded body) for an `enc` word.
pub fn encode(enc: &str, data: &[u8]) -> (Option<String>, Vec<u8>) {
    match enc {
        "identity" => (None, data.to_vec()),
        "gzip" => (Some("gzip".into()), gzip(data)),
        "deflate" => (Some("deflate".into()), zlib(data)),
        "deflate-raw" => (Some("deflate".into()), raw_deflate(data)),
        "br" => (Some("br".into()), br(data)),
        "gzip-br" => (Some("gzip, br".into()), br(&gzip(data))),
        other => (Some(other.to_string()), data.to_vec()),
    }
}

/// A chunked answer for `/echo-forms`, `/compressed-json` and `/bomb`; `None` for other paths.
pub fn respond(
    path: &str,
    query: &str,
    headers: &BTreeMap<String, String>,
) -> Option<Response<BoxBody<Bytes, Infallible>>> {
    let params: BTreeMap<String, String> = url::form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect();
    let enc = params.get("enc").map(String::as_str).unwrap_or("identity");
    let secrets = received_secrets(headers, query);
    let mut extra_headers: Vec<(String, String)> = Vec::new();
    let plain: Vec<u8> = match path {
        "/echo-forms" if params.get("only").map(String::as_str) == Some("header-value") => {
            format!("xx{}yy", secrets.first().cloned().unwrap_or_default()).into_bytes()
        }
        "/echo-forms" => {
            let mut text = String::new();
            for (i, s) in secrets.iter().enumerate() {
                text.push_str(&serde_json::json!({ "authorization": s }).to_string());
                text.push('\n');
                for (j, form) in echo_forms(s).into_iter().enumerate() {
                    text.push_str(&format!("form {j}: {form}\n"));
                    extra_headers.push((format!("x-echo-{i}-{j}"), form));
                }
                extra_headers.push((format!("x-echo-{i}-{}", hex::encode(s)), "1".into()));
            }
            text.into_bytes()
        }
        "/compressed-json" => br#"{"items":[1,2,3]}"#.to_vec(),
        // 10 MiB of zeros: about 10 KiB gzip-encoded.
        "/bomb" => vec![0u8; 10 << 20],
        _ => return None,
    };
    let (coding, body) = encode(enc, &plain);
    let cuts: Vec<usize> = match (params.get("split"), params.get("chunk")) {
        (Some(at), _) => {
            let at = at.parse::<usize>().unwrap_or(0).min(body.len());
            vec![0, at, body.len()]
        }
        (None, Some(n)) => {
            let n = n.parse::<usize>().unwrap_or(1).max(1);
            let mut v: Vec<usize> = (0..body.len()).step_by(n).collect();
            v.push(body.len());
            v
        }
        (None, None) => vec![0, body.len()],
    };
    let chunks: Vec<Result<Frame<Bytes>, Infallible>> = cuts
        .windows(2)
        .filter(|w| w[1] > w[0])
        .map(|w| Ok(Frame::data(Bytes::copy_from_slice(&body[w[0]..w[1]]))))
        .collect();
    let stream = StreamBody::new(futures::stream::iter(chunks));
    let mut r = Response::new(BodyExt::boxed(stream));
    let h = r.headers_mut();
    h.insert(
        "content-type",
        hyper::header::HeaderValue::from_static("text/plain"),
    );
    if let Some(c) = coding {
        if let Ok(v) = hyper::header::HeaderValue::from_str(&c) {
            h.insert("content-encoding", v);
        }
    }
    for (name, value) in extra_headers {
        if let (Ok(n), Ok(v)) = (
            hyper::header::HeaderName::from_bytes(name.as_bytes()),
            hyper::header::HeaderValue::from_str(&value),
        ) {
            h.append(n, v);
        }
    }
    Some(r)
}
