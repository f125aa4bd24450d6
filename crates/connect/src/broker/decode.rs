//! Decodes an answer's content encodings (gzip, deflate, br, stacked) so that the package gets
//! the bytes the origin meant, and redaction sees them: an encoded body would carry an echoed
//! credential past redaction to package code that decodes it with `node:zlib`.

use std::io::Read;

/// The `accept-encoding` the broker sends (the package's own is dropped): what it can decode.
pub(super) const ACCEPT_ENCODING: &str = "gzip, deflate, br";

/// Why a body could not be decoded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(super) enum DecodeError {
    /// A content coding the broker does not decode.
    #[error("unsupported content encoding {0:?}")]
    Unsupported(String),
    /// The decoded body is larger than the response limit.
    #[error("decoded body larger than {0} bytes")]
    TooLarge(u64),
    /// The body is not valid data of its coding.
    #[error("corrupt {0} body")]
    Corrupt(&'static str),
}

/// The codings of a `content-encoding` value in the order they were applied, `identity` left out.
fn codings(header: &str) -> Vec<String> {
    header
        .split(',')
        .map(|c| c.trim().to_ascii_lowercase())
        .filter(|c| !c.is_empty() && c != "identity")
        .collect()
}

/// Reads at most `max` bytes from `reader`; more is [`DecodeError::TooLarge`] (bounds a
/// decompression bomb at the limit instead of inflating it whole).
fn read_bounded<R: Read>(reader: R, max: u64, what: &'static str) -> Result<Vec<u8>, DecodeError> {
    let mut out = Vec::new();
    let mut limited = reader.take(max.saturating_add(1));
    limited
        .read_to_end(&mut out)
        .map_err(|_| DecodeError::Corrupt(what))?;
    if out.len() as u64 > max {
        return Err(DecodeError::TooLarge(max));
    }
    Ok(out)
}

/// Whether `body` starts with a zlib header (RFC 1950: deflate method, check bits).
fn is_zlib(body: &[u8]) -> bool {
    match body {
        [cmf, flg, ..] => {
            cmf & 0x0F == 8 && cmf >> 4 <= 7 && (u16::from(*cmf) << 8 | u16::from(*flg)) % 31 == 0
        }
        _ => false,
    }
}

fn decode_one(coding: &str, body: &[u8], max: u64) -> Result<Vec<u8>, DecodeError> {
    match coding {
        // Multi-member: a gzip body may be several concatenated members.
        "gzip" | "x-gzip" => read_bounded(flate2::read::MultiGzDecoder::new(body), max, "gzip"),
        // "deflate" means zlib-wrapped (RFC 9110), but some servers send raw deflate.
        "deflate" => {
            if is_zlib(body) {
                match read_bounded(flate2::read::ZlibDecoder::new(body), max, "deflate") {
                    // Raw deflate data can start like a zlib header by chance.
                    Err(DecodeError::Corrupt(_)) => {}
                    other => return other,
                }
            }
            read_bounded(flate2::read::DeflateDecoder::new(body), max, "deflate")
        }
        "br" => read_bounded(brotli::Decompressor::new(body, 4096), max, "br"),
        other => Err(DecodeError::Unsupported(other.to_string())),
    }
}

/// The body with every coding of `content_encoding` undone, last applied first; at most `max`
/// bytes after each step.
pub(super) fn decode_body(
    body: Vec<u8>,
    content_encoding: Option<&str>,
    max: u64,
) -> Result<Vec<u8>, DecodeError> {
    let list = content_encoding.map(codings).unwrap_or_default();
    // Unknown codings are refused before any work, also for an empty body.
    if let Some(bad) = list
        .iter()
        .find(|c| !matches!(c.as_str(), "gzip" | "x-gzip" | "deflate" | "br"))
    {
        return Err(DecodeError::Unsupported(bad.clone()));
    }
    // HEAD answers, 204 and 304 carry the header without a body.
    if body.is_empty() {
        return Ok(body);
    }
    let mut body = body;
    for coding in list.iter().rev() {
        body = decode_one(coding, &body, max)?;
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

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

    #[test]
    fn decodes_each_coding_and_stacks() {
        let data = b"{\"hello\":\"world\"}".repeat(20);
        let max = 1 << 20;
        for (coding, body) in [
            ("gzip", gzip(&data)),
            ("x-gzip", gzip(&data)),
            ("deflate", zlib(&data)),
            ("deflate", raw_deflate(&data)),
            ("br", br(&data)),
            ("identity", data.clone()),
            ("GZIP", gzip(&data)),
        ] {
            assert_eq!(
                decode_body(body, Some(coding), max).as_deref(),
                Ok(&data[..]),
                "{coding}"
            );
        }
        // gzip applied first, then br: undone in reverse.
        let stacked = br(&gzip(&data));
        assert_eq!(
            decode_body(stacked, Some("gzip, br"), max).as_deref(),
            Ok(&data[..])
        );
        // Two gzip members.
        let mut two = gzip(b"ab");
        two.extend(gzip(b"cd"));
        assert_eq!(
            decode_body(two, Some("gzip"), max).as_deref(),
            Ok(&b"abcd"[..])
        );
        assert_eq!(
            decode_body(data.clone(), None, max).as_deref(),
            Ok(&data[..])
        );
    }

    #[test]
    fn refuses_unknown_corrupt_and_bombs() {
        assert_eq!(
            decode_body(b"x".to_vec(), Some("zstd"), 100),
            Err(DecodeError::Unsupported("zstd".into()))
        );
        assert_eq!(
            decode_body(Vec::new(), Some("gzip, compress"), 100),
            Err(DecodeError::Unsupported("compress".into()))
        );
        assert_eq!(decode_body(Vec::new(), Some("gzip"), 100), Ok(Vec::new()));
        assert_eq!(
            decode_body(b"not gzip".to_vec(), Some("gzip"), 100),
            Err(DecodeError::Corrupt("gzip"))
        );
        // 10 MiB of zeros compress to about 10 KiB; the limit holds after decoding.
        let bomb = gzip(&vec![0u8; 10 << 20]);
        assert!(bomb.len() < 64 << 10);
        assert_eq!(
            decode_body(bomb, Some("gzip"), 1 << 20),
            Err(DecodeError::TooLarge(1 << 20))
        );
        let exact = gzip(&[7u8; 100]);
        assert_eq!(
            decode_body(exact, Some("gzip"), 100).map(|b| b.len()),
            Ok(100)
        );
    }
}
