//! Admission control on real gVisor, with a small configured capacity: a
//! create that does not fit gets 503 `compute_unavailable` at once (`storage_full`
//! when the data dir lacks free disk), and the
//! warm pool never boots past the capacity.

mod common;

use common::{assert_error, Daemon, KillLeftovers};
use serde_json::json;
use std::time::{Duration, Instant};

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn creates_beyond_capacity_are_refused_quickly() {
    let d = Daemon::start(&[
        "--capacity-memory-mb",
        "2048",
        "--capacity-vcpus",
        "2",
        "--cpu-overcommit",
        "1",
    ])
    .await;
    let _leftovers = KillLeftovers::of(&d);
    let a = d.create_running("a").await;
    d.create_running("b").await;
    for body in [
        json!({"name": "c", "vcpu": 1, "memoryMb": 1024}),
        json!({"name": "big", "vcpu": 2, "memoryMb": 2048}),
    ] {
        let t = Instant::now();
        let got = d.call("POST", "/v2/sandboxes", Some(body)).await;
        assert_error(&got, 503, "compute_unavailable");
        assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    }
    // A repeat of an existing create still answers with the sandbox.
    let (status, again) = d
        .call(
            "POST",
            "/v2/sandboxes",
            Some(json!({"name": "a", "vcpu": 1, "memoryMb": 1024})),
        )
        .await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["data"]["id"], a.as_str());
    // Room comes back when a sandbox ends.
    let (status, _) = d.call("DELETE", &format!("/v2/sandboxes/{a}"), None).await;
    assert!(status == 202 || status == 204);
    d.wait_status(&a, "TERMINATED", Duration::from_secs(60))
        .await;
    d.create_running("c").await;
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn the_warm_pool_counts_against_the_node_not_a_tenant() {
    let d = Daemon::start(&["--capacity-memory-mb", "2048", "--warm-pool", "1x1024=2"]).await;
    let _leftovers = KillLeftovers::of(&d);
    // Both members fit and boot.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, pool) = d.call("GET", "/v1/pool", None).await;
        if pool["data"][0]["ready"] == 2 {
            break;
        }
        assert!(Instant::now() < deadline, "pool never filled: {pool}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Creates take members (they already hold their capacity); refills do not fit.
    d.create_running("one").await;
    d.create_running("two").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (_, pool) = d.call("GET", "/v1/pool", None).await;
    assert_eq!(pool["data"][0]["ready"], 0, "{pool}");
    assert_error(
        &d.call(
            "POST",
            "/v2/sandboxes",
            Some(json!({"name": "three", "vcpu": 1, "memoryMb": 1024})),
        )
        .await,
        503,
        "compute_unavailable",
    );
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn a_data_dir_without_free_disk_refuses_creates() {
    let d = Daemon::start(&["--min-free-disk-mb", "1000000000"]).await;
    let _leftovers = KillLeftovers::of(&d);
    let got = d
        .call(
            "POST",
            "/v2/sandboxes",
            Some(json!({"name": "full", "vcpu": 1, "memoryMb": 1024})),
        )
        .await;
    assert_error(&got, 503, "storage_full");
    assert!(got.1["errors"][0]["message"]
        .as_str()
        .unwrap()
        .contains("disk"));
    let (_, list) = d.call("GET", "/v2/sandboxes", None).await;
    assert_eq!(list["data"].as_array().map_or(0, Vec::len), 0, "{list}");
}
