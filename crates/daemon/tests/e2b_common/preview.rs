//! Preview-URL helpers: requests by Host header to `{port}-{id}.sbx.test`
//! (the tests' `--e2b-domain`), and a minimal WebSocket client.

use crate::common::Daemon;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The preview domain the tests give sbxd (`--e2b-domain`).
pub const DOMAIN: &str = "sbx.test";

/// GET through the preview URL of `port` of `id`, by Host header.
pub async fn get(
    d: &Daemon,
    port: u16,
    id: &str,
    path: &str,
    token: Option<&str>,
) -> (u16, Vec<u8>) {
    let mut req = d
        .http
        .get(d.url(path))
        .header("host", format!("{port}-{id}.{DOMAIN}"));
    if let Some(t) = token {
        req = req.header("e2b-traffic-access-token", t);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.bytes().await.unwrap().to_vec())
}

/// Waits until the server on `port` answers through the preview URL.
pub async fn wait_listening(d: &Daemon, port: u16, id: &str, token: Option<&str>) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, body) = get(d, port, id, "/", token).await;
        if status != 502 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "port {port} never opened: {}",
            String::from_utf8_lossy(&body)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Opens a WebSocket to `port` of `id` through sbxd (with the traffic
/// token, if given) and checks the `101` (with the accept key of RFC 6455's
/// sample nonce).
pub async fn ws_connect(d: &Daemon, port: u16, id: &str, token: Option<&str>) -> TcpStream {
    let mut ws = TcpStream::connect(("127.0.0.1", d.port)).await.unwrap();
    let token = token
        .map(|t| format!("e2b-traffic-access-token: {t}\r\n"))
        .unwrap_or_default();
    let handshake = format!(
        "GET /echo HTTP/1.1\r\nHost: {port}-{id}.{DOMAIN}\r\nUpgrade: websocket\r\n\
         Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
         Sec-WebSocket-Version: 13\r\n{token}\r\n"
    );
    ws.write_all(handshake.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        ws.read_exact(&mut b).await.unwrap();
        head.push(b[0]);
    }
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 101"), "{head}");
    assert!(
        head.contains("sec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo="),
        "{head}"
    );
    ws
}
