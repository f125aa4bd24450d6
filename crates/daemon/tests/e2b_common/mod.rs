//! Helpers of the E2B tests (`e2b_api.rs`, `e2b_sdk.rs`): E2B requests with
//! `X-API-KEY` and E2B's error shape.
#![allow(dead_code)]

use crate::common::Daemon;
use serde_json::{json, Value};

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
