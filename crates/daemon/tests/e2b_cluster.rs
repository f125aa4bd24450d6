//! The E2B API and envd in cluster mode: two real sbxd nodes on one
//! PostgreSQL, the real npm `e2b` SDK talking to node A about a sandbox that
//! runs on node B (control plane, commands with streamed output, files,
//! timeouts, pause and connect), the E2B list showing both nodes' sandboxes,
//! each timeout expiry acted on once, and a lost node's E2B sandboxes handled
//! as cluster mode handles lost nodes; preview URLs (HTTP and WebSocket) of
//! a sandbox on node B through node A.
//!
//! Needs root, runsc, the image, node with tests/e2b installed, and the
//! PostgreSQL server whose URL `./scripts/test` exports as `SBX_TEST_DATABASE_URL`.

mod common;
mod e2b_common;

use common::cluster::{self, database, TOKEN};
use common::Daemon;
use e2b_common::{create, e2b, e2b_js_dir};
use serde_json::json;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;

/// The key of every E2B call (the nodes run in dev mode: the default tenant).
const KEY: &str = "dev";

async fn set_draining(d: &Daemon, node: &str, draining: bool) {
    let verb = if draining { "drain" } else { "undrain" };
    let (status, body) = d
        .call("POST", &format!("/v1/nodes/{node}/{verb}"), None)
        .await;
    assert_eq!(status, 200, "{verb} {node}: {body}");
}

/// Creates an E2B sandbox through `via` while node `avoid` is drained, so
/// that placement puts it on the other node.
async fn create_avoiding(via: &Daemon, avoid: &str, body: serde_json::Value) -> String {
    set_draining(via, avoid, true).await;
    let id = create(via, KEY, body).await;
    set_draining(via, avoid, false).await;
    id
}

/// The node a sandbox's row names.
fn node_of(d: &Daemon, id: &str) -> String {
    d.sql(&format!("SELECT node_id FROM sandboxes WHERE id = '{id}'"))
        .trim()
        .to_string()
}

/// Polls `f` every 100 ms until it holds, for at most `within`.
async fn wait_until<F, Fut>(what: &str, within: Duration, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn state_through(d: &Daemon, id: &str) -> (u16, Option<String>) {
    let (status, info, _) = e2b(d, Some(KEY), "GET", &format!("/sandboxes/{id}"), None).await;
    (status, info["state"].as_str().map(str::to_string))
}

#[tokio::test]
#[ignore = "needs root, runsc, the image, node and PostgreSQL; run ./scripts/test"]
async fn e2b_sdk_through_one_node_drives_a_sandbox_on_another() {
    let db = database();
    let a = cluster::node_with(db.url(), "node-a", TOKEN, &[]).await;
    let b = cluster::node_with(db.url(), "node-b", TOKEN, &[]).await;
    let run = uuid::Uuid::new_v4().simple().to_string();

    // A sandbox on A, created through B: E2B creates are placed like /v1 creates.
    let on_a = create_avoiding(&b, "node-b", json!({"metadata": {"run": run}})).await;
    assert_eq!(node_of(&a, &on_a), "node-a");

    // The SDK through A while A is drained: its sandbox lands on B, and every
    // call about it (envd included) is forwarded there.
    set_draining(&a, "node-a", true).await;
    let (ok, out) = common::run_node_script(
        &e2b_js_dir(),
        "cluster.mjs",
        &[
            ("SBX_URL", &a.base),
            ("SBX_KEY", KEY),
            ("SBX_RUN", &run),
            ("SBX_OTHER", &on_a),
        ],
    );
    set_draining(&a, "node-a", false).await;
    assert!(
        ok && out.contains("all steps passed"),
        "cluster.mjs failed:\n{out}"
    );
    let on_b = out
        .lines()
        .find_map(|l| l.strip_prefix("sandbox "))
        .expect("the script names its sandbox")
        .trim()
        .to_string();
    assert_eq!(node_of(&a, &on_b), "node-b", "placed on the undrained node");
    assert_eq!(
        a.sql(&format!("SELECT status FROM sandboxes WHERE id = '{on_b}'"))
            .trim(),
        "TERMINATED"
    );

    // A kill through B of A's sandbox is forwarded to A.
    let (status, body, _) = e2b(&b, Some(KEY), "DELETE", &format!("/sandboxes/{on_a}"), None).await;
    assert_eq!(status, 204, "{body}");
    assert_eq!(state_through(&a, &on_a).await.0, 404);
    for d in [&a, &b] {
        d.assert_no_containers(Duration::from_secs(60), "every sandbox was killed")
            .await;
    }
}

#[tokio::test]
#[ignore = "needs root, runsc, the image and PostgreSQL; run ./scripts/test"]
async fn e2b_timeouts_act_once_across_nodes_and_a_lost_nodes_sandboxes_end() {
    let db = database();
    let a = cluster::node_with(db.url(), "node-a", TOKEN, &[]).await;
    let mut b = cluster::node_with(db.url(), "node-b", TOKEN, &[]).await;

    // A 2 s timeout with auto-pause, on B, created through A.
    let paused = create_avoiding(&a, "node-a", json!({"timeout": 2, "autoPause": true})).await;
    assert_eq!(node_of(&a, &paused), "node-b");
    // E2B's "paused" covers PAUSING too: wait for the pause to have finished on B.
    let status_on_b = |b: &Daemon| {
        b.sql(&format!(
            "SELECT status FROM sandboxes WHERE id = '{paused}'"
        ))
        .trim()
        .to_string()
    };
    wait_until(
        "the auto-pause at the timeout",
        Duration::from_secs(60),
        || async {
            state_through(&a, &paused).await.1.as_deref() == Some("paused")
                && status_on_b(&b) == "PAUSED"
        },
    )
    .await;
    // Acted on once: the only write to its E2B row since the create is the
    // one claim of the expiry (a second sweeping node would claim it again).
    let generation = |d: &Daemon, id: &str| {
        d.sql(&format!(
            "SELECT generation FROM e2b_sandboxes WHERE id = '{id}'"
        ))
        .trim()
        .to_string()
    };
    assert_eq!(generation(&a, &paused), "1");
    assert_eq!(
        b.sql(&format!(
            "SELECT status FROM sandboxes WHERE id = '{paused}'"
        ))
        .trim(),
        "PAUSED"
    );
    // Connect through A resumes it on B (201) with a new end time.
    let (status, body, _) = e2b(
        &a,
        Some(KEY),
        "POST",
        &format!("/v2/sandboxes/{paused}/connect"),
        Some(json!({"timeout": 300})),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(
        state_through(&b, &paused).await.1.as_deref(),
        Some("running")
    );
    assert_eq!(generation(&a, &paused), "2");

    // A timeout set through A on B's sandbox expires on B: destroyed once.
    let ended = create_avoiding(&a, "node-a", json!({"timeout": 300})).await;
    let (status, body, _) = e2b(
        &a,
        Some(KEY),
        "POST",
        &format!("/sandboxes/{ended}/timeout"),
        Some(json!({"timeout": 1})),
    )
    .await;
    assert_eq!(status, 204, "{body}");
    wait_until(
        "the destroy at the timeout",
        Duration::from_secs(60),
        || async {
            a.sql(&format!(
                "SELECT status FROM sandboxes WHERE id = '{ended}'"
            ))
            .trim()
                == "TERMINATED"
        },
    )
    .await;
    assert_eq!(state_through(&a, &ended).await.0, 404);
    // Its record is forgotten by the sweep (any node; within ten sweeps).
    wait_until(
        "the ended sandbox's record to go",
        Duration::from_secs(30),
        || async {
            a.sql(&format!(
                "SELECT count(*) FROM e2b_sandboxes WHERE id = '{ended}'"
            ))
            .trim()
                == "0"
        },
    )
    .await;

    // B is lost: its E2B sandbox fails over as "node lost", answers 404 through
    // A, and its record goes; A's sweep never acts on it.
    b.kill9();
    wait_until(
        "the fail-over of node-b",
        Duration::from_secs(30),
        || async {
            a.sql(&format!(
                "SELECT status FROM sandboxes WHERE id = '{paused}'"
            ))
            .trim()
                == "FAILED"
        },
    )
    .await;
    assert_eq!(state_through(&a, &paused).await.0, 404);
    wait_until(
        "the lost sandbox's record to go",
        Duration::from_secs(30),
        || async {
            a.sql(&format!(
                "SELECT count(*) FROM e2b_sandboxes WHERE id = '{paused}'"
            ))
            .trim()
                == "0"
        },
    )
    .await;
    // B back: fenced, it cleans its leftovers and resurrects nothing.
    b.spawn().await;
    b.assert_no_containers(Duration::from_secs(60), "node-b removed its leftovers")
        .await;
    assert_eq!(state_through(&b, &paused).await.0, 404);
}

/// A guest HTTP server that answers every GET with the request's headers.
const ECHO_HEADERS: &str = "import http.server\n\
class H(http.server.BaseHTTPRequestHandler):\n    \
def do_GET(self):\n        \
b = str(self.headers).encode()\n        \
self.send_response(200)\n        \
self.send_header('content-length', str(len(b)))\n        \
self.end_headers()\n        \
self.wfile.write(b)\n\
http.server.HTTPServer(('127.0.0.1', 8000), H).serve_forever()\n";

const WS_ECHO: &str = include_str!("../../../tests/e2b/ws_echo.py");

/// Starts a background process in a sandbox (dev mode: no key).
async fn start(d: &Daemon, id: &str, argv: &[&str]) {
    let (status, body) = d
        .call(
            "POST",
            &format!("/v2/sandboxes/{id}/processes"),
            Some(json!({ "command": argv })),
        )
        .await;
    assert!(status == 200 || status == 201, "{status} {body}");
}

#[tokio::test]
#[ignore = "needs root, runsc, the image and PostgreSQL; run ./scripts/test"]
async fn preview_urls_of_a_sandbox_on_another_node_work_through_any_node() {
    use common::ws::{frame as ws_frame, read_frame as ws_read};
    use e2b_common::preview::{get, wait_listening, ws_connect, DOMAIN};
    let db = database();
    let domain = ["--e2b-domain", DOMAIN];
    let a = cluster::node_with(db.url(), "node-a", TOKEN, &domain).await;
    let b = cluster::node_with(db.url(), "node-b", TOKEN, &domain).await;

    // A restricted sandbox on B, created through A.
    let restricted = json!({"network": {"allowPublicTraffic": false}});
    set_draining(&a, "node-a", true).await;
    let (status, created, _) = e2b(&a, Some(KEY), "POST", "/v2/sandboxes", Some(restricted)).await;
    set_draining(&a, "node-a", false).await;
    assert_eq!(status, 201, "{created}");
    let id = created["sandboxID"].as_str().unwrap().to_string();
    let token = created["trafficAccessToken"].as_str().unwrap().to_string();
    assert_eq!(node_of(&a, &id), "node-b");
    start(&b, &id, &["python3", "-c", ECHO_HEADERS]).await;
    start(&b, &id, &["python3", "-c", WS_ECHO, "8765"]).await;

    // Through A: the request reaches B's guest with its Host, the client in
    // X-Forwarded-For once, and none of the cluster's headers.
    wait_listening(&a, 8000, &id, Some(&token)).await;
    let (status, body) = get(&a, 8000, &id, "/x?y=1", Some(&token)).await;
    let seen = String::from_utf8_lossy(&body).to_ascii_lowercase();
    assert_eq!(status, 200, "{seen}");
    assert!(
        seen.contains(&format!("host: 8000-{id}.{DOMAIN}")),
        "{seen}"
    );
    assert!(seen.contains("x-forwarded-for: 127.0.0.1\n"), "{seen}");
    for hidden in ["x-sbx-cluster-token", "x-sbx-forwarded-by", TOKEN, &token] {
        assert!(
            !seen.contains(&hidden.to_ascii_lowercase()),
            "{hidden} reached the guest: {seen}"
        );
    }
    // The same answer straight from B.
    assert_eq!(get(&b, 8000, &id, "/", Some(&token)).await.0, 200);

    // The token is checked on the node the client called: missing 401, wrong 403.
    assert_eq!(get(&a, 8000, &id, "/", None).await.0, 401);
    assert_eq!(get(&a, 8000, &id, "/", Some(&"0".repeat(64))).await.0, 403);
    // A request that claims to come from a node without the cluster token is
    // refused before anything else (no token, a wrong one).
    let forged = |cluster_token: Option<&str>| {
        let mut req = a
            .http
            .get(a.url("/"))
            .header("host", format!("8000-{id}.{DOMAIN}"))
            .header("e2b-traffic-access-token", &token)
            .header("x-sbx-forwarded-by", "node-b");
        if let Some(t) = cluster_token {
            req = req.header("x-sbx-cluster-token", t);
        }
        req.send()
    };
    assert_eq!(forged(None).await.unwrap().status().as_u16(), 401);
    assert_eq!(
        forged(Some("not-the-token"))
            .await
            .unwrap()
            .status()
            .as_u16(),
        401
    );

    // A WebSocket through A to B's guest: frames both ways.
    let mut ws = ws_connect(&a, 8765, &id, Some(&token)).await;
    ws.write_all(&ws_frame(1, b"across nodes")).await.unwrap();
    assert_eq!(ws_read(&mut ws).await, (1, b"across nodes".to_vec()));
    let blob: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    ws.write_all(&ws_frame(2, &blob)).await.unwrap();
    assert_eq!(ws_read(&mut ws).await, (2, blob));

    // Paused on B: 409 through A.
    let (status, body, _) = e2b(
        &a,
        Some(KEY),
        "POST",
        &format!("/sandboxes/{id}/pause"),
        None,
    )
    .await;
    assert_eq!(status, 204, "{body}");
    assert_eq!(get(&a, 8000, &id, "/", Some(&token)).await.0, 409);
    let (status, body, _) = e2b(&a, Some(KEY), "DELETE", &format!("/sandboxes/{id}"), None).await;
    assert_eq!(status, 204, "{body}");
    let (status, body) = get(&a, 8000, &id, "/", Some(&token)).await;
    assert_eq!(status, 404, "{}", String::from_utf8_lossy(&body));
}
