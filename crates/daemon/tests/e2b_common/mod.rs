//! Helpers of the E2B tests (`e2b_api.rs`, `e2b_sdk.rs`): E2B requests with
//! `X-API-KEY` and E2B's error shape.
#![allow(dead_code)]

pub mod preview;

use crate::common::Daemon;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A configured key (workspace `default`), so that sbxd runs without `--dev`.
pub const LEGACY_KEY: &str = "signkey-prod-0123456789abcdef0123456789abcdef";

/// Sends an E2B request with `X-API-KEY: key` (no header for `None`); returns
/// the status, the JSON body and the `x-next-token` header.
pub async fn e2b(
    d: &Daemon,
    key: Option<&str>,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value, Option<String>) {
    let mut req = d
        .http
        .request(method.parse().unwrap(), d.url(path))
        .header("content-type", "application/json");
    if let Some(k) = key {
        req = req.header("x-api-key", k);
    }
    if let Some(b) = body {
        req = req.body(b.to_string());
    }
    let resp = req.send().await.expect("request");
    let status = resp.status().as_u16();
    let next = resp
        .headers()
        .get("x-next-token")
        .map(|v| v.to_str().unwrap().to_string());
    let is_json = resp
        .headers()
        .get("content-type")
        .is_some_and(|v| v.to_str().unwrap().starts_with("application/json"));
    let bytes = resp.bytes().await.unwrap();
    let value = if bytes.is_empty() {
        Value::Null
    } else {
        assert!(is_json, "{method} {path}: non-JSON answer {status}");
        serde_json::from_slice(&bytes).unwrap()
    };
    (status, value, next)
}

/// Asserts an E2B error: the status and `{"code": status, "message": non-empty}`.
pub fn assert_e2b_error(got: &(u16, Value, Option<String>), status: u16, what: &str) {
    assert_eq!(got.0, status, "{what}: {:?}", got.1);
    assert_eq!(got.1["code"], json!(status), "{what}: {:?}", got.1);
    assert!(
        got.1["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{what}: {:?}",
        got.1
    );
}

/// Creates a sandbox through the E2B API; returns its id.
pub async fn create(d: &Daemon, key: &str, body: Value) -> String {
    let (status, body, _) = e2b(d, Some(key), "POST", "/v2/sandboxes", Some(body)).await;
    assert_eq!(status, 201, "create: {body}");
    body["sandboxID"].as_str().unwrap().to_string()
}

/// Ids of a list answer.
pub fn ids(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|s| s["sandboxID"].as_str().unwrap().to_string())
        .collect()
}

/// tests/e2b, where the npm `e2b` SDK (and the inngest SDK) are installed.
pub fn e2b_js_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/e2b");
    assert!(
        dir.join("node_modules/e2b/package.json").exists(),
        "e2b is not installed in {}; run ./scripts/test (npm ci there)",
        dir.display()
    );
    dir
}

pub type Runner = fn(&Path, &str, &[(&str, &str)]) -> (bool, String);

/// Runs `script` (from `dir`, with `run`) against a fresh sbxd and a tenant
/// key; it must pass every step and leave no sandbox behind.
pub async fn script_passes(run: Runner, dir: PathBuf, script: &str) {
    let d = Daemon::start(&["--signing-key", LEGACY_KEY]).await;
    let key = d.create_key("acme", None);
    let (ok, out) = run(&dir, script, &[("SBX_URL", &d.base), ("SBX_KEY", &key)]);
    assert!(
        ok && out.contains("all steps passed"),
        "{script} failed:\n{out}"
    );
    d.assert_no_containers(Duration::from_secs(60), "the SDK test kills what it made")
        .await;
}

/// An sbxd that terminates TLS itself (`--tls-cert/--tls-key`) for
/// `localhost` and `*.sbx.test` (`--e2b-domain sbx.test`), with a certificate
/// of the test's own CA, which its client trusts.
pub struct TlsDaemon {
    /// The daemon (its `base` is `https://localhost:PORT`).
    pub d: Daemon,
    /// The CA certificate (PEM).
    pub ca_pem: String,
    /// Where the CA certificate is written (for NODE_EXTRA_CA_CERTS and the like).
    pub ca_path: String,
    /// Holds the files while the daemon runs.
    _pki: tempfile::TempDir,
}

impl TlsDaemon {
    /// Makes the CA and the certificate, and starts sbxd with them.
    pub async fn start() -> TlsDaemon {
        let pki = tempfile::tempdir().unwrap();
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "sbx e2b test CA");
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let names = vec!["localhost".to_string(), "*.sbx.test".to_string()];
        let cert = rcgen::CertificateParams::new(names)
            .unwrap()
            .signed_by(&key, &ca, &ca_key)
            .unwrap();
        let path = |name: &str| pki.path().join(name).to_string_lossy().into_owned();
        std::fs::write(path("ca.pem"), ca.pem()).unwrap();
        std::fs::write(path("cert.pem"), cert.pem()).unwrap();
        std::fs::write(path("key.pem"), key.serialize_pem()).unwrap();
        let client = reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(ca.pem().as_bytes()).unwrap())
            .build()
            .unwrap();
        let (cert_path, key_path) = (path("cert.pem"), path("key.pem"));
        let d = Daemon::start_tls(
            &[
                "--signing-key",
                LEGACY_KEY,
                "--e2b-domain",
                "sbx.test",
                "--tls-cert",
                &cert_path,
                "--tls-key",
                &key_path,
            ],
            client,
        )
        .await;
        TlsDaemon {
            d,
            ca_pem: ca.pem(),
            ca_path: path("ca.pem"),
            _pki: pki,
        }
    }
}
