//! The console's terminal (`GET /v1/sandboxes/{id}/terminal`) on real gVisor,
//! driven by a raw WebSocket client: typing and output, a resize the shell
//! sees (`stty size`), a reattach to the same shell by pid (its variables
//! kept, its earlier output replayed), and who may open it: no key 401,
//! another tenant 404, the console's cookie only from sbxd's own origin.

mod common;

use common::ws::{frame, read_frame};
use common::{Daemon, KillLeftovers};
use sbx_api_types::signing_key::hashed_signing_key;
use serde_json::{json, Value};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const KEY: &str = "signkey-test-0123456789abcdef0123456789abcdef";

/// Sends a WebSocket handshake for `path` with `headers`; returns the status
/// line's code and, on `101`, the socket.
async fn handshake(d: &Daemon, path: &str, headers: &[(&str, &str)]) -> (u16, String, TcpStream) {
    let mut ws = TcpStream::connect(("127.0.0.1", d.port)).await.unwrap();
    let mut req = format!(
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nUpgrade: websocket\r\n\
         Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
         Sec-WebSocket-Version: 13\r\n",
        d.port
    );
    for (name, value) in headers {
        req.push_str(&format!("{name}: {value}\r\n"));
    }
    req.push_str("\r\n");
    ws.write_all(req.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        ws.read_exact(&mut b).await.unwrap();
        head.push(b[0]);
    }
    let head = String::from_utf8_lossy(&head).to_string();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, head, ws)
}

/// The terminal's first message: `{"type":"ready","pid":N}`.
async fn ready(ws: &mut TcpStream) -> u64 {
    let (op, data) = read_frame(ws).await;
    assert_eq!(op, 1, "a text frame first");
    let v: Value = serde_json::from_slice(&data).unwrap();
    assert_eq!(v["type"], "ready", "{v}");
    v["pid"].as_u64().unwrap()
}

/// Reads terminal output until it contains `needle`; returns all it read.
async fn until(ws: &mut TcpStream, needle: &str) -> String {
    let mut seen = String::new();
    let read = async {
        loop {
            let (op, data) = read_frame(ws).await;
            match op {
                2 => seen.push_str(&String::from_utf8_lossy(&data)),
                1 => {
                    let v: Value = serde_json::from_slice(&data).unwrap();
                    assert_ne!(v["type"], "error", "{v}");
                }
                8 => panic!("closed before {needle:?}: {seen}"),
                _ => {}
            }
            if seen.contains(needle) {
                return;
            }
        }
    };
    if tokio::time::timeout(Duration::from_secs(30), read)
        .await
        .is_err()
    {
        panic!("no {needle:?} in the terminal's output: {seen}");
    }
    seen
}

async fn type_line(ws: &mut TcpStream, line: &str) {
    ws.write_all(&frame(2, format!("{line}\r").as_bytes()))
        .await
        .unwrap();
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn terminal_over_a_websocket() {
    let d = Daemon::start(&["--signing-key", KEY]).await;
    let _cleanup = KillLeftovers::of(&d);
    let bearer = format!("Bearer {}", hashed_signing_key(KEY));
    let auth = ("authorization", bearer.as_str());
    let (status, body) = d
        .call_with(
            "POST",
            "/v2/sandboxes",
            Some(
                json!({"name": "term", "vcpu": 1, "memoryMb": 1024})
                    .to_string()
                    .into_bytes(),
            ),
            &[auth],
        )
        .await;
    assert!(status == 201 || status == 202, "{status} {body}");
    let id = body["data"]["id"].as_str().unwrap().to_string();
    let path = format!("/v1/sandboxes/{id}/terminal");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let (_, s) = d
            .call_with("GET", &format!("/v2/sandboxes/{id}"), None, &[auth])
            .await;
        if s["data"]["status"] == "RUNNING" {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{s}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // No key: 401; a plain GET (no upgrade): 400, and no shell is started.
    let (status, head, _) = handshake(&d, &path, &[]).await;
    assert_eq!(status, 401, "{head}");
    let (status, body) = d.call_with("GET", &path, None, &[auth]).await;
    assert_eq!(status, 400, "{body}");

    // Another tenant: 404, as for any of A's sandboxes.
    let other = d.create_key("other", None);
    let other_bearer = format!("Bearer {}", hashed_signing_key(&other));
    let (status, head, _) = handshake(&d, &path, &[("authorization", &other_bearer)]).await;
    assert_eq!(status, 404, "{head}");

    // Typing and output, on a terminal of the requested size.
    let (status, head, mut ws) = handshake(&d, &format!("{path}?cols=90&rows=20"), &[auth]).await;
    assert_eq!(status, 101, "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("sec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo="),
        "{head}"
    );
    let pid = ready(&mut ws).await;
    type_line(&mut ws, "echo hello-$((6*7))").await;
    until(&mut ws, "hello-42").await;
    type_line(&mut ws, "echo term=$TERM; stty size").await;
    let out = until(&mut ws, "20 90").await;
    assert!(out.contains("term=xterm-256color"), "{out}");

    // A resize: the shell sees the new size.
    let resize = json!({"type": "resize", "cols": 120, "rows": 33}).to_string();
    ws.write_all(&frame(1, resize.as_bytes())).await.unwrap();
    type_line(&mut ws, "stty size").await;
    until(&mut ws, "33 120").await;
    // A bad control message is answered, the terminal stays.
    ws.write_all(&frame(1, b"{\"type\":\"nope\"}"))
        .await
        .unwrap();
    loop {
        let (op, data) = read_frame(&mut ws).await;
        if op == 1 {
            let text = String::from_utf8_lossy(&data).to_string();
            assert!(text.contains("invalid control message"), "{text}");
            break;
        }
    }

    // Set a variable, leave (the shell keeps running), reattach by pid.
    type_line(&mut ws, "X=kept; echo set-$X").await;
    until(&mut ws, "set-kept").await;
    ws.write_all(&frame(8, &[])).await.unwrap();
    drop(ws);
    let (status, head, mut ws) = handshake(&d, &format!("{path}?pid={pid}"), &[auth]).await;
    assert_eq!(status, 101, "{head}");
    assert_eq!(ready(&mut ws).await, pid, "the same shell");
    // What it printed before is replayed from the retained output.
    until(&mut ws, "hello-42").await;
    type_line(&mut ws, "echo got-$X").await;
    until(&mut ws, "got-kept").await;
    drop(ws);

    // A pid that is no terminal shell of this sandbox: 404.
    let (status, head, _) = handshake(&d, &format!("{path}?pid=1"), &[auth]).await;
    assert_eq!(status, 404, "{head}");
    // A size out of range: 400.
    let (status, head, _) = handshake(&d, &format!("{path}?cols=0"), &[auth]).await;
    assert_eq!(status, 400, "{head}");

    // The console's cookie: only from sbxd's own origin (cross-site
    // WebSocket hijacking), never without an Origin.
    let resp = d
        .http
        .post(d.url("/console/session"))
        .header("content-type", "application/json")
        .body(json!({ "key": KEY }).to_string())
        .send()
        .await
        .unwrap();
    let cookie = resp.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    let with_cookie = ("cookie", cookie.as_str());
    for origin in ["http://evil.example", "http://127.0.0.1:1"] {
        let (status, head, _) = handshake(&d, &path, &[with_cookie, ("origin", origin)]).await;
        assert_eq!(status, 403, "{origin}: {head}");
    }
    let (status, head, _) = handshake(&d, &path, &[with_cookie]).await;
    assert_eq!(status, 403, "no Origin: {head}");
    let own = d.base.clone();
    let (status, head, mut ws) = handshake(
        &d,
        &format!("{path}?pid={pid}"),
        &[with_cookie, ("origin", &own)],
    )
    .await;
    assert_eq!(status, 101, "{head}");
    assert_eq!(ready(&mut ws).await, pid);
    type_line(&mut ws, "echo cookie-$X").await;
    until(&mut ws, "cookie-kept").await;

    // The shell's end is reported, then the socket closes.
    type_line(&mut ws, "exit 3").await;
    let ended = async {
        loop {
            let (op, data) = read_frame(&mut ws).await;
            if op == 1 {
                let v: Value = serde_json::from_slice(&data).unwrap();
                if v["type"] == "exit" {
                    return v;
                }
            }
        }
    };
    let v = tokio::time::timeout(Duration::from_secs(30), ended)
        .await
        .expect("an exit message");
    assert_eq!(v["code"], 3, "{v}");
    let (status, head, _) = handshake(&d, &format!("{path}?pid={pid}"), &[auth]).await;
    assert_eq!(status, 404, "an ended shell cannot be reattached: {head}");

    let (status, _) = d
        .call_with("DELETE", &format!("/v2/sandboxes/{id}"), None, &[auth])
        .await;
    assert!(status == 200 || status == 202 || status == 204, "{status}");
}
