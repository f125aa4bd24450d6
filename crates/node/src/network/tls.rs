//! Recognising a TLS ClientHello, for `https-only`: the broker forwards no
//! byte of a connection to port 443 until the client's first bytes form one
//! complete, well-formed ClientHello (possibly split over several records
//! and several `net_data` chunks). Plain HTTP dressed up with a leading 0x16
//! never gets through.

/// Largest ClientHello handshake message accepted (body, without its 4-byte header).
pub const MAX_HELLO_BYTES: usize = 16 * 1024;
/// Most TLS records a ClientHello may be split over.
pub const MAX_HELLO_RECORDS: usize = 16;
/// Largest plaintext record payload (RFC 8446 §5.1).
const MAX_RECORD_BYTES: usize = 16 * 1024;
/// TLS record header: type, version (2), length (2).
const RECORD_HEADER: usize = 5;
/// Handshake header: type, length (3).
const HANDSHAKE_HEADER: usize = 4;
/// Most bytes [`check_client_hello`] ever needs to decide.
pub const MAX_BUFFER_BYTES: usize =
    MAX_HELLO_BYTES + HANDSHAKE_HEADER + MAX_HELLO_RECORDS * RECORD_HEADER;

const CONTENT_HANDSHAKE: u8 = 22;
const HANDSHAKE_CLIENT_HELLO: u8 = 1;

/// Why the bytes are not a ClientHello.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HelloError {
    /// A record is not a handshake record (type 22).
    #[error("not a TLS handshake record")]
    NotHandshake,
    /// A record's version is not 3.x.
    #[error("not a TLS record version")]
    Version,
    /// A record is empty or longer than TLS allows.
    #[error("bad TLS record length")]
    RecordLength,
    /// The hello spans too many records.
    #[error("ClientHello split over too many records")]
    TooManyRecords,
    /// The first handshake message is not a ClientHello.
    #[error("not a ClientHello")]
    NotClientHello,
    /// The ClientHello is larger than [`MAX_HELLO_BYTES`].
    #[error("ClientHello too large")]
    TooLarge,
    /// The record carrying the hello's end carries more handshake bytes.
    #[error("trailing bytes after the ClientHello in its record")]
    Trailing,
    /// The ClientHello's fields do not add up.
    #[error("malformed ClientHello")]
    Malformed,
}

/// Where a stream's first bytes stand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hello {
    /// A complete ClientHello ends at this offset (a record boundary).
    Complete(usize),
    /// Undecided until at least this many bytes are there.
    Need(usize),
}

/// Checks the first bytes of a client's stream: a complete ClientHello, more
/// bytes needed (and how many at least, so callers need not re-check every
/// small chunk), or not TLS at all.
pub fn check_client_hello(buf: &[u8]) -> Result<Hello, HelloError> {
    let mut pos = 0;
    let mut records = 0;
    // The handshake bytes seen so far, reassembled from the records' payloads.
    let mut hs: Vec<u8> = Vec::new();
    loop {
        if buf.len() < pos + RECORD_HEADER {
            // Reject as early as the bytes allow.
            if let Some(&t) = buf.get(pos) {
                if t != CONTENT_HANDSHAKE {
                    return Err(HelloError::NotHandshake);
                }
            }
            if let Some(&v) = buf.get(pos + 1) {
                if v != 3 {
                    return Err(HelloError::Version);
                }
            }
            return Ok(Hello::Need(pos + RECORD_HEADER));
        }
        let header = &buf[pos..pos + RECORD_HEADER];
        if header[0] != CONTENT_HANDSHAKE {
            return Err(HelloError::NotHandshake);
        }
        if header[1] != 3 {
            return Err(HelloError::Version);
        }
        let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
        if len == 0 || len > MAX_RECORD_BYTES {
            return Err(HelloError::RecordLength);
        }
        records += 1;
        if records > MAX_HELLO_RECORDS {
            return Err(HelloError::TooManyRecords);
        }
        let start = pos + RECORD_HEADER;
        let end = start + len;
        let complete_record = buf.len() >= end;
        hs.extend_from_slice(&buf[start..end.min(buf.len())]);
        if hs.len() >= HANDSHAKE_HEADER {
            if hs[0] != HANDSHAKE_CLIENT_HELLO {
                return Err(HelloError::NotClientHello);
            }
            let body = (usize::from(hs[1]) << 16) | (usize::from(hs[2]) << 8) | usize::from(hs[3]);
            if body > MAX_HELLO_BYTES {
                return Err(HelloError::TooLarge);
            }
            let total = HANDSHAKE_HEADER + body;
            if hs.len() > total {
                return Err(HelloError::Trailing);
            }
            if hs.len() == total && complete_record {
                check_body(&hs[HANDSHAKE_HEADER..])?;
                return Ok(Hello::Complete(end));
            }
        } else if let Some(&t) = hs.first() {
            if t != HANDSHAKE_CLIENT_HELLO {
                return Err(HelloError::NotClientHello);
            }
        }
        if !complete_record {
            return Ok(Hello::Need(end));
        }
        pos = end;
    }
}

/// A cursor over a ClientHello body.
struct Fields<'a> {
    b: &'a [u8],
}

impl<'a> Fields<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], HelloError> {
        if self.b.len() < n {
            return Err(HelloError::Malformed);
        }
        let (head, rest) = self.b.split_at(n);
        self.b = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<usize, HelloError> {
        Ok(usize::from(self.take(1)?[0]))
    }

    fn u16(&mut self) -> Result<usize, HelloError> {
        let b = self.take(2)?;
        Ok(usize::from(u16::from_be_bytes([b[0], b[1]])))
    }
}

/// The ClientHello's own structure (RFC 8446 §4.1.2, RFC 5246 §7.4.1.2):
/// version 3.x, random, session id, cipher suites, compression methods and
/// the extensions, each length consistent with the message's end.
fn check_body(body: &[u8]) -> Result<(), HelloError> {
    let mut f = Fields { b: body };
    let version = f.take(2)?;
    if version[0] != 3 {
        return Err(HelloError::Malformed);
    }
    f.take(32)?;
    let session = f.u8()?;
    if session > 32 {
        return Err(HelloError::Malformed);
    }
    f.take(session)?;
    let suites = f.u16()?;
    if suites < 2 || suites % 2 != 0 {
        return Err(HelloError::Malformed);
    }
    f.take(suites)?;
    let compression = f.u8()?;
    if compression < 1 {
        return Err(HelloError::Malformed);
    }
    f.take(compression)?;
    if f.b.is_empty() {
        // Extensions are optional before TLS 1.3.
        return Ok(());
    }
    let extensions = f.u16()?;
    if extensions != f.b.len() {
        return Err(HelloError::Malformed);
    }
    while !f.b.is_empty() {
        f.take(2)?;
        let len = f.u16()?;
        f.take(len)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClientHello `openssl s_client -servername registry.example` sent.
    const OPENSSL: &[u8] = include_bytes!("testdata/client_hello_openssl.bin");

    /// A minimal well-formed ClientHello body with an SNI extension padded to `pad` bytes.
    fn hello_body(pad: usize) -> Vec<u8> {
        let mut b = vec![3, 3];
        b.extend_from_slice(&[7u8; 32]);
        b.push(0); // session id
        b.extend_from_slice(&[0, 2, 0x13, 0x01]); // one suite
        b.extend_from_slice(&[1, 0]); // null compression
        let mut ext = Vec::new();
        let name = b"example.test";
        ext.extend_from_slice(&[0, 0]); // server_name
        ext.extend_from_slice(&((name.len() + 5) as u16).to_be_bytes());
        ext.extend_from_slice(&((name.len() + 3) as u16).to_be_bytes());
        ext.push(0);
        ext.extend_from_slice(&(name.len() as u16).to_be_bytes());
        ext.extend_from_slice(name);
        ext.extend_from_slice(&[0, 21]); // padding
        ext.extend_from_slice(&(pad as u16).to_be_bytes());
        ext.extend(std::iter::repeat_n(0u8, pad));
        b.extend_from_slice(&(ext.len() as u16).to_be_bytes());
        b.extend_from_slice(&ext);
        b
    }

    fn handshake(body: &[u8]) -> Vec<u8> {
        let n = body.len();
        let mut hs = vec![1, (n >> 16) as u8, (n >> 8) as u8, n as u8];
        hs.extend_from_slice(body);
        hs
    }

    /// `hs` split into records of at most `size` payload bytes.
    fn records(hs: &[u8], size: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for chunk in hs.chunks(size) {
            out.extend_from_slice(&[22, 3, 1]);
            out.extend_from_slice(&(chunk.len() as u16).to_be_bytes());
            out.extend_from_slice(chunk);
        }
        out
    }

    #[test]
    fn a_real_client_hello_is_complete_only_at_its_last_byte() {
        assert_eq!(
            check_client_hello(OPENSSL),
            Ok(Hello::Complete(OPENSSL.len()))
        );
        for cut in 0..OPENSSL.len() {
            match check_client_hello(&OPENSSL[..cut]) {
                Ok(Hello::Need(n)) => assert!(n > cut && n <= OPENSSL.len(), "{cut}: {n}"),
                other => panic!("prefix of {cut} bytes: {other:?}"),
            }
        }
        // Whatever follows the hello (early data, the next record) is not inspected.
        let mut more = OPENSSL.to_vec();
        more.extend_from_slice(b"\x17\x03\x03\x00\x01x");
        assert_eq!(
            check_client_hello(&more),
            Ok(Hello::Complete(OPENSSL.len()))
        );
    }

    #[test]
    fn a_hello_split_over_records_is_reassembled() {
        let hs = handshake(&hello_body(300));
        for size in [1, 7, 100, 200] {
            let rec = records(&hs, size);
            if hs.len().div_ceil(size) > MAX_HELLO_RECORDS {
                assert_eq!(
                    check_client_hello(&rec),
                    Err(HelloError::TooManyRecords),
                    "{size}"
                );
                continue;
            }
            assert_eq!(
                check_client_hello(&rec),
                Ok(Hello::Complete(rec.len())),
                "{size}"
            );
            // And fed a byte at a time, as chunks arrive.
            for cut in 0..rec.len() {
                assert!(
                    matches!(check_client_hello(&rec[..cut]), Ok(Hello::Need(_))),
                    "{size} {cut}"
                );
            }
        }
    }

    #[test]
    fn smuggled_plain_http_is_refused_at_once() {
        assert_eq!(
            check_client_hello(b"\x16GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"),
            Err(HelloError::Version)
        );
        assert_eq!(check_client_hello(b"\x16G"), Err(HelloError::Version));
        assert_eq!(
            check_client_hello(b"GET / HTTP/1.1\r\n"),
            Err(HelloError::NotHandshake)
        );
        assert_eq!(check_client_hello(b"G"), Err(HelloError::NotHandshake));
        // A handshake record that holds HTTP instead of a ClientHello.
        let mut rec = b"\x16\x03\x01\x00\x20".to_vec();
        rec.extend_from_slice(b"GET /smuggled HTTP/1.1\r\nHost: x\r");
        assert_eq!(check_client_hello(&rec), Err(HelloError::NotClientHello));
        assert_eq!(
            check_client_hello(&rec[..6]),
            Err(HelloError::NotClientHello)
        );
        // A record of another type after a partial hello.
        let hs = handshake(&hello_body(10));
        let mut two = records(&hs[..20], 20);
        two.extend_from_slice(b"\x17\x03\x03\x00\x05hello");
        assert_eq!(check_client_hello(&two), Err(HelloError::NotHandshake));
    }

    #[test]
    fn truncated_oversize_and_malformed_hellos() {
        let hs = handshake(&hello_body(50));
        let rec = records(&hs, 16384);
        // Truncated: never complete, always "need more" (the caller's deadline ends it).
        assert_eq!(
            check_client_hello(&rec[..rec.len() - 1]),
            Ok(Hello::Need(rec.len()))
        );
        assert_eq!(check_client_hello(&[]), Ok(Hello::Need(5)));
        // Oversize: refused as soon as the handshake header says so.
        let big = handshake(&hello_body(MAX_HELLO_BYTES));
        let rec = records(&big, 16384);
        assert_eq!(check_client_hello(&rec[..9]), Err(HelloError::TooLarge));
        // Bad record lengths.
        assert_eq!(
            check_client_hello(b"\x16\x03\x01\x00\x00"),
            Err(HelloError::RecordLength)
        );
        assert_eq!(
            check_client_hello(b"\x16\x03\x01\x40\x01"),
            Err(HelloError::RecordLength)
        );
        // The handshake length disagrees with the body: extensions overrun the end.
        let mut body = hello_body(10);
        body.truncate(body.len() - 3);
        let rec = records(&handshake(&body), 16384);
        assert_eq!(check_client_hello(&rec), Err(HelloError::Malformed));
        // The record holds more than the hello.
        let mut hs = handshake(&hello_body(10));
        hs.extend_from_slice(&[2, 0, 0, 0]);
        assert_eq!(
            check_client_hello(&records(&hs, 16384)),
            Err(HelloError::Trailing)
        );
        // A handshake message that is not a ClientHello (a ServerHello, type 2).
        let mut sh = handshake(&hello_body(10));
        sh[0] = 2;
        assert_eq!(
            check_client_hello(&records(&sh, 16384)),
            Err(HelloError::NotClientHello)
        );
        // Cipher suites of odd length.
        let mut odd = hello_body(10);
        odd[35] = 0;
        odd[36] = 3;
        assert_eq!(
            check_client_hello(&records(&handshake(&odd), 16384)),
            Err(HelloError::Malformed)
        );
    }
}
