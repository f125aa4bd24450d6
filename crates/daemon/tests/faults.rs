//! Fault injection on real gVisor: `kill -9` of sbxd in the middle of each
//! kind of request, of a sandbox's host processes and of its agent, plus load
//! (50 concurrent creates), an output flood and a fork bomb.
//!
//! Every case ends with the same two questions: does each sandbox end in a
//! state that tells the truth (RUNNING and answering exec, FAILED with a
//! reason, or TERMINATED), and do the store and the host agree (runsc
//! containers, sandbox dirs, cgroups and host processes exist exactly for the
//! RUNNING/PAUSED sandboxes)?
//!
//! `./scripts/test` runs this file twice: on the default SQLite store, then
//! with `SBX_TEST_STORE=postgres` (every daemon on a PostgreSQL database of its
//! own; see common/store.rs).

mod common;

use common::{host_pids, kill9_pids, rss_kib, Daemon, KillLeftovers};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const SETTLE: Duration = Duration::from_secs(60);

/// The fault tests run one at a time: a fork bomb or fifty boots on this
/// 2-core machine would otherwise decide the other tests' latency assertions.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Polls the daemon's store (SQLite or PostgreSQL, beside the running sbxd)
/// until `sql` returns `want`.
async fn wait_sql(d: &Daemon, sql: &str, want: &str, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if d.sql(sql) == want {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    false
}

fn sql_value(d: &Daemon, sql: &str) -> String {
    d.sql(sql)
}

async fn find_by_name(d: &Daemon, name: &str) -> Option<Value> {
    d.list_all()
        .await
        .into_iter()
        .find(|s| s["name"] == name && !matches!(s["status"].as_str(), Some("TERMINATED")))
}

/// Reads an exec answer without asserting its status.
async fn exec_raw(d: &Daemon, id: &str, argv: &[&str], timeout_ms: u64) -> (u16, Value) {
    d.call(
        "POST",
        &format!("/v2/sandboxes/{id}/exec"),
        Some(json!({"command": argv, "timeout": format!("{timeout_ms}ms")})),
    )
    .await
}

/// Retries a trivial exec until it answers 200/0 or `timeout` passes.
async fn answers_within(d: &Daemon, id: &str, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        let (status, body) = exec_raw(d, id, &["echo", "ok"], 5000).await;
        if status == 200 && body["data"]["exitCode"] == 0 {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    false
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn kill9_during_create_then_restart_tells_the_truth() {
    let _serial = SERIAL.lock().await;
    // Declared first so that it is dropped last, after sbxd is gone.
    let _leftovers: KillLeftovers;
    let mut d = Daemon::start(&[]).await;
    _leftovers = KillLeftovers::of(&d);
    // Two moments: right after the row is written (PENDING/STARTING, nothing
    // on the host yet or runsc half-way), and once runsc knows the container
    // (agent not yet attached, most likely).
    for (name, moment, delay_ms) in [
        ("row-0", "row", 0),
        ("row-40", "row", 40),
        ("row-100", "row", 100),
        ("row-200", "row", 200),
        ("container", "container", 0),
    ] {
        let http = d.http.clone();
        let url = d.url("/v2/sandboxes");
        let body = json!({"name": name, "vcpu": 1, "memoryMb": 1024}).to_string();
        let req = tokio::spawn(async move {
            http.post(url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
        });
        let hit = match moment {
            "row" => {
                let hit = wait_sql(
                    &d,
                    &format!("SELECT count(*) FROM sandboxes WHERE name = '{name}'"),
                    "1",
                    Duration::from_secs(10),
                )
                .await;
                tokio::time::sleep(Duration::from_millis(delay_ms)).await;
                hit
            }
            _ => {
                let deadline = Instant::now() + Duration::from_secs(10);
                let mut seen = false;
                while !seen && Instant::now() < deadline {
                    let id = sql_value(
                        &d,
                        &format!("SELECT id FROM sandboxes WHERE name = '{name}'"),
                    );
                    seen = !id.is_empty() && d.runsc_containers().contains(&format!("sbx-{id}"));
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                seen
            }
        };
        d.kill9();
        let answered = req.await.unwrap();
        println!(
            "create '{name}': killed at {moment}+{delay_ms}ms (reached: {hit}); client got {:?}",
            answered.as_ref().map(|r| r.status().as_u16())
        );
        d.spawn().await;
        let Some(s) = find_by_name(&d, name).await else {
            // Killed before the row was committed: nothing may exist anywhere.
            assert!(answered.is_err(), "create answered but no sandbox exists");
            d.assert_host_matches_store(SETTLE).await;
            continue;
        };
        let id = s["id"].as_str().unwrap().to_string();
        let status = d.assert_truthful(&id, SETTLE).await;
        let (_, now) = d.call("GET", &format!("/v2/sandboxes/{id}"), None).await;
        println!(
            "create '{name}' after restart: {status} {}",
            now["data"]["error"]
        );
        // The client retries (same name, same config): idempotent.
        let (code, again) = d
            .call(
                "POST",
                "/v2/sandboxes",
                Some(json!({"name": name, "vcpu": 1, "memoryMb": 1024})),
            )
            .await;
        if status == "RUNNING" {
            assert_eq!(code, 200, "{again}");
            assert_eq!(
                again["data"]["id"],
                id.as_str(),
                "retry made a second sandbox"
            );
        } else {
            assert!(code == 201 || code == 202, "{code} {again}");
        }
        // Killed while `runsc run` was creating the container: runsc may not
        // list it, yet its sandbox and gofer run; sbxd must find and remove
        // them by id (runtime/leftovers.rs) instead of leaking them.
        let problems = d.host_store_problems_after(Duration::from_secs(15)).await;
        assert!(
            problems.is_empty(),
            "host and store disagree: {}",
            problems.join("; ")
        );
    }
    d.destroy_all(SETTLE).await;
    d.assert_host_matches_store(SETTLE).await;
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn kill9_during_exec_keeps_the_sandbox_and_its_processes() {
    let _serial = SERIAL.lock().await;
    // Declared first so that it is dropped last, after sbxd is gone.
    let _leftovers: KillLeftovers;
    let mut d = Daemon::start(&[]).await;
    _leftovers = KillLeftovers::of(&d);
    let id = d.create_running("exec-crash").await;
    // A background process that must survive the crash. It replaces the file
    // by a rename: `echo > file` truncates first, and a read in between saw
    // an empty file (a CI flake).
    let (status, p) = d
        .call(
            "POST",
            &format!("/v2/sandboxes/{id}/processes"),
            Some(json!({"command": ["sh", "-c", "i=0; while :; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.1; done"]})),
        )
        .await;
    assert_eq!(status, 201, "{p}");
    let pid = p["data"]["id"].as_str().unwrap().to_string();

    let http = d.http.clone();
    let url = d.url(&format!("/v2/sandboxes/{id}/exec"));
    let req = tokio::spawn(async move {
        http.post(url)
            .header("content-type", "application/json")
            .body(
                json!({"command": ["sh", "-c", "echo started > /tmp/exec; sleep 30; echo done >> /tmp/exec"], "timeout": "60000ms"})
                    .to_string(),
            )
            .send()
            .await
    });
    // Kill sbxd once the exec is known to be running inside the sandbox.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, out, _) = d.exec(&id, &["cat", "/tmp/exec"]).await;
        if out.starts_with("started") {
            break;
        }
        assert!(Instant::now() < deadline, "the exec never started");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    d.kill9();
    assert!(
        req.await.unwrap().is_err(),
        "exec answered although sbxd died"
    );
    d.spawn().await;

    assert_eq!(d.assert_truthful(&id, SETTLE).await, "RUNNING");
    let (_, out, _) = d.exec(&id, &["cat", "/tmp/exec"]).await;
    assert!(out.starts_with("started"), "{out:?}");
    // The background process lived on and is still known.
    let (status, got) = d
        .call("GET", &format!("/v2/sandboxes/{id}/processes/{pid}"), None)
        .await;
    assert_eq!(status, 200, "{got}");
    assert_eq!(got["data"]["state"], "RUNNING", "{got}");
    let before: u64 = d
        .exec(&id, &["cat", "/tmp/count"])
        .await
        .1
        .trim()
        .parse()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let after: u64 = d
            .exec(&id, &["cat", "/tmp/count"])
            .await
            .1
            .trim()
            .parse()
            .unwrap();
        if after > before {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "background loop stopped: {before} → {after}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    d.assert_host_matches_store(SETTLE).await;
    d.destroy_all(SETTLE).await;
    d.assert_host_matches_store(SETTLE).await;
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn kill9_during_upload_leaves_no_partial_file() {
    let _serial = SERIAL.lock().await;
    // Declared first so that it is dropped last, after sbxd is gone.
    let _leftovers: KillLeftovers;
    let mut d = Daemon::start(&[]).await;
    _leftovers = KillLeftovers::of(&d);
    let id = d.create_running("upload-crash").await;
    const TOTAL: usize = 40 * 1024 * 1024;
    const PIECE: usize = 256 * 1024;
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(1);
    let body = reqwest::Body::wrap_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
    let http = d.http.clone();
    let url = d.url(&format!("/v2/sandboxes/{id}/files?path=/tmp/up/big.bin"));
    let req = tokio::spawn(async move {
        http.put(url)
            .header("content-type", "application/octet-stream")
            .body(body)
            .send()
            .await
    });
    // Send a quarter of the body, then kill sbxd while the client still streams.
    let mut sent = 0;
    while sent < TOTAL / 4 {
        if tx.send(Ok(vec![b'x'; PIECE])).await.is_err() {
            break;
        }
        sent += PIECE;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    d.kill9();
    drop(tx);
    let answered = req.await.unwrap();
    println!(
        "upload: killed after {} MiB sent; client got {:?}",
        sent / (1024 * 1024),
        answered.as_ref().map(|r| r.status().as_u16())
    );
    assert!(
        !answered.as_ref().is_ok_and(|r| r.status().is_success()),
        "a cut upload was reported as written"
    );
    d.spawn().await;
    assert_eq!(d.assert_truthful(&id, SETTLE).await, "RUNNING");

    // No destination and, once the agent has noticed the dead connection, no temp file.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (_, listing, _) = d
            .exec(&id, &["sh", "-c", "ls -a /tmp/up 2>/dev/null; true"])
            .await;
        let left: Vec<&str> = listing
            .lines()
            .filter(|l| *l != "." && *l != "..")
            .collect();
        assert!(
            !left.contains(&"big.bin"),
            "a partial upload became the destination: {left:?}"
        );
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "upload temp file never removed: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The retry writes the whole file.
    let data = vec![b'y'; 3 * 1024 * 1024 + 7];
    let r = d
        .http
        .put(d.url(&format!("/v2/sandboxes/{id}/files?path=/tmp/up/big.bin")))
        .header("content-type", "application/octet-stream")
        .body(data.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let (_, size, _) = d.exec(&id, &["stat", "-c", "%s", "/tmp/up/big.bin"]).await;
    assert_eq!(size.trim(), data.len().to_string());
    d.assert_host_matches_store(SETTLE).await;
    d.destroy_all(SETTLE).await;
    d.assert_host_matches_store(SETTLE).await;
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn kill9_during_destroy_finishes_the_destroy() {
    let _serial = SERIAL.lock().await;
    // Declared first so that it is dropped last, after sbxd is gone.
    let _leftovers: KillLeftovers;
    let mut d = Daemon::start(&[]).await;
    _leftovers = KillLeftovers::of(&d);
    let keep = d.create_running("bystander").await;
    for attempt in 0..2 {
        let id = d.create_running(&format!("doomed-{attempt}")).await;
        let http = d.http.clone();
        let url = d.url(&format!("/v2/sandboxes/{id}"));
        let req = tokio::spawn(async move { http.delete(url).send().await });
        // Attempt 0: as soon as TERMINATING is recorded; attempt 1: a little later,
        // while runsc is tearing the sandbox down.
        let hit = wait_sql(
            &d,
            &format!("SELECT status FROM sandboxes WHERE id = '{id}'"),
            "TERMINATING",
            Duration::from_secs(10),
        )
        .await;
        if attempt == 1 {
            tokio::time::sleep(Duration::from_millis(60)).await;
        }
        d.kill9();
        let answered = req.await.unwrap();
        println!(
            "destroy {attempt}: TERMINATING seen in store: {hit}; client got {:?}",
            answered.as_ref().map(|r| r.status().as_u16())
        );
        d.spawn().await;
        let s = d.wait_settled(&id, SETTLE).await;
        assert_eq!(s["status"], "TERMINATED", "{s}");
        // Repeating the destroy is safe.
        let (status, _) = d.call("DELETE", &format!("/v2/sandboxes/{id}"), None).await;
        assert_eq!(status, 204);
        d.assert_host_matches_store(SETTLE).await;
    }
    assert_eq!(d.assert_truthful(&keep, SETTLE).await, "RUNNING");
    d.destroy_all(SETTLE).await;
    d.assert_host_matches_store(SETTLE).await;
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn kill9_of_the_gofer_alone() {
    let _serial = SERIAL.lock().await;
    // Declared first so that it is dropped last, after sbxd is gone.
    let _leftovers: KillLeftovers;
    let d = Daemon::start(&[]).await;
    _leftovers = KillLeftovers::of(&d);
    let id = d.create_running("gofer").await;
    let other = d.create_running("neighbour").await;
    d.exec(&id, &["sh", "-c", "echo hi > /tmp/f"]).await;
    let root = d.data_dir().join("runsc");
    let gofers = host_pids(&[
        "runsc-gofer",
        &root.to_string_lossy(),
        &format!("sandboxes/{id}/"),
    ]);
    assert_eq!(gofers.len(), 1, "gofer of {id}: {gofers:?}");
    kill9_pids(&gofers);
    // Touch the filesystem so the Sentry needs its gofer.
    let (status, body) = exec_raw(
        &d,
        &id,
        &[
            "sh",
            "-c",
            "cat /etc/os-release /tmp/f; ls /usr/bin | wc -l",
        ],
        10_000,
    )
    .await;
    println!("gofer killed: exec answered {status}: {body}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let final_status = loop {
        let s = d.wait_settled(&id, SETTLE).await;
        let status = s["status"].as_str().unwrap().to_string();
        if status != "RUNNING" {
            break status;
        }
        // Still RUNNING: then it has to really work.
        let (code, b) = exec_raw(
            &d,
            &id,
            &["sh", "-c", "cat /etc/os-release >/dev/null && echo ok"],
            10_000,
        )
        .await;
        if code == 200 && b["data"]["exitCode"] == 0 && common::b64(&b["data"]["stdout"]) == "ok\n"
        {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "sandbox says RUNNING but cannot run a command without its gofer: {code} {b}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    println!("after the gofer died the sandbox is {final_status}");
    d.assert_truthful(&id, SETTLE).await;
    assert_eq!(d.assert_truthful(&other, SETTLE).await, "RUNNING");
    d.assert_host_matches_store(SETTLE).await;
    d.destroy_all(SETTLE).await;
    d.assert_host_matches_store(SETTLE).await;
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn kill9_of_the_relay_reconnects() {
    let _serial = SERIAL.lock().await;
    // Declared first so that it is dropped last, after sbxd is gone.
    let _leftovers: KillLeftovers;
    let d = Daemon::start(&["--agent-channel", "relay"]).await;
    _leftovers = KillLeftovers::of(&d);
    let id = d.create_running("relay").await;
    let root = d.data_dir().join("runsc");
    let relays = host_pids(&[
        &root.to_string_lossy(),
        &format!("exec sbx-{id} /.sbx/sbx-agent relay"),
    ]);
    assert!(!relays.is_empty(), "no relay process for {id}");
    kill9_pids(&relays);
    assert!(
        answers_within(&d, &id, Duration::from_secs(20)).await,
        "sandbox did not come back after its relay was killed"
    );
    assert_eq!(d.assert_truthful(&id, SETTLE).await, "RUNNING");
    d.assert_host_matches_store(SETTLE).await;
    d.destroy_all(SETTLE).await;
    d.assert_host_matches_store(SETTLE).await;
}

/// A restarted sbxd has lost its end of every stdio channel: the sandboxes
/// it finds are reached through relays (their snapshots too), while a clone
/// it restores gets a channel of its own and no relay.
#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn sandboxes_from_before_a_restart_are_reached_through_a_relay() {
    let _serial = SERIAL.lock().await;
    // Declared first so that it is dropped last, after sbxd is gone.
    let _leftovers: KillLeftovers;
    let mut d = Daemon::start(&[]).await;
    _leftovers = KillLeftovers::of(&d);
    let id = d.create_running("older").await;
    let root = d.data_dir().join("runsc");
    let relay_of = |sandbox: &str| {
        host_pids(&[
            &root.to_string_lossy(),
            &format!("exec sbx-{sandbox} /.sbx/sbx-agent relay"),
        ])
    };
    assert_eq!(d.sh(&id, "echo one > /tmp/mark").await.0, 0);
    assert!(relay_of(&id).is_empty(), "a relay beside the stdio channel");
    d.kill9();
    d.spawn().await;
    let (code, out, _) = d.exec(&id, &["cat", "/tmp/mark"]).await;
    assert_eq!((code, out.as_str()), (0, "one\n"));
    assert!(!relay_of(&id).is_empty(), "no relay after the restart");

    let sid = d.snapshot_ready(&id, SETTLE).await;
    let cid = d.clone_running(&sid, "younger", SETTLE).await;
    let (code, out, _) = d.exec(&cid, &["cat", "/tmp/mark"]).await;
    assert_eq!((code, out.as_str()), (0, "one\n"));
    assert!(
        relay_of(&cid).is_empty(),
        "the clone is reached through a relay"
    );
    // The source still answers after its snapshot, through a new relay.
    assert_eq!(d.sh(&id, "true").await.0, 0);
    d.destroy_all(SETTLE).await;
    d.assert_host_matches_store(SETTLE).await;
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn killing_the_agent_from_inside() {
    let _serial = SERIAL.lock().await;
    // Declared first so that it is dropped last, after sbxd is gone.
    let _leftovers: KillLeftovers;
    let d = Daemon::start(&[]).await;
    _leftovers = KillLeftovers::of(&d);
    // 1. `kill -9 1`: Linux (and gVisor) ignore SIGKILL sent to a namespace's
    //    init from inside; if it did die, the sandbox must end FAILED.
    let a = d.create_running("kill-init").await;
    let (status, body) = exec_raw(&d, &a, &["sh", "-c", "kill -9 1; echo rc=$?"], 10_000).await;
    println!(
        "kill -9 1 → {status} {}",
        body["data"]["stdout"]
            .as_str()
            .map(|s| common::b64(&Value::String(s.into())))
            .unwrap_or_default()
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let sa = d.assert_truthful(&a, SETTLE).await;
    let (_, now) = d.call("GET", &format!("/v2/sandboxes/{a}"), None).await;
    println!(
        "after kill -9 1 the sandbox is {sa} {}",
        now["data"]["error"]
    );
    assert!(sa == "RUNNING" || sa == "FAILED", "{sa}");

    // 2. `kill -9 -1`: every process but init, including the relay inside and
    //    this exec itself. The agent stays; the daemon must reconnect.
    let b = d.create_running("kill-all").await;
    let (status, body) = exec_raw(&d, &b, &["sh", "-c", "kill -9 -1; sleep 1"], 10_000).await;
    println!("kill -9 -1 → {status} {body}");
    assert!(
        answers_within(&d, &b, Duration::from_secs(30)).await,
        "sandbox did not answer again after kill -9 -1"
    );
    assert_eq!(d.assert_truthful(&b, SETTLE).await, "RUNNING");

    // 3. The agent's socket replaced by a squatter: requests must fail or
    //    reconnect, never hang the daemon.
    let c = d.create_running("squat").await;
    let (status, body) = exec_raw(
        &d,
        &c,
        &["sh", "-c", "rm -f /run/sbx-agent.sock; python3 -c 'import socket,os; s=socket.socket(socket.AF_UNIX); s.bind(\"/run/sbx-agent.sock\"); s.listen(); os.fork() or __import__(\"time\").sleep(600)' >/dev/null 2>&1 & sleep 0.5; echo done"],
        10_000,
    )
    .await;
    println!("socket squatted → {status} {body}");
    let t = Instant::now();
    let (code, _) = d.call("GET", "/healthz", None).await;
    assert_eq!(code, 200);
    assert!(t.elapsed() < Duration::from_secs(2));
    let sc = d.assert_truthful(&c, SETTLE).await;
    println!("after the socket was squatted the sandbox is {sc}");

    d.assert_host_matches_store(SETTLE).await;
    d.destroy_all(SETTLE).await;
    d.assert_host_matches_store(SETTLE).await;
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn fifty_concurrent_creates_all_succeed_or_are_refused_retryably() {
    let _serial = SERIAL.lock().await;
    // Declared first so that it is dropped last, after sbxd is gone.
    let _leftovers: KillLeftovers;
    let d = Daemon::start(&[]).await;
    _leftovers = KillLeftovers::of(&d);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..50 {
        let http = d.http.clone();
        let base = d.base.clone();
        tasks.push(tokio::spawn(async move {
            let t = Instant::now();
            let r = http
                .post(format!("{base}/v2/sandboxes"))
                .header("content-type", "application/json")
                .body(
                    json!({"name": format!("burst-{i}"), "vcpu": 1, "memoryMb": 1024}).to_string(),
                )
                .timeout(Duration::from_secs(150))
                .send()
                .await;
            let status = match r {
                Ok(r) => {
                    let code = r.status().as_u16();
                    let body: Value = r.json().await.unwrap_or(Value::Null);
                    Ok((code, body))
                }
                Err(e) => Err(format!("{e} (timeout: {})", e.is_timeout())),
            };
            (i, t.elapsed(), status)
        }));
    }
    let mut latencies = Vec::new();
    let mut ids = Vec::new();
    let mut refused = 0;
    let mut problems = Vec::new();
    for t in tasks {
        let (i, took, r) = t.await.unwrap();
        latencies.push(took);
        match r {
            Ok((201, b)) if b["data"]["status"] == "RUNNING" => {
                ids.push(b["data"]["id"].as_str().unwrap().to_string())
            }
            Ok((202, b)) => ids.push(b["data"]["id"].as_str().unwrap().to_string()),
            Ok((503 | 429, _)) => refused += 1,
            Ok((code, b)) => problems.push(format!("burst-{i}: {code} {b}")),
            Err(e) => problems.push(format!("burst-{i}: {e}")),
        }
    }
    latencies.sort();
    let pct = |p: usize| latencies[(latencies.len() * p / 100).min(latencies.len() - 1)];
    println!(
        "50 concurrent creates: {} accepted, {refused} refused (503/429), {} other; latency p50 {:?} p99 {:?} max {:?}; all answered in {:?}",
        ids.len(),
        problems.len(),
        pct(50),
        pct(99),
        latencies.last().unwrap(),
        started.elapsed()
    );
    assert!(problems.is_empty(), "{problems:#?}");
    // 202s must reach RUNNING.
    for id in &ids {
        let s = d.wait_settled(id, Duration::from_secs(120)).await;
        assert_eq!(s["status"], "RUNNING", "{s}");
    }
    if let Some(id) = ids.first() {
        d.assert_truthful(id, SETTLE).await;
    }
    d.assert_host_matches_store(SETTLE).await;
    let t = Instant::now();
    d.destroy_all(Duration::from_secs(120)).await;
    println!("destroyed {} sandboxes in {:?}", ids.len(), t.elapsed());
    d.assert_host_matches_store(SETTLE).await;
}

/// Times one healthz and one exec on `probe`; both must answer within 2 s.
async fn probe_responsive(d: &Daemon, probe: &str) -> (Duration, Duration) {
    let t = Instant::now();
    let (code, _) = d.call("GET", "/healthz", None).await;
    let health = t.elapsed();
    assert_eq!(code, 200);
    let t = Instant::now();
    let (code, out, _) = d.exec(probe, &["echo", "pong"]).await;
    let exec = t.elapsed();
    assert_eq!((code, out.as_str()), (0, "pong\n"));
    (health, exec)
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn output_flood_keeps_the_daemon_responsive_and_output_bounded() {
    let _serial = SERIAL.lock().await;
    // Declared first so that it is dropped last, after sbxd is gone.
    let _leftovers: KillLeftovers;
    let d = Daemon::start(&[]).await;
    _leftovers = KillLeftovers::of(&d);
    let flood = d.create_running("flood").await;
    let probe = d.create_running("probe").await;
    let rss_before = rss_kib(d.sbxd_pid().unwrap()).unwrap_or(0);
    let (status, p) = d
        .call(
            "POST",
            &format!("/v2/sandboxes/{flood}/processes"),
            Some(json!({"command": ["sh", "-c", "head -c 200000000 /dev/zero | tr '\\0' x"]})),
        )
        .await;
    assert_eq!(status, 201, "{p}");
    let pid = p["data"]["id"].as_str().unwrap().to_string();
    let t0 = Instant::now();
    let mut worst = (Duration::ZERO, Duration::ZERO);
    let mut probes = 0;
    loop {
        let (_, got) = d
            .call(
                "GET",
                &format!("/v2/sandboxes/{flood}/processes/{pid}"),
                None,
            )
            .await;
        if got["data"]["state"] != "RUNNING" {
            assert_eq!(got["data"]["state"], "EXITED", "{got}");
            assert_eq!(got["data"]["exitCode"], 0, "{got}");
            break;
        }
        let (h, e) = probe_responsive(&d, &probe).await;
        worst = (worst.0.max(h), worst.1.max(e));
        probes += 1;
        assert!(t0.elapsed() < Duration::from_secs(120), "flood never ended");
    }
    let rss_after = rss_kib(d.sbxd_pid().unwrap()).unwrap_or(0);
    println!(
        "200 MB flood took {:?}; {probes} probes while it ran, worst healthz {:?}, worst exec {:?}; sbxd RSS {} → {} MiB",
        t0.elapsed(),
        worst.0,
        worst.1,
        rss_before / 1024,
        rss_after / 1024
    );
    assert!(probes >= 1, "the flood ended before any probe ran");
    assert!(
        worst.0 < Duration::from_secs(5),
        "healthz took {:?}",
        worst.0
    );
    assert!(worst.1 < Duration::from_secs(5), "exec took {:?}", worst.1);
    assert!(
        rss_after < rss_before + 256 * 1024,
        "sbxd grew by {} MiB",
        (rss_after - rss_before) / 1024
    );
    let (status, out) = d
        .call(
            "GET",
            &format!("/v2/sandboxes/{flood}/processes/{pid}/output"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{out}");
    let kept: usize = out["data"]["chunks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| common::b64(&c["data"]).len())
        .sum();
    println!("retained output: {kept} bytes");
    assert!(
        kept <= 512 * 1024 + 64 * 1024,
        "retained {kept} bytes, more than 512 KiB + one chunk"
    );
    assert!(kept >= 256 * 1024, "only {kept} bytes retained");
    d.assert_truthful(&flood, SETTLE).await;
    d.destroy_all(SETTLE).await;
    d.assert_host_matches_store(SETTLE).await;
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn fork_bomb_is_contained() {
    let _serial = SERIAL.lock().await;
    // Declared first so that it is dropped last, after sbxd is gone.
    let _leftovers: KillLeftovers;
    let d = Daemon::start(&[]).await;
    _leftovers = KillLeftovers::of(&d);
    let bomb = d.create_running("bomb").await;
    let probe = d.create_running("bystander").await;
    // The guest task limit (RLIMIT_NPROC 1024 from the agent) is in force and
    // enforced by gVisor for root: threads count, and the 1,024th task fails.
    let (code, limit, err) = d
        .exec(
            &bomb,
            &[
                "python3",
                "-c",
                "import resource; print(resource.getrlimit(resource.RLIMIT_NPROC))",
            ],
        )
        .await;
    assert_eq!((code, limit.trim()), (0, "(1024, 1024)"), "{err}");
    let (code, started, err) = d
        .exec(
            &probe,
            &[
                "python3",
                "-c",
                "import threading\n\
                 ev = threading.Event(); n = 0\n\
                 try:\n    \
                     for _ in range(1100): threading.Thread(target=ev.wait).start(); n += 1\n\
                 except RuntimeError: pass\n\
                 ev.set(); print(n)",
            ],
        )
        .await;
    assert_eq!(code, 0, "{err}");
    let started: u64 = started.trim().parse().unwrap_or(0);
    println!("fork bomb: a guest could start {started} threads under the limit");
    assert!(
        (900..1024).contains(&started),
        "{started} threads started: the task limit did not hold"
    );

    let (status, p) = d
        .call(
            "POST",
            &format!("/v2/sandboxes/{bomb}/processes"),
            Some(json!({"command": ["sh", "-c", "exec >/dev/null 2>&1; b(){ b|b& }; b"]})),
        )
        .await;
    assert_eq!(status, 201, "{p}");
    let t0 = Instant::now();
    let mut worst = (Duration::ZERO, Duration::ZERO);
    let mut bomb_status = String::from("RUNNING");
    while t0.elapsed() < Duration::from_secs(20) {
        let (h, e) = probe_responsive(&d, &probe).await;
        worst = (worst.0.max(h), worst.1.max(e));
        let (_, s) = d.call("GET", &format!("/v2/sandboxes/{bomb}"), None).await;
        bomb_status = s["data"]["status"].as_str().unwrap_or_default().to_string();
        if bomb_status != "RUNNING" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let cg = |controller: &str, files: &[&str]| -> Option<u64> {
        files.iter().find_map(|file| {
            [
                format!("/sys/fs/cgroup/{controller}/sbx/sbx-{bomb}/{file}"),
                format!("/sys/fs/cgroup/sbx/sbx-{bomb}/{file}"),
            ]
            .iter()
            .find_map(|path| std::fs::read_to_string(path).ok())
            .and_then(|v| v.trim().parse().ok())
        })
    };
    let host_tasks = cg("pids", &["pids.current"]).expect("pids.current");
    let peak_memory = cg("memory", &["memory.max_usage_in_bytes", "memory.peak"])
        .expect("the memory cgroup's peak");
    println!(
        "fork bomb: bombing sandbox {bomb_status} after {:?}; {host_tasks} host tasks; memory peak {} MiB; worst healthz {:?}, worst exec on the other sandbox {:?}",
        t0.elapsed(),
        peak_memory >> 20,
        worst.0,
        worst.1
    );
    assert!(
        worst.0 < Duration::from_secs(5),
        "healthz took {:?}",
        worst.0
    );
    assert!(worst.1 < Duration::from_secs(5), "exec took {:?}", worst.1);
    // Contained by the task limit: the Sentry neither reached the host pids
    // limit nor filled the sandbox's memory (without the limit the bomb
    // fills all 1,024 MiB), so the sandbox is still RUNNING.
    assert_eq!(bomb_status, "RUNNING");
    assert!(host_tasks < 4096, "host pids cgroup at {host_tasks}");
    assert!(
        peak_memory < 1024 << 20,
        "the bomb filled the sandbox's memory ({} MiB)",
        peak_memory >> 20
    );
    // Whether the bombing sandbox answers while the bomb churns at its limit
    // depends on the scheduler (it recovered within ~20 s here, not always on
    // a loaded machine), so it is reported, not asserted.
    let (status, body) = exec_raw(
        &d,
        &bomb,
        &["sh", "-c", "ls /proc | grep -c '^[0-9]'"],
        10_000,
    )
    .await;
    println!(
        "fork bomb: process count exec in the bombing sandbox → {status} {}",
        if status == 200 {
            common::b64(&body["data"]["stdout"])
        } else {
            body.to_string()
        }
    );
    assert_eq!(d.assert_truthful(&probe, SETTLE).await, "RUNNING");
    let t = Instant::now();
    d.destroy_all(Duration::from_secs(120)).await;
    println!("destroy after the bomb took {:?}", t.elapsed());
    d.assert_host_matches_store(SETTLE).await;
}
