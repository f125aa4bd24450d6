//! Shapes on real gVisor: the grid of 1, 2 or 4 vCPU with 1, 2 or 4 GiB per
//! vCPU, narrowed by `--shapes`; a large shape's memory limit is the one the
//! sandbox sees (guest `/proc/meminfo`) and the one its host cgroup enforces;
//! a shape outside the list is refused with `invalid_field_format` naming the
//! allowed ones, and a warm pool of such a shape keeps sbxd from starting.

mod common;

use common::{assert_error, start_refused, Daemon, KillLeftovers};
use serde_json::json;
use std::time::Duration;

/// `MemTotal` of the guest's `/proc/meminfo`, MiB.
async fn guest_mem_total_mb(d: &Daemon, id: &str) -> u64 {
    let (code, out, err) = d.exec(id, &["cat", "/proc/meminfo"]).await;
    assert_eq!(code, 0, "{err}");
    let kib: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no MemTotal in {out}"));
    kib / 1024
}

/// The memory limit of the sandbox's host cgroup, MiB (cgroup v2 `memory.max`
/// or v1 `memory.limit_in_bytes` under the `sbx` parent).
fn host_cgroup_limit_mb(id: &str) -> u64 {
    let cid = format!("sbx-{id}");
    for file in [
        format!("/sys/fs/cgroup/sbx/{cid}/memory.max"),
        format!("/sys/fs/cgroup/memory/sbx/{cid}/memory.limit_in_bytes"),
    ] {
        if let Ok(text) = std::fs::read_to_string(&file) {
            let bytes: u64 = text
                .trim()
                .parse()
                .unwrap_or_else(|_| panic!("{file}: {text:?}"));
            return bytes / (1024 * 1024);
        }
    }
    panic!("no memory cgroup found for {cid}");
}

/// Creates a sandbox of `vcpu`/`memory_mb` and waits until it runs; its id.
async fn create_shape(d: &Daemon, name: &str, vcpu: u32, memory_mb: u32) -> String {
    let (status, body) = d
        .call(
            "POST",
            "/v2/sandboxes",
            Some(json!({"name": name, "vcpu": vcpu, "memoryMb": memory_mb})),
        )
        .await;
    assert!(status == 201 || status == 202, "create: {status} {body}");
    let id = body["data"]["id"].as_str().unwrap().to_string();
    let running = d
        .wait_status(&id, "RUNNING", Duration::from_secs(120))
        .await;
    assert_eq!(running["resources"]["vcpu"], vcpu, "{running}");
    assert_eq!(running["resources"]["memoryMb"], memory_mb, "{running}");
    id
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn a_large_shape_gets_its_memory_inside_gvisor_and_shapes_narrow_the_grid() {
    let d = Daemon::start(&["--shapes", "1x1024,2x8192"]).await;
    let _leftovers = KillLeftovers::of(&d);
    let (status, shapes) = d.call("GET", "/v1/shapes", None).await;
    assert_eq!(status, 200, "{shapes}");
    assert_eq!(
        shapes["data"],
        json!([{"vcpu": 1, "memoryMb": 1024}, {"vcpu": 2, "memoryMb": 8192}])
    );

    // 2/8192: the guest's total memory and the host cgroup's limit are 8 GiB
    // (gVisor sizes its memory from the limit; the host has more).
    let big = create_shape(&d, "big", 2, 8192).await;
    let seen = guest_mem_total_mb(&d, &big).await;
    eprintln!("2/8192: guest MemTotal {seen} MiB");
    assert!(
        (7680..=8192).contains(&seen),
        "2/8192 sees MemTotal {seen} MiB"
    );
    assert_eq!(host_cgroup_limit_mb(&big), 8192);
    // 1/1024 on the same node sees its own, smaller memory: the size follows the shape.
    let small = create_shape(&d, "small", 1, 1024).await;
    let seen = guest_mem_total_mb(&d, &small).await;
    eprintln!("1/1024: guest MemTotal {seen} MiB");
    assert!(
        (900..=1024).contains(&seen),
        "1/1024 sees MemTotal {seen} MiB"
    );
    assert_eq!(host_cgroup_limit_mb(&small), 1024);

    // A grid shape this node leaves out, and a shape off the grid: 400 as
    // before, naming what is offered.
    for (vcpu, memory_mb) in [(2, 2048), (3, 3072)] {
        let got = d
            .call(
                "POST",
                "/v2/sandboxes",
                Some(json!({"name": "refused", "vcpu": vcpu, "memoryMb": memory_mb})),
            )
            .await;
        assert_error(&got, 400, "invalid_field_format");
        let message = got.1["errors"][0]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("use 1/1024 or 2/8192"),
            "{vcpu}/{memory_mb}: {message}"
        );
    }
    d.destroy_all(Duration::from_secs(60)).await;
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn every_grid_shape_is_offered_by_default_and_the_pool_may_use_any() {
    let d = Daemon::start(&["--warm-pool", "4x16384=1"]).await;
    let _leftovers = KillLeftovers::of(&d);
    let (_, shapes) = d.call("GET", "/v1/shapes", None).await;
    let listed: Vec<(u64, u64)> = shapes["data"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|s| (s["vcpu"].as_u64().unwrap(), s["memoryMb"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        listed,
        [1024, 2048, 4096]
            .map(|m| (1, m))
            .into_iter()
            .chain([2048, 4096, 8192].map(|m| (2, m)))
            .chain([4096, 8192, 16384].map(|m| (4, m)))
            .collect::<Vec<_>>()
    );
    let (_, pool) = d.call("GET", "/v1/pool", None).await;
    assert_eq!(pool["data"][0]["shape"], "4x16384", "{pool}");
    assert_eq!(pool["data"][0]["target"], 1, "{pool}");
    d.destroy_all(Duration::from_secs(60)).await;
}

#[test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
fn shapes_off_the_grid_or_a_pool_outside_them_keep_sbxd_from_starting() {
    for (args, expect) in [
        (&["--shapes", "3x3072"][..], "--shapes \"3x3072\""),
        (&["--shapes", "2x1024"][..], "use 1/1024, 1/2048"),
        (
            &["--shapes", "1x1024,4x4096", "--warm-pool", "2x2048=1"][..],
            "--warm-pool \"2x2048=1\": resources: 2 vCPU / 2048 MiB is not offered; use 1/1024 or 4/4096",
        ),
    ] {
        let (code, stderr) = start_refused(args, Duration::from_secs(30));
        assert_ne!(code, Some(0), "{args:?}");
        assert!(stderr.contains(expect), "{args:?}: {stderr}");
    }
}
