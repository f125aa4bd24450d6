//! `GET /metrics` on a real sbxd and real runsc: the exposition parses with the
//! Prometheus project's Python parsers (tests/metrics/parse.py, venv by
//! tests/metrics/install.sh) and its counters and gauges move across a create, an
//! exec, a failing exec, a refused egress connection, a snapshot, a pause and a
//! destroy; outside dev mode only the metrics token scrapes.

mod common;

use common::{assert_error, Daemon};
use serde_json::{json, Value};
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One parsed sample.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: serde_json::Map<String, Value>,
    value: f64,
}

/// The samples of an exposition, as `tests/metrics/parse.py` reads them.
struct Scrape(Vec<Sample>);

impl Scrape {
    /// Sum of the samples named `name` whose labels include `labels`.
    fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.0
            .iter()
            .filter(|s| s.name == name)
            .filter(|s| {
                labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k) == Some(&json!(v)))
            })
            .map(|s| s.value)
            .sum()
    }

    fn has(&self, name: &str, labels: &[(&str, &str)]) -> bool {
        self.0.iter().any(|s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k) == Some(&json!(v)))
        })
    }
}

fn parser_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/metrics")
}

/// Parses `text` with the real Python parsers.
fn parse(text: &str) -> Scrape {
    let dir = parser_dir();
    let mut child = Command::new(dir.join(".venv/bin/python"))
        .arg(dir.join("parse.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tests/metrics/.venv: run tests/metrics/install.sh (./scripts/test does)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the exposition does not parse: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let samples: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    Scrape(
        samples
            .into_iter()
            .map(|s| Sample {
                name: s["name"].as_str().unwrap().to_string(),
                labels: s["labels"].as_object().unwrap().clone(),
                value: s["value"].as_f64().unwrap(),
            })
            .collect(),
    )
}

async fn scrape(d: &Daemon) -> Scrape {
    let resp = d.http.get(d.url("/metrics")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let ctype = resp.headers()["content-type"].to_str().unwrap().to_string();
    assert!(ctype.starts_with("application/openmetrics-text"), "{ctype}");
    parse(&resp.text().await.unwrap())
}

async fn snapshot_ready(d: &Daemon, id: &str) {
    let (status, body) = d
        .call(
            "POST",
            &format!("/v2/sandboxes/{id}/snapshots"),
            Some(json!({})),
        )
        .await;
    assert!(status == 201 || status == 202, "snapshot: {status} {body}");
    let snap = body["data"]["id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (_, body) = d.call("GET", &format!("/v2/snapshots/{snap}"), None).await;
        match body["data"]["status"].as_str() {
            Some("READY") => return,
            Some("CREATING") => {}
            _ => panic!("snapshot {snap}: {body}"),
        }
        assert!(Instant::now() < deadline, "snapshot never READY: {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn counters_and_gauges_follow_a_sandbox_lifecycle() {
    let d = Daemon::start(&[]).await;
    let before = scrape(&d).await;
    // Build info: this sbxd and the runsc it found.
    assert!(
        before.has("sbx_build_info", &[("version", env!("CARGO_PKG_VERSION"))]),
        "no build info"
    );
    assert!(
        !before.has("sbx_build_info", &[("runsc_version", "unknown")]),
        "runsc version not read"
    );

    let id = d.create_running("metrics-1").await;
    let (code, _, _) = d.exec(&id, &["true"]).await;
    assert_eq!(code, 0);
    let (code, _, _) = d.exec(&id, &["sh", "-c", "exit 3"]).await;
    assert_eq!(code, 3);
    // A denied destination (link-local metadata address) through the SOCKS proxy.
    let (code, _, _) = d
        .exec(
            &id,
            &[
                "sh",
                "-c",
                "curl -s --max-time 20 -x socks5h://127.0.0.1:1080 http://169.254.169.254/",
            ],
        )
        .await;
    assert_ne!(code, 0, "the metadata address was reached");
    snapshot_ready(&d, &id).await;
    let (status, body) = d
        .call("POST", &format!("/v2/sandboxes/{id}/pause"), None)
        .await;
    assert!(status == 200 || status == 202, "pause: {status} {body}");
    d.wait_status(&id, "PAUSED", Duration::from_secs(120)).await;

    let paused = scrape(&d).await;
    let shape = [("state", "paused"), ("shape", "1x1024")];
    assert_eq!(paused.sum("sbx_sandboxes", &shape), 1.0);
    assert_eq!(paused.sum("sbx_sandboxes", &[("state", "running")]), 0.0);

    let (status, body) = d.call("DELETE", &format!("/v2/sandboxes/{id}"), None).await;
    assert!(
        matches!(status, 200 | 202 | 204),
        "destroy: {status} {body}"
    );
    // Gone once its row leaves the active states (TERMINATED, or no longer listed).
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (status, body) = d.call("GET", &format!("/v2/sandboxes/{id}"), None).await;
        if status == 404 || body["data"]["status"] == "TERMINATED" {
            break;
        }
        assert!(Instant::now() < deadline, "never destroyed: {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let after = scrape(&d).await;

    let moved =
        |name: &str, labels: &[(&str, &str)]| after.sum(name, labels) - before.sum(name, labels);
    let route = |r: &'static str, m: &'static str| [("route", r), ("method", m)];
    // HTTP: by route template (never the sandbox's id), method and status.
    assert_eq!(
        moved("sbx_http_requests_total", &route("/v2/sandboxes", "POST")),
        1.0
    );
    assert_eq!(
        moved(
            "sbx_http_requests_total",
            &[
                ("route", "/v2/sandboxes/{id}/exec"),
                ("method", "POST"),
                ("status", "200")
            ]
        ),
        3.0
    );
    assert_eq!(
        moved(
            "sbx_http_request_duration_seconds_count",
            &route("/v2/sandboxes/{id}/pause", "POST")
        ),
        1.0
    );
    assert!(moved("sbx_http_requests_total", &route("/metrics", "GET")) >= 2.0);
    assert!(
        !after.0.iter().any(|s| s
            .labels
            .values()
            .any(|v| v.as_str().is_some_and(|v| v.contains(&id)))),
        "a label carries the sandbox id"
    );
    // runsc: the boot, the checkpoint, the pause and the teardown, by subcommand.
    for sub in ["checkpoint", "pause", "delete"] {
        assert!(
            moved(
                "sbx_runsc_command_duration_seconds_count",
                &[("subcommand", sub)]
            ) >= 1.0,
            "runsc {sub} not counted"
        );
    }
    assert!(
        moved(
            "sbx_runsc_command_duration_seconds_count",
            &[("subcommand", "run")]
        ) + moved(
            "sbx_runsc_command_duration_seconds_count",
            &[("subcommand", "create")]
        ) + moved(
            "sbx_runsc_command_duration_seconds_count",
            &[("subcommand", "restore")]
        ) >= 1.0,
        "no runsc boot counted"
    );
    // The agent ran the three execs (a failing command is still an answer).
    assert!(
        moved(
            "sbx_agent_request_duration_seconds_count",
            &[("kind", "exec")]
        ) >= 3.0
    );
    assert_eq!(
        moved("sbx_agent_request_failures_total", &[("kind", "exec")]),
        0.0
    );
    // The snapshot: one capture, READY, with its size.
    assert_eq!(
        moved(
            "sbx_snapshot_duration_seconds_count",
            &[("outcome", "ready")]
        ),
        1.0
    );
    assert_eq!(moved("sbx_snapshot_size_bytes_count", &[]), 1.0);
    assert!(moved("sbx_snapshot_size_bytes_sum", &[]) > 0.0);
    // The refused connection, by reason.
    assert!(
        moved("sbx_egress_connections_total", &[("decision", "denied")]) >= 1.0,
        "egress denial not counted"
    );
    // The store was called, by call name.
    assert!(
        moved(
            "sbx_store_call_duration_seconds_count",
            &[("call", "update_sandbox")]
        ) >= 1.0
    );
    // The gauge follows the destroy: nothing holds capacity any more.
    assert_eq!(after.sum("sbx_sandboxes", &[]), 0.0);
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn outside_dev_mode_only_the_metrics_token_scrapes() {
    const KEY: &str = "signkey-test-0123456789abcdef0123456789abcdef";
    let token = "m".repeat(40);
    let mut file = tempfile::NamedTempFile::new().unwrap();
    writeln!(file, "{token}").unwrap();
    let path = file.path().to_str().unwrap().to_string();
    let d = Daemon::start(&["--signing-key", KEY, "--metrics-token-file", &path]).await;
    let get = |auth: Option<String>| {
        let mut req = d.http.get(d.url("/metrics"));
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        async move {
            let resp = req.send().await.unwrap();
            let status = resp.status().as_u16();
            let text = resp.text().await.unwrap();
            (status, text)
        }
    };
    let json_of = |(s, t): (u16, String)| (s, serde_json::from_str::<Value>(&t).unwrap());
    assert_error(
        &json_of(get(None).await),
        401,
        "authorization_header_missing",
    );
    // A signing key is a tenant's: it does not open the node's metrics.
    let hashed = sbx_api_types::signing_key::hashed_signing_key(KEY);
    assert_error(
        &json_of(get(Some(format!("Bearer {hashed}"))).await),
        401,
        "invalid_api_key",
    );
    assert_error(
        &json_of(get(Some(format!("Bearer {}x", token))).await),
        401,
        "invalid_api_key",
    );
    let (status, text) = get(Some(format!("Bearer {token}"))).await;
    assert_eq!(status, 200, "{text}");
    let scraped = parse(&text);
    // The refusals above were counted, by status.
    assert_eq!(
        scraped.sum(
            "sbx_http_requests_total",
            &[("route", "/metrics"), ("status", "401")]
        ),
        3.0
    );
}
