//! Cluster nodes for the cluster tests: sbxd with `--cluster` on a fresh PostgreSQL
//! database (`SBX_TEST_DATABASE_URL`, which `./scripts/test` exports), a shared token and
//! a 3 s lease.

use super::Daemon;
use sbx_store::TestDatabase;

/// The cluster token every node of these tests shares.
pub const TOKEN: &str = "0123456789abcdef0123456789abcdef-test-cluster";

/// A fresh database on the test PostgreSQL server.
pub fn database() -> TestDatabase {
    let url = std::env::var("SBX_TEST_DATABASE_URL").unwrap_or_else(|_| {
        panic!("SBX_TEST_DATABASE_URL is not set: run ./scripts/test, which starts PostgreSQL")
    });
    TestDatabase::create(&url).unwrap_or_else(|e| panic!("creating a test database: {e}"))
}

/// A file holding `token`, for `--cluster-token-file`.
pub fn token_file(token: &str) -> tempfile::NamedTempFile {
    let f = tempfile::NamedTempFile::new().expect("token file");
    std::fs::write(f.path(), format!("{token}\n")).expect("write token");
    f
}

/// A cluster node `id` on `url` with a 3 s lease, `token` and `extra` flags.
pub async fn node_with(url: &str, id: &str, token: &str, extra: &[&str]) -> Daemon {
    let file = token_file(token);
    let path = file.path().to_str().expect("utf-8 path").to_string();
    let mut args = vec![
        "--cluster",
        "--database-url",
        url,
        "--cluster-token-file",
        &path,
        "--node-id",
        id,
        "--node-lease-secs",
        "3",
    ];
    args.extend_from_slice(extra);
    let d = Daemon::start(&args).await;
    // Read at start only; a restart (kill -9, spawn) needs it again.
    std::mem::forget(file);
    d
}

/// Creates `name` through `d` while node `other_id` (reached as `other`) is
/// drained, so that placement puts it on `d`'s node; undrains it again.
pub async fn created_on(d: &Daemon, other: &Daemon, other_id: &str, name: &str) -> String {
    let (status, body) = other
        .call("POST", &format!("/v1/nodes/{other_id}/drain"), None)
        .await;
    assert_eq!(status, 200, "{body}");
    let id = d.create_running(name).await;
    let (status, body) = other
        .call("POST", &format!("/v1/nodes/{other_id}/undrain"), None)
        .await;
    assert_eq!(status, 200, "{body}");
    id
}
