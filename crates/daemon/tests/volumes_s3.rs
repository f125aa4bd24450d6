//! S3-backed volumes in a local cluster (issue 18): two sbxd nodes on one
//! PostgreSQL, snapshots and volumes in the test S3 server, real gVisor, and
//! real rclone mounts on the host.
//!
//! - a file written and fsynced by a sandbox on node A is read by a sandbox
//!   on node C (placed there by `nodeSelector`), within rclone's directory
//!   cache time;
//! - a read-only mount of it on C refuses writes;
//! - a local volume pins its sandbox to its node: a create through C that
//!   mounts A's local volume runs on A;
//! - node A killed with -9: the volume lives on, C keeps reading and writing;
//! - after every sandbox is destroyed, C unmounts the volume cleanly (rclone
//!   gone from the host's mounts), and what was written on C right before
//!   without an fsync (uploaded when its sandbox ended) is read back on A
//!   restarted (so it came from the object store, not
//!   from C's cache): nothing was lost;
//! - `usedBytes` counts the objects; delete removes them;
//! - a 16 MiB volume (the quota layer, quotafs, over rclone): `df` shows
//!   its size, a write past it fails with ENOSPC inside the sandbox, what
//!   was written before is intact and read on the other node, a delete
//!   frees space for a new write, and a sandbox writing more than that to
//!   the 1 GiB volume at the same time is unaffected; the quota layer
//!   killed with -9 is detached and mounted again by the next sandbox.
//!
//! Needs PostgreSQL and S3 (`SBX_TEST_DATABASE_URL`, `SBX_TEST_S3_*`), as
//! `./scripts/test` exports, and rclone + fuse3 (`scripts/install-deps`).

mod common;

use common::cluster::{self, database, TOKEN};
use common::{assert_error, Daemon, KillLeftovers};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// A cluster node labelled `zone=ZONE` with `extra` flags.
async fn node(url: &str, id: &str, zone: &str, extra: &[&str]) -> Daemon {
    let label = format!("zone={zone}");
    let mut args = vec!["--node-label", label.as_str()];
    args.extend_from_slice(extra);
    cluster::node_with(url, id, TOKEN, &args).await
}

/// Creates a RUNNING sandbox in `zone` with `volumes`, through `d`.
async fn create_in(d: &Daemon, name: &str, zone: &str, volumes: Value) -> String {
    let (status, body) = d
        .call(
            "POST",
            "/v1/sandboxes",
            Some(json!({"name": name, "vcpu": 1, "memoryMb": 1024,
                        "nodeSelector": {"zone": zone}, "volumes": volumes})),
        )
        .await;
    assert!(status == 201 || status == 202, "create: {status} {body}");
    let id = body["data"]["id"].as_str().unwrap().to_string();
    d.wait_status(&id, "RUNNING", Duration::from_secs(120))
        .await;
    id
}

/// Runs `script` in sandbox `id` until it prints `want` (another node's
/// write shows up after its upload and this node's directory cache time).
async fn eventually(d: &Daemon, id: &str, script: &str, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, out, err) = d.sh(id, script).await;
        if out == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "`{script}` printed {out:?} (stderr {err:?}), want {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The node that runs sandbox `id`, as the store says.
fn node_of(d: &Daemon, id: &str) -> String {
    d.sql(&format!("SELECT node_id FROM sandboxes WHERE id = '{id}'"))
        .trim()
        .to_string()
}

/// Whether node `d` has a mount of volume `id` on this host: rclone's
/// (hidden, `remote`) or the quota layer's over it (`mnt`, what sandboxes bind).
fn s3_mounted(d: &Daemon, id: &str) -> bool {
    let dir = d.data_dir().join("volumes/s3").join(id);
    let quota = format!(" {} ", dir.join("mnt").display());
    let remote = format!(" {} ", dir.join("remote").display());
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| {
            (l.contains(" sbx-quotafs ") && l.contains(&quota))
                || (l.contains(" - fuse.rclone ") && l.contains(&remote))
        })
}

#[tokio::test]
#[ignore = "needs root, runsc, the image, rclone, PostgreSQL and S3; run ./scripts/test"]
async fn an_s3_volume_is_shared_by_nodes_and_survives_a_node_kill9() {
    let db = database();
    let prefix = format!("volumes-{}", uuid::Uuid::new_v4());
    let s3 = common::s3_flags(&prefix);
    let mut flags: Vec<&str> = s3.iter().map(String::as_str).collect();
    let mut a = node(db.url(), "node-a", "a", &flags).await;
    let _leftovers_a = KillLeftovers::of(&a);
    let key = a.data_dir().join("secret.key");
    let key = key.to_str().expect("utf-8 path").to_string();
    flags.extend(["--secret-key-file", key.as_str()]);
    let c = node(db.url(), "node-c", "c", &flags).await;
    let _leftovers_c = KillLeftovers::of(&c);

    let (status, body) = a
        .call(
            "POST",
            "/v1/volumes",
            Some(json!({"name": "shared", "kind": "s3", "sizeMb": 1024})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(
        (
            body["data"]["kind"].as_str(),
            body["data"]["nodeId"].as_str()
        ),
        (Some("s3"), Some(""))
    );
    let vol = body["data"]["id"].as_str().unwrap().to_string();

    // Written on A, read on C.
    let w = create_in(
        &a,
        "writer",
        "a",
        json!([{"name": "shared", "path": "/data"}]),
    )
    .await;
    let (code, _, err) = a
        .sh(
            &w,
            "mkdir -p /data/dir && echo from-a > /data/dir/hello && \
         head -c 3000000 /dev/urandom > /data/blob && sync /data/dir/hello /data/blob",
        )
        .await;
    assert_eq!(code, 0, "{err}");
    let (_, blob_sum, _) = a.sh(&w, "sha256sum /data/blob | cut -c1-64").await;
    let r = create_in(
        &c,
        "reader",
        "c",
        json!([{"name": "shared", "path": "/data", "readOnly": true}]),
    )
    .await;
    assert_eq!(node_of(&c, &r), "node-c");
    eventually(&c, &r, "cat /data/dir/hello", "from-a\n").await;
    eventually(&c, &r, "sha256sum /data/blob | cut -c1-64", &blob_sum).await;
    let (code, _, err) = c.sh(&r, "echo x > /data/nope").await;
    assert!(code != 0 && err.contains("Read-only"), "{err}");

    // A 16 MiB volume: its size is enforced by the quota layer.
    let (status, body) = a
        .call(
            "POST",
            "/v1/volumes",
            Some(json!({"name": "small", "kind": "s3", "sizeMb": 16})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let small = body["data"]["id"].as_str().unwrap().to_string();
    let q = create_in(&a, "quota", "a", json!([{"name": "small", "path": "/q"}])).await;
    let (code, out, err) = a.sh(&q, "df -k /q | tail -1").await;
    assert_eq!(code, 0, "{err}");
    let fields: Vec<&str> = out.split_whitespace().collect();
    assert_eq!(fields.get(1), Some(&"16384"), "df shows the size: {out}");
    let (code, _, err) = a
        .sh(
            &q,
            "head -c 10000000 /dev/urandom > /q/first && sync /q/first",
        )
        .await;
    assert_eq!(code, 0, "{err}");
    let (_, first_sum, _) = a.sh(&q, "sha256sum /q/first | cut -c1-64").await;
    // Past the size: ENOSPC inside the sandbox, from write(2) (python's
    // errno) and for dd.
    let (code, out, err) = a
        .sh(
            &q,
            "python3 -c \"
import errno, os
fd = os.open('/q/second', os.O_WRONLY | os.O_CREAT)
try:
    for _ in range(10):
        os.write(fd, b'x' * 1048576)
    print('no error')
except OSError as e:
    print(errno.errorcode[e.errno])
\"",
        )
        .await;
    assert_eq!((code, out.as_str()), (0, "ENOSPC\n"), "{err}");
    let (code, _, err) = a.sh(&q, "dd if=/dev/zero of=/q/third bs=1M count=10").await;
    assert!(
        code != 0 && err.contains("No space left on device"),
        "dd past the size: {code} {err}"
    );
    let (_, sum, _) = a.sh(&q, "sha256sum /q/first | cut -c1-64").await;
    assert_eq!(sum, first_sum, "what was written before is intact");
    let (_, out, _) = a.sh(&q, "df -k /q | tail -1").await;
    let avail: u64 = out
        .split_whitespace()
        .nth(3)
        .and_then(|v| v.parse().ok())
        .unwrap_or(u64::MAX);
    assert!(avail < 1024, "df shows the volume full: {out}");
    // The quota layer killed: the next sandbox's mount detaches the dead
    // mount, mounts it again (counting the bytes anew), and sees the data.
    let pid_file = a
        .data_dir()
        .join("volumes/s3")
        .join(&small)
        .join("quotafs.pid");
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    let killed = std::process::Command::new("kill")
        .args(["-9", pid.trim()])
        .status()
        .unwrap();
    assert!(killed.success());
    let (code, _, _) = a.sh(&q, "ls /q").await;
    assert_ne!(code, 0, "the killed layer's mount is dead");
    let q2 = create_in(&a, "quota2", "a", json!([{"name": "small", "path": "/q"}])).await;
    let new_pid = std::fs::read_to_string(&pid_file).unwrap();
    assert_ne!(new_pid, pid, "a new quota layer");
    let (_, sum, _) = a.sh(&q2, "sha256sum /q/first | cut -c1-64").await;
    assert_eq!(sum, first_sum);
    let (code, _, err) = a
        .sh(&q2, "dd if=/dev/zero of=/q/third bs=1M count=10")
        .await;
    assert!(
        code != 0 && err.contains("No space left on device"),
        "the new layer enforces the size too: {code} {err}"
    );
    a.destroy_and_wait(&q).await;
    // Meanwhile the 1 GiB volume on the same node takes more than 16 MiB.
    let (code, _, err) = a
        .sh(
            &w,
            "head -c 20000000 /dev/zero > /data/big && sync /data/big && rm /data/big",
        )
        .await;
    assert_eq!(code, 0, "another volume is unaffected: {err}");
    // Deleting files frees their space for a new write.
    let (code, _, err) = a
        .sh(
            &q2,
            "rm /q/second /q/third && head -c 5000000 /dev/urandom > /q/fourth && sync /q/fourth",
        )
        .await;
    assert_eq!(code, 0, "a write after a delete: {err}");
    // What was written before the refusal was published: C reads it.
    let qr = create_in(
        &c,
        "quota-reader",
        "c",
        json!([{"name": "small", "path": "/q", "readOnly": true}]),
    )
    .await;
    eventually(&c, &qr, "sha256sum /q/first | cut -c1-64", &first_sum).await;
    eventually(&c, &qr, "ls /q", "first\nfourth\n").await;
    a.destroy_and_wait(&q2).await;
    c.destroy_and_wait(&qr).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while s3_mounted(&a, &small) || s3_mounted(&c, &small) {
        assert!(Instant::now() < deadline, "volume {small} never unmounted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A local volume pins its sandboxes to its node, whichever node is asked.
    let (status, body) = a
        .call(
            "POST",
            "/v1/volumes",
            Some(json!({"name": "on-a", "kind": "local", "sizeMb": 16})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["data"]["nodeId"], "node-a");
    let (status, body) = c
        .call(
            "POST",
            "/v1/sandboxes",
            Some(json!({"name": "pinned", "vcpu": 1, "memoryMb": 1024,
                        "volumes": [{"name": "on-a", "path": "/local"}]})),
        )
        .await;
    assert!(status == 201 || status == 202, "{status} {body}");
    let pinned = body["data"]["id"].as_str().unwrap().to_string();
    c.wait_status(&pinned, "RUNNING", Duration::from_secs(120))
        .await;
    assert_eq!(node_of(&c, &pinned), "node-a");
    // With a selector that excludes its node, the create is refused, not misplaced.
    let refused = c
        .call(
            "POST",
            "/v1/sandboxes",
            Some(json!({"name": "misplaced", "vcpu": 1, "memoryMb": 1024,
                        "nodeSelector": {"zone": "c"},
                        "volumes": [{"name": "on-a", "path": "/local"}]})),
        )
        .await;
    assert!(refused.0 == 409 || refused.0 == 503, "{refused:?}");
    c.destroy_and_wait(&pinned).await;

    // kill -9 of A: the volume lives on; C reads and writes it.
    a.kill9();
    let w2 = create_in(
        &c,
        "writer2",
        "c",
        json!([{"name": "shared", "path": "/data"}]),
    )
    .await;
    let (code, out, err) = c
        .sh(&w2, "cat /data/dir/hello && echo from-c > /data/dir/after")
        .await;
    assert_eq!((code, out.as_str()), (0, "from-a\n"), "{err}");
    let (code, _, err) = c
        .sh(&w2, "head -c 5000000 /dev/urandom > /data/last && sync")
        .await;
    assert_eq!(code, 0, "{err}");
    let (_, last_sum, _) = c.sh(&w2, "sha256sum /data/last | cut -c1-64").await;

    // Every sandbox of C destroyed: C unmounts cleanly (after its uploads).
    assert!(s3_mounted(&c, &vol));
    c.destroy_and_wait(&w2).await;
    c.destroy_and_wait(&r).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while s3_mounted(&c, &vol) {
        assert!(Instant::now() < deadline, "C never unmounted volume {vol}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A again (after its kill -9): its sandbox is gone, the volume's data is
    // not, and C's last write is there, read from the object store.
    a.spawn().await;
    let (status, got) = a.call("GET", "/v1/volumes/shared", None).await;
    assert_eq!(status, 200, "{got}");
    let used = got["data"]["usedBytes"].as_u64().unwrap();
    assert!(used >= 8_000_000, "usedBytes {used}: {got}");
    let again = create_in(
        &a,
        "again",
        "a",
        json!([{"name": "shared", "path": "/mnt/s"}]),
    )
    .await;
    let (code, out, err) = a.sh(&again,
        "cat /mnt/s/dir/hello /mnt/s/dir/after && sha256sum /mnt/s/last /mnt/s/blob | cut -c1-64",
    )
    .await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, format!("from-a\nfrom-c\n{last_sum}{blob_sum}"));
    a.destroy_and_wait(&again).await;
    // A's first writer outlived A's kill -9 (or was failed over): ended either way.
    let (status, body) = a.call("DELETE", &format!("/v2/sandboxes/{w}"), None).await;
    assert!([202, 204, 409].contains(&status), "{status} {body}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, got) = a.call("GET", &format!("/v2/sandboxes/{w}"), None).await;
        if got["data"]["status"] == "TERMINATED" || got["data"]["status"] == "FAILED" {
            break;
        }
        assert!(Instant::now() < deadline, "writer never ended: {got}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Delete removes the objects; the name is free again.
    let (status, body) = a.call("DELETE", "/v1/volumes/shared", None).await;
    assert_eq!(status, 204, "{body}");
    assert_error(
        &c.call("GET", "/v1/volumes/shared", None).await,
        404,
        "volume_not_found",
    );
    let (status, body) = c
        .call(
            "POST",
            "/v1/volumes",
            Some(json!({"name": "shared", "kind": "s3", "sizeMb": 16})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let (_, got) = c.call("GET", "/v1/volumes/shared", None).await;
    assert_eq!(got["data"]["usedBytes"], 0, "{got}");
    drop(c);
}
