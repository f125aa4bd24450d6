//! The per-sandbox disk limit (`--sandbox-disk-mb`) on real gVisor: a full
//! disk is ENOSPC inside that sandbox only, the daemon and the other
//! sandboxes do not notice, and no mount, loop device or image outlives its
//! sandbox, also across a `kill -9` of sbxd. And the console log, which is
//! outside that disk, stays within `--console-log-max-mb` on the host.

mod common;

use common::disks::{loop_files_under, mounts_under};
use common::{Daemon, KillLeftovers};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const SETTLE: Duration = Duration::from_secs(60);
/// Small enough to fill in well under a second.
const DISK_MB: &str = "64";

/// One boot-heavy case at a time on this 2-core machine.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Mounts under the daemon's data dir.
fn mounts(d: &Daemon) -> Vec<PathBuf> {
    mounts_under(d.data_dir())
}

/// Images ready in the spare dir.
fn spares(d: &Daemon) -> usize {
    std::fs::read_dir(d.data_dir().join("spare-disks"))
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter(|e| e.path().extension().is_some_and(|x| x == "img"))
                .count()
        })
        .unwrap_or(0)
}

/// The sandbox's disk mount point.
fn overlay(d: &Daemon, id: &str) -> PathBuf {
    d.data_dir().join("sandboxes").join(id).join("overlay")
}

/// Waits until no mount, loop device or sandbox dir is left under the data dir.
async fn assert_no_disks_left(d: &Daemon) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (m, l, dirs) = (mounts(d), loop_files_under(d.data_dir()), d.sandbox_dirs());
        if m.is_empty() && l.is_empty() && dirs.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "left behind: mounts {m:?}, loop devices {l:?}, sandbox dirs {dirs:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn a_full_disk_is_enospc_in_that_sandbox_only() {
    let _serial = SERIAL.lock().await;
    let _leftovers: KillLeftovers;
    let d = Daemon::start(&["--sandbox-disk-mb", DISK_MB]).await;
    _leftovers = KillLeftovers::of(&d);
    assert!(spares(&d) >= 1, "no spare disk images after start");
    let a = d.create_running("filler").await;
    let b = d.create_running("neighbour").await;
    for id in [&a, &b] {
        assert!(
            mounts(&d).contains(&overlay(&d, id)),
            "{id} has no disk mount: {:?}",
            mounts(&d)
        );
    }

    // Fill A's disk while probing the daemon and B.
    let fill = d.exec(
        &a,
        &["sh", "-c", "dd if=/dev/zero of=/root/big bs=1M count=200"],
    );
    let probe = async {
        let mut worst = Duration::ZERO;
        for _ in 0..10 {
            let t = Instant::now();
            let (code, _) = d.call("GET", "/healthz", None).await;
            assert_eq!(code, 200);
            worst = worst.max(t.elapsed());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        worst
    };
    let ((code, _, stderr), worst_health) = tokio::join!(fill, probe);
    println!(
        "dd into a {DISK_MB} MiB disk: exit {code}, {stderr:?}; worst healthz {worst_health:?}"
    );
    assert_ne!(code, 0, "dd filled 200 MiB into a {DISK_MB} MiB disk");
    assert!(
        stderr.contains("No space left on device"),
        "dd did not get ENOSPC: {stderr:?}"
    );
    assert!(worst_health < Duration::from_secs(5), "{worst_health:?}");
    let (_, size, _) = d.exec(&a, &["stat", "-c", "%s", "/root/big"]).await;
    let size: u64 = size.trim().parse().unwrap();
    assert!(
        size > 48 * 1024 * 1024,
        "only {size} bytes fit in a {DISK_MB} MiB disk"
    );

    // B does not notice: it writes (more than A has left) and runs what it wrote.
    let (code, out, err) = d
        .exec(
            &b,
            &[
                "sh",
                "-c",
                "dd if=/dev/zero of=/root/b bs=1M count=32 2>/dev/null && cp /bin/ls /root/ls && /root/ls -d /root",
            ],
        )
        .await;
    assert_eq!(
        (code, out.as_str()),
        (0, "/root\n"),
        "B cannot write: {err}"
    );
    // The daemon answers everything else.
    let (status, list) = d.call("GET", "/v2/sandboxes", None).await;
    assert_eq!(status, 200, "{list}");
    let upload = d
        .http
        .put(d.url(&format!("/v2/sandboxes/{b}/files?path=/root/up.txt")))
        .header("content-type", "application/octet-stream")
        .body("uploaded")
        .send()
        .await
        .unwrap();
    assert_eq!(upload.status().as_u16(), 200);

    // An upload into the full disk fails as a client error, not a daemon one.
    // Own client: sbxd answers before reading the whole body and closes that
    // connection, which the shared pool could otherwise hand to the next call.
    let full = reqwest::Client::new()
        .put(d.url(&format!("/v2/sandboxes/{a}/files?path=/root/up.bin")))
        .header("content-type", "application/octet-stream")
        .body(vec![b'x'; 4 * 1024 * 1024])
        .send()
        .await
        .unwrap();
    let status = full.status().as_u16();
    let body = full.text().await.unwrap_or_default();
    println!("upload into the full disk: {status} {body}");
    assert_eq!(status, 409, "{body}");
    // A still answers, and writes again once it deleted its file.
    let (code, out, _) = d.exec(&a, &["echo", "alive"]).await;
    assert_eq!((code, out.as_str()), (0, "alive\n"));
    let (code, out, err) = d
        .exec(
            &a,
            &[
                "sh",
                "-c",
                "rm /root/big && dd if=/dev/zero of=/root/again bs=1M count=16 2>/dev/null && echo ok",
            ],
        )
        .await;
    assert_eq!(
        (code, out.as_str()),
        (0, "ok\n"),
        "A cannot write again: {err}"
    );

    d.assert_host_matches_store(SETTLE).await;
    d.destroy_all(SETTLE).await;
    d.assert_host_matches_store(SETTLE).await;
    assert_no_disks_left(&d).await;
    // Spares stay, refilled up to their fixed number.
    let n = spares(&d);
    assert!((1..=4).contains(&n), "{n} spare images");
}

/// Mounts a copy of a spare image on `mountpoint` with mount(8), as sbxd would have.
fn mount_copy_of_a_spare(d: &Daemon, image: &Path, mountpoint: &Path) {
    let spare = std::fs::read_dir(d.data_dir().join("spare-disks"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "img"))
        .expect("a spare image");
    std::fs::create_dir_all(mountpoint).unwrap();
    let copied = Command::new("cp")
        .arg("--sparse=always")
        .arg(&spare)
        .arg(image)
        .status()
        .unwrap();
    assert!(copied.success());
    let mounted = Command::new("mount")
        .args(["-o", "loop"])
        .arg(image)
        .arg(mountpoint)
        .status()
        .unwrap();
    assert!(mounted.success());
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn kill9_keeps_live_disks_and_removes_the_rest() {
    let _serial = SERIAL.lock().await;
    let _leftovers: KillLeftovers;
    let mut d = Daemon::start(&["--sandbox-disk-mb", DISK_MB]).await;
    _leftovers = KillLeftovers::of(&d);
    let keep = d.create_running("keep").await;
    let (code, _, _) = d
        .exec(&keep, &["sh", "-c", "echo before > /root/note"])
        .await;
    assert_eq!(code, 0);
    let doomed = d.create_running("doomed").await;

    // Destroy `doomed` and kill sbxd as soon as TERMINATING is recorded.
    let http = d.http.clone();
    let url = d.url(&format!("/v2/sandboxes/{doomed}"));
    let req = tokio::spawn(async move { http.delete(url).send().await });
    let db = d.data_dir().join("sbx.sqlite");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = Command::new("sqlite3")
            .arg(&db)
            .arg(format!(
                "SELECT status FROM sandboxes WHERE id = '{doomed}'"
            ))
            .output()
            .unwrap();
        if String::from_utf8_lossy(&out.stdout).trim() == "TERMINATING" || Instant::now() > deadline
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    d.kill9();
    let _ = req.await;
    // What a sbxd killed between mounting a disk and `runsc run`, or during
    // its start-up probe, leaves: mounts no sandbox owns.
    let orphan = uuid::Uuid::new_v4().to_string();
    let orphan_dir = d.data_dir().join("sandboxes").join(&orphan);
    mount_copy_of_a_spare(
        &d,
        &orphan_dir.join("disk.img"),
        &orphan_dir.join("overlay"),
    );
    let probe = d.data_dir().join("spare-disks/probe");
    mount_copy_of_a_spare(&d, &d.data_dir().join("probe-copy.img"), &probe);
    println!("before restart: mounts {:?}", mounts(&d));

    d.spawn().await;
    let s = d.wait_settled(&doomed, SETTLE).await;
    assert_eq!(s["status"], "TERMINATED", "{s}");
    assert_eq!(d.assert_truthful(&keep, SETTLE).await, "RUNNING");
    // The live sandbox kept its disk and what is on it, and still has its limit.
    let (code, out, _) = d.exec(&keep, &["cat", "/root/note"]).await;
    assert_eq!((code, out.as_str()), (0, "before\n"));
    let (code, _, stderr) = d
        .exec(
            &keep,
            &["sh", "-c", "dd if=/dev/zero of=/root/big bs=1M count=200"],
        )
        .await;
    assert!(
        code != 0 && stderr.contains("No space left on device"),
        "{code} {stderr:?}"
    );
    assert_eq!(mounts(&d), vec![overlay(&d, &keep)]);
    assert!(!orphan_dir.exists(), "orphan dir left");
    d.assert_host_matches_store(SETTLE).await;
    let _ = std::fs::remove_file(d.data_dir().join("probe-copy.img"));

    d.destroy_all(SETTLE).await;
    d.assert_host_matches_store(SETTLE).await;
    assert_no_disks_left(&d).await;
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn disk_limit_zero_mounts_nothing() {
    let _serial = SERIAL.lock().await;
    let _leftovers: KillLeftovers;
    let d = Daemon::start(&["--sandbox-disk-mb", "0"]).await;
    _leftovers = KillLeftovers::of(&d);
    let id = d.create_running("unlimited").await;
    assert!(mounts(&d).is_empty(), "{:?}", mounts(&d));
    assert!(!d.data_dir().join("spare-disks").exists());
    let (code, out, _) = d
        .exec(
            &id,
            &[
                "sh",
                "-c",
                "dd if=/dev/zero of=/root/f bs=1M count=80 2>/dev/null && echo ok",
            ],
        )
        .await;
    assert_eq!((code, out.as_str()), (0, "ok\n"));
    d.destroy_all(SETTLE).await;
    d.assert_host_matches_store(SETTLE).await;
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn start_fails_clearly_when_disks_cannot_be_made() {
    // No mkfs.ext4 on PATH: sbxd must refuse to start and say how to run without a limit.
    let dir = tempfile::Builder::new()
        .prefix("sbx-it-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let agent = std::env::var("SBX_TEST_AGENT_DIR").expect("SBX_TEST_AGENT_DIR");
    let rootfs = std::env::var("SBX_TEST_IMAGE_ROOTFS").expect("SBX_TEST_IMAGE_ROOTFS");
    let empty = dir.path().join("empty-path");
    std::fs::create_dir_all(&empty).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_sbxd"))
        .args(["--dev", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("data"))
        .args(["--agent-dir", &agent, "--image-rootfs", &rootfs])
        .env("PATH", &empty)
        .env("SBX_CONNECT_SDK_DIR", dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("sbxd without mkfs.ext4: {} {stderr}", out.status);
    assert!(!out.status.success());
    assert!(stderr.contains("mkfs.ext4"), "{stderr}");
    assert!(stderr.contains("--sandbox-disk-mb 0"), "{stderr}");
    assert!(mounts_under(dir.path()).is_empty());
}

/// The sandbox's logs, decoded (the non-follow stream ends at the current end).
async fn sandbox_logs(d: &Daemon, id: &str) -> Vec<u8> {
    let resp = d
        .http
        .get(d.url(&format!("/v2/sandboxes/{id}/logs")))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let body = resp.text().await.unwrap();
    let mut out = Vec::new();
    for line in body.lines() {
        let frame: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(frame["type"], "log", "{frame}");
        out.extend(common::b64(&frame["data"]).into_bytes());
    }
    out
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn console_log_flood_is_trimmed_and_logs_keep_the_newest_bytes() {
    let _serial = SERIAL.lock().await;
    let _leftovers: KillLeftovers;
    let d = Daemon::start(&["--console-log-max-mb", "4"]).await;
    _leftovers = KillLeftovers::of(&d);
    let id = d.create_running("console-flood").await;
    let log = d.data_dir().join("sandboxes").join(&id).join("console.log");
    // Anything in the sandbox can write to PID 1's stdout: 150 MB of it, between two markers.
    let script = "echo first-marker > /proc/1/fd/1; \
                  head -c 150000000 /dev/zero | tr '\\0' y > /proc/1/fd/1; \
                  echo last-marker > /proc/1/fd/1";
    let (code, _, err) = d.exec(&id, &["sh", "-c", script]).await;
    assert_eq!(code, 0, "{err}");
    // Bounded in length as well as in disk use (the trim collapses the
    // oldest bytes out of the file; before, only a hole was punched).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let meta = std::fs::metadata(&log).unwrap();
        let on_disk = meta.blocks() * 512;
        if on_disk <= 4 * 1024 * 1024 && meta.len() <= 4 * 1024 * 1024 {
            println!("console.log: {} bytes long, {on_disk} on disk", meta.len());
            break;
        }
        assert!(
            Instant::now() < deadline,
            "console.log is still {} bytes long and uses {on_disk} bytes of disk",
            meta.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let logs = sandbox_logs(&d, &id).await;
    assert!(!logs.contains(&0), "the trimmed part was served as zeros");
    let text = String::from_utf8_lossy(&logs);
    // The agent's own lines (this exec's exit) may follow the marker.
    let tail = &text[text.len().saturating_sub(4096)..];
    assert!(tail.contains("last-marker"), "{tail}");
    assert!(!text.contains("first-marker"));
    assert!(
        logs.len() <= 4 * 1024 * 1024,
        "{} bytes of logs",
        logs.len()
    );
    assert!(
        logs.len() >= 1024 * 1024,
        "only {} bytes of logs",
        logs.len()
    );
    let (code, out, _) = d.exec(&id, &["echo", "alive"]).await;
    assert_eq!((code, out.as_str()), (0, "alive\n"));
    d.destroy_all(SETTLE).await;
    d.assert_host_matches_store(SETTLE).await;
}
