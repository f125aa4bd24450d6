//! Webhook connections on real gVisor, through the real SDK runner: deliveries to a
//! connection's URL become records (exactly once, also across a kill -9 right after the
//! `202`), signatures are checked before anything is stored, a throwing handler commits
//! nothing and leaves no message text, and the body, rate and token checks answer as
//! documented (docs/connect/webhooks.md).
//!
//! Needs what `--test connect` needs (root, runsc, the image, the npm registry); the
//! package is `examples/connector-webhooks`. Runs on PostgreSQL too (`SBX_TEST_STORE=postgres`).

mod common;
mod connect_host;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use common::Daemon;
use connect_host::flow::{install, records};
use connect_host::ApiHost;
use sbx_connect::signature::{hmac_sha256, standard_key};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// `sbx --url D ARGS...` (the CLI built next to sbxd); its stdout.
fn sbx(d: &Daemon, args: &[&str]) -> String {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_sbxd")).with_file_name("sbx");
    assert!(
        bin.exists(),
        "{} missing: cargo build -p sbx-cli",
        bin.display()
    );
    let out = Command::new(bin)
        .arg("--url")
        .arg(&d.base)
        .args(args)
        .output()
        .expect("run sbx");
    assert!(
        out.status.success(),
        "sbx {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A delivery as a sender makes it: `(status, body, Retry-After)`.
async fn post(
    d: &Daemon,
    path: &str,
    body: &[u8],
    headers: &[(&str, String)],
) -> (u16, Value, Option<String>) {
    let mut req = d
        .http
        .post(d.url(path))
        .header("content-type", "application/json")
        .body(body.to_vec());
    for (k, v) in headers {
        req = req.header(*k, v);
    }
    let resp = req.send().await.expect("delivery");
    let status = resp.status().as_u16();
    let retry = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap_or("").to_string());
    let bytes = resp.bytes().await.expect("body");
    let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, value, retry)
}

/// Standard Webhooks headers for `body` signed with `secret` at `ts`.
fn signed(secret: &str, id: &str, ts: i64, body: &[u8]) -> Vec<(&'static str, String)> {
    let key = standard_key(secret).expect("a whsec_ secret");
    let ts = ts.to_string();
    let mac = hmac_sha256(&key, &[id.as_bytes(), b".", ts.as_bytes(), b".", body]);
    vec![
        ("webhook-id", id.to_string()),
        ("webhook-timestamp", ts),
        ("webhook-signature", format!("v1,{}", STANDARD.encode(mac))),
    ]
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// Deliveries of a connection (newest first).
async fn deliveries(d: &Daemon, conn: &str) -> Vec<Value> {
    let (status, body) = d
        .call(
            "GET",
            &format!("/v1/connect/connections/{conn}/deliveries?limit=1000"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    body["data"].as_array().expect("items").clone()
}

/// Waits until a delivery is no longer pending; returns it.
async fn settled(d: &Daemon, conn: &str, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let (status, b) = d
            .call(
                "GET",
                &format!("/v1/connect/connections/{conn}/deliveries/{id}"),
                None,
            )
            .await;
        assert_eq!(status, 200, "{b}");
        if b["data"]["status"] != "pending" {
            return b["data"].clone();
        }
        assert!(
            Instant::now() < deadline,
            "delivery {id} stayed pending: {b}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The records of a webhook with a query string: (status, body text).
async fn records_where(d: &Daemon, conn: &str, name: &str, query: &str) -> (u16, String) {
    let resp = d
        .http
        .get(d.url(&format!(
            "/v1/connect/connections/{conn}/syncs/{name}/records?{query}"
        )))
        .send()
        .await
        .expect("records");
    let status = resp.status().as_u16();
    (status, resp.text().await.expect("body"))
}

/// Sets up webhooks; returns the URL paths by webhook name and the secret.
async fn setup(
    d: &Daemon,
    conn: &str,
    body: Value,
) -> (BTreeMap<String, Option<String>>, Option<String>) {
    let (status, b) = d
        .call(
            "POST",
            &format!("/v1/connect/connections/{conn}/webhooks"),
            Some(body),
        )
        .await;
    assert_eq!(status, 200, "setup: {b}");
    let paths = b["data"]["webhooks"]
        .as_array()
        .expect("webhooks")
        .iter()
        .map(|w| {
            (
                w["name"].as_str().unwrap().to_string(),
                w["path"].as_str().map(str::to_string),
            )
        })
        .collect();
    (paths, b["data"]["secret"].as_str().map(str::to_string))
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn webhook_deliveries_become_records_exactly_once() {
    let api = ApiHost::start();
    let args = api.daemon_args();
    let args: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    let mut d = Daemon::start(&args).await;
    let conn = install(&d, &api, "connector-webhooks", "hooks", json!({})).await;

    let (paths, secret) = setup(&d, &conn, json!({})).await;
    let secret = secret.expect("a standard secret");
    assert!(secret.starts_with("whsec_"), "{secret}");
    let events = paths["events"].clone().expect("events URL");
    let raw = paths["raw"].clone().expect("raw URL");
    let broken = paths["broken"].clone().expect("broken URL");
    assert!(
        events.len() > "/v1/connect/webhooks/whk_".len() + 40,
        "{events}"
    );

    // A signed delivery is stored (202) and becomes records.
    let body = br#"{"events":[{"id":1,"n":"a"},{"id":2,"n":"b"}]}"#;
    let (status, b, _) = post(&d, &events, body, &signed(&secret, "evt-1", now(), body)).await;
    assert_eq!(status, 202, "{b}");
    let first = b["data"]["id"].as_str().expect("delivery id").to_string();
    assert_eq!(b["data"]["deliveryId"], "evt-1");

    // Refused before anything is stored: no signature, another body's signature, a stale
    // timestamp, a signature with another secret.
    let other = br#"{"events":[{"id":666}]}"#;
    let mut wrong_key = signed(
        "whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
        "evt-x",
        now(),
        other,
    );
    wrong_key.push(("x-extra", "1".into()));
    for (what, headers) in [
        ("missing", Vec::new()),
        ("other body", signed(&secret, "evt-x", now(), body)),
        ("stale", signed(&secret, "evt-x", now() - 600, other)),
        ("other secret", wrong_key),
    ] {
        let (status, b, _) = post(&d, &events, other, &headers).await;
        assert_eq!(status, 401, "{what}: {b}");
        assert_eq!(
            b["errors"][0]["code"], "connect_webhook_signature_invalid",
            "{what}"
        );
    }

    // A replay of evt-1 is answered and dropped.
    let (status, b, _) = post(&d, &events, body, &signed(&secret, "evt-1", now(), body)).await;
    assert!(status == 200 || status == 202, "{b}");
    assert_eq!(b["data"]["duplicate"], true, "{b}");
    assert_eq!(b["data"]["id"], first.as_str());

    let done = settled(&d, &conn, &first).await;
    assert_eq!(done["status"], "committed", "{done}");
    assert_eq!(done["recordsCommitted"], 2, "{done}");
    let recs = records(&d, &conn, "events").await;
    assert_eq!(recs.len(), 2, "{recs:?}");
    assert!(recs.iter().all(|r| r["deliveryId"] == "evt-1"), "{recs:?}");
    // The records filter by primary key (`events` merges on id): one record, or none; the
    // append webhook `raw` has no key to filter on.
    let (status, text) = records_where(&d, &conn, "events", "key=2").await;
    assert_eq!(status, 200, "{text}");
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("line"))
        .collect();
    assert_eq!(lines.len(), 1, "{text}");
    assert_eq!(
        (lines[0]["id"].clone(), lines[0]["n"].clone()),
        (json!(2), json!("b"))
    );
    assert_eq!(
        records_where(&d, &conn, "events", "key=3").await,
        (200, String::new())
    );
    let (status, text) = records_where(&d, &conn, "raw", "key=evt-1").await;
    assert_eq!(status, 400, "{text}");
    assert!(
        text.contains("invalid_request") && text.contains("no primary key"),
        "{text}"
    );
    // The replay after the commit is dropped too: still one delivery of evt-1, two records.
    let (status, b, _) = post(&d, &events, body, &signed(&secret, "evt-1", now(), body)).await;
    assert_eq!(
        (status, b["data"]["duplicate"].clone()),
        (200, json!(true)),
        "{b}"
    );
    let list = deliveries(&d, &conn).await;
    assert_eq!(list.len(), 1, "401s and replays stored nothing: {list:?}");

    // An unknown token: 404, nothing stored.
    let (status, b, _) = post(
        &d,
        "/v1/connect/webhooks/whk_nope",
        body,
        &signed(&secret, "evt-9", now(), body),
    )
    .await;
    assert_eq!(status, 404, "{b}");
    assert_eq!(b["errors"][0]["code"], "connect_webhook_not_found");
    assert_eq!(deliveries(&d, &conn).await.len(), 1);

    // A handler that throws: failed, package_error, nothing committed, no message text anywhere.
    let (status, b, _) = post(&d, &broken, b"{}", &signed(&secret, "evt-b", now(), b"{}")).await;
    assert_eq!(status, 202, "{b}");
    let failed = settled(&d, &conn, b["data"]["id"].as_str().unwrap()).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    assert_eq!(failed["failureCategory"], "package_error", "{failed}");
    assert_eq!(failed["failureKind"], "threw", "{failed}");
    assert_eq!(failed["recordsCommitted"], 0);
    assert!(records(&d, &conn, "broken").await.is_empty());
    let run = failed["runId"].as_str().expect("run of the delivery");
    let (_, logs) = d
        .call("GET", &format!("/v1/connect/runs/{run}/logs"), None)
        .await;
    let (_, run_body) = d
        .call("GET", &format!("/v1/connect/runs/{run}"), None)
        .await;
    for text in [failed.to_string(), logs.to_string(), run_body.to_string()] {
        assert!(
            !text.contains("SECRET-MESSAGE"),
            "message text leaked: {text}"
        );
    }

    // sbxd killed with -9 right after a 202: the delivery is processed after the restart,
    // exactly once.
    let raw_body = br#"{"hello":"crash"}"#;
    let (status, b, _) = post(
        &d,
        &raw,
        raw_body,
        &signed(&secret, "evt-crash", now(), raw_body),
    )
    .await;
    assert_eq!(status, 202, "{b}");
    d.kill9();
    let crash = b["data"]["id"].as_str().unwrap().to_string();
    d.spawn().await;
    let done = settled(&d, &conn, &crash).await;
    assert_eq!(done["status"], "committed", "{done}");
    let raws = records(&d, &conn, "raw").await;
    assert_eq!(raws.len(), 1, "processed exactly once: {raws:?}");
    assert_eq!(raws[0]["id"], "evt-crash");
    assert_eq!(raws[0]["body"], r#"{"hello":"crash"}"#);
    let headers = raws[0]["headers"].as_object().expect("headers");
    assert!(
        headers.contains_key("webhook-id") && !headers.contains_key("webhook-signature"),
        "{headers:?}"
    );
    // The CLI lists the deliveries with their outcome.
    let table = sbx(&d, &["connect", "deliveries", &conn, "--limit", "100"]);
    let line = table
        .lines()
        .find(|l| l.contains("evt-crash"))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(
        line.contains("committed") && line.contains(&crash),
        "{line}"
    );
    let failed_only = sbx(&d, &["connect", "deliveries", &conn, "--status", "failed"]);
    assert!(
        failed_only.contains("evt-b") && !failed_only.contains("evt-crash"),
        "{failed_only}"
    );

    // GitHub-style HMAC of the raw body: the URLs stay, the secret changes.
    let (paths, gh_secret) = setup(
        &d,
        &conn,
        json!({"signature": {"scheme": "hmac-sha256", "idHeader": "X-GitHub-Delivery"}}),
    )
    .await;
    assert!(paths.values().all(Option::is_none), "URLs kept: {paths:?}");
    let gh_secret = gh_secret.expect("hmac secret");
    let gh_body = br#"{"zen":"Keep it logically awesome."}"#;
    let sig = format!(
        "sha256={}",
        hex::encode(hmac_sha256(gh_secret.as_bytes(), &[gh_body]))
    );
    let (status, b, _) = post(
        &d,
        &raw,
        gh_body,
        &signed(&secret, "evt-old", now(), gh_body),
    )
    .await;
    assert_eq!(status, 401, "the old scheme no longer opens it: {b}");
    let gh = [
        ("x-hub-signature-256", sig),
        ("x-github-delivery", "gh-1".to_string()),
    ];
    let (status, b, _) = post(&d, &raw, gh_body, &gh).await;
    assert_eq!(status, 202, "{b}");
    assert_eq!(b["data"]["deliveryId"], "gh-1");
    let done = settled(&d, &conn, b["data"]["id"].as_str().unwrap()).await;
    assert_eq!(done["status"], "committed", "{done}");

    // A disabled connection takes no deliveries.
    let status_path = format!("/v1/connect/connections/{conn}");
    let (status, b) = d
        .call("PATCH", &status_path, Some(json!({"status": "disabled"})))
        .await;
    assert_eq!(status, 200, "{b}");
    let (status, b, _) = post(&d, &raw, b"{}", &[]).await;
    assert_eq!(status, 409, "{b}");
    assert_eq!(b["errors"][0]["code"], "connect_invalid_state");
    let (status, b) = d
        .call("PATCH", &status_path, Some(json!({"status": "active"})))
        .await;
    assert_eq!(status, 200, "{b}");

    // Body limit (1 MiB): 413 in the error envelope.
    let big = vec![b' '; 1024 * 1024 + 1];
    let (status, b, _) = post(&d, &raw, &big, &[]).await;
    assert_eq!(status, 413, "{b}");
    assert_eq!(b["errors"][0]["code"], "payload_too_large");

    // Rate (burst 50, 10/s): a flood gets 429 with Retry-After, in the error envelope.
    let mut limited = None;
    for _ in 0..80 {
        let (status, b, retry) = post(&d, &raw, b"{}", &[]).await;
        if status == 429 {
            limited = Some((b, retry));
            break;
        }
        assert_eq!(status, 401, "{b}");
    }
    let (b, retry) = limited.expect("no 429 within 80 deliveries");
    assert_eq!(b["errors"][0]["code"], "rate_limited");
    let retry: u64 = retry.expect("Retry-After").parse().expect("seconds");
    assert!(retry >= 1, "{retry}");
    d.kill9();
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn a_full_inbox_and_an_empty_bucket_answer_429_with_retry_after() {
    let api = ApiHost::start();
    let mut args = api.daemon_args();
    args.extend(
        [
            "--connect-webhook-max-pending",
            "1",
            "--connect-webhook-burst",
            "3",
            "--connect-webhook-rate",
            "0.5",
        ]
        .map(String::from),
    );
    let args: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    let mut d = Daemon::start(&args).await;
    let conn = install(&d, &api, "connector-webhooks", "inbox", json!({})).await;
    let (paths, secret) = setup(
        &d,
        &conn,
        json!({"signature": {"scheme": "none", "idHeader": "X-Delivery"}}),
    )
    .await;
    assert_eq!(secret, None, "scheme none has no secret");
    let raw = paths["raw"].clone().expect("raw URL");
    let id = |v: &str| vec![("x-delivery", v.to_string())];

    // The first delivery is pending until its job commits (a sandbox start away): the
    // second, sent at once, finds the inbox (1) full.
    let (status, first, _) = post(&d, &raw, b"{}", &id("d-1")).await;
    assert_eq!(status, 202, "{first}");
    let (status, b, retry) = post(&d, &raw, b"{}", &id("d-2")).await;
    assert_eq!(status, 429, "{b}");
    assert_eq!(b["errors"][0]["code"], "rate_limited");
    assert!(
        b["errors"][0]["message"]
            .as_str()
            .unwrap_or("")
            .contains("pending"),
        "{b}"
    );
    assert!(retry.expect("Retry-After").parse::<u64>().expect("seconds") >= 1);
    let done = settled(&d, &conn, first["data"]["id"].as_str().unwrap()).await;
    assert_eq!(done["status"], "committed", "{done}");

    // Room again; then the bucket (3, refilled 0.5/s) is empty: 429 with Retry-After.
    let (status, b, _) = post(&d, &raw, b"{}", &id("d-2")).await;
    assert_eq!(status, 202, "{b}");
    let (status, b, retry) = post(&d, &raw, b"{}", &id("d-3")).await;
    assert_eq!(status, 429, "{b}");
    assert!(
        b["errors"][0]["message"]
            .as_str()
            .unwrap_or("")
            .contains("too many"),
        "{b}"
    );
    let retry: u64 = retry.expect("Retry-After").parse().expect("seconds");
    assert!((1..=2).contains(&retry), "{retry}");
    d.kill9();
}
