//! envd's doors, tried as an attacker would (real sbxd, runsc and agent):
//! no token, another sandbox's token, another tenant's sandbox, a forged or
//! expired signature, an unknown user, a sandbox made through `/v1`, and
//! malformed Connect frames. Each refusal must leave the sandbox untouched.

mod common;
mod e2b_common;

use base64::Engine;
use common::Daemon;
use e2b_common::LEGACY_KEY;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// A sandbox made through E2B: its id and envd access token.
async fn sandbox(d: &Daemon, key: &str) -> (String, String) {
    let (status, body, _) = e2b_common::e2b(
        d,
        Some(key),
        "POST",
        "/v2/sandboxes",
        Some(json!({"templateID": "base"})),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    (
        body["sandboxID"].as_str().unwrap().to_string(),
        body["envdAccessToken"].as_str().unwrap().to_string(),
    )
}

/// A unary envd RPC; answers the status and JSON body.
async fn rpc(d: &Daemon, id: &str, token: Option<&str>, method: &str, msg: Value) -> (u16, Value) {
    let mut req = d
        .http
        .post(d.url(&format!("/{method}")))
        .header("content-type", "application/json")
        .header("connect-protocol-version", "1")
        .header("e2b-sandbox-id", id)
        .header("e2b-sandbox-port", "49983")
        .body(msg.to_string());
    if let Some(t) = token {
        req = req.header("x-access-token", t);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let body = resp.json::<Value>().await.unwrap_or(Value::Null);
    (status, body)
}

fn sign(path: &str, op: &str, user: &str, token: &str, exp: Option<i64>) -> String {
    let mut text = format!("{path}:{op}:{user}:{token}");
    if let Some(e) = exp {
        text.push_str(&format!(":{e}"));
    }
    let b64 = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(text.as_bytes()));
    format!("v1_{}", b64.trim_end_matches('='))
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn envd_refuses_every_caller_without_the_sandboxs_token() {
    let d = Daemon::start(&["--signing-key", LEGACY_KEY]).await;
    let acme = d.create_key("acme", None);
    let other = d.create_key("other", None);
    let (id, token) = sandbox(&d, &acme).await;
    let (their_id, their_token) = sandbox(&d, &other).await;
    let list = |v: &Value| v["processes"].as_array().map(Vec::len);

    // The owner's token works.
    let (status, body) = rpc(&d, &id, Some(&token), "process.Process/List", json!({})).await;
    assert_eq!((status, list(&body).is_some()), (200, true), "{body}");

    // No token, an empty one, a wrong one, another tenant's sandbox token.
    for (t, what) in [
        (None, "no token"),
        (Some(""), "empty token"),
        (Some("0".repeat(64).as_str()), "wrong token"),
        (Some(their_token.as_str()), "another tenant's token"),
    ] {
        let (status, body) = rpc(&d, &id, t, "process.Process/List", json!({})).await;
        assert_eq!(status, 401, "{what}: {body}");
        assert_eq!(body["code"], "unauthenticated", "{what}: {body}");
    }
    // A start without the token runs nothing: the stream answers 200 with an
    // end-stream error (Connect), and no process appears.
    let start = json!({"process": {"cmd": "/bin/sh", "args": ["-c", "touch /tmp/pwned"]}});
    let payload = start.to_string();
    let mut frame = vec![0u8];
    frame.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    frame.extend_from_slice(payload.as_bytes());
    let resp = d
        .http
        .post(d.url("/process.Process/Start"))
        .header("content-type", "application/connect+json")
        .header("e2b-sandbox-id", &id)
        .header("x-access-token", &their_token)
        .body(frame)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let bytes = resp.bytes().await.unwrap();
    assert_eq!(bytes[0], 0x02, "only an end-stream envelope: {bytes:?}");
    let end: Value = serde_json::from_slice(&bytes[5..]).unwrap();
    assert_eq!(end["error"]["code"], "unauthenticated", "{end}");
    let (_, stat) = rpc(
        &d,
        &id,
        Some(&token),
        "filesystem.Filesystem/Stat",
        json!({"path": "/tmp/pwned"}),
    )
    .await;
    assert_eq!(stat["code"], "not_found", "nothing ran: {stat}");

    // The other tenant's own sandbox still answers its own token only.
    let (status, _) = rpc(
        &d,
        &their_id,
        Some(&token),
        "process.Process/List",
        json!({}),
    )
    .await;
    assert_eq!(status, 401);

    // Unknown and malformed sandbox ids: "not running" (503 unavailable on
    // RPCs; 502 "was not found" on /health and /files).
    for bad in [
        "00000000-0000-0000-0000-000000000001",
        "../../etc",
        "",
        "x y",
    ] {
        let (status, body) = rpc(&d, bad, Some(&token), "process.Process/List", json!({})).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (503, Some("unavailable")),
            "{bad:?}: {body}"
        );
        let health = d
            .http
            .get(d.url("/health"))
            .header("e2b-sandbox-id", bad)
            .send()
            .await
            .unwrap();
        assert_eq!(health.status().as_u16(), 502, "{bad:?}");
    }
    let health = d
        .http
        .get(d.url("/health"))
        .header("e2b-sandbox-id", &id)
        .send()
        .await
        .unwrap();
    assert_eq!(health.status().as_u16(), 204);

    // An unknown user and a malformed Authorization header are unauthenticated.
    for auth in ["Basic bm9ib2R5LWhlcmU6", "Basic Li4vcm9vdDo=", "Bearer x"] {
        let resp = d
            .http
            .post(d.url("/filesystem.Filesystem/Stat"))
            .header("content-type", "application/json")
            .header("e2b-sandbox-id", &id)
            .header("x-access-token", &token)
            .header("authorization", auth)
            .body(json!({"path": "/"}).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 401, "{auth}");
    }

    // Signed file URLs: right signature reads; a forged, expired, or
    // other-op signature is 401, also with the sandbox id in the header.
    let (status, _) = rpc(
        &d,
        &id,
        Some(&token),
        "filesystem.Filesystem/MakeDir",
        json!({"path": "/home/user/d"}),
    )
    .await;
    assert_eq!(status, 200);
    let write = d
        .http
        .post(d.url("/files?path=%2Fhome%2Fuser%2Fs.txt"))
        .header("e2b-sandbox-id", &id)
        .header("x-access-token", &token)
        .header("content-type", "application/octet-stream")
        .body("secret")
        .send()
        .await
        .unwrap();
    assert_eq!(write.status().as_u16(), 200);
    let path = "/home/user/s.txt";
    let get = |sig: String, exp: Option<i64>| {
        let mut url = format!(
            "/files?path=%2Fhome%2Fuser%2Fs.txt&signature={}",
            urlencode(&sig)
        );
        if let Some(e) = exp {
            url.push_str(&format!("&signature_expiration={e}"));
        }
        d.http.get(d.url(&url)).send()
    };
    let ok = get(sign(path, "read", "", &token, None), None)
        .await
        .unwrap();
    assert_eq!(ok.status().as_u16(), 200);
    assert_eq!(ok.text().await.unwrap(), "secret");
    let future = chrono::Utc::now().timestamp() + 60;
    let ok = get(sign(path, "read", "", &token, Some(future)), Some(future))
        .await
        .unwrap();
    assert_eq!(ok.status().as_u16(), 200);
    // A URL signed with another sandbox's token is a URL for that sandbox
    // (no header names one): it reads there, never here.
    let theirs = get(sign(path, "read", "", &their_token, None), None)
        .await
        .unwrap();
    assert_eq!(
        theirs.status().as_u16(),
        404,
        "the file is not in their sandbox"
    );
    for (sig, exp, what) in [
        (
            sign(path, "write", "", &token, None),
            None,
            "a write signature",
        ),
        (
            sign("/etc/shadow", "read", "", &token, None),
            None,
            "another path",
        ),
        (sign(path, "read", "", &token, Some(1)), Some(1), "expired"),
        (
            sign(path, "read", "", &token, Some(future)),
            Some(future + 1),
            "changed expiry",
        ),
        ("v1_AAAA".to_string(), None, "forged"),
    ] {
        let resp = get(sig, exp).await.unwrap();
        assert_eq!(resp.status().as_u16(), 401, "{what}");
    }

    // A sandbox made through /v1 has no token: its envd refuses everyone.
    let bearer = format!(
        "Bearer {}",
        sbx_api_types::signing_key::hashed_signing_key(&acme)
    );
    let body = json!({"name": "plain", "vcpu": 1, "memoryMb": 1024}).to_string();
    let (status, v1) = d
        .call_with(
            "POST",
            "/v1/sandboxes",
            Some(body.into_bytes()),
            &[("authorization", &bearer)],
        )
        .await;
    assert_eq!(status, 201, "{v1}");
    let v1_id = v1["data"]["id"].as_str().unwrap().to_string();
    let (status, _) = rpc(&d, &v1_id, Some(&token), "process.Process/List", json!({})).await;
    assert_eq!(status, 503, "a sandbox without an E2B record is not envd's");

    // Malformed Connect input: a bad JSON body, an unknown method.
    let (status, body) = rpc(&d, &id, Some(&token), "process.Process/Nope", json!({})).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (501, Some("unimplemented"))
    );
    let resp = d
        .http
        .post(d.url("/process.Process/SendSignal"))
        .header("content-type", "application/json")
        .header("e2b-sandbox-id", &id)
        .header("x-access-token", &token)
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);

    // File metadata (X-Metadata-*): a bad value or an over-budget map is
    // 400 and leaves the file as it was; a large upload (the direct path,
    // past 2 MiB) keeps its metadata too.
    let upload = |headers: Vec<(&'static str, Vec<u8>)>, body: Vec<u8>| {
        let mut req = d
            .http
            .post(d.url("/files?path=%2Fhome%2Fuser%2Fm.bin"))
            .header("e2b-sandbox-id", &id)
            .header("x-access-token", &token)
            .header("content-type", "application/octet-stream");
        for (name, value) in headers {
            req = req.header(
                name,
                reqwest::header::HeaderValue::from_bytes(&value).unwrap(),
            );
        }
        req.body(body).send()
    };
    let ok = upload(vec![("x-metadata-tag", b"one".to_vec())], b"first".to_vec())
        .await
        .unwrap();
    assert_eq!(ok.status().as_u16(), 200);
    for (what, headers) in [
        (
            "a non-ASCII value",
            vec![("x-metadata-tag", "caf\u{e9}".as_bytes().to_vec())],
        ),
        (
            "an over-budget value",
            vec![("x-metadata-tag", vec![b'v'; 4100])],
        ),
    ] {
        let resp = upload(headers, b"second".to_vec()).await.unwrap();
        assert_eq!(resp.status().as_u16(), 400, "{what}");
    }
    let stat_m = json!({"path": "/home/user/m.bin"});
    let (status, body) = rpc(
        &d,
        &id,
        Some(&token),
        "filesystem.Filesystem/Stat",
        stat_m.clone(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["entry"]["size"],
        json!(5),
        "refused uploads left the file: {body}"
    );
    assert_eq!(body["entry"]["metadata"], json!({"tag": "one"}), "{body}");
    let big = vec![7u8; 3 * 1024 * 1024];
    let resp = upload(vec![("x-metadata-Big", b"yes".to_vec())], big)
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let answer: Value = resp.json().await.unwrap();
    assert_eq!(answer[0]["metadata"], json!({"big": "yes"}), "{answer}");
    let (_, body) = rpc(&d, &id, Some(&token), "filesystem.Filesystem/Stat", stat_m).await;
    assert_eq!(body["entry"]["size"], json!(3 * 1024 * 1024), "{body}");
    assert_eq!(body["entry"]["metadata"], json!({"big": "yes"}), "{body}");
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn host_routing_reaches_envd_and_refuses_host_tricks() {
    let d = Daemon::start(&["--signing-key", LEGACY_KEY, "--e2b-domain", "sbx.test"]).await;
    let acme = d.create_key("acme", None);
    let (id, token) = sandbox(&d, &acme).await;
    let (_, info, _) =
        e2b_common::e2b(&d, Some(&acme), "GET", &format!("/sandboxes/{id}"), None).await;
    assert_eq!(
        info["domain"], "sbx.test",
        "the SDKs are told the domain: {info}"
    );
    let host_get = |host: String, path: &'static str| {
        d.http
            .get(d.url(path))
            .header("host", host)
            .header("x-access-token", token.clone())
            .send()
    };
    // envd by Host alone (no E2b-Sandbox-Id), with or without a port.
    for host in [
        format!("49983-{id}.sbx.test"),
        format!("49983-{id}.SBX.test:443"),
    ] {
        let resp = host_get(host.clone(), "/health").await.unwrap();
        assert_eq!(resp.status().as_u16(), 204, "{host}");
    }
    let resp = d
        .http
        .post(d.url("/process.Process/List"))
        .header("host", format!("49983-{}.sbx.test", id.replace('-', "")))
        .header("content-type", "application/json")
        .header("x-access-token", &token)
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(
        resp.status().as_u16(),
        200,
        "the id without dashes names it too"
    );
    // The API itself still answers on other hosts and on the bare domain.
    let (status, _, _) = e2b_common::e2b(&d, Some(&acme), "GET", "/v2/sandboxes", None).await;
    assert_eq!(status, 200);
    // Tricks: a second dash, userinfo, bad ports, not-an-id, another label.
    for host in [
        format!("49983-{id}-1.sbx.test"),
        format!("a@49983-{id}.sbx.test"),
        format!("0-{id}.sbx.test"),
        format!("65536-{id}.sbx.test"),
        format!("049983-{id}.sbx.test"),
        format!("x.49983-{id}.sbx.test"),
        "49983-../../etc.sbx.test".to_string(),
    ] {
        let resp = host_get(host.clone(), "/health").await.unwrap();
        assert_eq!(resp.status().as_u16(), 400, "{host}");
    }
    // A preview port with nothing listening: 502, saying so (e2b_preview.rs
    // covers ports that are listening).
    let resp = host_get(format!("8000-{id}.sbx.test"), "/").await.unwrap();
    assert_eq!(resp.status().as_u16(), 502);
    let text = resp.text().await.unwrap();
    assert!(text.contains("nothing listens on port 8000"), "{text}");
    // A header naming another sandbox than the Host: refused, not obeyed.
    let (other_id, _) = sandbox(&d, &acme).await;
    let resp = d
        .http
        .get(d.url("/health"))
        .header("host", format!("49983-{id}.sbx.test"))
        .header("e2b-sandbox-id", &other_id)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    // An unknown sandbox under the domain: 502 "was not found".
    let resp = host_get(
        "49983-00000000-0000-0000-0000-000000000001.sbx.test".to_string(),
        "/health",
    )
    .await
    .unwrap();
    assert_eq!(resp.status().as_u16(), 502);
}

/// A CA and a certificate for `localhost` and `*.sbx.test` signed by it,
/// written as PEM files into `dir`; answers (CA PEM, cert path, key path).
#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn sbxd_terminates_tls_for_the_api_and_sandbox_hosts() {
    let tls = e2b_common::TlsDaemon::start().await;
    let d = &tls.d;
    let ca = reqwest::Certificate::from_pem(tls.ca_pem.as_bytes()).unwrap();
    let acme = d.create_key("acme", None);
    // The control plane over https://localhost.
    let (id, token) = sandbox(d, &acme).await;
    // envd at https://49983-{id}.sbx.test, as the SDK builds it without
    // E2B_SANDBOX_URL (name resolved to this machine by the client).
    let port: u16 = d.base.rsplit(':').next().unwrap().parse().unwrap();
    let host = format!("49983-{id}.sbx.test");
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let envd = reqwest::Client::builder()
        .add_root_certificate(ca)
        .resolve(&host, addr)
        .build()
        .unwrap();
    let health = envd
        .get(format!("https://{host}:{port}/health"))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status().as_u16(), 204);
    let list = envd
        .post(format!("https://{host}:{port}/process.Process/List"))
        .header("content-type", "application/json")
        .header("x-access-token", &token)
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(list.status().as_u16(), 200);
    // Plain HTTP on the TLS port gets nothing served.
    let plain = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{port}/healthz"))
        .send()
        .await;
    assert!(
        plain.map(|r| !r.status().is_success()).unwrap_or(true),
        "plain HTTP must not be served on the TLS listener"
    );
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn a_request_claiming_to_come_from_a_node_needs_the_cluster_token() {
    // A single node has no cluster token: no claim can be proven.
    let d = Daemon::start(&["--signing-key", LEGACY_KEY]).await;
    let acme = d.create_key("acme", None);
    let (id, token) = sandbox(&d, &acme).await;
    for forged in [
        vec![("x-sbx-forwarded-by", "node-b")],
        vec![
            ("x-sbx-forwarded-by", "node-b"),
            (
                "x-sbx-cluster-token",
                "0123456789abcdef0123456789abcdef-guess",
            ),
        ],
    ] {
        // The E2B control plane, with a valid API key.
        let mut req = d
            .http
            .get(d.url(&format!("/sandboxes/{id}")))
            .header("x-api-key", &acme);
        for (k, v) in &forged {
            req = req.header(*k, *v);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 401, "E2B with {forged:?}");
        let text = resp.text().await.unwrap();
        assert!(
            text.contains("cluster token"),
            "E2B with {forged:?}: {text}"
        );
        // envd, with the sandbox's valid access token.
        let mut req = d
            .http
            .post(d.url("/process.Process/List"))
            .header("content-type", "application/json")
            .header("connect-protocol-version", "1")
            .header("e2b-sandbox-id", &id)
            .header("x-access-token", &token)
            .body("{}");
        for (k, v) in &forged {
            req = req.header(*k, *v);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 401, "envd with {forged:?}");
        let text = resp.text().await.unwrap();
        assert!(
            text.contains("cluster token"),
            "envd with {forged:?}: {text}"
        );
    }
    // The same requests without the claim are answered.
    let (status, body, _) =
        e2b_common::e2b(&d, Some(&acme), "GET", &format!("/sandboxes/{id}"), None).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = rpc(&d, &id, Some(&token), "process.Process/List", json!({})).await;
    assert_eq!(status, 200, "{body}");
}
