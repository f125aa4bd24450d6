//! Against a real S3-compatible server (s3s-fs, started by `scripts/test`
//! through `scripts/lib/s3.sh`): no fake object store.

use super::*;

fn store() -> S3Store {
    let var =
        |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} is not set; run ./scripts/test"));
    S3Store::new(
        S3Config {
            bucket: var("SBX_TEST_S3_BUCKET"),
            // A prefix per test run: tests share the bucket.
            prefix: format!("unit-{}", Uuid::new_v4()),
            endpoint: Some(var("SBX_TEST_S3_ENDPOINT")),
            region: "us-east-1".into(),
            access_key_id: Some(var("SBX_TEST_S3_ACCESS_KEY")),
            secret_access_key: Some(var("SBX_TEST_S3_SECRET_KEY")),
            session_token: None,
        },
        ring(),
    )
    .unwrap()
}

fn ring() -> sbx_secrets::KeyRing {
    sbx_secrets::KeyRing::new(sbx_secrets::Key::from_bytes([3; 32]))
}

/// A snapshot directory like runsc's: a small file and one larger than a part.
fn snapshot_dir(root: &Path) -> PathBuf {
    let dir = root.join("src");
    std::fs::create_dir_all(dir.join("checkpoint")).unwrap();
    std::fs::write(
        dir.join("checkpoint/checkpoint.img"),
        b"state of the sentry",
    )
    .unwrap();
    let big: Vec<u8> = (0..PART + PART / 2).map(|i| (i * 31 % 251) as u8).collect();
    std::fs::write(dir.join("checkpoint/pages.img"), &big).unwrap();
    dir
}

async fn keys(s: &S3Store, id: Uuid) -> Vec<String> {
    let prefix = ObjectPath::from(format!("{}/", s.snapshot_prefix(id)));
    let mut keys: Vec<String> = s
        .client
        .list(Some(&prefix))
        .map(|m| m.unwrap().location.to_string())
        .collect()
        .await;
    keys.sort();
    keys
}

#[tokio::test]
#[ignore = "needs S3; run ./scripts/test"]
async fn round_trip_then_delete_removes_everything() {
    let s = store();
    let tmp = tempfile::tempdir().unwrap();
    let src = snapshot_dir(tmp.path());
    let id = Uuid::new_v4();
    let up = s.upload(id, &src).await.unwrap();
    assert_eq!(up.files, 2);
    // Stored bytes: each chunk carries its tag (the big file is two chunks).
    assert_eq!(up.bytes, (19 + PART + PART / 2 + 3 * TAG) as u64);
    // Nothing in the store is plaintext.
    let stored = s
        .client
        .get(&s.key(id, "files/checkpoint/checkpoint.img"))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert!(!stored.windows(6).any(|w| w == b"sentry"), "encrypted");
    let p = s.snapshot_prefix(id);
    assert_eq!(
        keys(&s, id).await,
        vec![
            format!("{p}/files/checkpoint/checkpoint.img"),
            format!("{p}/files/checkpoint/pages.img"),
            format!("{p}/manifest.json"),
        ]
    );
    // Another node's cache: nothing there yet.
    let cache = tmp.path().join("cache").join(id.to_string());
    std::fs::create_dir_all(cache.parent().unwrap()).unwrap();
    // Two clones at once share one fetch.
    let (a, b) = tokio::join!(s.fetch(id, &cache), s.fetch(id, &cache));
    a.unwrap();
    b.unwrap();
    for f in ["checkpoint/checkpoint.img", "checkpoint/pages.img"] {
        assert_eq!(
            std::fs::read(cache.join(f)).unwrap(),
            std::fs::read(src.join(f)).unwrap(),
            "{f}"
        );
    }
    assert!(!staging_dir(id, &cache).exists(), "the staging dir is gone");
    s.delete(id).await.unwrap();
    assert!(keys(&s, id).await.is_empty());
    // Repeatable, and a later fetch says what is missing.
    s.delete(id).await.unwrap();
    let again = tmp.path().join("cache2").join(id.to_string());
    let err = s.fetch(id, &again).await.unwrap_err();
    assert!(matches!(err, SnapshotStoreError::Missing { .. }), "{err}");
    assert!(!again.exists());
}

#[tokio::test]
#[ignore = "needs S3; run ./scripts/test"]
async fn missing_manifest_is_missing() {
    let s = store();
    let tmp = tempfile::tempdir().unwrap();
    let src = snapshot_dir(tmp.path());
    let id = Uuid::new_v4();
    s.upload(id, &src).await.unwrap();
    // An upload cut short before its manifest looks like this.
    s.client.delete(&s.key(id, MANIFEST)).await.unwrap();
    let cache = tmp.path().join(id.to_string());
    let err = s.fetch(id, &cache).await.unwrap_err();
    assert!(
        matches!(err, SnapshotStoreError::Missing { .. }) && err.is_unusable(),
        "{err}"
    );
    assert!(err.to_string().contains("manifest"), "{err}");
    assert!(!cache.exists() && !staging_dir(id, &cache).exists());
    // A missing file named by the manifest is missing too.
    s.upload(id, &src).await.unwrap();
    s.client
        .delete(&s.key(id, "files/checkpoint/checkpoint.img"))
        .await
        .unwrap();
    let err = s.fetch(id, &cache).await.unwrap_err();
    assert!(matches!(err, SnapshotStoreError::Missing { .. }), "{err}");
    s.delete(id).await.unwrap();
}

#[tokio::test]
#[ignore = "needs S3; run ./scripts/test"]
async fn corrupted_object_is_corrupt() {
    let s = store();
    let tmp = tempfile::tempdir().unwrap();
    let src = snapshot_dir(tmp.path());
    let id = Uuid::new_v4();
    s.upload(id, &src).await.unwrap();
    // Same size, one byte changed in the second chunk.
    let pages = s.key(id, "files/checkpoint/pages.img");
    let mut bytes = s
        .client
        .get(&pages)
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap()
        .to_vec();
    bytes[PART + TAG + 7] ^= 0xff;
    s.client.put(&pages, bytes.clone().into()).await.unwrap();
    let cache = tmp.path().join(id.to_string());
    let err = s.fetch(id, &cache).await.unwrap_err();
    assert!(
        matches!(err, SnapshotStoreError::Corrupt { .. }) && err.is_unusable(),
        "{err}"
    );
    assert!(err.to_string().contains("does not decrypt"), "{err}");
    assert!(!cache.exists(), "no half-fetched cache");
    // The chunks swapped inside the object (each one intact).
    let mut swapped = bytes[PART + TAG..].to_vec();
    swapped.extend_from_slice(&bytes[..PART + TAG]);
    assert_eq!(swapped.len(), bytes.len());
    s.client.put(&pages, swapped.into()).await.unwrap();
    let err = s.fetch(id, &cache).await.unwrap_err();
    assert!(matches!(err, SnapshotStoreError::Corrupt { .. }), "{err}");
    // Another cluster's key ring cannot open the data key.
    s.upload(id, &src).await.unwrap();
    let foreign = S3Store::new(
        S3Config {
            prefix: s.config.prefix.clone(),
            ..s.config.clone()
        },
        sbx_secrets::KeyRing::new(sbx_secrets::Key::from_bytes([4; 32])),
    )
    .unwrap();
    let err = foreign.fetch(id, &cache).await.unwrap_err();
    assert!(
        matches!(err, SnapshotStoreError::Corrupt { .. }) && err.to_string().contains("data key"),
        "{err}"
    );
    // A shorter object, and a manifest that does not parse.
    s.client
        .put(&pages, b"short".to_vec().into())
        .await
        .unwrap();
    let err = s.fetch(id, &cache).await.unwrap_err();
    assert!(matches!(err, SnapshotStoreError::Corrupt { .. }), "{err}");
    s.client
        .put(&s.key(id, MANIFEST), b"{not json".to_vec().into())
        .await
        .unwrap();
    let err = s.fetch(id, &cache).await.unwrap_err();
    assert!(matches!(err, SnapshotStoreError::Corrupt { .. }), "{err}");
    s.delete(id).await.unwrap();
    assert!(keys(&s, id).await.is_empty());
}

#[tokio::test]
async fn unreachable_endpoint_fails_quickly_with_the_reason() {
    // A closed loopback port: bind one, note it, close it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let s = S3Store::new(
        S3Config {
            bucket: "sbx".into(),
            prefix: "p".into(),
            endpoint: Some(format!("http://127.0.0.1:{port}")),
            region: "us-east-1".into(),
            access_key_id: Some("k".into()),
            secret_access_key: Some("s".into()),
            session_token: None,
        },
        ring(),
    )
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let src = snapshot_dir(tmp.path());
    let err = s.upload(Uuid::new_v4(), &src).await.unwrap_err();
    assert!(matches!(err, SnapshotStoreError::Remote { .. }), "{err}");
    assert!(!err.is_unusable());
}

#[test]
fn manifest_paths_stay_inside() {
    for ok in ["checkpoint/pages.img", "a"] {
        assert!(safe_relative(ok), "{ok}");
    }
    for bad in [
        "",
        "/etc/passwd",
        "../x",
        "a/../../b",
        "a//b",
        "a/./b",
        "a\\b",
        "a\nb",
    ] {
        assert!(!safe_relative(bad), "{bad:?}");
    }
}
