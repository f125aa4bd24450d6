//! `Idempotency-Key` on exec, process start, signal and snapshot create, on
//! real gVisor: a repeat returns the first response instead of running again,
//! also after an sbxd restart; a request interrupted by a crash answers
//! `operation_ambiguous` and never runs again.

mod common;

use common::{assert_error, b64, Daemon, KillLeftovers};
use serde_json::{json, Value};
use std::time::Duration;

async fn keyed(d: &Daemon, path: &str, body: Value, key: &str) -> (u16, Value) {
    d.call_with(
        "POST",
        path,
        Some(body.to_string().into_bytes()),
        &[("idempotency-key", key)],
    )
    .await
}

/// Appends a line to `file` and prints a fresh uuid: a re-run shows up in both.
fn append(file: &str) -> Value {
    json!({
        "command": ["sh", "-c", format!("echo x >> {file}; cat /proc/sys/kernel/random/uuid")],
        "timeout": "30000ms"
    })
}

async fn lines(d: &Daemon, id: &str, file: &str) -> String {
    let (_, out, _) = d.exec(id, &["sh", "-c", &format!("wc -l < {file}")]).await;
    out.trim().to_string()
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn repeats_with_the_same_key_run_once() {
    let mut d = Daemon::start(&[]).await;
    let _leftovers = KillLeftovers::of(&d);
    let id = d.create_running("idem").await;
    let exec = format!("/v2/sandboxes/{id}/exec");

    // Exec: the same key twice gives the first result; the command ran once.
    let first = keyed(&d, &exec, append("/tmp/f"), "exec-1").await;
    assert_eq!(first.0, 200, "{}", first.1);
    let again = keyed(&d, &exec, append("/tmp/f"), "exec-1").await;
    assert_eq!(again, first);
    assert_eq!(lines(&d, &id, "/tmp/f").await, "1");
    // Another body with the same key is refused; a new key runs again.
    let other = keyed(&d, &exec, append("/tmp/other"), "exec-1").await;
    assert_error(&other, 422, "idempotency_key_reused");
    assert_eq!(keyed(&d, &exec, append("/tmp/f"), "exec-2").await.0, 200);
    assert_eq!(lines(&d, &id, "/tmp/f").await, "2");

    // Two at once: the second waits for the first and gets its result.
    let slow = json!({
        "command": ["sh", "-c", "echo y >> /tmp/g; sleep 2; cat /proc/sys/kernel/random/uuid"],
        "timeout": "30000ms"
    });
    let (one, two) = tokio::join!(
        keyed(&d, &exec, slow.clone(), "exec-3"),
        keyed(&d, &exec, slow.clone(), "exec-3")
    );
    assert_eq!(one.0, 200, "{}", one.1);
    assert_eq!(one, two);
    assert_eq!(lines(&d, &id, "/tmp/g").await, "1");

    // Process start: one process, the same id twice.
    let procs = format!("/v2/sandboxes/{id}/processes");
    let start = json!({"command": ["sleep", "301"]});
    let p1 = keyed(&d, &procs, start.clone(), "start-1").await;
    let p2 = keyed(&d, &procs, start.clone(), "start-1").await;
    assert_eq!(p1.0, 201, "{}", p1.1);
    assert_eq!(p1.1["data"]["id"], p2.1["data"]["id"]);
    let (_, list) = d.call("GET", &format!("{procs}?limit=100"), None).await;
    let sleepers = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["command"] == json!(["sleep", "301"]))
        .count();
    assert_eq!(sleepers, 1, "{list}");
    // Signal: a repeat answers 204 again.
    let pid = p1.1["data"]["id"].as_str().unwrap();
    let signal = format!("/v2/sandboxes/{id}/processes/{pid}/signals");
    let body = json!({"signal": 15, "includeChildren": true});
    assert_eq!(keyed(&d, &signal, body.clone(), "sig-1").await.0, 204);
    assert_eq!(keyed(&d, &signal, body.clone(), "sig-1").await.0, 204);

    // Snapshot create (unnamed, so a plain repeat would make a second one).
    let snaps = format!("/v2/sandboxes/{id}/snapshots");
    let s1 = keyed(&d, &snaps, json!({}), "snap-1").await;
    assert!(s1.0 == 201 || s1.0 == 202, "{}", s1.1);
    let s2 = keyed(&d, &snaps, json!({}), "snap-1").await;
    assert_eq!(s1.1["data"]["id"], s2.1["data"]["id"]);
    let (_, all) = d.call("GET", "/v2/snapshots", None).await;
    assert_eq!(all["data"].as_array().unwrap().len(), 1, "{all}");

    // A finished request survives a restart: the repeat is replayed, not run.
    let done = keyed(&d, &exec, append("/tmp/r"), "exec-restart").await;
    assert_eq!(done.0, 200);
    d.kill9();
    d.spawn().await;
    d.wait_status(&id, "RUNNING", Duration::from_secs(30)).await;
    let replay = keyed(&d, &exec, append("/tmp/r"), "exec-restart").await;
    assert_eq!(
        b64(&replay.1["data"]["stdout"]),
        b64(&done.1["data"]["stdout"])
    );
    assert_eq!(lines(&d, &id, "/tmp/r").await, "1");
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn a_request_interrupted_by_a_crash_is_ambiguous_and_never_rerun() {
    let mut d = Daemon::start(&[]).await;
    let _leftovers = KillLeftovers::of(&d);
    let id = d.create_running("crash").await;
    let exec = format!("/v2/sandboxes/{id}/exec");
    let body = json!({
        "command": ["sh", "-c", "echo z >> /tmp/h; sleep 20"],
        "timeout": "60000ms"
    });
    let client = d.http.clone();
    let url = d.url(&exec);
    let sent = body.to_string();
    let first = tokio::spawn(async move {
        client
            .post(url)
            .header("content-type", "application/json")
            .header("idempotency-key", "in-flight")
            .body(sent)
            .send()
            .await
    });
    // Wait until the command has run, then kill sbxd under it.
    let mut ran = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (code, _, _) = d.exec(&id, &["test", "-e", "/tmp/h"]).await;
        if code == 0 {
            ran = true;
            break;
        }
    }
    assert!(ran, "the first request never started");
    d.kill9();
    assert!(
        first.await.unwrap().is_err(),
        "the first request cannot have an answer"
    );
    d.spawn().await;
    d.wait_status(&id, "RUNNING", Duration::from_secs(30)).await;
    let repeat = keyed(&d, &exec, body, "in-flight").await;
    assert_error(&repeat, 409, "operation_ambiguous");
    assert_eq!(lines(&d, &id, "/tmp/h").await, "1");
}
