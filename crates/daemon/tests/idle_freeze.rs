//! Idle sandboxes sleep (integration: real gVisor, sbxd, the cgroup freezer
//! of this host): an idle sandbox's host processes are frozen and burn no
//! CPU; every way of reaching it (exec, files, snapshot, pause, destroy,
//! an sbxd restart) wakes it first; a guest process keeps it awake, sbxd's
//! relay after a restart does not; an sbxd that stops leaves none frozen. And what an idle sandbox holds: the
//! agent's read-only data is not copied into it.

mod common;

use common::{Daemon, KillLeftovers};
use serde_json::json;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How long a test waits for the freezer task (it looks twice a second).
const PATIENCE: Duration = Duration::from_secs(30);

/// The v1 freezer state file of a sandbox's container (this host is cgroup v1).
fn freezer_state(id: &str) -> PathBuf {
    PathBuf::from(format!("/sys/fs/cgroup/freezer/sbx/sbx-{id}/freezer.state"))
}

fn state(id: &str) -> String {
    std::fs::read_to_string(freezer_state(id))
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// CPU time (ns) of every process in the sandbox's cgroup.
fn cpu_ns(id: &str) -> u64 {
    let path = format!("/sys/fs/cgroup/cpuacct/sbx/sbx-{id}/cpuacct.usage");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .trim()
        .parse()
        .unwrap()
}

async fn wait_frozen(id: &str) {
    let deadline = Instant::now() + PATIENCE;
    while state(id) != "FROZEN" {
        assert!(
            Instant::now() < deadline,
            "sandbox {id} never frozen (state {:?})",
            state(id)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn sleepy_daemon() -> Daemon {
    Daemon::start(&["--freeze-idle-after-secs", "1"]).await
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn an_idle_sandbox_is_frozen_burns_nothing_and_wakes_for_each_request() {
    let d = sleepy_daemon().await;
    let _cleanup = KillLeftovers::of(&d);
    // `busy` first: when `idle` (created after it) is frozen, `busy` has been
    // idle as long, and only its process keeps it awake.
    let busy = d.create_running("busy").await;
    let (status, body) = d
        .call(
            "POST",
            &format!("/v2/sandboxes/{busy}/processes"),
            Some(json!({ "command": ["sleep", "600"] })),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let idle = d.create_running("idle").await;
    wait_frozen(&idle).await;
    assert_eq!(
        state(&busy),
        "THAWED",
        "a sandbox with a guest process was frozen"
    );

    // Frozen means no host CPU at all (an awake idle sandbox burns ~2 % of a core).
    let before = cpu_ns(&idle);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(cpu_ns(&idle), before, "a frozen sandbox used CPU");

    // Usage sampling (every 5 s) does not wake it; its process count is PID 1.
    let (status, m) = d
        .call("GET", &format!("/v1/sandboxes/{idle}/metrics"), None)
        .await;
    assert_eq!(status, 200, "{m}");
    assert_eq!(state(&idle), "FROZEN");

    // The metrics count it (`busy` is awake).
    let scrape = d.http.get(d.url("/metrics")).send().await.unwrap();
    let text = scrape.text().await.unwrap();
    assert!(
        text.lines().any(|l| l == "sbx_sandboxes_asleep 1"),
        "{text}"
    );

    // An exec wakes it and answers.
    let (code, out, _) = d.exec(&idle, &["echo", "awake"]).await;
    assert_eq!((code, out.trim()), (0, "awake"));
    assert_eq!(state(&idle), "THAWED");

    // A file written while awake is read back after it slept again.
    let resp = d
        .http
        .put(d.url(&format!("/v2/sandboxes/{idle}/files?path=/tmp/f.txt")))
        .body("kept")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    wait_frozen(&idle).await;
    let got = d
        .http
        .get(d.url(&format!("/v2/sandboxes/{idle}/files?path=/tmp/f.txt")))
        .send()
        .await
        .unwrap();
    assert_eq!(got.status(), 200);
    assert_eq!(got.text().await.unwrap(), "kept");

    // Pause and resume of a frozen sandbox.
    wait_frozen(&idle).await;
    let (status, body) = d
        .call("POST", &format!("/v2/sandboxes/{idle}/pause"), None)
        .await;
    assert!(status == 200 || status == 202, "pause: {status} {body}");
    d.wait_status(&idle, "PAUSED", PATIENCE).await;
    let (status, body) = d
        .call("POST", &format!("/v2/sandboxes/{idle}/resume"), None)
        .await;
    assert!(status == 200 || status == 202, "resume: {status} {body}");
    d.wait_status(&idle, "RUNNING", PATIENCE).await;
    let (code, out, _) = d.exec(&idle, &["cat", "/tmp/f.txt"]).await;
    assert_eq!((code, out.as_str()), (0, "kept"));

    // A snapshot of a frozen sandbox is READY and its clone answers.
    wait_frozen(&idle).await;
    let sid = d.snapshot_ready(&idle, Duration::from_secs(120)).await;
    let clone = d
        .clone_running(&sid, "clone", Duration::from_secs(120))
        .await;
    let (code, out, _) = d.exec(&clone, &["cat", "/tmp/f.txt"]).await;
    assert_eq!((code, out.as_str()), (0, "kept"));

    // Destroy of a frozen sandbox ends its processes (SIGKILL waits for a thaw).
    wait_frozen(&idle).await;
    d.destroy_and_wait(&idle).await;
    assert!(
        d.sandbox_host_pids(&idle).is_empty(),
        "processes left behind"
    );
    d.destroy_and_wait(&busy).await;
    d.destroy_and_wait(&clone).await;
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn sandboxes_left_frozen_by_a_dead_sbxd_are_thawed_when_it_restarts() {
    let mut d = sleepy_daemon().await;
    let _cleanup = KillLeftovers::of(&d);
    let id = d.create_running("left").await;
    wait_frozen(&id).await;
    d.kill9();
    assert_eq!(state(&id), "FROZEN");
    // Restarted without freezing: whatever thawed it was the restart itself.
    d.set_arg("--freeze-idle-after-secs", "0");
    d.spawn().await;
    assert_eq!(state(&id), "THAWED");
    let (code, out, _) = d.exec(&id, &["echo", "back"]).await;
    assert_eq!((code, out.trim()), (0, "back"));
    d.destroy_and_wait(&id).await;
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn a_sandbox_reached_through_a_relay_after_a_restart_sleeps_too() {
    let mut d = Daemon::start(&["--freeze-idle-after-secs", "0"]).await;
    let _cleanup = KillLeftovers::of(&d);
    let id = d.create_running("relayed").await;
    // Its agent's stdio channel ends with this sbxd: the next one reaches it
    // through `runsc exec … sbx-agent relay`, a process in the guest.
    d.kill9();
    d.set_arg("--freeze-idle-after-secs", "1");
    d.spawn().await;
    let (code, out, _) = d
        .exec(
            &id,
            &["sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"],
        )
        .await;
    assert_eq!(code, 0);
    assert!(
        out.contains("sbx-agent relay"),
        "no relay in the guest: {out}"
    );
    wait_frozen(&id).await;
    let (code, out, _) = d.exec(&id, &["echo", "awake"]).await;
    assert_eq!((code, out.trim()), (0, "awake"));
    d.destroy_and_wait(&id).await;
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn an_sbxd_that_stops_leaves_no_sandbox_frozen() {
    let mut d = sleepy_daemon().await;
    let _cleanup = KillLeftovers::of(&d);
    let id = d.create_running("stays").await;
    wait_frozen(&id).await;
    d.terminate();
    let after = state(&id);
    if after == "FROZEN" {
        // Thawed here so that the cleanup's runsc calls can end it (they
        // would wait forever), then the test fails.
        std::fs::write(freezer_state(&id), "THAWED").expect("thaw");
    }
    assert_eq!(after, "THAWED", "a stopped sbxd left its sandbox frozen");
    // `runsc list` asks every sandbox for its state: it answers again (it
    // waited forever while one was frozen).
    let listed = d.runsc_containers();
    assert!(listed.contains(&format!("sbx-{id}")), "{listed:?}");
    d.spawn().await;
    let (code, out, _) = d.exec(&id, &["echo", "back"]).await;
    assert_eq!((code, out.trim()), (0, "back"));
    d.destroy_and_wait(&id).await;
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn a_sleeping_warm_pool_member_is_handed_out_awake_and_configured() {
    let d = Daemon::start(&["--warm-pool", "1x1024=1", "--freeze-idle-after-secs", "1"]).await;
    let _cleanup = KillLeftovers::of(&d);
    let deadline = Instant::now() + Duration::from_secs(90);
    let member = loop {
        let found: Vec<String> = d
            .runsc_containers()
            .into_iter()
            .filter_map(|c| c.strip_prefix("sbx-").map(str::to_string))
            .collect();
        if let [one] = found.as_slice() {
            break one.clone();
        }
        assert!(Instant::now() < deadline, "no pool member: {found:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    wait_frozen(&member).await;
    let (status, body) = d
        .call(
            "POST",
            "/v2/sandboxes",
            Some(json!({"name": "warm", "vcpu": 1, "memoryMb": 1024,
                        "environment": {"GREETING": "hi"}})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["data"]["status"], "RUNNING");
    assert_eq!(body["data"]["id"], member.as_str(), "not the pool member");
    let (code, out, _) = d.exec(&member, &["sh", "-c", "echo $GREETING"]).await;
    assert_eq!((code, out.trim()), (0, "hi"));
    d.destroy_and_wait(&member).await;
}

/// The agent's read-only segment (`.rodata`, `.eh_frame`: ~0.9 MB) stays
/// the host's page cache of the one agent binary, shared by every sandbox:
/// gVisor's loader would copy it into each sandbox if its file part ended
/// inside a page (crates/agent/link/pad-rodata.ld, crates/runsc/NOTES.md
/// section 12). gVisor's `/proc/1/smaps` counts private pages as `Anonymous`.
#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn the_agents_read_only_data_is_shared_not_copied_into_each_sandbox() {
    let d = Daemon::start(&[]).await;
    let id = d.create_running("lean").await;
    // One line per mapping of the agent binary: its permissions and private kB.
    let script = r#"/^[0-9a-f]+-/ { m = ($6 ~ /sbx-agent$/) ? $2 : "" }
                    m != "" && /^Anonymous:/ { print m, $2 }"#;
    let (code, out, err) = d.exec(&id, &["awk", script, "/proc/1/smaps"]).await;
    assert_eq!(code, 0, "{err}");
    let maps: Vec<(String, u64)> = out
        .lines()
        .filter_map(|l| {
            let (perms, kb) = l.split_once(' ')?;
            Some((perms.to_string(), kb.trim().parse().ok()?))
        })
        .collect();
    let first_read_only = maps.iter().find(|(perms, _)| perms == "r--p");
    assert_eq!(
        first_read_only.map(|(_, kb)| *kb),
        Some(0),
        "the agent's read-only data was copied into the sandbox:\n{out}"
    );
    // The column measures something: the writable data is private, as it must be.
    assert!(
        maps.iter().any(|(perms, kb)| perms == "rw-p" && *kb > 0),
        "no private page in any agent mapping:\n{out}"
    );
    d.destroy_and_wait(&id).await;
}
