//! Local volumes on real gVisor (issue 18, first slice).
//!
//! - two sandboxes share a volume: one writes, the other reads at once;
//! - a read-only mount refuses writes (EROFS) while the other sandbox writes;
//! - the size limit is ENOSPC in the volume, and another volume of the same
//!   sandbox keeps working;
//! - destroy keeps the data: a new sandbox mounting the volume sees it;
//! - delete is refused (409) while an active sandbox mounts it, allowed after;
//! - pause/resume keeps the mount, and a clone of a snapshot mounts the
//!   volume again and sees its current data (not a copy);
//! - escape attempts from inside fail: a symlink to a host path (the host's
//!   `/etc/shadow`, a marker file on the host) made in the volume and
//!   followed from another sandbox; `..` traversal out of the mount point;
//!   a hard link to a file outside the volume (EXDEV); writing through
//!   `/proc/self/root/..`; a bind mount made inside the sandbox does not
//!   appear on the host;
//! - bad API inputs (relative path, `/proc`, duplicate paths, unknown
//!   volume, bad sizes, kind `s3`) answer 400/404/409 and change nothing.

mod common;

use common::{assert_error, Daemon, KillLeftovers};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// One boot-heavy case at a time on this 2-core machine.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn volume(d: &Daemon, name: &str, size_mb: u64) -> String {
    let (status, body) = d
        .call(
            "POST",
            "/v1/volumes",
            Some(json!({"name": name, "kind": "local", "sizeMb": size_mb})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["data"]["kind"], "local");
    body["data"]["id"].as_str().unwrap().to_string()
}

/// Creates a RUNNING sandbox with `volumes` through `/v1`.
async fn create_with(d: &Daemon, name: &str, volumes: Value) -> String {
    let (status, body) = d
        .call(
            "POST",
            "/v1/sandboxes",
            Some(json!({"name": name, "vcpu": 1, "memoryMb": 1024, "volumes": volumes})),
        )
        .await;
    assert!(status == 201 || status == 202, "create: {status} {body}");
    let id = body["data"]["id"].as_str().unwrap().to_string();
    if status == 202 {
        d.wait_status(&id, "RUNNING", Duration::from_secs(120))
            .await;
    }
    id
}

fn mount_point(d: &Daemon, id: &str) -> PathBuf {
    d.data_dir().join("volumes").join(id)
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn volumes_are_shared_read_only_enforced_size_limited_and_outlive_sandboxes() {
    let _serial = SERIAL.lock().await;
    let d = Daemon::start(&[]).await;
    let _leftovers = KillLeftovers::of(&d);
    let shared = volume(&d, "shared", 32).await;
    let _other = volume(&d, "other", 32).await;
    let writer = create_with(
        &d,
        "writer",
        json!([{"name": "shared", "path": "/data"}, {"name": "other", "path": "/other"}]),
    )
    .await;
    let reader = create_with(
        &d,
        "reader",
        json!([{"name": "shared", "path": "/data", "readOnly": true}]),
    )
    .await;
    let (_, detail) = d
        .call("GET", &format!("/v1/sandboxes/{reader}"), None)
        .await;
    assert_eq!(
        detail["data"]["mounts"],
        json!([{"name": "shared", "path": "/data", "readOnly": true}]),
        "{detail}"
    );

    // One writes, the other reads at once.
    let (code, _, err) = d
        .sh(&writer, "echo hello-volume > /data/hello && sync")
        .await;
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = d.sh(&reader, "cat /data/hello").await;
    assert_eq!((code, out.trim()), (0, "hello-volume"), "{err}");
    // A second write is seen too (no stale cache).
    d.sh(&writer, "echo again >> /data/hello").await;
    let (_, out, _) = d.sh(&reader, "cat /data/hello").await;
    assert_eq!(out, "hello-volume\nagain\n");

    // Read-only is enforced by gVisor; the writer still writes.
    let (code, _, err) = d.sh(&reader, "echo x > /data/nope").await;
    assert_ne!(code, 0);
    assert!(err.contains("Read-only file system"), "{err}");
    let (code, _, err) = d.sh(&reader, "rm /data/hello").await;
    assert!(code != 0 && err.contains("Read-only"), "{err}");
    let (code, _, _) = d.sh(&writer, "echo y > /data/yes").await;
    assert_eq!(code, 0);

    // The size limit: ENOSPC in this volume, the other volume unaffected.
    let (code, _, err) = d
        .sh(&writer, "dd if=/dev/zero of=/data/fill bs=1M count=64")
        .await;
    assert_ne!(code, 0, "64 MiB fit in a 32 MiB volume");
    assert!(err.contains("No space left on device"), "{err}");
    let (code, _, err) = d
        .sh(
            &writer,
            "dd if=/dev/zero of=/other/ok bs=1M count=8 && rm /other/ok",
        )
        .await;
    assert_eq!(code, 0, "the other volume was affected: {err}");
    let (_, got) = d.call("GET", "/v1/volumes/shared", None).await;
    let used = got["data"]["usedBytes"].as_u64().unwrap();
    assert!(used > 24 * 1024 * 1024, "usage {used} after filling: {got}");
    d.sh(&writer, "rm /data/fill").await;

    // Delete is refused while mounted, and changes nothing.
    assert_error(
        &d.call("DELETE", "/v1/volumes/shared", None).await,
        409,
        "invalid_request",
    );
    let (status, _) = d.call("GET", "/v1/volumes/shared", None).await;
    assert_eq!(status, 200);

    // Destroy keeps the data: a new sandbox sees it.
    d.destroy_and_wait(&writer).await;
    d.destroy_and_wait(&reader).await;
    let again = create_with(&d, "again", json!([{"name": "shared", "path": "/mnt/v"}])).await;
    let (code, out, err) = d.sh(&again, "cat /mnt/v/hello /mnt/v/yes").await;
    assert_eq!(
        (code, out.as_str()),
        (0, "hello-volume\nagain\ny\n"),
        "{err}"
    );
    d.destroy_and_wait(&again).await;

    // Allowed after destroy: the data and the host mount go.
    let (status, body) = d.call("DELETE", "/v1/volumes/shared", None).await;
    assert_eq!(status, 204, "{body}");
    assert_error(
        &d.call("GET", "/v1/volumes/shared", None).await,
        404,
        "volume_not_found",
    );
    assert!(!mount_point(&d, &shared).exists());
    assert!(!d
        .data_dir()
        .join("volumes")
        .join(format!("{shared}.img"))
        .exists());
    let (_, list) = d.call("GET", "/v1/volumes", None).await;
    assert_eq!(
        list["data"]["volumes"].as_array().unwrap().len(),
        1,
        "{list}"
    );
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn escapes_from_a_volume_fail() {
    let _serial = SERIAL.lock().await;
    let d = Daemon::start(&[]).await;
    let _leftovers = KillLeftovers::of(&d);
    let vol = volume(&d, "esc", 32).await;
    let a = create_with(&d, "a", json!([{"name": "esc", "path": "/data"}])).await;
    let b = create_with(&d, "b", json!([{"name": "esc", "path": "/data"}])).await;
    // A host file no guest path names.
    let marker = d.data_dir().join("host-marker");
    std::fs::write(&marker, "host-secret").unwrap();
    let marker = marker.to_str().unwrap().to_string();
    let host_root = mount_point(&d, &vol);

    // Symlinks made in the volume resolve inside the reading sandbox.
    let script = format!("ln -s /etc/shadow /data/shadow && ln -s {marker} /data/marker");
    assert_eq!(d.sh(&a, &script).await.0, 0);
    let (code, out, _) = d.sh(&b, "cat /data/marker").await;
    assert!(code != 0 && !out.contains("host-secret"), "{out}");
    if let Ok(host_shadow) = std::fs::read_to_string("/etc/shadow") {
        let (_, out, _) = d.sh(&b, "cat /data/shadow").await;
        assert_ne!(out, host_shadow, "the host's /etc/shadow was read");
    }
    // On the host they are plain symlinks in the volume, never followed.
    assert_eq!(
        std::fs::read_link(host_root.join("marker")).unwrap(),
        PathBuf::from(&marker)
    );

    // `..` out of the mount point is the guest's root.
    let (_, out, _) = d
        .sh(&b, &format!("cat /data/../..{marker}; ls /data/.."))
        .await;
    assert!(!out.contains("host-secret") && !out.contains(&vol), "{out}");
    // A hard link to a file outside the volume.
    let (code, _, err) = d.sh(&a, "ln /etc/passwd /data/pw").await;
    assert!(code != 0, "hard link across mounts: {err}");
    assert!(!host_root.join("pw").exists());
    // Through /proc/self/root.
    let script = format!(
        "cat /proc/self/root{marker}; echo pwned > /proc/self/root/data/../../..{marker}.pwned; \
         cat /proc/self/root/data/../../{marker}"
    );
    let (_, out, _) = d.sh(&a, &script).await;
    assert!(!out.contains("host-secret"), "{out}");
    assert!(!PathBuf::from(format!("{marker}.pwned")).exists());
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "host-secret");
    // A bind mount inside the sandbox stays inside it.
    d.sh(&a, "mkdir -p /data/root && mount --bind / /data/root")
        .await;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let under: Vec<&str> = mountinfo
        .lines()
        .filter(|l| l.contains(host_root.to_str().unwrap()))
        .collect();
    assert_eq!(under.len(), 1, "host mounts under the volume: {under:?}");
    let entries: Vec<_> = std::fs::read_dir(host_root.join("root"))
        .map(|rd| rd.filter_map(|e| e.ok()).collect())
        .unwrap_or_default();
    assert!(
        entries.is_empty(),
        "guest root visible on the host: {entries:?}"
    );
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn pause_resume_and_clones_keep_the_volume() {
    let _serial = SERIAL.lock().await;
    let d = Daemon::start(&[]).await;
    let _leftovers = KillLeftovers::of(&d);
    volume(&d, "keep", 32).await;
    let a = create_with(&d, "a", json!([{"name": "keep", "path": "/data"}])).await;
    assert_eq!(d.sh(&a, "echo before > /data/f").await.0, 0);
    let (status, body) = d
        .call("POST", &format!("/v2/sandboxes/{a}/pause"), None)
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = d
        .call("POST", &format!("/v2/sandboxes/{a}/resume"), None)
        .await;
    assert_eq!(status, 200, "{body}");
    let (code, out, err) = d.sh(&a, "cat /data/f && echo resumed >> /data/f").await;
    assert_eq!((code, out.as_str()), (0, "before\n"), "{err}");

    let (status, snap) = d
        .call("POST", &format!("/v2/sandboxes/{a}/snapshots"), None)
        .await;
    assert!(status == 201 || status == 202, "{status} {snap}");
    let sid = snap["data"]["id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, got) = d.call("GET", &format!("/v2/snapshots/{sid}"), None).await;
        if got["data"]["status"] == "READY" {
            break;
        }
        assert!(Instant::now() < deadline, "{got}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Written after the snapshot: the clone sees it (volume data is not in the snapshot).
    assert_eq!(d.sh(&a, "echo after >> /data/f").await.0, 0);
    let (status, body) = d
        .call(
            "POST",
            "/v1/sandboxes",
            Some(json!({"name": "clone", "snapshotId": sid})),
        )
        .await;
    assert!(status == 201 || status == 202, "{status} {body}");
    let clone = body["data"]["id"].as_str().unwrap().to_string();
    d.wait_status(&clone, "RUNNING", Duration::from_secs(120))
        .await;
    let (code, out, err) = d
        .sh(&clone, "cat /data/f && echo from-clone >> /data/f")
        .await;
    assert_eq!(
        (code, out.as_str()),
        (0, "before\nresumed\nafter\n"),
        "{err}"
    );
    let (_, out, _) = d.sh(&a, "cat /data/f").await;
    assert_eq!(out, "before\nresumed\nafter\nfrom-clone\n");
    let (_, detail) = d.call("GET", &format!("/v1/sandboxes/{clone}"), None).await;
    assert_eq!(detail["data"]["mounts"][0]["path"], "/data", "{detail}");
    // A clone may not name volumes of its own.
    assert_error(
        &d.call(
            "POST",
            "/v1/sandboxes",
            Some(json!({"name": "c2", "snapshotId": sid, "volumes": [{"name": "keep", "path": "/x"}]})),
        )
        .await,
        400,
        "invalid_field_format",
    );
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn bad_volume_inputs_are_refused_and_change_nothing() {
    let _serial = SERIAL.lock().await;
    let d = Daemon::start(&[]).await;
    let _leftovers = KillLeftovers::of(&d);
    volume(&d, "v", 16).await;
    let create =
        |volumes: Value| json!({"name": "bad", "vcpu": 1, "memoryMb": 1024, "volumes": volumes});
    let cases = [
        (
            json!([{"name": "v", "path": "data"}]),
            400,
            "invalid_field_format",
        ),
        (
            json!([{"name": "v", "path": "/proc"}]),
            400,
            "invalid_field_format",
        ),
        (
            json!([{"name": "v", "path": "/etc/x"}]),
            400,
            "invalid_field_format",
        ),
        (
            json!([{"name": "v", "path": "/"}]),
            400,
            "invalid_field_format",
        ),
        (
            json!([{"name": "v", "path": "/a/../b"}]),
            400,
            "invalid_field_format",
        ),
        (
            json!([{"name": "v", "path": "/d"}, {"name": "v", "path": "/d"}]),
            400,
            "invalid_field_format",
        ),
        (
            json!([{"name": "nope", "path": "/d"}]),
            404,
            "volume_not_found",
        ),
        (
            json!([{"name": "v", "path": "/d", "extra": 1}]),
            400,
            "invalid_request",
        ),
    ];
    for (volumes, status, code) in cases {
        let got = d
            .call("POST", "/v1/sandboxes", Some(create(volumes.clone())))
            .await;
        assert_error(&got, status, code);
    }
    let (_, list) = d.call("GET", "/v2/sandboxes", None).await;
    assert_eq!(list["data"].as_array().map(Vec::len), Some(0), "{list}");

    for (body, status, code) in [
        (
            json!({"name": "x", "kind": "local", "sizeMb": 0}),
            400,
            "invalid_field_format",
        ),
        (
            json!({"name": "x", "kind": "local", "sizeMb": 1}),
            400,
            "invalid_field_format",
        ),
        (json!({"name": "x", "kind": "local"}), 400, "missing_field"),
        (
            json!({"name": "", "sizeMb": 64}),
            400,
            "invalid_field_format",
        ),
        (
            json!({"name": "x", "kind": "nfs", "sizeMb": 64}),
            400,
            "invalid_request",
        ),
        (
            json!({"name": "x", "kind": "s3", "sizeMb": 64}),
            400,
            "invalid_field_format",
        ),
        (
            json!({"name": "v", "kind": "local", "sizeMb": 64}),
            409,
            "volume_name_taken",
        ),
    ] {
        assert_error(
            &d.call("POST", "/v1/volumes", Some(body)).await,
            status,
            code,
        );
    }
    let (_, list) = d.call("GET", "/v1/volumes", None).await;
    assert_eq!(
        list["data"]["volumes"].as_array().unwrap().len(),
        1,
        "{list}"
    );
    let images = std::fs::read_dir(d.data_dir().join("volumes"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "img"))
        })
        .count();
    assert_eq!(images, 1, "a refused create left an image");
    assert_error(
        &d.call("DELETE", "/v1/volumes/v?force=maybe", None).await,
        400,
        "invalid_field_format",
    );
    assert_error(
        &d.call("DELETE", "/v1/volumes/nope", None).await,
        404,
        "volume_not_found",
    );
}
