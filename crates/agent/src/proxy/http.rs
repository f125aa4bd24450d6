//! The HTTP proxy client: CONNECT and absolute-form `http://` requests, and its error answers.

use super::Net;
use sbx_agent_proto::NetError;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest HTTP request head the proxy reads.
const MAX_HEAD_BYTES: usize = 64 * 1024;

async fn write_http_error(s: &mut TcpStream, code: u16, reason: &str, msg: &str) {
    let body = format!("sbx proxy: {msg}\n");
    let resp = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = s.write_all(resp.as_bytes()).await;
    let _ = s.shutdown().await;
}

async fn write_net_error(s: &mut TcpStream, e: NetError) {
    let (code, reason, msg) = match e {
        NetError::Denied => (
            403,
            "Forbidden",
            "the sandbox's network policy does not allow this destination",
        ),
        NetError::Resolve => (502, "Bad Gateway", "the host name did not resolve"),
        NetError::Refused => (502, "Bad Gateway", "connection refused"),
        NetError::Unreachable => (502, "Bad Gateway", "destination unreachable"),
        NetError::TimedOut => (504, "Gateway Timeout", "connection timed out"),
        NetError::Failed => (
            503,
            "Service Unavailable",
            "the sandbox's network service is not available",
        ),
    };
    write_http_error(s, code, reason, msg).await;
}

/// Splits `host:port` / `[v6]:port`; `default` when no port is given.
fn split_host_port(authority: &str, default: Option<u16>) -> Option<(String, u16)> {
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (h, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None if after.is_empty() => default?,
            None => return None,
        };
        (h.to_string(), port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), p.parse().ok()?),
            None => (authority.to_string(), default?),
        }
    };
    if host.is_empty() || port == 0 {
        return None;
    }
    Some((host, port))
}

async fn read_head(s: &mut TcpStream) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut buf = Vec::with_capacity(4096);
    let mut tmp = [0u8; 4096];
    loop {
        if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(pos + 4);
            return Some((buf, rest));
        }
        if buf.len() > MAX_HEAD_BYTES {
            return None;
        }
        let n = tokio::time::timeout(Duration::from_secs(30), s.read(&mut tmp))
            .await
            .ok()?
            .ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
    }
}

pub(super) async fn http_client(net: Arc<Net>, mut s: TcpStream) {
    let Some((head, rest)) = read_head(&mut s).await else {
        return write_http_error(&mut s, 400, "Bad Request", "unreadable request head").await;
    };
    let Ok(head) = String::from_utf8(head) else {
        return write_http_error(&mut s, 400, "Bad Request", "request head is not UTF-8").await;
    };
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or("");
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return write_http_error(&mut s, 400, "Bad Request", "malformed request line").await;
    };
    if method.eq_ignore_ascii_case("CONNECT") {
        let Some((host, port)) = split_host_port(target, None) else {
            return write_http_error(&mut s, 400, "Bad Request", "CONNECT needs host:port").await;
        };
        match net.open(host, port).await {
            Ok(t) => {
                if s.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await
                    .is_ok()
                {
                    t.run(s, rest).await;
                } else {
                    t.net.forget(t.conn);
                }
            }
            Err(e) => write_net_error(&mut s, e).await,
        }
        return;
    }
    let Some(after) = target
        .strip_prefix("http://")
        .or_else(|| target.strip_prefix("HTTP://"))
    else {
        return write_http_error(
            &mut s,
            400,
            "Bad Request",
            "only CONNECT and absolute-form http:// requests are proxied",
        )
        .await;
    };
    let (authority, path) = match after.find(['/', '?']) {
        Some(i) => (&after[..i], &after[i..]),
        None => (after, "/"),
    };
    let authority = authority.rsplit('@').next().unwrap_or(authority);
    let Some((host, port)) = split_host_port(authority, Some(80)) else {
        return write_http_error(&mut s, 400, "Bad Request", "bad host in URL").await;
    };
    let path = if path.starts_with('?') {
        format!("/{path}")
    } else {
        path.to_string()
    };
    let mut out = format!("{method} {path} {version}\r\n");
    let mut has_host = false;
    for line in lines.filter(|l| !l.is_empty()) {
        let name = line.split(':').next().unwrap_or("").trim();
        if [
            "proxy-connection",
            "proxy-authorization",
            "connection",
            "keep-alive",
        ]
        .iter()
        .any(|h| name.eq_ignore_ascii_case(h))
        {
            continue;
        }
        has_host |= name.eq_ignore_ascii_case("host");
        out.push_str(line);
        out.push_str("\r\n");
    }
    if !has_host {
        out.push_str(&format!("Host: {authority}\r\n"));
    }
    out.push_str("Connection: close\r\n\r\n");
    let mut initial = out.into_bytes();
    initial.extend_from_slice(&rest);
    match net.open(host, port).await {
        Ok(t) => t.run(s, initial).await,
        Err(e) => write_net_error(&mut s, e).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port_forms() {
        assert_eq!(
            split_host_port("example.com:443", None),
            Some(("example.com".into(), 443))
        );
        assert_eq!(
            split_host_port("[::1]:8080", None),
            Some(("::1".into(), 8080))
        );
        assert_eq!(
            split_host_port("example.com", Some(80)),
            Some(("example.com".into(), 80))
        );
        assert_eq!(split_host_port("example.com", None), None);
        assert_eq!(split_host_port("[::1]", Some(80)), Some(("::1".into(), 80)));
        assert_eq!(split_host_port(":80", None), None);
    }
}
