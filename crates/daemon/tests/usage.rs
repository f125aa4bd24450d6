//! Per-sandbox usage on real gVisor (`GET /v1/sandboxes/{id}/metrics`,
//! sampled every second here): a CPU busy loop shows as CPU %, an allocation
//! as memory, a file as disk; a paused sandbox gets no samples while another
//! one does; a destroyed sandbox's metrics are 404.

mod common;

use common::{assert_error, Daemon, KillLeftovers};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// How long a sample showing the expected use may take to appear.
const WITHIN: Duration = Duration::from_secs(60);

async fn metrics(d: &Daemon, id: &str) -> Value {
    let (status, body) = d
        .call("GET", &format!("/v1/sandboxes/{id}/metrics"), None)
        .await;
    assert_eq!(status, 200, "metrics of {id}: {body}");
    body["data"].clone()
}

fn samples(m: &Value) -> Vec<Value> {
    m["samples"].as_array().cloned().unwrap_or_default()
}

/// Polls the metrics of `id` until `pred` holds for the newest sample; returns it.
async fn wait_sample(d: &Daemon, id: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + WITHIN;
    loop {
        let m = metrics(d, id).await;
        if let Some(last) = samples(&m).last() {
            if pred(last) {
                return last.clone();
            }
        }
        assert!(Instant::now() < deadline, "{id}: never {what}: {m}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn start_process(d: &Daemon, id: &str, argv: &[&str]) {
    let (status, body) = d
        .call(
            "POST",
            &format!("/v2/sandboxes/{id}/processes"),
            Some(json!({ "command": argv })),
        )
        .await;
    assert_eq!(status, 201, "start {argv:?}: {body}");
}

fn num(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing: {v}"))
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn busy_loops_allocations_pauses_and_destroys_show_in_the_metrics() {
    let _leftovers: KillLeftovers;
    let d = Daemon::start(&["--usage-sample-secs", "1", "--sandbox-disk-mb", "256"]).await;
    _leftovers = KillLeftovers::of(&d);
    let busy = d.create_running("busy").await;
    let hog = d.create_running("hog").await;

    // Limits and the shape of a sample.
    let m = metrics(&d, &busy).await;
    assert_eq!(
        (m["vcpu"].as_u64(), m["memoryMb"].as_u64()),
        (Some(1), Some(1024)),
        "{m}"
    );
    assert_eq!(m["intervalSecs"], 1, "{m}");

    // A busy loop: CPU % of its one vCPU above 50 within a few samples.
    start_process(&d, &busy, &["sh", "-c", "while :; do :; done"]).await;
    let s = wait_sample(&d, &busy, "busy (cpuPercent > 50)", |s| {
        num(s, "cpuPercent") > 50.0
    })
    .await;
    println!("busy loop sample: {s}");
    assert!(
        num(&s, "cpuTimeMs") > 0.0 && num(&s, "processes") >= 2.0,
        "{s}"
    );
    assert!(
        num(&s, "memoryBytes") > 0.0 && num(&s, "memoryPeakBytes") >= num(&s, "memoryBytes"),
        "{s}"
    );

    // ~200 MiB allocated and touched: memory rises by at least 150 MiB.
    let before = wait_sample(&d, &hog, "sampled", |_| true).await;
    let base = num(&before, "memoryBytes");
    start_process(
        &d,
        &hog,
        &[
            "python3",
            "-c",
            "import time\nb = bytearray(200 * 1024 * 1024)\ntime.sleep(3600)",
        ],
    )
    .await;
    let grown = wait_sample(&d, &hog, "memory up by 150 MiB", |s| {
        num(s, "memoryBytes") >= base + 150.0 * 1024.0 * 1024.0
    })
    .await;
    println!("memory before {base}, after the allocation: {grown}");

    // 64 MiB written to the sandbox's disk (256 MiB): disk use rises by at least 48 MiB.
    assert_eq!(
        num(&grown, "diskTotalBytes") as u64 / (1024 * 1024) / 10,
        25,
        "{grown}"
    );
    let disk0 = num(&grown, "diskUsedBytes");
    let (code, _, err) = d
        .exec(
            &hog,
            &[
                "sh",
                "-c",
                "dd if=/dev/urandom of=/root/f bs=1M count=64 && sync",
            ],
        )
        .await;
    assert_eq!(code, 0, "{err}");
    let written = wait_sample(&d, &hog, "disk up by 48 MiB", |s| {
        num(s, "diskUsedBytes") >= disk0 + 48.0 * 1024.0 * 1024.0
    })
    .await;
    println!("disk before {disk0}, after 64 MiB: {written}");

    // Paused: no new samples of `busy` while `hog` gets three more (the sampler's clock).
    let (status, body) = d
        .call("POST", &format!("/v2/sandboxes/{busy}/pause"), None)
        .await;
    assert_eq!(status, 200, "{body}");
    d.wait_status(&busy, "PAUSED", Duration::from_secs(60))
        .await;
    let frozen = samples(&metrics(&d, &busy).await);
    let hog_count = samples(&metrics(&d, &hog).await).len();
    let deadline = Instant::now() + WITHIN;
    while samples(&metrics(&d, &hog).await).len() < hog_count + 3 {
        assert!(Instant::now() < deadline, "hog stopped being sampled");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        samples(&metrics(&d, &busy).await),
        frozen,
        "a paused sandbox was sampled"
    );
    assert!(
        !frozen.is_empty(),
        "the samples of before the pause are kept"
    );

    // Destroyed: 404, for the paused one too.
    for id in [&busy, &hog] {
        let (status, body) = d.call("DELETE", &format!("/v2/sandboxes/{id}"), None).await;
        assert!(status == 204 || status == 202, "{body}");
        d.wait_status(id, "TERMINATED", Duration::from_secs(60))
            .await;
        let got = d
            .call("GET", &format!("/v1/sandboxes/{id}/metrics"), None)
            .await;
        assert_error(&got, 404, "sandbox_not_found");
    }
}
