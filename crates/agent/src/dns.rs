//! The in-sandbox DNS responder on 127.0.0.1:53 (UDP and TCP).
//!
//! It answers the small subset clients need (one question, class IN, types A
//! and AAAA) by asking the daemon over `net_serve` ([`Event::NetResolve`]);
//! the daemon resolves with the host resolver and applies the sandbox's
//! policy, so a name the proxies would refuse does not resolve here either.
//! `localhost` and names under `.localhost` (RFC 6761) are answered here with
//! the sandbox's own loopback (127.0.0.1, ::1), without the daemon: its
//! policy refuses loopback, which for the daemon is the host's. Other types
//! get an empty NOERROR answer, other opcodes NOTIMP. Packets are parsed by
//! hand; malformed ones get FORMERR (or are dropped when even the
//! header is missing), never a panic.
//!
//! [`Event::NetResolve`]: sbx_agent_proto::Event::NetResolve

use crate::console;
use crate::proxy::Net;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::task::JoinHandle;

/// DNS address inside the sandbox.
pub const DNS_ADDR: &str = "127.0.0.1:53";
/// The resolver configuration written when the responder starts.
pub const RESOLV_CONF: &str = "/etc/resolv.conf";
/// The hosts file written at init when the image has none.
pub const HOSTS: &str = "/etc/hosts";
/// What [`write_hosts_if_missing`] writes.
pub const HOSTS_CONTENT: &str = "# Written by sbx-agent: the image had no /etc/hosts.\n\
                                 127.0.0.1 localhost\n\
                                 ::1 localhost ip6-localhost ip6-loopback\n";
/// TTL of every answer, seconds.
pub const TTL: u32 = 30;
/// Record type A.
pub const TYPE_A: u16 = 1;
/// Record type AAAA.
pub const TYPE_AAAA: u16 = 28;
/// Class IN.
const CLASS_IN: u16 = 1;
/// Largest classic UDP answer.
const UDP_MAX: usize = 512;
/// Response codes.
pub const NOERROR: u8 = 0;
/// Malformed query.
pub const FORMERR: u8 = 1;
/// The daemon could not be asked or did not answer in time.
pub const SERVFAIL: u8 = 2;
/// No such name (or refused by the policy).
pub const NXDOMAIN: u8 = 3;
/// Opcode not supported.
pub const NOTIMP: u8 = 4;
/// How long a TCP client may take to send its query.
const TCP_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// One parsed query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    /// Transaction id.
    pub id: u16,
    /// Header flags as sent.
    pub flags: u16,
    /// Dotted name without the trailing dot.
    pub name: String,
    /// QTYPE.
    pub qtype: u16,
    /// QCLASS.
    pub qclass: u16,
    /// The question section as sent (name, type, class), echoed in answers.
    question: Vec<u8>,
}

impl Query {
    fn opcode(&self) -> u16 {
        (self.flags >> 11) & 0xf
    }
}

fn be16(pkt: &[u8], at: usize) -> Option<u16> {
    let b = pkt.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes([b[0], b[1]]))
}

/// Parses a query. `Err(Some(id))`: answer FORMERR with that id;
/// `Err(None)`: drop silently (no header, or a response).
pub fn parse(pkt: &[u8]) -> Result<Query, Option<u16>> {
    if pkt.len() < 12 {
        return Err(None);
    }
    let id = be16(pkt, 0).ok_or(None)?;
    let flags = be16(pkt, 2).ok_or(None)?;
    let qdcount = be16(pkt, 4).ok_or(None)?;
    if flags & 0x8000 != 0 {
        return Err(None);
    }
    if qdcount != 1 {
        return Err(Some(id));
    }
    let mut at = 12;
    let mut name = String::new();
    loop {
        let len = *pkt.get(at).ok_or(Some(id))? as usize;
        at += 1;
        if len == 0 {
            break;
        }
        // Compression pointers (and the reserved 0x40/0x80 forms) have no place in a question.
        if len > 63 {
            return Err(Some(id));
        }
        let label = pkt.get(at..at + len).ok_or(Some(id))?;
        at += len;
        if !label
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_')
        {
            return Err(Some(id));
        }
        if !name.is_empty() {
            name.push('.');
        }
        // Checked ASCII above.
        name.extend(label.iter().map(|b| *b as char));
        if name.len() > 253 {
            return Err(Some(id));
        }
    }
    let qtype = be16(pkt, at).ok_or(Some(id))?;
    let qclass = be16(pkt, at + 2).ok_or(Some(id))?;
    let question = pkt.get(12..at + 4).ok_or(Some(id))?.to_vec();
    Ok(Query {
        id,
        flags,
        name,
        qtype,
        qclass,
        question,
    })
}

fn header(id: u16, query_flags: u16, rcode: u8, qd: u16, an: u16) -> Vec<u8> {
    // QR, the query's opcode and RD, RA; AA clear.
    let flags = 0x8000 | (query_flags & 0x7900) | 0x0080 | u16::from(rcode & 0xf);
    let mut out = Vec::with_capacity(UDP_MAX);
    for v in [id, flags, qd, an, 0, 0] {
        out.extend_from_slice(&v.to_be_bytes());
    }
    out
}

/// An answer without a question section (FORMERR for an unparsable query).
pub fn error_reply(id: u16, rcode: u8) -> Vec<u8> {
    header(id, 0, rcode, 0, 0)
}

/// The response to `q`: `rcode` and the addresses matching its type (at
/// most what fits in a 512-byte message), each with a pointer to the question name.
pub fn reply(q: &Query, rcode: u8, addrs: &[IpAddr]) -> Vec<u8> {
    let records: Vec<Vec<u8>> = addrs
        .iter()
        .filter_map(|ip| match (ip, q.qtype) {
            (IpAddr::V4(v4), TYPE_A) => Some(v4.octets().to_vec()),
            (IpAddr::V6(v6), TYPE_AAAA) => Some(v6.octets().to_vec()),
            _ => None,
        })
        .collect();
    let room = UDP_MAX.saturating_sub(12 + q.question.len());
    let fit: Vec<&Vec<u8>> = records
        .iter()
        .scan(0usize, |used, r| {
            *used += 12 + r.len();
            (*used <= room).then_some(r)
        })
        .collect();
    let an = u16::try_from(fit.len()).unwrap_or(0);
    let mut out = header(q.id, q.flags, rcode, 1, an);
    out.extend_from_slice(&q.question);
    for rdata in fit {
        out.extend_from_slice(&[0xc0, 0x0c]);
        out.extend_from_slice(&q.qtype.to_be_bytes());
        out.extend_from_slice(&CLASS_IN.to_be_bytes());
        out.extend_from_slice(&TTL.to_be_bytes());
        out.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
        out.extend_from_slice(rdata);
    }
    out
}

/// `localhost` or a name under `.localhost` (RFC 6761), any case, with or
/// without the trailing dot.
pub fn is_localhost(name: &str) -> bool {
    const LOCALHOST: &[u8] = b"localhost";
    let name = name.strip_suffix('.').unwrap_or(name).as_bytes();
    name.len() >= LOCALHOST.len()
        && name[name.len() - LOCALHOST.len()..].eq_ignore_ascii_case(LOCALHOST)
        && (name.len() == LOCALHOST.len() || name[name.len() - LOCALHOST.len() - 1] == b'.')
}

/// The addresses of every [`is_localhost`] name: the sandbox's own loopback.
const LOOPBACK: [IpAddr; 2] = [
    IpAddr::V4(Ipv4Addr::LOCALHOST),
    IpAddr::V6(Ipv6Addr::LOCALHOST),
];

/// The full answer to one packet, `None` to drop it.
pub async fn answer(net: &Arc<Net>, pkt: &[u8]) -> Option<Vec<u8>> {
    let q = match parse(pkt) {
        Ok(q) => q,
        Err(Some(id)) => return Some(error_reply(id, FORMERR)),
        Err(None) => return None,
    };
    if q.opcode() != 0 {
        return Some(reply(&q, NOTIMP, &[]));
    }
    if q.qclass != CLASS_IN || q.name.is_empty() {
        return Some(reply(&q, NOERROR, &[]));
    }
    let ipv6 = match q.qtype {
        TYPE_A => false,
        TYPE_AAAA => true,
        _ => return Some(reply(&q, NOERROR, &[])),
    };
    if is_localhost(&q.name) {
        // The sandbox's loopback, not the host's: no policy, no denial.
        return Some(reply(&q, NOERROR, &LOOPBACK));
    }
    Some(match net.resolve(q.name.clone(), ipv6).await {
        Ok(Some(addrs)) => reply(&q, NOERROR, &addrs),
        Ok(None) => reply(&q, NXDOMAIN, &[]),
        Err(()) => reply(&q, SERVFAIL, &[]),
    })
}

/// Binds UDP and TCP 127.0.0.1:53, points `/etc/resolv.conf` at them and
/// serves for the agent's lifetime.
/// Starts the UDP and TCP responders; returns their listener tasks.
pub fn start(net: &Arc<Net>) -> Vec<JoinHandle<()>> {
    let mut tasks = Vec::new();
    let udp = std::net::UdpSocket::bind(DNS_ADDR).and_then(|s| {
        s.set_nonblocking(true)?;
        UdpSocket::from_std(s)
    });
    let udp = match udp {
        Ok(s) => Arc::new(s),
        Err(e) => {
            console!("dns: cannot listen on udp {DNS_ADDR}: {e}");
            return tasks;
        }
    };
    if let Err(e) = write_resolv_conf() {
        console!("dns: cannot write {RESOLV_CONF}: {e}");
    }
    let n = Arc::clone(net);
    tasks.push(tokio::spawn(async move {
        let mut buf = vec![0u8; 4096];
        loop {
            let (len, peer) = match udp.recv_from(&mut buf).await {
                Ok(r) => r,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let pkt = buf[..len].to_vec();
            let (net, udp) = (Arc::clone(&n), Arc::clone(&udp));
            tokio::spawn(async move {
                if let Some(out) = answer(&net, &pkt).await {
                    let _ = udp.send_to(&out, peer).await;
                }
            });
        }
    }));
    let tcp = std::net::TcpListener::bind(DNS_ADDR).and_then(|l| {
        l.set_nonblocking(true)?;
        TcpListener::from_std(l)
    });
    match tcp {
        Ok(listener) => {
            let n = Arc::clone(net);
            tasks.push(tokio::spawn(async move {
                loop {
                    match listener.accept().await {
                        Ok((s, _)) => {
                            tokio::spawn(tcp_client(Arc::clone(&n), s));
                        }
                        Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                    }
                }
            }));
        }
        Err(e) => console!("dns: cannot listen on tcp {DNS_ADDR}: {e}"),
    }
    tasks
}

/// Length-prefixed queries on one TCP connection until EOF or idle.
async fn tcp_client(net: Arc<Net>, mut s: TcpStream) {
    loop {
        let mut len = [0u8; 2];
        match tokio::time::timeout(TCP_READ_TIMEOUT, s.read_exact(&mut len)).await {
            Ok(Ok(_)) => {}
            _ => return,
        }
        let mut pkt = vec![0u8; u16::from_be_bytes(len) as usize];
        match tokio::time::timeout(TCP_READ_TIMEOUT, s.read_exact(&mut pkt)).await {
            Ok(Ok(_)) => {}
            _ => return,
        }
        let Some(out) = answer(&net, &pkt).await else {
            return;
        };
        let mut framed = (out.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(&out);
        if s.write_all(&framed).await.is_err() {
            return;
        }
    }
}

fn write_resolv_conf() -> std::io::Result<()> {
    // A symlink (e.g. to a resolved stub file) is replaced, not followed.
    if std::fs::symlink_metadata(RESOLV_CONF).is_ok_and(|m| m.file_type().is_symlink()) {
        std::fs::remove_file(RESOLV_CONF)?;
    }
    std::fs::write(
        RESOLV_CONF,
        "# Written by sbx-agent: names resolve through the sandbox's network policy.\n\
         nameserver 127.0.0.1\n",
    )
}

/// Creates `path` with [`HOSTS_CONTENT`] unless something (a file, a
/// symlink, even a dangling one) is already there; `Ok(true)` when written.
/// The agent calls it once at init with [`HOSTS`]: images without an
/// `/etc/hosts` would otherwise send `localhost` to DNS.
pub fn write_hosts_if_missing(path: &Path) -> std::io::Result<bool> {
    let created = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(path);
    let mut f = match created {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(false),
        Err(e) => return Err(e),
    };
    if let Err(e) = f.write_all(HOSTS_CONTENT.as_bytes()) {
        // No half-written file: the next start tries again.
        let _ = std::fs::remove_file(path);
        return Err(e);
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(id: u16, name: &str, qtype: u16) -> Vec<u8> {
        let mut p = Vec::new();
        for v in [id, 0x0100, 1, 0, 0, 0] {
            p.extend_from_slice(&v.to_be_bytes());
        }
        // A trailing dot is the root label, which the terminating 0 encodes.
        for label in name.strip_suffix('.').unwrap_or(name).split('.') {
            p.push(label.len() as u8);
            p.extend_from_slice(label.as_bytes());
        }
        p.push(0);
        p.extend_from_slice(&qtype.to_be_bytes());
        p.extend_from_slice(&1u16.to_be_bytes());
        p
    }

    #[test]
    fn parses_example_com_a() {
        let pkt = query(0x1234, "example.com", TYPE_A);
        let q = parse(&pkt).expect("parses");
        assert_eq!(q.id, 0x1234);
        assert_eq!(q.name, "example.com");
        assert_eq!(q.qtype, TYPE_A);
        assert_eq!(q.qclass, 1);
        assert_eq!(q.question, pkt[12..].to_vec());
    }

    #[test]
    fn encodes_a_answer() {
        let pkt = query(0xbeef, "example.com", TYPE_A);
        let q = parse(&pkt).expect("parses");
        let addrs = [
            IpAddr::V4(Ipv4Addr::new(93, 184, 216, 34)),
            IpAddr::V6(Ipv6Addr::LOCALHOST),
        ];
        let out = reply(&q, NOERROR, &addrs);
        // Header: same id, QR|RD|RA, NOERROR, 1 question, 1 answer (the AAAA is dropped).
        assert_eq!(
            &out[..12],
            &[0xbe, 0xef, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0]
        );
        assert_eq!(&out[12..pkt.len()], &pkt[12..]);
        let rr = &out[pkt.len()..];
        assert_eq!(
            rr,
            &[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 30, 0, 4, 93, 184, 216, 34]
        );
    }

    #[test]
    fn encodes_aaaa_and_nxdomain() {
        let pkt = query(7, "example.com", TYPE_AAAA);
        let q = parse(&pkt).expect("parses");
        let v6: Ipv6Addr = "2001:db8::1".parse().expect("v6");
        let out = reply(&q, NOERROR, &[IpAddr::V6(v6)]);
        let rr = &out[pkt.len()..];
        assert_eq!(&rr[..12], &[0xc0, 0x0c, 0, 28, 0, 1, 0, 0, 0, 30, 0, 16]);
        assert_eq!(&rr[12..], &v6.octets());
        let nx = reply(&q, NXDOMAIN, &[]);
        assert_eq!(nx[3] & 0xf, NXDOMAIN);
        assert_eq!(&nx[6..8], &[0, 0]);
    }

    #[test]
    fn answers_fit_in_512_bytes() {
        let q = parse(&query(1, "example.com", TYPE_A)).expect("parses");
        let many: Vec<IpAddr> = (0..200u8)
            .map(|i| IpAddr::V4(Ipv4Addr::new(198, 51, 100, i)))
            .collect();
        let out = reply(&q, NOERROR, &many);
        assert!(out.len() <= 512);
        let an = u16::from_be_bytes([out[6], out[7]]) as usize;
        assert_eq!(out.len(), 12 + q.question.len() + an * 16);
    }

    #[test]
    fn malformed_packets_never_panic() {
        let good = query(9, "example.com", TYPE_A);
        // Every truncation.
        for n in 0..good.len() {
            let r = parse(&good[..n]);
            if n < 12 {
                assert_eq!(r, Err(None));
            } else {
                assert_eq!(r, Err(Some(9)), "len {n}");
            }
        }
        // Compression pointer in the question, oversized labels, two questions, responses.
        let mut ptr = good[..12].to_vec();
        ptr.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1]);
        assert_eq!(parse(&ptr), Err(Some(9)));
        let mut two = good.clone();
        two[5] = 2;
        assert_eq!(parse(&two), Err(Some(9)));
        let mut resp = good.clone();
        resp[2] |= 0x80;
        assert_eq!(parse(&resp), Err(None));
        let mut bad_char = good.clone();
        bad_char[13] = b'/';
        assert_eq!(parse(&bad_char), Err(Some(9)));
        // Pseudo-random garbage.
        let mut x: u32 = 0x1234_5678;
        for len in 0..300 {
            let pkt: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    x as u8
                })
                .collect();
            if let Ok(q) = parse(&pkt) {
                let _ = reply(&q, NOERROR, &[IpAddr::V4(Ipv4Addr::LOCALHOST)]);
            }
        }
        let e = error_reply(9, FORMERR);
        assert_eq!(e.len(), 12);
        assert_eq!(e[3] & 0xf, FORMERR);
    }

    #[test]
    fn localhost_names() {
        for name in [
            "localhost",
            "localhost.",
            "LOCALHOST.",
            "LocalHost",
            "foo.localhost",
            "a.b.FOO.localhost.",
        ] {
            assert!(is_localhost(name), "{name}");
        }
        for name in [
            "",
            ".",
            "localhos",
            "notlocalhost",
            "foo-localhost",
            "localhost.example.com",
            "localhost.localdomain",
            "example.com",
        ] {
            assert!(!is_localhost(name), "{name}");
        }
    }

    /// The rcode and the answer records' data of a reply to a [`query`] packet.
    fn answers(pkt: &[u8], out: &[u8]) -> (u8, Vec<Vec<u8>>) {
        assert_eq!(&out[..2], &pkt[..2], "id");
        assert_eq!(&out[12..pkt.len()], &pkt[12..], "question echoed");
        let an = u16::from_be_bytes([out[6], out[7]]);
        let mut at = pkt.len();
        let mut rdata = Vec::new();
        for _ in 0..an {
            let len = u16::from_be_bytes([out[at + 10], out[at + 11]]) as usize;
            assert_eq!(
                &out[at + 2..at + 4],
                &pkt[pkt.len() - 4..pkt.len() - 2],
                "type"
            );
            rdata.push(out[at + 12..at + 12 + len].to_vec());
            at += 12 + len;
        }
        assert_eq!(at, out.len());
        (out[3] & 0xf, rdata)
    }

    #[tokio::test]
    async fn localhost_is_answered_with_loopback_without_the_daemon() {
        // No `net_serve`: any question that needs the daemon gets SERVFAIL.
        let net = Arc::new(Net::default());
        for name in [
            "localhost",
            "LOCALHOST.",
            "foo.localhost",
            "Dev.App.Localhost",
        ] {
            let pkt = query(3, name, TYPE_A);
            let out = answer(&net, &pkt).await.expect("answered");
            assert_eq!(
                answers(&pkt, &out),
                (NOERROR, vec![vec![127, 0, 0, 1]]),
                "{name} A"
            );
            let pkt = query(4, name, TYPE_AAAA);
            let out = answer(&net, &pkt).await.expect("answered");
            assert_eq!(
                answers(&pkt, &out),
                (NOERROR, vec![Ipv6Addr::LOCALHOST.octets().to_vec()]),
                "{name} AAAA"
            );
            // Other types: NOERROR without answers, as for every name.
            let pkt = query(5, name, 15);
            let out = answer(&net, &pkt).await.expect("answered");
            assert_eq!(answers(&pkt, &out), (NOERROR, vec![]), "{name} MX");
        }
    }

    #[tokio::test]
    async fn other_names_still_go_to_the_daemon() {
        let net = Arc::new(Net::default());
        for name in ["example.com", "localhost.example.com", "notlocalhost"] {
            for qtype in [TYPE_A, TYPE_AAAA] {
                let pkt = query(6, name, qtype);
                let out = answer(&net, &pkt).await.expect("answered");
                assert_eq!(answers(&pkt, &out), (SERVFAIL, vec![]), "{name} {qtype}");
            }
        }
    }

    #[test]
    fn hosts_file_written_only_when_missing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let hosts = dir.path().join("hosts");
        assert!(write_hosts_if_missing(&hosts).expect("written"));
        let text = std::fs::read_to_string(&hosts).expect("read");
        assert_eq!(text, HOSTS_CONTENT);
        let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            lines,
            [
                "127.0.0.1 localhost",
                "::1 localhost ip6-localhost ip6-loopback"
            ]
        );
        // The image's own file (or symlink, even a dangling one) is kept.
        std::fs::write(&hosts, "10.0.0.1 mine\n").expect("write");
        assert!(!write_hosts_if_missing(&hosts).expect("kept"));
        assert_eq!(
            std::fs::read_to_string(&hosts).expect("read"),
            "10.0.0.1 mine\n"
        );
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(dir.path().join("absent"), &link).expect("symlink");
        assert!(!write_hosts_if_missing(&link).expect("kept"));
        assert!(!dir.path().join("absent").exists());
    }
}
