//! The real `e2b` npm SDK (2.51.0, from tests/e2b's lockfile) driving sbxd's
//! E2B control plane next to the inngest SDK, and dev mode as README's
//! `E2B_API_KEY=dev` uses it.

mod common;
mod e2b_common;

use common::Daemon;
use e2b_common::{assert_e2b_error, create, e2b, e2b_js_dir, script_passes};
use serde_json::{json, Value};
use std::time::Duration;

#[tokio::test]
#[ignore = "needs root, runsc, the image and node; run ./scripts/test"]
async fn e2b_sdk_control_plane_and_inngest_sdk_on_one_sbxd() {
    script_passes(common::run_node_script, e2b_js_dir(), "control-plane.mjs").await;
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn e2b_dev_mode_takes_any_key_but_needs_one_and_keeps_the_browser_guard() {
    // What README's `E2B_API_KEY=dev` does against `./scripts/up`'s dev-mode sbxd.
    let d = Daemon::start(&[]).await;
    let id = create(&d, "dev", json!({"templateID": "base"})).await;
    // The inngest API without a key (dev mode) sees it: the same default tenant.
    let (status, v2) = d.call("GET", &format!("/v2/sandboxes/{id}"), None).await;
    assert_eq!(
        (status, v2["data"]["status"].as_str()),
        (200, Some("RUNNING")),
        "{v2}"
    );
    // No key is still 401 on E2B paths: a web page cannot send the header
    // cross-origin without a preflight.
    assert_e2b_error(
        &e2b(&d, None, "POST", &format!("/sandboxes/{id}/pause"), None).await,
        401,
        "no key in dev mode",
    );
    // A DNS-rebound page (foreign Host) and a cross-origin one are refused in E2B's shape.
    let refused = d
        .http
        .delete(d.url(&format!("/sandboxes/{id}")))
        .header("x-api-key", "dev")
        .header("host", "evil.example:8731")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 403);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["code"], 403, "{body}");
    let got = d
        .http
        .post(d.url(&format!("/sandboxes/{id}/pause")))
        .header("x-api-key", "dev")
        .header("origin", "https://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(got.status().as_u16(), 403);
    let (status, info, _) = e2b(&d, Some("dev"), "GET", &format!("/sandboxes/{id}"), None).await;
    assert_eq!(
        (status, info["state"].as_str()),
        (200, Some("running")),
        "nothing was refused into effect"
    );
    let (status, _, _) = e2b(
        &d,
        Some("another-key"),
        "DELETE",
        &format!("/sandboxes/{id}"),
        None,
    )
    .await;
    assert_eq!(status, 204, "in dev mode every key is the default tenant");
    // The real SDK through the browser guard, with README's settings.
    let (ok, out) = common::run_node_script(
        &e2b_js_dir(),
        "control-plane.mjs",
        &[
            ("SBX_URL", &d.base),
            ("SBX_KEY", "dev"),
            ("SBX_INNGEST_DEV", "1"),
        ],
    );
    assert!(
        ok && out.contains("all steps passed"),
        "control-plane.mjs in dev mode failed:\n{out}"
    );
    d.assert_no_containers(Duration::from_secs(60), "killed")
        .await;
}
