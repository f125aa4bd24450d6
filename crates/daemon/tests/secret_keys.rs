//! Key management on real sbxd processes sharing one PostgreSQL: a secret stored
//! under one key (and one written the way sbx sealed secrets before key ids)
//! survives `sbxd rotate-secret-key`, is injected by a node holding the new key
//! with the old one as previous and by a node holding the new key alone, and a
//! node started with a wrong key refuses to start, naming the key it needs.
//!
//! Needs what the other integration tests need, plus the PostgreSQL server that
//! `./scripts/test` exports as `SBX_TEST_DATABASE_URL`.

mod common;

use base64::Engine;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Nonce};
use common::Daemon;
use sbx_store::{PostgresStore, SecretRecord, Store, TestDatabase};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

fn database() -> TestDatabase {
    let url = std::env::var("SBX_TEST_DATABASE_URL").unwrap_or_else(|_| {
        panic!("SBX_TEST_DATABASE_URL is not set: run ./scripts/test, which starts PostgreSQL")
    });
    TestDatabase::create(&url).unwrap_or_else(|e| panic!("creating a test database: {e}"))
}

fn random_key() -> [u8; 32] {
    use std::io::Read;
    let mut key = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut key))
        .expect("random");
    key
}

/// Writes a key file: raw bytes, or base64 text as an operator might keep it.
fn key_file(dir: &Path, name: &str, key: &[u8; 32], base64_text: bool) -> PathBuf {
    let path = dir.join(name);
    if base64_text {
        let text = base64::engine::general_purpose::STANDARD.encode(key) + "\n";
        std::fs::write(&path, text).expect("write key");
    } else {
        std::fs::write(&path, key).expect("write key");
    }
    path
}

fn key_id(key: &[u8; 32]) -> String {
    sbx_secrets::Key::from_bytes(*key).id().to_string()
}

/// The value of secret `name` as a sandbox created with it sees it.
async fn injected(d: &Daemon, name: &str) -> String {
    let (status, body) = d
        .call(
            "POST",
            "/v2/sandboxes",
            Some(json!({"name": format!("uses-{}", name.to_lowercase().replace('_', "-")), "vcpu": 1, "memoryMb": 1024, "secrets": [name]})),
        )
        .await;
    assert!(status == 201 || status == 202, "create: {status} {body}");
    let id = body["data"]["id"].as_str().expect("id").to_string();
    if status == 202 {
        d.wait_status(&id, "RUNNING", Duration::from_secs(120))
            .await;
    }
    let (code, out, _) = d
        .exec(&id, &["sh", "-c", &format!("printf %s \"${name}\"")])
        .await;
    assert_eq!(code, 0);
    d.destroy_all(Duration::from_secs(60)).await;
    out
}

/// `sbxd rotate-secret-key` on the database: (success, stdout, stderr).
fn rotate(database_url: &str, args: &[&str]) -> (bool, String, String) {
    let dir = tempfile::tempdir().expect("data dir");
    let out = Command::new(env!("CARGO_BIN_EXE_sbxd"))
        .arg("rotate-secret-key")
        .arg("--data-dir")
        .arg(dir.path())
        .args(["--database-url", database_url])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run rotate-secret-key");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A secret row as sbx wrote it before key ids: a 12-byte nonce, the bare ciphertext.
fn legacy_row(key: &[u8; 32], workspace: &str, name: &str, value: &str) -> SecretRecord {
    let nonce = [7u8; 12];
    let ciphertext = ChaCha20Poly1305::new(chacha20poly1305::Key::from_slice(key))
        .encrypt(
            Nonce::from_slice(&nonce),
            Payload {
                msg: value.as_bytes(),
                aad: format!("sbx-secret\0{workspace}\0{name}").as_bytes(),
            },
        )
        .expect("encrypt");
    SecretRecord {
        workspace: workspace.into(),
        name: name.into(),
        nonce: nonce.to_vec(),
        ciphertext,
        created_at: chrono::Utc::now(),
        updated_at: chrono::Utc::now(),
    }
}

/// sbxd on `database_url` with `key_args`, expected to refuse to start: its exit code and stderr.
fn refused(database_url: &str, key_args: &[&str]) -> (Option<i32>, String) {
    let mut args = vec!["--database-url", database_url];
    args.extend_from_slice(key_args);
    common::start_refused(&args, Duration::from_secs(60))
}

#[tokio::test]
#[ignore = "needs root, runsc, the image and PostgreSQL; run ./scripts/test"]
async fn secrets_survive_a_key_rotation_and_a_wrong_key_is_refused() {
    let db = database();
    let url = db.url().to_string();
    let keys = tempfile::tempdir().expect("key dir");
    let (old, new, wrong) = (random_key(), random_key(), random_key());
    let old_file = key_file(keys.path(), "old.key", &old, false);
    let new_file = key_file(keys.path(), "new.key", &new, true);
    let wrong_file = key_file(keys.path(), "wrong.key", &wrong, false);
    let (old_path, new_path, wrong_path) = (
        old_file.to_str().unwrap(),
        new_file.to_str().unwrap(),
        wrong_file.to_str().unwrap(),
    );
    let value = format!("rotated-{}", uuid::Uuid::new_v4());

    // A node on the old key stores a secret and injects it.
    let d = Daemon::start(&["--database-url", &url, "--secret-key-file", old_path]).await;
    let (status, body) = d
        .call(
            "PUT",
            "/v1/secrets/ROTATED_TOKEN",
            Some(json!({"value": value})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(injected(&d, "ROTATED_TOKEN").await, value);
    drop(d);
    // And one row sealed the way sbx did before key ids, with the old key.
    let store = PostgresStore::open(&url).expect("open the test database");
    let workspace = store.list_all_secrets().expect("list")[0].workspace.clone();
    store
        .put_secret(&legacy_row(
            &old,
            &workspace,
            "LEGACY_TOKEN",
            "from-before-key-ids",
        ))
        .expect("legacy row");
    let row = store
        .get_secret(&workspace, "ROTATED_TOKEN")
        .unwrap()
        .unwrap();
    assert_eq!(
        &row.nonce[5..13],
        sbx_secrets::Key::from_bytes(old).id().as_bytes()
    );

    // The rotation re-encrypts both under the new key, and a rerun has nothing to do.
    let (ok, out, err) = rotate(
        &url,
        &["--secret-key-file", old_path, "--new-key-file", new_path],
    );
    assert!(ok, "rotate failed: {out}\n{err}");
    assert!(
        out.contains("workspace secrets: 2 re-encrypted, 0 already under the new key"),
        "{out}"
    );
    assert!(err.contains(&key_id(&new)), "names the new key: {err}");
    let (ok, out, err) = rotate(
        &url,
        &["--secret-key-file", old_path, "--new-key-file", new_path],
    );
    assert!(ok, "rerun failed: {out}\n{err}");
    assert!(
        out.contains("workspace secrets: 0 re-encrypted, 2 already under the new key"),
        "{out}"
    );
    for name in ["ROTATED_TOKEN", "LEGACY_TOKEN"] {
        let row = store.get_secret(&workspace, name).unwrap().unwrap();
        assert_eq!(
            &row.nonce[5..13],
            sbx_secrets::Key::from_bytes(new).id().as_bytes(),
            "{name} carries the new key id"
        );
    }

    // A node with the new key and the old one as previous injects both.
    let d = Daemon::start(&[
        "--database-url",
        &url,
        "--secret-key-file",
        new_path,
        "--previous-secret-key-file",
        old_path,
    ])
    .await;
    assert_eq!(injected(&d, "ROTATED_TOKEN").await, value);
    assert_eq!(injected(&d, "LEGACY_TOKEN").await, "from-before-key-ids");
    drop(d);

    // So does a node with the new key alone.
    let d = Daemon::start(&["--database-url", &url, "--secret-key-file", new_path]).await;
    assert_eq!(injected(&d, "ROTATED_TOKEN").await, value);
    assert_eq!(injected(&d, "LEGACY_TOKEN").await, "from-before-key-ids");
    drop(d);

    // A node with a wrong key (or the old key alone, after the rotation) stops at
    // start and says which key the stored secrets need.
    for (key, what) in [(wrong_path, "a wrong key"), (old_path, "the old key alone")] {
        let (code, stderr) = refused(&url, &["--secret-key-file", key]);
        assert_ne!(code, Some(0), "{what}: {stderr}");
        assert!(
            stderr.contains("none of the 2 stored secrets opens with this node's keys"),
            "{what}: {stderr}"
        );
        assert!(
            stderr.contains(&key_id(&new)),
            "{what}: names the needed key: {stderr}"
        );
        assert!(!stderr.contains(&value), "{what}: {stderr}");
    }
    // Bad key material is refused with a clear message before anything else.
    let short = keys.path().join("short.key");
    std::fs::write(&short, [1u8; 31]).unwrap();
    let (code, stderr) = refused(&url, &["--secret-key-file", short.to_str().unwrap()]);
    assert_ne!(code, Some(0));
    assert!(stderr.contains("holds 31 bytes"), "{stderr}");
    let (code, stderr) = refused(&url, &["--secret-key-file", "/nonexistent/sbx.key"]);
    assert_ne!(code, Some(0));
    assert!(
        stderr.contains("/nonexistent/sbx.key does not exist"),
        "{stderr}"
    );
}
