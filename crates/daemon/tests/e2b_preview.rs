//! Preview URLs (`{port}-{id}.{domain}`) against a real sbxd, runsc and
//! agent: HTTP and WebSocket reach servers inside the sandbox over the agent
//! channel; the traffic token, tenants, sandboxes made elsewhere, paused
//! sandboxes, closed ports and Host tricks are refused; a sandbox cannot
//! reach another's preview URL from inside. The SDK's `getHost` over HTTPS
//! is `tests/e2b/preview.mjs`.

mod common;
mod e2b_common;

use common::ws::{frame as ws_frame, read_frame as ws_read};
use common::Daemon;
use e2b_common::preview::{get, wait_listening, ws_connect};
use e2b_common::LEGACY_KEY;
use sbx_api_types::signing_key::hashed_signing_key;
use serde_json::{json, Value};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const WS_ECHO: &str = include_str!("../../../tests/e2b/ws_echo.py");

/// An E2B sandbox: id and the whole create answer.
async fn create(d: &Daemon, key: &str, body: Value) -> (String, Value) {
    let (status, created, _) =
        e2b_common::e2b(d, Some(key), "POST", "/v2/sandboxes", Some(body)).await;
    assert_eq!(status, 201, "{created}");
    (created["sandboxID"].as_str().unwrap().to_string(), created)
}

/// Starts a background process in the sandbox (through `/v2`, the tenant's key).
async fn start(d: &Daemon, key: &str, id: &str, argv: &[&str]) -> String {
    let bearer = format!("Bearer {}", hashed_signing_key(key));
    let body = json!({ "command": argv }).to_string().into_bytes();
    let (status, p) = d
        .call_with(
            "POST",
            &format!("/v2/sandboxes/{id}/processes"),
            Some(body),
            &[("authorization", &bearer)],
        )
        .await;
    assert!(status == 201 || status == 200, "{status} {p}");
    p["data"]["id"].as_str().unwrap().to_string()
}

/// Runs a command to completion in the sandbox; (exit code, stdout).
async fn exec(d: &Daemon, key: &str, id: &str, argv: &[&str]) -> (i64, String) {
    let bearer = format!("Bearer {}", hashed_signing_key(key));
    let body = json!({ "command": argv, "timeout": "30000ms" })
        .to_string()
        .into_bytes();
    let (status, r) = d
        .call_with(
            "POST",
            &format!("/v2/sandboxes/{id}/exec"),
            Some(body),
            &[("authorization", &bearer)],
        )
        .await;
    assert_eq!(status, 200, "{argv:?}: {r}");
    (
        r["data"]["exitCode"].as_i64().unwrap(),
        common::b64(&r["data"]["stdout"]),
    )
}

/// A process's output so far (stdout and stderr).
async fn output(d: &Daemon, key: &str, id: &str, pid: &str) -> String {
    let bearer = format!("Bearer {}", hashed_signing_key(key));
    let (status, r) = d
        .call_with(
            "GET",
            &format!("/v2/sandboxes/{id}/processes/{pid}/output?tailBytes=0"),
            None,
            &[("authorization", &bearer)],
        )
        .await;
    assert_eq!(status, 200, "{r}");
    r["data"]["chunks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| common::b64(&c["data"]))
        .collect()
}

/// Sends raw bytes to sbxd and answers the status line's code (0 if none).
async fn raw(d: &Daemon, request: &str) -> u16 {
    let mut s = TcpStream::connect(("127.0.0.1", d.port)).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(20), s.read(&mut buf))
        .await
        .expect("an answer")
        .unwrap_or(0);
    let text = String::from_utf8_lossy(&buf[..n]);
    text.split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn preview_urls_reach_guest_servers_behind_their_gates() {
    let d = Daemon::start(&["--signing-key", LEGACY_KEY, "--e2b-domain", "sbx.test"]).await;
    let acme = d.create_key("acme", None);
    let other = d.create_key("other", None);
    let (open_id, open) = create(&d, &acme, json!({"templateID": "base"})).await;
    assert!(open["trafficAccessToken"].is_null(), "{open}");
    let restricted = json!({"templateID": "base", "network": {"allowPublicTraffic": false}});
    let (locked_id, locked) = create(&d, &acme, restricted.clone()).await;
    let token = locked["trafficAccessToken"].as_str().unwrap().to_string();
    assert_eq!(token.len(), 64, "{locked}");
    let (theirs_id, theirs) = create(&d, &other, restricted).await;
    let their_token = theirs["trafficAccessToken"].as_str().unwrap().to_string();
    assert_ne!(token, their_token);
    // The token is in connect and info answers too.
    let (_, info, _) = e2b_common::e2b(
        &d,
        Some(&acme),
        "POST",
        &format!("/v2/sandboxes/{locked_id}/connect"),
        Some(json!({"timeout": 300})),
    )
    .await;
    assert_eq!(info["trafficAccessToken"], token.as_str(), "{info}");

    // A file server in each sandbox (a logging one: its log shows every
    // request that reached it), and a WebSocket echo server.
    let serve = "mkdir -p /tmp/www && cd /tmp/www && echo hello-preview > hello.txt \
                 && head -c 8388608 /dev/urandom > big.bin && sha256sum big.bin > big.sha \
                 && exec python3 -m http.server 8000";
    let server_pid = start(&d, &acme, &open_id, &["sh", "-c", serve]).await;
    start(&d, &acme, &locked_id, &["sh", "-c", serve]).await;
    start(&d, &other, &theirs_id, &["sh", "-c", serve]).await;
    start(&d, &acme, &open_id, &["python3", "-c", WS_ECHO, "8765"]).await;
    wait_listening(&d, 8000, &open_id, None).await;
    wait_listening(&d, 8000, &locked_id, Some(&token)).await;

    // HTTP through the preview URL: a small file and an 8 MiB one, intact.
    let (status, body) = get(&d, 8000, &open_id, "/hello.txt", None).await;
    assert_eq!((status, body.as_slice()), (200, &b"hello-preview\n"[..]));
    let (status, big) = get(&d, 8000, &open_id, "/big.bin", None).await;
    assert_eq!((status, big.len()), (200, 8 << 20));
    let (_, sums) = exec(&d, &acme, &open_id, &["cat", "/tmp/www/big.sha"]).await;
    let digest = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(&big))
    };
    assert!(sums.starts_with(&digest), "{sums} vs {digest}");
    // The guest's own status (501 for a POST to http.server) comes back as is.
    let resp = d
        .http
        .post(d.url("/x"))
        .header("host", format!("8000-{open_id}.sbx.test"))
        .body("data")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 501);

    // Nothing listening: 502 that says so.
    let (status, body) = get(&d, 8001, &open_id, "/", None).await;
    assert_eq!(status, 502);
    assert!(String::from_utf8_lossy(&body).contains("nothing listens on port 8001"));

    // The traffic token: missing 401, wrong 403, another sandbox's
    // (another tenant's) 403, its own 200.
    assert_eq!(get(&d, 8000, &locked_id, "/hello.txt", None).await.0, 401);
    assert_eq!(
        get(&d, 8000, &locked_id, "/hello.txt", Some(&"0".repeat(64)))
            .await
            .0,
        403
    );
    assert_eq!(
        get(&d, 8000, &locked_id, "/hello.txt", Some(&their_token))
            .await
            .0,
        403
    );
    assert_eq!(
        get(&d, 8000, &theirs_id, "/hello.txt", Some(&token))
            .await
            .0,
        403
    );
    assert_eq!(
        get(&d, 8000, &locked_id, "/hello.txt", Some(&token))
            .await
            .0,
        200
    );
    assert_eq!(
        get(&d, 8000, &theirs_id, "/hello.txt", Some(&their_token))
            .await
            .0,
        200
    );

    // WebSocket: upgrade through sbxd, then frames both ways.
    let mut ws = ws_connect(&d, 8765, &open_id, None).await;
    ws.write_all(&ws_frame(1, b"hello over the agent channel"))
        .await
        .unwrap();
    assert_eq!(
        ws_read(&mut ws).await,
        (1, b"hello over the agent channel".to_vec())
    );
    let blob: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    ws.write_all(&ws_frame(2, &blob)).await.unwrap();
    assert_eq!(ws_read(&mut ws).await, (2, blob));
    ws.write_all(&ws_frame(8, &[3, 232])).await.unwrap();
    assert_eq!(ws_read(&mut ws).await.0, 8);
    drop(ws);

    // Host tricks: refused by sbxd, and nothing reaches the guest (its
    // request log never shows these paths).
    let host = format!("8000-{open_id}.sbx.test");
    for (what, request) in [
        (
            "absolute-form target for another host",
            format!("GET http://other.example/trick-1 HTTP/1.1\r\nHost: {host}\r\n\r\n"),
        ),
        (
            "absolute-form target naming the sandbox, Host another",
            format!("GET http://{host}/trick-2 HTTP/1.1\r\nHost: other.example\r\n\r\n"),
        ),
        (
            "two Host headers",
            format!("GET /trick-3 HTTP/1.1\r\nHost: {host}\r\nHost: {host}\r\n\r\n"),
        ),
        (
            "userinfo in Host",
            format!("GET /trick-4 HTTP/1.1\r\nHost: a@{host}\r\n\r\n"),
        ),
        (
            "port out of range",
            format!("GET /trick-5 HTTP/1.1\r\nHost: 65536-{open_id}.sbx.test\r\n\r\n"),
        ),
        (
            "port 0",
            format!("GET /trick-6 HTTP/1.1\r\nHost: 0-{open_id}.sbx.test\r\n\r\n"),
        ),
        (
            "a second dash",
            format!("GET /trick-7 HTTP/1.1\r\nHost: 8000-{open_id}-x.sbx.test\r\n\r\n"),
        ),
    ] {
        assert_eq!(raw(&d, &request).await, 400, "{what}");
    }
    // A last request that does reach it: the log is complete up to here.
    assert_eq!(get(&d, 8000, &open_id, "/after-tricks", None).await.0, 404);
    let log = output(&d, &acme, &open_id, &server_pid).await;
    assert!(log.contains("/after-tricks"), "{log}");
    assert!(!log.contains("trick-"), "a trick reached the guest: {log}");

    // A sandbox made through /v2 (never through E2B) has no preview URLs.
    let bearer = format!("Bearer {}", hashed_signing_key(&acme));
    let (status, v2) = d
        .call_with(
            "POST",
            "/v2/sandboxes",
            Some(
                json!({"name": "plain", "vcpu": 1, "memoryMb": 1024})
                    .to_string()
                    .into_bytes(),
            ),
            &[("authorization", &bearer)],
        )
        .await;
    assert!(status == 201 || status == 202, "{v2}");
    let v2_id = v2["data"]["id"].as_str().unwrap().to_string();
    assert_eq!(get(&d, 8000, &v2_id, "/", None).await.0, 404);
    // An unknown sandbox: 404.
    let unknown = "00000000-0000-0000-0000-000000000001";
    assert_eq!(get(&d, 8000, unknown, "/", None).await.0, 404);

    // From inside a sandbox, another sandbox's preview URL is out of reach:
    // sbxd's port on the host loopback is not an allowed destination.
    let probe = format!(
        "import urllib.request, sys\n\
         for url in ['http://127.0.0.1:{port}/hello.txt', 'http://8000-{locked_id}.sbx.test:{port}/hello.txt']:\n\
         \x20   try:\n\
         \x20       r = urllib.request.urlopen(urllib.request.Request(url, headers={{'Host': '8000-{locked_id}.sbx.test', 'e2b-traffic-access-token': '{token}'}}), timeout=10)\n\
         \x20       print('REACHED', url, r.status)\n\
         \x20   except Exception as e:\n\
         \x20       print('refused', url, type(e).__name__)\n",
        port = d.port
    );
    let (_, out) = exec(&d, &acme, &open_id, &["python3", "-c", &probe]).await;
    assert!(!out.contains("REACHED"), "{out}");
    assert_eq!(out.matches("refused").count(), 2, "{out}");

    // Paused: a clear 409, not a hang.
    let (status, _, _) = e2b_common::e2b(
        &d,
        Some(&acme),
        "POST",
        &format!("/sandboxes/{locked_id}/pause"),
        Some(json!({})),
    )
    .await;
    assert_eq!(status, 204);
    let (status, body) = get(&d, 8000, &locked_id, "/hello.txt", Some(&token)).await;
    assert_eq!(status, 409, "{}", String::from_utf8_lossy(&body));

    for (key, id) in [(&acme, &open_id), (&acme, &locked_id), (&other, &theirs_id)] {
        e2b_common::e2b(&d, Some(key), "DELETE", &format!("/sandboxes/{id}"), None).await;
    }
    d.call_with(
        "DELETE",
        &format!("/v2/sandboxes/{v2_id}"),
        None,
        &[("authorization", &bearer)],
    )
    .await;
}

/// A CA and a certificate for `localhost` and `*.sbx.test` signed by it, as
/// PEM files in `dir`: (CA path, cert path, key path, CA PEM).
#[tokio::test]
#[ignore = "needs root, runsc, the image and tests/e2b's SDKs; run ./scripts/test"]
async fn e2b_sdks_get_host_over_https_with_websockets_and_tokens() {
    let tls = e2b_common::TlsDaemon::start().await;
    let (d, ca_path) = (&tls.d, tls.ca_path.as_str());
    let tenant = d.create_key("acme", None);
    let dir = e2b_common::e2b_js_dir();
    let ws_echo = dir.join("ws_echo.py").to_string_lossy().into_owned();
    let (ok, out) = common::run_node_script(
        &dir,
        "preview.mjs",
        &[
            ("SBX_URL", &d.base),
            ("SBX_KEY", &tenant),
            ("SBX_CA", ca_path),
            ("NODE_EXTRA_CA_CERTS", ca_path),
            ("SBX_WS_ECHO", &ws_echo),
        ],
    );
    assert!(
        ok && out.contains("all steps passed"),
        "preview.mjs:\n{out}"
    );
    // The Python SDK's get_host, the same way (tests/e2b/python/.venv).
    let (ok, out) = common::run_python_script(
        &dir.join("python"),
        "preview.py",
        &[
            ("SBX_URL", &d.base),
            ("SBX_KEY", &tenant),
            ("SBX_CA", ca_path),
            ("SSL_CERT_FILE", ca_path),
        ],
    );
    assert!(ok && out.contains("all steps passed"), "preview.py:\n{out}");
    d.assert_no_containers(Duration::from_secs(60), "the script kills what it made")
        .await;
}

/// A `/v1` call with a tenant's key: (status, the whole answer).
async fn v1(d: &Daemon, key: &str, method: &str, path: &str, body: Option<&str>) -> (u16, Value) {
    let bearer = format!("Bearer {}", hashed_signing_key(key));
    d.call_with(
        method,
        path,
        body.map(|b| b.as_bytes().to_vec()),
        &[("authorization", &bearer)],
    )
    .await
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn v1_sandboxes_have_preview_urls_once_their_owner_turns_them_on() {
    let d = Daemon::start(&["--signing-key", LEGACY_KEY, "--e2b-domain", "sbx.test"]).await;
    let acme = d.create_key("acme", None);
    let other = d.create_key("other", None);

    // Made through /v1 without preview: off, and its preview URL is 404.
    let (status, made) = v1(
        &d,
        &acme,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name": "plain", "vcpu": 1, "memoryMb": 1024}"#),
    )
    .await;
    assert!(status == 201 || status == 202, "{made}");
    let id = made["data"]["id"].as_str().unwrap().to_string();
    let preview = format!("/v1/sandboxes/{id}/preview");
    let (status, off) = v1(&d, &acme, "GET", &preview, None).await;
    assert_eq!(status, 200, "{off}");
    assert_eq!(off["data"]["enabled"], false, "{off}");
    assert_eq!(off["data"]["domain"], "sbx.test", "{off}");
    start(
        &d,
        &acme,
        &id,
        &["python3", "-m", "http.server", "8000", "-d", "/etc"],
    )
    .await;
    let (status, body) = get(&d, 8000, &id, "/hostname", None).await;
    assert_eq!(status, 404, "{}", String::from_utf8_lossy(&body));

    // On, behind a token: the answer has it and the host of a port.
    let (status, on) = v1(&d, &acme, "PUT", &preview, Some(r#"{"public": false}"#)).await;
    assert_eq!(status, 200, "{on}");
    let token = on["data"]["token"].as_str().unwrap().to_string();
    assert_eq!(token.len(), 64, "{on}");
    assert_eq!(on["data"]["tokenHeader"], "e2b-traffic-access-token");
    let (_, shown) = v1(&d, &acme, "GET", &format!("{preview}?port=8000"), None).await;
    assert_eq!(
        shown["data"]["host"],
        format!("8000-{id}.sbx.test"),
        "{shown}"
    );
    assert_eq!(
        shown["data"]["token"],
        token.as_str(),
        "asked again: the same token"
    );
    wait_listening(&d, 8000, &id, Some(&token)).await;
    assert_eq!(get(&d, 8000, &id, "/hostname", Some(&token)).await.0, 200);
    assert_eq!(get(&d, 8000, &id, "/hostname", None).await.0, 401);
    assert_eq!(
        get(&d, 8000, &id, "/hostname", Some(&"0".repeat(64)))
            .await
            .0,
        403
    );
    // Asked again with the same setting: the token stays.
    let (_, again) = v1(&d, &acme, "PUT", &preview, Some(r#"{"public": false}"#)).await;
    assert_eq!(again["data"]["token"], token.as_str());

    // Public: no token needed (and none shown).
    let (status, public) = v1(&d, &acme, "PUT", &preview, Some(r#"{"public": true}"#)).await;
    assert_eq!(status, 200, "{public}");
    assert!(public["data"]["token"].is_null(), "{public}");
    assert_eq!(get(&d, 8000, &id, "/hostname", None).await.0, 200);

    // Another tenant cannot see, set or clear it.
    for (method, body) in [("GET", None), ("PUT", Some("{}")), ("DELETE", None)] {
        let (status, e) = v1(&d, &other, method, &preview, body).await;
        assert_eq!(status, 404, "{method}: {e}");
        assert_eq!(e["errors"][0]["code"], "sandbox_not_found", "{e}");
    }
    // Bad input is refused with a clear code and changes nothing.
    for (method, path, body) in [
        ("PUT", preview.clone(), Some(r#"{"public": "yes"}"#)),
        (
            "PUT",
            preview.clone(),
            Some(r#"{"public": true, "port": 1}"#),
        ),
        ("PUT", preview.clone(), Some("not json")),
        ("GET", format!("{preview}?port=0"), None),
        ("GET", format!("{preview}?port=65536"), None),
        ("GET", format!("{preview}?port=x"), None),
        ("GET", format!("{preview}?other=1"), None),
    ] {
        let (status, e) = v1(&d, &acme, method, &path, body).await;
        assert_eq!(status, 400, "{method} {path} {body:?}: {e}");
    }
    assert_eq!(get(&d, 8000, &id, "/hostname", None).await.0, 200);

    // Off again: 404.
    let (status, gone) = v1(&d, &acme, "DELETE", &preview, None).await;
    assert_eq!(
        (status, &gone["data"]["enabled"]),
        (200, &json!(false)),
        "{gone}"
    );
    assert_eq!(get(&d, 8000, &id, "/hostname", None).await.0, 404);

    // On from the create: the first request needs nothing more.
    let body =
        r#"{"name": "born-public", "vcpu": 1, "memoryMb": 1024, "preview": {"public": true}}"#;
    let (status, made) = v1(&d, &acme, "POST", "/v1/sandboxes", Some(body)).await;
    assert!(status == 201 || status == 202, "{made}");
    let born = made["data"]["id"].as_str().unwrap().to_string();
    start(
        &d,
        &acme,
        &born,
        &["python3", "-m", "http.server", "8000", "-d", "/etc"],
    )
    .await;
    wait_listening(&d, 8000, &born, None).await;
    assert_eq!(get(&d, 8000, &born, "/hostname", None).await.0, 200);

    // An E2B sandbox's preview URLs are E2B's: /v1 may restrict them, not remove them.
    let (e2b_id, _) = create(&d, &acme, json!({"templateID": "base"})).await;
    let e2b_preview = format!("/v1/sandboxes/{e2b_id}/preview");
    let (status, shown) = v1(&d, &acme, "GET", &e2b_preview, None).await;
    assert_eq!(
        (status, &shown["data"]["public"]),
        (200, &json!(true)),
        "{shown}"
    );
    let (status, e) = v1(&d, &acme, "DELETE", &e2b_preview, None).await;
    assert_eq!(status, 409, "{e}");
    let (_, locked) = v1(&d, &acme, "PUT", &e2b_preview, Some(r#"{"public": false}"#)).await;
    let e2b_token = locked["data"]["token"].as_str().unwrap().to_string();
    // The E2B SDK's connect hands out the same token.
    let (_, info, _) = e2b_common::e2b(
        &d,
        Some(&acme),
        "POST",
        &format!("/v2/sandboxes/{e2b_id}/connect"),
        Some(json!({"timeout": 300})),
    )
    .await;
    assert_eq!(info["trafficAccessToken"], e2b_token.as_str(), "{info}");

    for s in [&id, &born, &e2b_id] {
        let (status, _) = v1(&d, &acme, "DELETE", &format!("/v2/sandboxes/{s}"), None).await;
        assert!(status == 202 || status == 204, "{status}");
    }
    d.assert_no_containers(Duration::from_secs(60), "all destroyed")
        .await;
}
