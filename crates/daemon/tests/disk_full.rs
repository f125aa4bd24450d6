//! The data dir on a small tmpfs that fills up, on real gVisor: every write
//! answers `503 storage_full` at once (never a 500 with SQLite's text, never a
//! hang), reads keep working, stored rows stay intact, a restart on the full
//! disk serves reads, and once space returns the same writes succeed without
//! restarting sbxd.

mod common;

use common::{assert_error, Daemon, KillLeftovers};
use serde_json::{json, Value};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Longest a request may take on (or just after) a full disk: a hang shows
/// as no answer at all, and the successful calls among them (a create, a
/// snapshot with its verify-restore) may legitimately need 20 s on a loaded
/// machine.
const ANSWER_WITHIN: Duration = Duration::from_secs(30);

/// A tmpfs mounted over a directory; unmounted (lazily if still busy) when
/// dropped, and the directory removed if `remove_dir`.
struct Tmpfs {
    path: PathBuf,
    remove_dir: bool,
}

impl Tmpfs {
    fn mount(path: &Path, size: &str, remove_dir: bool) -> Tmpfs {
        let status = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0755"),
                "tmpfs",
            ])
            .arg(path)
            .status()
            .expect("mount");
        assert!(status.success(), "mount tmpfs on {}", path.display());
        Tmpfs {
            path: path.to_path_buf(),
            remove_dir,
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.path)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(&self.path).status();
        }
        if self.remove_dir {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// Writes `path` until the filesystem has no byte left; returns the bytes written.
fn fill(path: &Path) -> u64 {
    let mut f = std::fs::File::create(path).expect("create filler");
    let chunk = vec![0xa5u8; 64 * 1024];
    let mut written = 0u64;
    loop {
        match f.write(&chunk) {
            Ok(0) => break,
            Ok(n) => written += n as u64,
            Err(e) if e.kind() == std::io::ErrorKind::StorageFull => break,
            Err(e) => panic!("filling {}: {e}", path.display()),
        }
    }
    written
}

fn sqlite(db: &Path, sql: &str) -> String {
    let out = Command::new("sqlite3").arg(db).arg(sql).output().unwrap();
    assert!(out.status.success(), "sqlite3 {sql}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A request that must answer within [`ANSWER_WITHIN`].
async fn call(d: &Daemon, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    tokio::time::timeout(ANSWER_WITHIN, d.call(method, path, body))
        .await
        .unwrap_or_else(|_| panic!("{method} {path} hung on a full disk"))
}

/// exec with an `Idempotency-Key`; returns status, body and whether it was a replay.
async fn exec_with_key(d: &Daemon, id: &str, key: &str, argv: &[&str]) -> (u16, Value, bool) {
    let send = d
        .http
        .post(d.url(&format!("/v2/sandboxes/{id}/exec")))
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .body(json!({"command": argv, "timeout": "30000ms"}).to_string())
        .send();
    let resp = tokio::time::timeout(ANSWER_WITHIN, send)
        .await
        .expect("exec with a key hung on a full disk")
        .expect("exec request");
    let status = resp.status().as_u16();
    let replayed = resp.headers().get("idempotent-replayed").is_some();
    let body = resp.json().await.unwrap_or(Value::Null);
    (status, body, replayed)
}

/// The refusal every write gets on the full disk: 503 `storage_full`, a message
/// that says so in words, none of SQLite's or the OS's own text.
fn assert_storage_full(got: &(u16, Value), what: &str) {
    assert_error(got, 503, "storage_full");
    let message = got.1["errors"][0]["message"].as_str().unwrap_or_default();
    assert!(message.contains("disk is full"), "{what}: {message}");
    for raw in ["SQLITE", "database or disk is full", "os error"] {
        assert!(!message.contains(raw), "{what} leaks {raw:?}: {message}");
    }
}

/// Appends a line to a file in the sandbox's memory (`/dev/shm`, not the full disk).
const COUNT: [&str; 3] = [
    "sh",
    "-c",
    "echo ran >> /dev/shm/count; wc -l < /dev/shm/count",
];

/// Every kind of write, on the full disk: each refused at once, clearly, with nothing done.
async fn refused_writes(d: &Daemon, id: &str, snap_id: &str) {
    let got = call(
        d,
        "POST",
        "/v2/sandboxes",
        Some(json!({"name": "while-full", "vcpu": 1, "memoryMb": 1024})),
    )
    .await;
    assert_storage_full(&got, "create");
    let got = call(d, "PUT", "/v1/secrets/NEW", Some(json!({"value": "v"}))).await;
    assert_storage_full(&got, "secret put");
    let got = call(d, "PUT", "/v1/secrets/KEPT", Some(json!({"value": "v2"}))).await;
    assert_storage_full(&got, "secret replace");
    let (status, body, _) = exec_with_key(d, id, "count-1", &COUNT).await;
    assert_storage_full(&(status, body), "exec with Idempotency-Key");
    let path = format!("/v2/sandboxes/{id}/snapshots");
    let got = call(d, "POST", &path, Some(json!({}))).await;
    assert_storage_full(&got, "snapshot create");
    let got = call(d, "POST", &format!("/v2/sandboxes/{id}/pause"), None).await;
    assert_storage_full(&got, "pause");
    let got = call(d, "DELETE", &format!("/v2/sandboxes/{id}"), None).await;
    assert_storage_full(&got, "destroy");
    let got = call(d, "DELETE", &format!("/v2/snapshots/{snap_id}"), None).await;
    assert_storage_full(&got, "snapshot delete");
}

/// Reads, and what needs no store write, keep working on the full disk.
async fn assert_reads(d: &Daemon, id: &str, snap_id: &str) {
    let (status, body) = call(d, "GET", &format!("/v2/sandboxes/{id}"), None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"]["status"], "RUNNING", "{body}");
    let names: Vec<String> = d
        .list_all()
        .await
        .iter()
        .filter_map(|s| s["name"].as_str().map(String::from))
        .collect();
    assert!(!names.iter().any(|n| n == "while-full"), "{names:?}");
    assert!(names.iter().any(|n| n == "kept"), "{names:?}");
    let (status, body) = call(d, "GET", "/v1/secrets", None).await;
    assert_eq!(status, 200, "{body}");
    let secrets: Vec<&str> = body["data"]
        .as_array()
        .map(|a| a.iter().filter_map(|s| s["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(secrets, ["KEPT"], "{body}");
    let (status, body) = call(d, "GET", &format!("/v2/snapshots/{snap_id}"), None).await;
    assert_eq!(status, 200, "{body}");
    let (code, out, _) = d.exec(id, &["echo", "still here"]).await;
    assert_eq!((code, out.as_str()), (0, "still here\n"));
    let (status, body) = call(
        d,
        "POST",
        &format!("/v2/sandboxes/{id}/processes"),
        Some(json!({"command": ["true"]})),
    )
    .await;
    assert_eq!(status, 201, "process start needs no store write: {body}");
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn a_full_data_disk_refuses_writes_cleanly_and_recovers_without_a_restart() {
    let dir = tempfile::Builder::new()
        .prefix("sbx-it-full-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let mount_point = dir.path().to_path_buf();
    // Dropped last: after sbxd and its sandboxes are gone (the TempDir cannot
    // remove its own directory while the tmpfs is mounted on it).
    let _tmpfs = Tmpfs::mount(&mount_point, "32m", true);
    let _leftovers: KillLeftovers;
    // No free-disk minimum: the writes themselves must meet the full disk
    // (admission's own refusal is covered in admission.rs).
    let mut d = Daemon::start_in(dir, &["--min-free-disk-mb", "0"]).await;
    _leftovers = KillLeftovers::of(&d);
    let db = mount_point.join("sbx.sqlite");

    // A boot that meets a full disk: FAILED with a reason that says so, no dir left.
    let sandboxes = mount_point.join("sandboxes");
    {
        let _small = Tmpfs::mount(&sandboxes, "64k", false);
        fill(&sandboxes.join("filler"));
        let (status, body) = call(
            &d,
            "POST",
            "/v2/sandboxes",
            Some(json!({"name": "boot-full", "vcpu": 1, "memoryMb": 1024})),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["data"]["status"], "FAILED", "{body}");
        let id = body["data"]["id"].as_str().unwrap().to_string();
        let (_, detail) = call(&d, "GET", &format!("/v2/sandboxes/{id}"), None).await;
        assert_eq!(detail["data"]["status"], "FAILED");
        let error = detail["data"]["error"].as_str().unwrap_or_default();
        assert!(error.contains("data disk is full"), "{error}");
        std::fs::remove_file(sandboxes.join("filler")).unwrap();
        let left: Vec<_> = std::fs::read_dir(&sandboxes).unwrap().collect();
        assert!(left.is_empty(), "the failed boot left {left:?}");
    }

    // State from before the disk fills.
    let id = d.create_running("kept").await;
    let paused = d.create_running("paused").await;
    let (status, body) = call(&d, "POST", &format!("/v2/sandboxes/{paused}/pause"), None).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = call(&d, "PUT", "/v1/secrets/KEPT", Some(json!({"value": "v1"}))).await;
    assert_eq!(status, 200, "{body}");
    let (status, snap) = call(
        &d,
        "POST",
        &format!("/v2/sandboxes/{id}/snapshots"),
        Some(json!({"name": "before"})),
    )
    .await;
    assert!(status == 201 || status == 202, "{snap}");
    let snap_id = snap["data"]["id"].as_str().unwrap().to_string();
    let (status, body, _) = exec_with_key(&d, &id, "before", &["true"]).await;
    assert_eq!(status, 200, "{body}");

    // Nothing in flight when the disk fills: the snapshot is READY and its
    // verification probe is gone.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, body) = call(&d, "GET", &format!("/v2/snapshots/{snap_id}"), None).await;
        let mut dirs = d.sandbox_dirs();
        dirs.sort();
        let mut want = vec![id.clone(), paused.clone()];
        want.sort();
        if body["data"]["status"] == "READY" && dirs == want {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "settling: {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let filler = mount_point.join("filler");
    let filled = fill(&filler);
    println!("filled the data dir with {} MiB", filled / (1024 * 1024));

    // Writes: each refused at once, clearly, with nothing done.
    refused_writes(&d, &id, &snap_id).await;

    // Reads, and what needs no store write, keep working.
    assert_reads(&d, &id, &snap_id).await;
    // No half-created sandbox: no row (above) and no directory.
    assert_eq!(d.sandbox_dirs().len(), 2, "{:?}", d.sandbox_dirs());
    assert_eq!(sqlite(&db, "PRAGMA integrity_check"), "ok");
    assert_eq!(
        sqlite(
            &db,
            "SELECT name || ':' || status FROM sandboxes ORDER BY created_at_ms"
        ),
        "boot-full:FAILED\nkept:RUNNING\npaused:PAUSED"
    );

    // A restart on the full disk: sbxd starts, reattaches and serves reads;
    // writes are still refused the same way.
    d.kill9();
    d.spawn().await;
    assert_reads(&d, &id, &snap_id).await;
    // Reconciliation could not record a thing, and needed not: the paused
    // sandbox is kept as it is (never failed for want of a write).
    let (_, body) = call(&d, "GET", &format!("/v2/sandboxes/{paused}"), None).await;
    assert_eq!(body["data"]["status"], "PAUSED", "{body}");
    refused_writes(&d, &id, &snap_id).await;
    assert_eq!(sqlite(&db, "PRAGMA integrity_check"), "ok");

    // Nearly full: a few pages freed at a time until an exec's claim fits.
    // The response may then not fit (a store refusal after the command ran):
    // a repeat must still get that response at once, never wait or run again.
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&filler)
        .unwrap();
    let mut len = file.metadata().unwrap().len();
    let count2 = [
        "sh",
        "-c",
        "echo ran >> /dev/shm/count2; wc -l < /dev/shm/count2",
    ];
    let mut ran = None;
    for step in 0..64 {
        len = len.saturating_sub(4096);
        file.set_len(len).unwrap();
        let key = format!("edge-{step}");
        let (status, body, _) = exec_with_key(&d, &id, &key, &count2).await;
        if status == 200 {
            ran = Some((key, body));
            break;
        }
        assert_storage_full(&(status, body), "exec on a nearly full disk");
    }
    let (key, first) = ran.expect("an exec's claim fits once enough pages are free");
    assert_eq!(common::b64(&first["data"]["stdout"]), "1\n");
    let stored = sqlite(
        &db,
        &format!("SELECT status IS NOT NULL FROM idempotency WHERE key = '{key}'"),
    );
    println!("exec {key} ran; its response was stored at once: {stored}");
    let (status, again, replayed) = exec_with_key(&d, &id, &key, &count2).await;
    assert_eq!((status, replayed), (200, true), "{again}");
    assert_eq!(again["data"], first["data"]);
    drop(file);

    // Space returns: the same writes succeed, without a restart.
    std::fs::remove_file(&filler).unwrap();
    let (status, body) = call(
        &d,
        "POST",
        "/v2/sandboxes",
        Some(json!({"name": "while-full", "vcpu": 1, "memoryMb": 1024})),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let second = body["data"]["id"].as_str().unwrap().to_string();
    let (status, body) = call(&d, "PUT", "/v1/secrets/NEW", Some(json!({"value": "v"}))).await;
    assert_eq!(status, 200, "{body}");
    // The refused exec never ran: its key runs it now, once.
    let (status, body, replayed) = exec_with_key(&d, &id, "count-1", &COUNT).await;
    assert_eq!((status, replayed), (200, false), "{body}");
    assert_eq!(common::b64(&body["data"]["stdout"]), "1\n");
    let (status, body, replayed) = exec_with_key(&d, &id, "count-1", &COUNT).await;
    assert_eq!((status, replayed), (200, true), "{body}");
    assert_eq!(common::b64(&body["data"]["stdout"]), "1\n");
    // The response kept in memory is stored now, and still replayed.
    let (status, again, replayed) = exec_with_key(&d, &id, &key, &count2).await;
    assert_eq!((status, replayed), (200, true), "{again}");
    assert_eq!(again["data"], first["data"]);
    let stored = format!("SELECT status FROM idempotency WHERE key = '{key}'");
    assert_eq!(sqlite(&db, &stored), "200");
    let (status, body) = call(
        &d,
        "POST",
        &format!("/v2/sandboxes/{id}/snapshots"),
        Some(json!({"name": "after"})),
    )
    .await;
    assert!(status == 201 || status == 202, "{body}");
    let (status, body) = call(&d, "POST", &format!("/v2/sandboxes/{id}/pause"), None).await;
    assert_eq!(
        (status, body["data"]["status"].as_str()),
        (200, Some("PAUSED")),
        "{body}"
    );
    let (status, body) = call(&d, "POST", &format!("/v2/sandboxes/{id}/resume"), None).await;
    assert_eq!(
        (status, body["data"]["status"].as_str()),
        (200, Some("RUNNING")),
        "{body}"
    );
    let (status, body) = call(&d, "DELETE", &format!("/v2/snapshots/{snap_id}"), None).await;
    assert_eq!(status, 204, "{body}");
    for sandbox in [&id, &second, &paused] {
        let (status, body) = call(&d, "DELETE", &format!("/v2/sandboxes/{sandbox}"), None).await;
        assert!(status == 204 || status == 202, "{body}");
    }
    d.assert_host_matches_store(Duration::from_secs(30)).await;
    assert_eq!(sqlite(&db, "PRAGMA integrity_check"), "ok");
}
