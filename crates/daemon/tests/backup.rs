//! `sbxd backup` and `sbxd restore` on a real node: a backup taken while sbxd runs
//! restores into a fresh data dir, and an sbxd started there has the keys, the
//! secret (opened with the restored key), the snapshot record and a built Connect
//! package with its files; bad inputs are
//! refused with clear errors and nothing is overwritten.
//!
//! Needs root, runsc, the image and the agent (`./scripts/test`).

mod common;

use common::Daemon;
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// A key given by flag: production mode, so that stored keys are what authenticates.
const FLAG_KEY: &str = "signkey-test-00112233445566778899aabbccddeeff";

/// Runs `sbxd ARGS`; returns (success, stdout, stderr).
fn sbxd(args: &[&str], paths: &[&Path]) -> (bool, String, String) {
    let out = Command::new(common::sbxd_binary())
        .args(args)
        .args(paths)
        .env("SBX_LOG", "warn")
        .output()
        .expect("run sbxd");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn backup(from: &Path, to: &Path) -> (bool, String, String) {
    let (ok, out, err) = sbxd(&["backup", "--data-dir", path(from)], &[to]);
    println!("backup -> {ok}\n{out}{err}");
    (ok, out, err)
}

fn restore(from: &Path, to: &Path, extra: &[&str]) -> (bool, String, String) {
    let mut args = vec!["restore", "--data-dir", path(to)];
    args.extend(extra);
    let (ok, out, err) = sbxd(&args, &[from]);
    println!("restore -> {ok}\n{out}{err}");
    (ok, out, err)
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// What the SDK sends: the hashed form of the signing key.
fn bearer(key: &str) -> String {
    format!(
        "Bearer {}",
        sbx_api_types::signing_key::hashed_signing_key(key)
    )
}

/// `examples/NAME` as a gzipped tarball under `package/`, as `npm pack` lays it out.
fn package_tarball(name: &str) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("p.tgz");
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let status = Command::new("tar")
        .arg("-czf")
        .arg(&out)
        .arg("-C")
        .arg(&examples)
        .arg("--transform")
        .arg(format!("s,^{name},package,"))
        .arg(name)
        .status()
        .expect("tar");
    assert!(status.success());
    std::fs::read(out).unwrap()
}

async fn call(d: &Daemon, key: &str, method: &str, url: &str, body: Option<Value>) -> (u16, Value) {
    let auth = bearer(key);
    d.call_with(
        method,
        url,
        body.map(|b| b.to_string().into_bytes()),
        &[("authorization", auth.as_str())],
    )
    .await
}

/// Every file under `dir` with its contents (to tell that nothing changed).
fn contents(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                todo.push(p);
            } else {
                out.push((
                    p.display().to_string(),
                    std::fs::read(&p).unwrap_or_default(),
                ));
            }
        }
    }
    out.sort();
    out
}

fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("sbx-it-")
        .tempdir_in("/var/tmp")
        .unwrap()
}

#[tokio::test]
#[ignore = "needs root, runsc, the image and the agent; run ./scripts/test"]
async fn a_backup_taken_online_restores_into_a_fresh_data_dir_with_its_data() {
    let d = Daemon::start(&["--signing-key", FLAG_KEY, "--snapshot-verify", "false"]).await;
    if d.database_url().is_some() {
        // SBX_TEST_STORE=postgres: the store is PostgreSQL, which pg_dump backs up.
        let out = scratch();
        let url = d.database_url().unwrap_or_default().to_string();
        let (ok, _, err) = sbxd(
            &[
                "backup",
                "--data-dir",
                path(d.data_dir()),
                "--database-url",
                &url,
            ],
            &[&out.path().join("b")],
        );
        assert!(!ok && err.contains("pg_dump"), "{err}");
        return;
    }
    let key = d.create_key("acme", None);
    let (status, put) = call(
        &d,
        &key,
        "PUT",
        "/v1/secrets/TOKEN",
        Some(json!({"value": "kept-by-the-key"})),
    )
    .await;
    assert_eq!(status, 200, "{put}");
    // A snapshot record (its checkpoint files are not in a backup).
    let (status, created) = call(
        &d,
        &key,
        "POST",
        "/v2/sandboxes",
        Some(json!({"name": "source", "vcpu": 1, "memoryMb": 1024})),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let sandbox = created["data"]["id"].as_str().expect("id").to_string();
    let (status, snap) = call(
        &d,
        &key,
        "POST",
        &format!("/v2/sandboxes/{sandbox}/snapshots"),
        Some(json!({"name": "kept"})),
    )
    .await;
    assert!(status == 201 || status == 202, "{status} {snap}");
    let snap_id = snap["data"]["id"]
        .as_str()
        .expect("snapshot id")
        .to_string();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (_, got) = call(&d, &key, "GET", &format!("/v2/snapshots/{snap_id}"), None).await;
        if got["data"]["status"] == "READY" {
            break;
        }
        assert_ne!(got["data"]["status"], "FAILED", "{got}");
        assert!(Instant::now() < deadline, "snapshot not READY: {got}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A Connect package, uploaded and built: its rows, tarball and built artifact.
    let (status, body) = d
        .call_with(
            "POST",
            "/v1/connect/packages",
            Some(package_tarball("connector-items")),
            &[
                ("content-type", "application/gzip"),
                ("authorization", bearer(&key).as_str()),
            ],
        )
        .await;
    assert_eq!(status, 201, "upload: {body}");
    let (status, body) = call(
        &d,
        &key,
        "POST",
        "/v1/connect/packages/connector-items/versions/1.0.0/builds",
        None,
    )
    .await;
    assert_eq!(status, 202, "build: {body}");
    let build_id = body["data"]["id"].as_str().expect("build id").to_string();
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let (_, b) = call(
            &d,
            &key,
            "GET",
            &format!("/v1/connect/builds/{build_id}"),
            None,
        )
        .await;
        match b["data"]["status"].as_str() {
            Some("succeeded") => break,
            Some("failed") => panic!("build failed: {b}"),
            _ => {}
        }
        assert!(Instant::now() < deadline, "build not finished: {b}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Running sandboxes are not in a backup: this one is gone before it.
    let (status, _) = call(
        &d,
        &key,
        "DELETE",
        &format!("/v2/sandboxes/{sandbox}"),
        None,
    )
    .await;
    assert!(status < 300, "destroy: {status}");

    // Online: sbxd keeps running (and holds its data dir) during the backup.
    let work = scratch();
    let dir = work.path().join("backup");
    let (ok, summary, err) = backup(d.data_dir(), &dir);
    assert!(ok, "backup failed: {err}");
    assert!(summary.contains("sbx.sqlite: copied"), "{summary}");
    assert!(summary.contains("secret.key: copied"), "{summary}");
    assert!(dir.join("manifest.json").is_file());
    let (status, _) = call(&d, &key, "GET", "/v2/snapshots", None).await;
    assert_eq!(status, 200, "the node serves on after its backup");

    // Bad inputs: clear errors, nothing written or overwritten.
    let before = contents(&dir);
    let (ok, _, err) = backup(d.data_dir(), &dir);
    assert!(!ok && err.contains("exists and is not empty"), "{err}");
    assert_eq!(
        contents(&dir),
        before,
        "a refused backup changed the old one"
    );
    let (ok, _, err) = sbxd(
        &["backup", "--database-url", "postgres://sbx@db/sbx"],
        &[&work.path().join("pg")],
    );
    assert!(!ok && err.contains("pg_dump"), "{err}");
    assert!(!work.path().join("pg").exists());

    let target = scratch();
    std::fs::write(target.path().join("keep.txt"), b"mine").unwrap();
    let (ok, _, err) = restore(d.data_dir(), target.path(), &[]);
    assert!(
        !ok && err.contains("is not an sbx backup"),
        "a data dir is no backup: {err}"
    );
    let (ok, _, err) = restore(&dir, target.path(), &[]);
    assert!(!ok && err.contains("is not empty"), "{err}");
    assert!(
        !target.path().join("sbx.sqlite").exists(),
        "written despite the refusal"
    );
    assert_eq!(
        std::fs::read(target.path().join("keep.txt")).unwrap(),
        b"mine"
    );
    // --force: the store and key are put in; other files stay.
    std::fs::write(target.path().join("sbx.sqlite-wal"), b"stale journal").unwrap();
    let (ok, _, err) = restore(&dir, target.path(), &["--force"]);
    assert!(ok, "restore --force: {err}");
    assert_eq!(
        std::fs::read(target.path().join("sbx.sqlite")).unwrap(),
        std::fs::read(dir.join("sbx.sqlite")).unwrap()
    );
    assert!(
        !target.path().join("sbx.sqlite-wal").exists(),
        "a journal of the replaced store would be replayed onto the restored one"
    );
    assert!(target.path().join("keep.txt").exists());
    let (ok, _, err) = restore(&dir, d.data_dir(), &["--force"]);
    assert!(
        !ok && err.contains("another sbxd is using"),
        "restore onto a running node: {err}"
    );
    // A damaged copy is refused before anything is written.
    let damaged = work.path().join("damaged");
    std::fs::create_dir(&damaged).unwrap();
    for (file, bytes) in contents(&dir) {
        let rel = Path::new(&file).strip_prefix(&dir).unwrap().to_path_buf();
        let to = damaged.join(&rel);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::write(&to, bytes).unwrap();
    }
    let mut db = std::fs::read(damaged.join("sbx.sqlite")).unwrap();
    let last = db.len() - 1;
    db[last] ^= 0xff;
    std::fs::write(damaged.join("sbx.sqlite"), db).unwrap();
    let fresh = scratch();
    let (ok, _, err) = restore(&damaged, fresh.path(), &[]);
    assert!(!ok && err.contains("damaged"), "{err}");
    assert!(
        common_is_empty(fresh.path()),
        "a refused restore wrote files"
    );

    // The round trip: restore into a fresh data dir and start sbxd on it.
    let (ok, out, err) = restore(&dir, fresh.path(), &[]);
    assert!(ok, "restore failed: {err}");
    assert!(out.contains("restored"), "{out}");
    let r = Daemon::start_in(fresh, &["--signing-key", FLAG_KEY]).await;
    let (status, got) = call(&r, &key, "GET", &format!("/v2/snapshots/{snap_id}"), None).await;
    assert_eq!(status, 200, "the stored key and the snapshot record: {got}");
    assert_eq!(got["data"]["name"], "kept");
    let (status, secrets) = call(&r, &key, "GET", "/v1/secrets", None).await;
    assert_eq!(status, 200, "{secrets}");
    assert!(secrets.to_string().contains("TOKEN"), "{secrets}");
    // The secret opens with the restored key inside a new sandbox.
    let (status, with_secret) = call(
        &r,
        &key,
        "POST",
        "/v2/sandboxes",
        Some(json!({"name": "after", "vcpu": 1, "memoryMb": 1024, "secrets": ["TOKEN"]})),
    )
    .await;
    assert_eq!(status, 201, "{with_secret}");
    let id = with_secret["data"]["id"].as_str().expect("id").to_string();
    let (status, ran) = call(
        &r,
        &key,
        "POST",
        &format!("/v2/sandboxes/{id}/exec"),
        Some(json!({"command": ["sh", "-c", "printf %s \"$TOKEN\""], "timeout": "30000ms"})),
    )
    .await;
    assert_eq!(status, 200, "{ran}");
    assert_eq!(common::b64(&ran["data"]["stdout"]), "kept-by-the-key");
    // Connect: the package version and its build, with the files they name.
    let (status, got) = call(
        &r,
        &key,
        "GET",
        &format!("/v1/connect/builds/{build_id}"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{got}");
    assert_eq!(got["data"]["status"], "succeeded", "{got}");
    let restored = r.data_dir().join("connect");
    assert!(
        std::fs::read_dir(restored.join("tarballs")).map_or(0, |e| e.count()) > 0,
        "the package tarball is restored"
    );
    assert!(
        restored.join("artifacts").join(&build_id).is_dir(),
        "the built artifact is restored"
    );
    // A key of another workspace does not exist there either: the key table is the backup's.
    let (status, _) = call(&r, "signkey-sbx-unknown", "GET", "/v2/snapshots", None).await;
    assert_eq!(status, 401);
}

fn common_is_empty(dir: &Path) -> bool {
    std::fs::read_dir(dir)
        .map(|mut e| e.next().is_none())
        .unwrap_or(true)
}
