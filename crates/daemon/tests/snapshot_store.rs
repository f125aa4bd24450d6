//! Snapshots in S3-compatible object storage, on real gVisor and a real
//! S3-compatible server (s3s-fs from `scripts/lib/s3.sh`): nothing is faked.

mod common;

use common::s3::{keys_under, s3_client};
use common::{assert_error, Daemon};
use object_store::path::Path as ObjectPath;
use object_store::ObjectStore;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Takes a snapshot and waits until it is no longer CREATING.
async fn snapshot_settled(d: &Daemon, id: &str) -> Value {
    let (status, snap) = d
        .call("POST", &format!("/v2/sandboxes/{id}/snapshots"), None)
        .await;
    assert!(status == 201 || status == 202, "{status} {snap}");
    let sid = snap["data"]["id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (_, got) = d.call("GET", &format!("/v2/snapshots/{sid}"), None).await;
        if got["data"]["status"] != "CREATING" {
            return got["data"].clone();
        }
        assert!(Instant::now() < deadline, "snapshot stays CREATING");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn clone(d: &Daemon, snap: &str, name: &str) -> (u16, Value) {
    d.call(
        "POST",
        "/v2/sandboxes",
        Some(json!({"name": name, "snapshotId": snap})),
    )
    .await
}

/// The in-memory value the background process of the source holds, asked
/// through a file it watches; it answers with `still <value>`.
async fn ask_memory(d: &Daemon, id: &str) -> String {
    let (code, out, err) = d
        .exec(
            id,
            &[
                "sh",
                "-c",
                "rm -f /tmp/answer; touch /tmp/ask; \
                 for i in $(seq 300); do [ -s /tmp/answer ] && exec cat /tmp/answer; sleep 0.05; done; exit 1",
            ],
        )
        .await;
    assert_eq!(code, 0, "the background process did not answer: {err}");
    out.trim().to_string()
}

#[tokio::test]
#[ignore = "needs root, runsc, the image and S3; run ./scripts/test"]
async fn s3_snapshots_survive_cache_loss_and_refuse_damaged_objects() {
    let prefix = format!("it-{}", uuid::Uuid::new_v4());
    let flags = common::s3_flags(&prefix);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let d = Daemon::start(&flags).await;
    let _leftovers = common::KillLeftovers::of(&d);
    let s3 = s3_client();

    // Disk: 5 MB of random bytes and their checksum. Memory: a background
    // process holding a random value it never wrote to disk.
    let id = d.create_running("src").await;
    let (code, _, err) = d
        .exec(
            &id,
            &[
                "sh",
                "-c",
                "head -c 5000000 /dev/urandom > /tmp/blob && sha256sum /tmp/blob > /tmp/blob.sha",
            ],
        )
        .await;
    assert_eq!(code, 0, "{err}");
    let (_, p) = d
        .call(
            "POST",
            &format!("/v2/sandboxes/{id}/processes"),
            Some(json!({"command": ["sh", "-c",
                "v=$(od -An -tx1 -N8 /dev/urandom | tr -d ' \\n'); echo \"value $v\"; \
                 while :; do if [ -e /tmp/ask ]; then echo \"still $v\" > /tmp/answer.tmp; \
                 mv /tmp/answer.tmp /tmp/answer; rm -f /tmp/ask; fi; sleep 0.05; done"]})),
        )
        .await;
    let pid = p["data"]["id"].as_str().unwrap().to_string();
    let remembered = ask_memory(&d, &id).await;
    assert!(remembered.starts_with("still "), "{remembered}");

    let snap = snapshot_settled(&d, &id).await;
    assert_eq!(snap["status"], "READY", "{snap}");
    let sid = snap["id"].as_str().unwrap().to_string();
    let snap_prefix = format!("{prefix}/snapshots/{sid}");
    let keys = keys_under(&s3, &snap_prefix).await;
    assert!(
        keys.contains(&format!("{snap_prefix}/manifest.json")) && keys.len() >= 2,
        "{keys:?}"
    );

    // The node loses its cache (as another node never had it): the clone
    // fetches it, and has the disk and the memory of the source.
    let cache = d.data_dir().join("snapshots").join(&sid);
    std::fs::remove_dir_all(&cache).unwrap();
    let (status, c) = clone(&d, &sid, "clone").await;
    assert!(status == 201 || status == 202, "{status} {c}");
    let cid = c["data"]["id"].as_str().unwrap().to_string();
    d.wait_status(&cid, "RUNNING", Duration::from_secs(120))
        .await;
    assert!(cache.join("checkpoint").is_dir(), "the cache is back");
    let (code, out, err) = d.exec(&cid, &["sha256sum", "-c", "/tmp/blob.sha"]).await;
    assert_eq!((code, out.as_str()), (0, "/tmp/blob: OK\n"), "{err}");
    assert_eq!(ask_memory(&d, &cid).await, remembered);
    let (_, proc_in_clone) = d
        .call("GET", &format!("/v2/sandboxes/{cid}/processes/{pid}"), None)
        .await;
    assert_eq!(proc_in_clone["data"]["state"], "RUNNING", "{proc_in_clone}");
    d.call("DELETE", &format!("/v2/sandboxes/{cid}"), None)
        .await;

    // A damaged object: same key, other bytes. The clone fails with a clear
    // error before anything is restored; its sandbox is FAILED with the reason.
    let manifest = s3
        .get(&ObjectPath::from(format!("{snap_prefix}/manifest.json")))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let manifest: Value = serde_json::from_slice(&manifest).unwrap();
    let biggest = manifest["files"]
        .as_array()
        .unwrap()
        .iter()
        .max_by_key(|f| f["size"].as_u64().unwrap())
        .unwrap()["path"]
        .as_str()
        .unwrap()
        .to_string();
    let damaged_key = ObjectPath::from(format!("{snap_prefix}/files/{biggest}"));
    let original = s3.get(&damaged_key).await.unwrap().bytes().await.unwrap();
    let mut damaged = original.to_vec();
    let middle = damaged.len() / 2;
    damaged[middle] ^= 0x5a;
    s3.put(&damaged_key, damaged.into()).await.unwrap();
    std::fs::remove_dir_all(&cache).unwrap();
    let refused = clone(&d, &sid, "clone-of-damaged").await;
    assert_error(&refused, 422, "sandbox_start_failed");
    let message = refused.1["errors"][0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains("could not be fetched") && message.contains("is corrupt"),
        "{message}"
    );
    assert!(!cache.exists(), "no half-fetched cache");
    let (_, list) = d.call("GET", "/v2/sandboxes", None).await;
    let failed = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "clone-of-damaged")
        .cloned()
        .expect("the refused clone is listed");
    assert_eq!(failed["status"], "FAILED", "{failed}");
    let failed_id = failed["id"].as_str().unwrap();
    assert!(
        !d.runsc_containers().iter().any(|c| c.contains(failed_id)),
        "no container of the refused clone"
    );

    // A missing manifest (an upload cut short, or deleted): missing, clearly.
    s3.put(&damaged_key, original.into()).await.unwrap();
    s3.delete(&ObjectPath::from(format!("{snap_prefix}/manifest.json")))
        .await
        .unwrap();
    let refused = clone(&d, &sid, "clone-of-missing").await;
    assert_error(&refused, 422, "sandbox_start_failed");
    let message = refused.1["errors"][0]["message"].as_str().unwrap();
    assert!(message.contains("missing from object storage"), "{message}");

    // The source was never touched.
    assert_eq!(d.exec(&id, &["echo", "fine"]).await.1, "fine\n");

    // Delete removes every object and the cache.
    let (status, _) = d
        .call("DELETE", &format!("/v2/snapshots/{sid}"), None)
        .await;
    assert!(status == 200 || status == 204, "{status}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, got) = d.call("GET", &format!("/v2/snapshots/{sid}"), None).await;
        if got["errors"][0]["code"] == "sandbox_snapshot_not_found" {
            break;
        }
        assert!(Instant::now() < deadline, "snapshot not deleted: {got}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(keys_under(&s3, &snap_prefix).await, Vec::<String>::new());
    assert!(!cache.exists());
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn an_unreachable_object_store_fails_the_snapshot_not_the_sandbox() {
    // A loopback port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let d = Daemon::start(&[
        "--snapshot-store",
        "s3://sbx-nowhere/p",
        "--s3-endpoint",
        &endpoint,
    ])
    .await;
    let _leftovers = common::KillLeftovers::of(&d);
    let id = d.create_running("src").await;
    // Answered once the upload gave up (a few quick retries): 503, the reason.
    let refused = d
        .call("POST", &format!("/v2/sandboxes/{id}/snapshots"), None)
        .await;
    assert_error(&refused, 503, "compute_unavailable");
    let message = refused.1["errors"][0]["message"].as_str().unwrap();
    assert!(
        message.contains("uploading the snapshot to object storage failed: "),
        "{message}"
    );
    let (_, all) = d.call("GET", "/v2/snapshots", None).await;
    let snap = all["data"][0].clone();
    assert_eq!(snap["status"], "FAILED", "{snap}");
    let error = snap["error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with("uploading the snapshot to object storage failed: "),
        "{snap}"
    );
    let sid = snap["id"].as_str().unwrap();
    assert!(!d.data_dir().join("snapshots").join(sid).exists());
    let (_, got) = d.call("GET", &format!("/v2/sandboxes/{id}"), None).await;
    assert_eq!(got["data"]["status"], "RUNNING", "{got}");
    assert_eq!(d.exec(&id, &["echo", "still"]).await.1, "still\n");
    // A FAILED snapshot cannot be cloned.
    assert_error(
        &clone(&d, sid, "clone").await,
        409,
        "sandbox_snapshot_not_ready",
    );
}

#[tokio::test]
#[ignore = "needs root, runsc, the image and S3; run ./scripts/test"]
async fn expiry_removes_the_objects_and_the_cache() {
    let prefix = format!("it-{}", uuid::Uuid::new_v4());
    let mut flags = common::s3_flags(&prefix);
    flags.extend(["--snapshot-ttl-secs".to_string(), "5".to_string()]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let d = Daemon::start(&flags).await;
    let _leftovers = common::KillLeftovers::of(&d);
    let s3 = s3_client();
    let id = d.create_running("src").await;
    let snap = snapshot_settled(&d, &id).await;
    assert_eq!(snap["status"], "READY", "{snap}");
    let sid = snap["id"].as_str().unwrap().to_string();
    let snap_prefix = format!("{prefix}/snapshots/{sid}");
    assert!(!keys_under(&s3, &snap_prefix).await.is_empty());
    // The janitor (every 2 s) deletes it once expired.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, got) = d.call("GET", &format!("/v2/snapshots/{sid}"), None).await;
        if got["errors"][0]["code"] == "sandbox_snapshot_not_found" {
            break;
        }
        assert!(Instant::now() < deadline, "never expired: {got}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(keys_under(&s3, &snap_prefix).await, Vec::<String>::new());
    assert!(!d.data_dir().join("snapshots").join(&sid).exists());
}
