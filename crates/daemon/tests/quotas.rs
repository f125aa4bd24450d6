//! Workspace quotas on real gVisor (`--workspace-max-sandboxes`): a tenant at
//! its quota gets 429 on both faces (the inngest API's `rate_limited`, E2B's
//! `{"code": 429}`), nothing boots for it and the warm member it would have
//! taken stays in the pool, other tenants are not affected, and a sandbox
//! that ends gives its place back.

mod common;
mod e2b_common;

use common::{assert_error, Daemon, KillLeftovers};
use e2b_common::{assert_e2b_error, e2b, LEGACY_KEY};
use sbx_api_types::signing_key::hashed_signing_key;
use serde_json::{json, Value};

/// A request of the inngest API with `key`.
async fn call(
    d: &Daemon,
    key: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let auth = format!("Bearer {}", hashed_signing_key(key));
    let body = body.map(|b| b.to_string().into_bytes());
    d.call_with(method, path, body, &[("authorization", auth.as_str())])
        .await
}

/// `GET /v1/pool`'s (ready, starting) of the 1 vCPU / 1 GiB shape.
async fn pool(d: &Daemon) -> (u64, u64) {
    let (status, body) = call(d, LEGACY_KEY, "GET", "/v1/pool", None).await;
    assert_eq!(status, 200, "{body}");
    let shape = body["data"]
        .as_array()
        .and_then(|shapes| shapes.iter().find(|s| s["shape"] == "1x1024"))
        .unwrap_or_else(|| panic!("no 1x1024 pool: {body}"))
        .clone();
    (
        shape["ready"].as_u64().unwrap_or_default(),
        shape["starting"].as_u64().unwrap_or_default(),
    )
}

/// Polls until the pool has its one member ready.
async fn pool_ready(d: &Daemon) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    while pool(d).await != (1, 0) {
        assert!(
            std::time::Instant::now() < deadline,
            "the pool never refilled"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// `POST /v2/sandboxes` of the inngest API with `key`.
async fn create(d: &Daemon, key: &str, name: &str) -> (u16, Value) {
    let body = json!({"name": name, "vcpu": 1, "memoryMb": 1024});
    call(d, key, "POST", "/v2/sandboxes", Some(body)).await
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn a_tenant_at_its_quota_gets_429_on_both_faces_and_others_do_not() {
    let d = Daemon::start(&[
        "--signing-key",
        LEGACY_KEY,
        "--workspace-max-sandboxes",
        "2",
        "--warm-pool",
        "1x1024=1",
    ])
    .await;
    let _leftovers = KillLeftovers::of(&d);
    let alpha = d.create_key("alpha", None);
    let beta = d.create_key("beta", None);

    pool_ready(&d).await;
    let first = create(&d, &alpha, "one").await;
    assert_eq!(first.0, 201, "{}", first.1);
    let (status, e2b_created, _) = e2b(
        &d,
        Some(&alpha),
        "POST",
        "/v2/sandboxes",
        Some(json!({"templateID": "base", "timeout": 300})),
    )
    .await;
    assert_eq!(status, 201, "{e2b_created}");

    // A ready member the refused create would have taken.
    pool_ready(&d).await;
    let containers = d.runsc_containers().len();
    let refused = create(&d, &alpha, "three").await;
    assert_error(&refused, 429, "rate_limited");
    let message = refused.1["errors"][0]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(message.contains("2 of 2 sandboxes"), "{message}");
    let refused = e2b(
        &d,
        Some(&alpha),
        "POST",
        "/v2/sandboxes",
        Some(json!({"templateID": "base"})),
    )
    .await;
    assert_e2b_error(&refused, 429, "E2B create past the quota");
    assert_eq!(d.runsc_containers().len(), containers, "nothing booted");
    assert_eq!(
        pool(&d).await,
        (1, 0),
        "the warm member went back to the pool"
    );

    // A repeat of the create that worked answers with its sandbox (idempotent by name).
    let again = create(&d, &alpha, "one").await;
    assert_eq!(again.0, 200, "{}", again.1);
    assert_eq!(again.1["data"]["id"], first.1["data"]["id"]);
    // Another tenant has a quota of its own.
    let other = create(&d, &beta, "one").await;
    assert_eq!(other.0, 201, "{}", other.1);

    let id = first.1["data"]["id"].as_str().unwrap().to_string();
    let (status, body) = call(&d, &alpha, "DELETE", &format!("/v2/sandboxes/{id}"), None).await;
    assert!(status == 204 || status == 202, "{status} {body}");
    // Its place is free once it is TERMINATED (a 202 answers before that).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let (_, got) = call(&d, &alpha, "GET", &format!("/v2/sandboxes/{id}"), None).await;
        if got["data"]["status"] == "TERMINATED" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not TERMINATED: {got}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let freed = create(&d, &alpha, "three").await;
    assert_eq!(freed.0, 201, "{}", freed.1);
}
