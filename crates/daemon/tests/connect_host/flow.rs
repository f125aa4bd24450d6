//! The steps of a Connect test through sbxd's API: install a connector, run a sync,
//! read its committed records.

use super::{tarball, ApiHost, API_KEY};
use crate::common::Daemon;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// GETs `path` until its `data` has finished (a build or a run); returns it.
pub async fn wait_finished(d: &Daemon, path: &str, what: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let (_, b) = d.call("GET", path, None).await;
        let status = b["data"]["status"].as_str().unwrap_or("");
        if status == "succeeded" || status == "failed" {
            return b["data"].clone();
        }
        assert!(Instant::now() < deadline, "{what} did not finish: {b}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Uploads and builds the example package `package` at 1.0.0, then creates a
/// connection `name` of it against `api`; returns the connection id.
pub async fn install(
    d: &Daemon,
    api: &ApiHost,
    package: &str,
    name: &str,
    config: Value,
) -> String {
    let (status, body) = d
        .call_with(
            "POST",
            "/v1/connect/packages",
            Some(tarball(package)),
            &[("content-type", "application/gzip")],
        )
        .await;
    assert_eq!(status, 201, "upload: {body}");
    let (status, body) = d
        .call(
            "POST",
            &format!("/v1/connect/packages/{package}/versions/1.0.0/builds"),
            None,
        )
        .await;
    assert_eq!(status, 202, "build: {body}");
    let build_id = body["data"]["id"].as_str().expect("build id");
    let b = wait_finished(d, &format!("/v1/connect/builds/{build_id}"), "build").await;
    assert_eq!(b["status"], "succeeded", "{b}");
    let (status, body) = d
        .call(
            "POST",
            "/v1/connect/connections",
            Some(json!({
                "name": name,
                "package": package,
                "version": "1.0.0",
                "config": config,
                "origin": api.origin(),
                "credentials": {"type": "apiKey", "key": API_KEY},
            })),
        )
        .await;
    assert_eq!(status, 201, "create connection: {body}");
    body["data"]["id"]
        .as_str()
        .expect("connection id")
        .to_string()
}

/// Runs sync `name` of connection `conn` now and insists that it succeeded; returns the run.
pub async fn sync(d: &Daemon, conn: &str, name: &str) -> Value {
    let (status, body) = d
        .call(
            "POST",
            &format!("/v1/connect/connections/{conn}/syncs/{name}/runs"),
            None,
        )
        .await;
    assert_eq!(status, 202, "run now {name}: {body}");
    let id = body["data"]["id"].as_str().expect("run id");
    let run = wait_finished(d, &format!("/v1/connect/runs/{id}"), "run").await;
    assert_eq!(run["status"], "succeeded", "{run}");
    run
}

/// Committed records of a sync through the API (NDJSON).
pub async fn records(d: &Daemon, conn: &str, name: &str) -> Vec<Value> {
    let resp = d
        .http
        .get(d.url(&format!(
            "/v1/connect/connections/{conn}/syncs/{name}/records?limit=1000"
        )))
        .send()
        .await
        .expect("records");
    assert_eq!(resp.status().as_u16(), 200);
    let text = resp.text().await.expect("body");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("record line"))
        .collect()
}
