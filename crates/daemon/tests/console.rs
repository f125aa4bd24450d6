//! The web console: its sign-in sessions and CSRF rules over plain HTTP, then the
//! whole console end to end in headless Debian Chromium driven by playwright-core
//! (tests/console/e2e.mjs, installed from its lockfile by ./scripts/test), which
//! also writes the screenshots in docs/console/. The end-to-end run covers the
//! Connect pages too: it uploads examples/connector-items as a tarball, builds it,
//! runs its `generate` sync from a connection (live progress), browses the records
//! and edits the config for the next run; then examples/connector-webhooks for the
//! Deliveries tab, the records filter by key and credential rotation.

mod common;

use common::{Daemon, KillLeftovers};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const KEY: &str = "signkey-test-0123456789abcdef0123456789abcdef";

/// tests/console with playwright-core installed (`SBX_TEST_CONSOLE_DIR`, else the repo's).
fn console_dir() -> PathBuf {
    let dir = std::env::var("SBX_TEST_CONSOLE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/console"));
    assert!(
        dir.join("node_modules/playwright-core/package.json")
            .exists(),
        "playwright-core is not installed in {}; run ./scripts/test (npm ci there)",
        dir.display()
    );
    assert!(
        PathBuf::from("/usr/bin/chromium").exists(),
        "/usr/bin/chromium is missing; run ./scripts/install-deps"
    );
    dir
}

/// Where the screenshots go (`SBX_TEST_CONSOLE_SHOTS`, else the repo's docs/console).
fn screenshot_dir() -> PathBuf {
    std::env::var("SBX_TEST_CONSOLE_SHOTS")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/console"))
}

/// A raw request: (status, headers, JSON body or Null).
async fn send(
    d: &Daemon,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<String>,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let mut req = d.http.request(method.parse().unwrap(), d.url(path));
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    if let Some(body) = body {
        req = req.body(body);
    }
    let resp = req.send().await.expect("request");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let bytes = resp.bytes().await.unwrap();
    let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, headers, value)
}

/// Signs in with JSON; returns (cookie pair `sbx_session=...`, csrf token, Set-Cookie).
async fn sign_in(d: &Daemon, key: &str) -> (String, String, String) {
    let (status, headers, body) = send(
        d,
        "POST",
        "/console/session",
        &[("content-type", "application/json")],
        Some(json!({ "key": key }).to_string()),
    )
    .await;
    assert_eq!(status, 200, "sign-in: {body}");
    let set_cookie = headers["set-cookie"].to_str().unwrap().to_string();
    let pair = set_cookie.split(';').next().unwrap().to_string();
    let csrf = body["data"]["csrfToken"].as_str().unwrap().to_string();
    (pair, csrf, set_cookie)
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn sessions_cookies_and_csrf_over_http() {
    let d = Daemon::start(&["--signing-key", KEY]).await;

    // The page and its assets need no key; strict CSP, a cache policy and an ETag.
    let (status, headers, _) = send(&d, "GET", "/", &[], None).await;
    assert_eq!(status, 200);
    assert!(headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    let csp = headers["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"));
    assert_eq!(headers["cache-control"], "no-cache");
    let etag = headers["etag"].to_str().unwrap().to_string();
    let (status, _, _) = send(&d, "GET", "/", &[("if-none-match", &etag)], None).await;
    assert_eq!(status, 304);
    let (status, headers, _) = send(&d, "GET", "/console/assets/app.js", &[], None).await;
    assert_eq!(status, 200);
    assert!(headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/javascript"));
    let (status, _, body) = send(&d, "GET", "/console/assets/nope.js", &[], None).await;
    assert_eq!(
        (status, body["errors"][0]["code"].as_str()),
        (404, Some("not_found"))
    );

    // Without a session the API still wants a key.
    let (status, _, body) = send(&d, "GET", "/console/session", &[], None).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["errors"][0]["code"], "authorization_header_missing");

    // A wrong key, a missing key, a cross-origin sign-in.
    let wrong = json!({"key": "signkey-test-ffff"}).to_string();
    let json_ct = ("content-type", "application/json");
    let (status, _, body) = send(&d, "POST", "/console/session", &[json_ct], Some(wrong)).await;
    assert_eq!(
        (status, body["errors"][0]["code"].as_str()),
        (401, Some("invalid_api_key"))
    );
    let (status, _, body) = send(
        &d,
        "POST",
        "/console/session",
        &[json_ct],
        Some("{}".into()),
    )
    .await;
    assert_eq!(
        (status, body["errors"][0]["code"].as_str()),
        (400, Some("missing_field"))
    );
    let good = json!({ "key": KEY }).to_string();
    let evil = [json_ct, ("origin", "https://evil.example")];
    let (status, _, body) = send(&d, "POST", "/console/session", &evil, Some(good)).await;
    assert_eq!(
        (status, body["errors"][0]["code"].as_str()),
        (403, Some("csrf_token_invalid"))
    );

    // A form sign-in works too; the cookie is HttpOnly, SameSite=Strict, Path=/, not
    // Secure on loopback, and an opaque id rather than the key.
    let form = [
        ("content-type", "application/x-www-form-urlencoded"),
        ("origin", &d.base as &str),
    ];
    let (status, headers, _) = send(
        &d,
        "POST",
        "/console/session",
        &form,
        Some(format!("key={KEY}")),
    )
    .await;
    assert_eq!(status, 200);
    let set_cookie = headers["set-cookie"].to_str().unwrap();
    assert!(set_cookie.starts_with("sbx_session="), "{set_cookie}");

    let (cookie, csrf, set_cookie) = sign_in(&d, KEY).await;
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(set_cookie.contains(attr), "{set_cookie} lacks {attr}");
    }
    assert!(
        !set_cookie.contains("Secure"),
        "no Secure on loopback: {set_cookie}"
    );
    assert!(
        !set_cookie.contains("0123456789abcdef"),
        "the cookie is not the key"
    );
    let with_cookie = ("cookie", cookie.as_str());

    // The cookie authenticates safe requests; the session reveals its CSRF token.
    let (status, _, body) = send(&d, "GET", "/console/session", &[with_cookie], None).await;
    assert_eq!(status, 200);
    assert_eq!(body["data"]["csrfToken"], csrf.as_str());
    assert_eq!(body["data"]["dev"], false);
    let (status, _, _) = send(&d, "GET", "/v2/sandboxes", &[with_cookie], None).await;
    assert_eq!(status, 200);

    // Unsafe requests by cookie need the token; with it they pass.
    let secret = Some(json!({"value": "v"}).to_string());
    let path = "/v1/secrets/CONSOLE_CSRF";
    let (status, _, body) = send(&d, "PUT", path, &[with_cookie, json_ct], secret.clone()).await;
    assert_eq!(
        (status, body["errors"][0]["code"].as_str()),
        (403, Some("csrf_token_invalid"))
    );
    let bad = [with_cookie, json_ct, ("x-csrf-token", "not-it")];
    let (status, _, _) = send(&d, "PUT", path, &bad, secret.clone()).await;
    assert_eq!(status, 403);
    let ok = [with_cookie, json_ct, ("x-csrf-token", csrf.as_str())];
    let (status, _, body) = send(&d, "PUT", path, &ok, secret.clone()).await;
    assert_eq!(status, 200, "{body}");

    // Header callers are unaffected (no token needed), even with a stale cookie.
    let bearer = format!(
        "Bearer {}",
        sbx_api_types::signing_key::hashed_signing_key(KEY)
    );
    let api = [
        ("authorization", bearer.as_str()),
        json_ct,
        ("cookie", "sbx_session=stale"),
    ];
    let (status, _, body) = send(&d, "DELETE", path, &api, None).await;
    assert_eq!(status, 204, "{body}");

    // An unknown cookie is its own 401.
    let stale = [("cookie", "sbx_session=0000")];
    let (status, _, body) = send(&d, "GET", "/v2/sandboxes", &stale, None).await;
    assert_eq!(
        (status, body["errors"][0]["code"].as_str()),
        (401, Some("console_session_invalid"))
    );

    // Sign-out needs the token, deletes the cookie and ends the session.
    let (status, _, _) = send(&d, "DELETE", "/console/session", &[with_cookie], None).await;
    assert_eq!(status, 403);
    let out = [with_cookie, ("x-csrf-token", csrf.as_str())];
    let (status, headers, _) = send(&d, "DELETE", "/console/session", &out, None).await;
    assert_eq!(status, 204);
    assert!(headers["set-cookie"]
        .to_str()
        .unwrap()
        .contains("Max-Age=0"));
    let (status, _, body) = send(&d, "GET", "/v2/sandboxes", &[with_cookie], None).await;
    assert_eq!(
        (status, body["errors"][0]["code"].as_str()),
        (401, Some("console_session_invalid"))
    );
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn dev_mode_needs_no_sign_in() {
    let dir = console_dir();
    let d = Daemon::start(&[]).await;
    let (status, _, body) = send(&d, "GET", "/console/session", &[], None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"]["dev"], true);
    assert_eq!(body["data"]["csrfToken"], Value::Null);
    let (ok, stdout) = run_e2e(&dir, &d.base, "--dev", &std::env::temp_dir(), &[]);
    assert!(
        ok && stdout.contains(" passed, 0 failed"),
        "dev-mode console:\n{stdout}"
    );
}

/// Runs tests/console/e2e.mjs (with the Connect package tarballs to upload, if any);
/// returns (success, stdout).
fn run_e2e(dir: &Path, base: &str, key: &str, shots: &Path, tarballs: &[&Path]) -> (bool, String) {
    let out = Command::new("node")
        .arg("e2e.mjs")
        .arg(base)
        .arg(key)
        .arg(shots)
        .args(tarballs)
        .current_dir(dir)
        .output()
        .expect("node");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    (out.status.success(), stdout)
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn console_end_to_end_in_chromium() {
    let dir = console_dir();
    let shots = screenshot_dir();
    // Usage sampled every second: the sparklines of a busy process fill in seconds.
    // A preview domain: the Preview tab shows a port's URL under it.
    let d = Daemon::start(&[
        "--signing-key",
        KEY,
        "--usage-sample-secs",
        "1",
        "--e2b-domain",
        "sbx.localhost",
    ])
    .await;
    let _leftovers = KillLeftovers::of(&d);
    let tmp = tempfile::tempdir().unwrap();
    let tarball = tmp.path().join("connector-items.tgz");
    pack(&examples().join("connector-items"), &tarball);
    let oauth = tmp.path().join("connector-oauth.tgz");
    pack(&oauth_package(tmp.path()), &oauth);
    let webhooks = tmp.path().join("connector-webhooks.tgz");
    pack(&examples().join("connector-webhooks"), &webhooks);
    let (ok, stdout) = run_e2e(&dir, &d.base, KEY, &shots, &[&tarball, &oauth, &webhooks]);
    assert!(
        ok && stdout.contains(" passed, 0 failed"),
        "the console e2e test failed:\n{stdout}"
    );
    for page in [
        "sign-in",
        "sandboxes",
        "create",
        "terminal",
        "processes",
        "files",
        "usage",
        "preview",
        "snapshots",
        "packages",
        "package-build",
        "connections",
        "connection-create",
        "connection-runs",
        "connection-logs",
        "connection-test",
        "connection-records",
        "connection-records-key",
        "connection-edit",
        "connection-edit-error",
        "connection-deliveries",
    ] {
        assert!(
            shots.join(format!("{page}.png")).exists(),
            "no screenshot of {page}"
        );
    }
    // Connect's build and job sandboxes go away when their job ends.
    d.assert_no_containers(
        Duration::from_secs(60),
        "the e2e test destroys everything it made",
    )
    .await;
}

fn examples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// The files of `dir` as a gzip tarball at `out` (at the archive root, no node_modules).
fn pack(dir: &Path, out: &Path) {
    let status = Command::new("tar")
        .arg("-czf")
        .arg(out)
        .arg("--exclude=node_modules")
        .arg("-C")
        .arg(dir)
        .arg(".")
        .status()
        .expect("tar");
    assert!(status.success(), "tar of {} failed", dir.display());
}

/// A minimal OAuth2 package (its provider does not exist): a connection to it
/// starts in "Reauthorization required" and Reconnect goes to the authorize URL.
fn oauth_package(tmp: &Path) -> PathBuf {
    let dir = tmp.join("connector-oauth");
    std::fs::create_dir_all(&dir).unwrap();
    let manifest = json!({
        "name": "connector-oauth", "version": "1.0.0", "private": true,
        "type": "module", "main": "index.mjs",
    });
    let lock = json!({
        "name": "connector-oauth", "version": "1.0.0", "lockfileVersion": 3, "requires": true,
        "packages": {"": {"name": "connector-oauth", "version": "1.0.0"}},
    });
    std::fs::write(dir.join("package.json"), manifest.to_string()).unwrap();
    std::fs::write(dir.join("package-lock.json"), lock.to_string()).unwrap();
    std::fs::write(
        dir.join("index.mjs"),
        r#"import { defineConnector } from "@sbx/connect";
export default defineConnector({
  auth: {
    type: "oauth2",
    authorizeUrl: "https://auth.example.invalid/authorize",
    tokenUrl: "https://auth.example.invalid/token",
    scopes: ["read"],
  },
  async verify(ctx) {
    await ctx.json("/me", { type: "object" });
  },
  syncs: {
    things: {
      mode: "append",
      async *run() {
        yield { records: [] };
      },
    },
  },
});
"#,
    )
    .unwrap();
    dir
}
