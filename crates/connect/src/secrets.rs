//! A connection's secrets in every form they take in transit, and finding them in bytes. The
//! broker redacts them from what a package receives; the job driver refuses records,
//! checkpoints, log messages and results that carry them.
//!
//! Forms matched, each ASCII case-insensitively: the raw value; its hex; its base64 at each of
//! the three byte alignments, standard and URL-safe alphabets (so with or without padding, and
//! also inside a longer base64 text such as the base64 of the whole header value or of a JSON
//! echo). Escaped text is matched after unescaping: percent-encoding (with and without `+` for
//! space), JSON string escapes and HTML character references, up to three times nested.

use crate::credentials::Credentials;
use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use base64::Engine;
use std::ops::Range;

/// What replaces a secret in an answer handed to a package.
pub const REDACTED: &str = "[redacted]";

/// Secrets shorter than this many bytes are not matched on their own: a 3-character password
/// would turn up in every other answer and record, and redacting it there corrupts data while
/// protecting little (it is guessable). They are still matched inside the longer forms that
/// always reach the origin, such as the whole `Authorization` value `Bearer abc`.
pub const MIN_SECRET_LEN: usize = 8;

/// Nested unescaping rounds tried (`%252F` is `/` after two rounds).
const MAX_UNESCAPE_ROUNDS: usize = 3;

/// Errors of the secrets module.
#[derive(Debug, thiserror::Error)]
pub enum SecretsError {
    /// The matcher could not be built (it refuses pattern sets larger than it can handle).
    #[error("building the secret matcher failed: {0}")]
    Matcher(String),
}

/// The secret strings of a set of credentials: what the broker sends (header values included)
/// and what it keeps to itself (client secret, refresh token). Not the user name or client id,
/// which are not secret and appear in ordinary data.
pub fn credential_values(credentials: &Credentials) -> Vec<String> {
    match credentials {
        Credentials::ApiKey { key } => vec![key.clone()],
        Credentials::Bearer { token } => vec![token.clone(), format!("Bearer {token}")],
        Credentials::Basic { username, password } => {
            let pair = format!("{username}:{password}");
            // The encoded pair on its own too: its own encodings (base64 of it) are not
            // substrings of the pair's.
            let encoded = STANDARD.encode(&pair);
            let header = format!("Basic {encoded}");
            vec![password.clone(), pair, encoded, header]
        }
        Credentials::Oauth2 {
            client_secret,
            access_token,
            refresh_token,
            ..
        } => {
            let mut out: Vec<String> = [client_secret, refresh_token]
                .into_iter()
                .flatten()
                .cloned()
                .collect();
            if let Some(t) = access_token {
                out.push(t.clone());
                out.push(format!("Bearer {t}"));
            }
            out
        }
        Credentials::None => Vec::new(),
    }
}

/// The base64 characters that depend only on `secret` when it starts `k` bytes into the
/// encoded data (`k` in 0..3): the same characters appear wherever the secret sits in a
/// longer base64 text at that alignment, padded or not.
fn base64_core(secret: &[u8], k: usize) -> String {
    let mut data = vec![0u8; k];
    data.extend_from_slice(secret);
    let text = STANDARD_NO_PAD.encode(&data);
    let start = (8 * k).div_ceil(6);
    let end = (8 * (k + secret.len())) / 6;
    text.get(start..end).unwrap_or_default().to_string()
}

/// Every matched form of one secret; none when it is too short.
fn forms_of(secret: &[u8]) -> Vec<Vec<u8>> {
    if secret.len() < MIN_SECRET_LEN {
        return Vec::new();
    }
    let mut out = vec![secret.to_vec(), hex::encode(secret).into_bytes()];
    for k in 0..3 {
        let core = base64_core(secret, k);
        let url_safe = core.replace('+', "-").replace('/', "_");
        out.push(core.into_bytes());
        out.push(url_safe.into_bytes());
    }
    out
}

/// The secrets of one broker session and a matcher for all their forms.
#[derive(Debug, Clone)]
pub struct SecretSet {
    values: Vec<String>,
    matcher: Option<AhoCorasick>,
}

impl SecretSet {
    /// A set for these secret values (short and empty ones are dropped).
    pub fn new(values: Vec<String>) -> Result<Self, SecretsError> {
        let mut values = values;
        values.sort();
        values.dedup();
        let mut patterns: Vec<Vec<u8>> =
            values.iter().flat_map(|v| forms_of(v.as_bytes())).collect();
        patterns.retain(|p| !p.is_empty());
        patterns.sort();
        patterns.dedup();
        let matcher = if patterns.is_empty() {
            None
        } else {
            // Standard semantics: overlapping search reports every match; ranges are merged later.
            let ac = AhoCorasickBuilder::new()
                .ascii_case_insensitive(true)
                .match_kind(MatchKind::Standard)
                .build(&patterns)
                .map_err(|e| SecretsError::Matcher(e.to_string()))?;
            Some(ac)
        };
        Ok(SecretSet { values, matcher })
    }

    /// A set of these credentials' secrets.
    pub fn of_credentials(credentials: &Credentials) -> Result<Self, SecretsError> {
        Self::new(credential_values(credentials))
    }

    /// This set plus more values (an OAuth refresh adds tokens; old ones stay secret).
    pub fn with(&self, more: Vec<String>) -> Result<Self, SecretsError> {
        let mut values = self.values.clone();
        values.extend(more);
        Self::new(values)
    }

    /// Whether nothing is matched (no credentials, or only too short ones).
    pub fn is_empty(&self) -> bool {
        self.matcher.is_none()
    }

    /// Whether `hay` carries a secret in any form.
    pub fn contains(&self, hay: &[u8]) -> bool {
        !self.find(hay).is_empty()
    }

    /// `hay` with every secret replaced by [`REDACTED`]; `None` when it carries none.
    pub fn redact(&self, hay: &[u8]) -> Option<Vec<u8>> {
        let ranges = self.find(hay);
        if ranges.is_empty() {
            return None;
        }
        let mut out = Vec::with_capacity(hay.len());
        let mut at = 0;
        for r in ranges {
            out.extend_from_slice(&hay[at..r.start]);
            out.extend_from_slice(REDACTED.as_bytes());
            at = r.end;
        }
        out.extend_from_slice(&hay[at..]);
        Some(out)
    }

    /// The byte ranges of `hay` that carry a secret, sorted and merged.
    pub fn find(&self, hay: &[u8]) -> Vec<Range<usize>> {
        let Some(ac) = &self.matcher else {
            return Vec::new();
        };
        let mut found = matches(ac, hay);
        if has_escapes(hay) {
            for plus in [false, true] {
                if plus && !hay.contains(&b'+') {
                    continue;
                }
                found.extend(unescaped_matches(ac, hay, plus));
            }
        }
        merge(found)
    }
}

fn matches(ac: &AhoCorasick, hay: &[u8]) -> Vec<Range<usize>> {
    ac.find_overlapping_iter(hay).map(|m| m.range()).collect()
}

fn has_escapes(hay: &[u8]) -> bool {
    hay.iter().any(|b| matches!(b, b'%' | b'\\' | b'&' | b'+'))
}

/// Matches in up to [`MAX_UNESCAPE_ROUNDS`] nested unescapings of `hay`, as ranges of `hay`.
fn unescaped_matches(ac: &AhoCorasick, hay: &[u8], plus: bool) -> Vec<Range<usize>> {
    let mut found = Vec::new();
    // layers[0] is `hay`; layers[j + 1] = unescape(layers[j]).
    let mut layers: Vec<Vec<u8>> = Vec::new();
    for _ in 0..MAX_UNESCAPE_ROUNDS {
        let input = layers.last().map(Vec::as_slice).unwrap_or(hay);
        let output = unescape(input, plus);
        if output == input {
            break;
        }
        let mut ranges = merge(matches(ac, &output));
        layers.push(output);
        if ranges.is_empty() {
            continue;
        }
        // Map back through every layer to offsets in `hay`.
        for j in (0..layers.len()).rev() {
            let parent = if j == 0 { hay } else { &layers[j - 1] };
            ranges = merge(map_back(parent, plus, &ranges));
        }
        found.extend(ranges);
    }
    found
}

/// Sorts and merges overlapping or touching ranges.
fn merge(mut ranges: Vec<Range<usize>>) -> Vec<Range<usize>> {
    ranges.sort_by_key(|r| (r.start, r.end));
    let mut out: Vec<Range<usize>> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match out.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    out
}

/// Up to four bytes of unescaped output (one UTF-8 character).
struct Unit {
    bytes: [u8; 4],
    len: usize,
}

impl Unit {
    fn byte(b: u8) -> Self {
        Unit {
            bytes: [b, 0, 0, 0],
            len: 1,
        }
    }

    fn char(c: char) -> Self {
        let mut bytes = [0u8; 4];
        let len = c.encode_utf8(&mut bytes).len();
        Unit { bytes, len }
    }
}

fn hex_value(digits: &[u8]) -> Option<u32> {
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    u32::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
}

/// `\uXXXX` at `src[i..]`, combining a surrogate pair; (bytes consumed, character).
fn json_unicode(src: &[u8], i: usize) -> Option<(usize, char)> {
    let first = hex_value(src.get(i + 2..i + 6)?)?;
    if (0xD800..0xDC00).contains(&first) {
        if src.get(i + 6..i + 8)? != b"\\u" {
            return None;
        }
        let second = hex_value(src.get(i + 8..i + 12)?)?;
        if !(0xDC00..0xE000).contains(&second) {
            return None;
        }
        let c = 0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00);
        return Some((12, char::from_u32(c)?));
    }
    Some((6, char::from_u32(first)?))
}

/// An HTML character reference at `src[i..]` (`&#47;`, `&#x2F;`, `&amp;` ...).
fn html_reference(src: &[u8], i: usize) -> Option<(usize, char)> {
    let rest = src.get(i + 1..)?;
    let end = rest.iter().take(10).position(|&b| b == b';')?;
    let name = &rest[..end];
    let c = match name {
        b"amp" => '&',
        b"quot" => '"',
        b"apos" => '\'',
        b"lt" => '<',
        b"gt" => '>',
        _ => {
            let num = name.strip_prefix(b"#")?;
            let code = match num.first() {
                Some(b'x' | b'X') => hex_value(&num[1..])?,
                _ => std::str::from_utf8(num).ok()?.parse::<u32>().ok()?,
            };
            char::from_u32(code)?
        }
    };
    Some((end + 2, c))
}

/// One step of unescaping at `src[i]`: (bytes consumed, output).
fn step(src: &[u8], i: usize, plus: bool) -> (usize, Unit) {
    let b = src[i];
    match b {
        b'%' => {
            if let Some(v) = src.get(i + 1..i + 3).and_then(hex_value) {
                return (3, Unit::byte(v as u8));
            }
        }
        b'+' if plus => return (1, Unit::byte(b' ')),
        b'\\' => {
            let simple = match src.get(i + 1) {
                Some(b'"') => Some(b'"'),
                Some(b'\\') => Some(b'\\'),
                Some(b'/') => Some(b'/'),
                Some(b'b') => Some(0x08),
                Some(b'f') => Some(0x0C),
                Some(b'n') => Some(b'\n'),
                Some(b'r') => Some(b'\r'),
                Some(b't') => Some(b'\t'),
                _ => None,
            };
            if let Some(v) = simple {
                return (2, Unit::byte(v));
            }
            if src.get(i + 1) == Some(&b'u') {
                if let Some((n, c)) = json_unicode(src, i) {
                    return (n, Unit::char(c));
                }
            }
        }
        b'&' => {
            if let Some((n, c)) = html_reference(src, i) {
                return (n, Unit::char(c));
            }
        }
        _ => {}
    }
    (1, Unit::byte(b))
}

/// `src` with one round of percent, JSON and HTML escapes decoded (`+` as space if `plus`).
fn unescape(src: &[u8], plus: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(src.len());
    let mut i = 0;
    while i < src.len() {
        let (n, unit) = step(src, i, plus);
        out.extend_from_slice(&unit.bytes[..unit.len]);
        i += n;
    }
    out
}

/// Maps sorted, disjoint ranges of `unescape(src, plus)` to the ranges of `src` they came from
/// (an escape is taken whole when any of its output is in a range).
fn map_back(src: &[u8], plus: bool, ranges: &[Range<usize>]) -> Vec<Range<usize>> {
    let mut out = Vec::with_capacity(ranges.len());
    let (mut i, mut o, mut r) = (0usize, 0usize, 0usize);
    let mut open: Option<usize> = None;
    while i < src.len() && r < ranges.len() {
        let (n, unit) = step(src, i, plus);
        let seg_end = o + unit.len;
        if open.is_none() && ranges[r].start < seg_end {
            open = Some(i);
        }
        if let Some(start) = open {
            if ranges[r].end <= seg_end {
                out.push(start..i + n);
                open = None;
                r += 1;
                // The next range may start inside this same segment: look at it again.
                continue;
            }
        }
        i += n;
        o = seg_end;
    }
    if let Some(start) = open {
        out.push(start..src.len());
    }
    out
}

#[cfg(test)]
mod tests;
