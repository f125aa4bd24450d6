//! The Connect HTTP API on a real sbxd: package uploads (new, repeated, conflicting,
//! invalid), lookups of unknown ids, connections with a bad config, list/get shapes and
//! the records of a sync that never ran. The sandbox jobs themselves are `connect.rs`.

mod common;

use common::{assert_error, Daemon, KillLeftovers};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const UNKNOWN: &str = "0b7c3f0e-1111-4222-8333-944455556666";

fn examples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// A gzip tarball of the files of `dir` at the archive root.
fn tarball_of(dir: &Path) -> Vec<u8> {
    let out = tempfile::NamedTempFile::new().unwrap();
    let status = std::process::Command::new("tar")
        .arg("-czf")
        .arg(out.path())
        .arg("--exclude=node_modules")
        .arg("-C")
        .arg(dir)
        .arg(".")
        .status()
        .unwrap();
    assert!(status.success(), "tar failed");
    std::fs::read(out.path()).unwrap()
}

/// A copy of `examples/NAME` in a temporary directory.
fn copy_example(name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(examples().join(name)).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
        }
    }
    dir
}

async fn upload(d: &Daemon, tarball: Vec<u8>) -> (u16, Value) {
    d.call_with(
        "POST",
        "/v1/connect/packages",
        Some(tarball),
        &[("content-type", "application/gzip")],
    )
    .await
}

async fn wait_build(d: &Daemon, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let (status, b) = d
            .call("GET", &format!("/v1/connect/builds/{id}"), None)
            .await;
        assert_eq!(status, 200, "{b}");
        let s = b["data"]["status"].as_str().unwrap_or("").to_string();
        if s == "succeeded" || s == "failed" {
            return b["data"].clone();
        }
        assert!(Instant::now() < deadline, "build did not finish: {b}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn connection_body(config: Value) -> Value {
    json!({
        "name": "items",
        "package": "connector-items",
        "version": "1.0.0",
        "config": config,
        "origin": "https://api.example.com",
        "credentials": {"type": "apiKey", "key": "k-secret-123"},
    })
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn connect_api_shapes_and_errors() {
    let d = Daemon::start(&[]).await;
    let _leftovers = KillLeftovers::of(&d);

    // Empty lists are lists.
    let (status, list) = d.call("GET", "/v1/connect/packages", None).await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["data"], json!([]));
    assert_eq!(list["page"]["hasMore"], false);
    let (status, list) = d.call("GET", "/v1/connect/connections", None).await;
    assert_eq!((status, list["data"].clone()), (200, json!([])), "{list}");

    // Upload: 201, then the same bytes 200.
    let items = tarball_of(&examples().join("connector-items"));
    let (status, up) = upload(&d, items.clone()).await;
    assert_eq!(status, 201, "{up}");
    let v = &up["data"];
    assert_eq!(v["name"], "connector-items");
    assert_eq!(v["version"], "1.0.0");
    assert_eq!(v["entry"], "index.mjs");
    assert_eq!(v["sha256"].as_str().unwrap().len(), 64, "{v}");
    assert_eq!(v["size"], items.len() as u64);
    assert!(v["buildId"].is_null() && v["definition"].is_null(), "{v}");
    let (status, again) = upload(&d, items.clone()).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["data"]["sha256"], v["sha256"]);

    // Other bytes for the same version: 409.
    let changed = copy_example("connector-items");
    let index = changed.path().join("index.mjs");
    let mut text = std::fs::read_to_string(&index).unwrap();
    text.push_str("\n// changed\n");
    std::fs::write(&index, text).unwrap();
    assert_error(
        &upload(&d, tarball_of(changed.path())).await,
        409,
        "connect_version_exists",
    );

    // Not a tarball; no lockfile; a dependency with an install script: 400.
    assert_error(
        &upload(&d, b"not a tarball".to_vec()).await,
        400,
        "connect_invalid_package",
    );
    let no_lock = copy_example("connector-items");
    std::fs::remove_file(no_lock.path().join("package-lock.json")).unwrap();
    let got = upload(&d, tarball_of(no_lock.path())).await;
    assert_error(&got, 400, "connect_invalid_package");
    assert!(
        got.1["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("package-lock.json"),
        "{}",
        got.1
    );
    let got = upload(&d, tarball_of(&examples().join("connector-install-script"))).await;
    assert_error(&got, 400, "connect_invalid_package");
    let message = got.1["errors"][0]["message"].as_str().unwrap();
    assert!(
        message.contains("@scarf/scarf") && message.contains("install script"),
        "{message}"
    );

    // Lists and gets.
    let (status, list) = d.call("GET", "/v1/connect/packages", None).await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["data"].as_array().unwrap().len(), 1, "{list}");
    assert_eq!(list["data"][0]["name"], "connector-items");
    assert_eq!(list["data"][0]["versions"], json!(["1.0.0"]));
    let (status, versions) = d
        .call("GET", "/v1/connect/packages/connector-items/versions", None)
        .await;
    assert_eq!(status, 200, "{versions}");
    assert_eq!(versions["data"][0]["version"], "1.0.0");
    let (status, one) = d
        .call(
            "GET",
            "/v1/connect/packages/connector-items/versions/1.0.0",
            None,
        )
        .await;
    assert_eq!(status, 200, "{one}");
    assert_eq!(one["data"]["sha256"], v["sha256"]);

    // Unknown ids: 404 with the resource's code.
    for (path, code) in [
        (
            "/v1/connect/packages/nope/versions".to_string(),
            "connect_package_not_found",
        ),
        (
            "/v1/connect/packages/%40acme%2Fnope/versions/1.0.0".into(),
            "connect_package_not_found",
        ),
        (
            "/v1/connect/packages/connector-items/versions/9.9.9".into(),
            "connect_package_not_found",
        ),
        (
            "/v1/connect/packages/connector-items/versions/9.9.9/builds".into(),
            "connect_package_not_found",
        ),
        (
            format!("/v1/connect/builds/{UNKNOWN}"),
            "connect_build_not_found",
        ),
        (
            format!("/v1/connect/connections/{UNKNOWN}"),
            "connect_connection_not_found",
        ),
        (
            format!("/v1/connect/connections/{UNKNOWN}/runs"),
            "connect_connection_not_found",
        ),
        (
            format!("/v1/connect/connections/{UNKNOWN}/logs"),
            "connect_connection_not_found",
        ),
        (
            format!("/v1/connect/connections/{UNKNOWN}/syncs/items/records"),
            "connect_connection_not_found",
        ),
        (
            format!("/v1/connect/connections/{UNKNOWN}/syncs/items/checkpoint"),
            "connect_connection_not_found",
        ),
        (
            format!("/v1/connect/runs/{UNKNOWN}"),
            "connect_run_not_found",
        ),
        (
            format!("/v1/connect/runs/{UNKNOWN}/logs"),
            "connect_run_not_found",
        ),
    ] {
        assert_error(&d.call("GET", &path, None).await, 404, code);
    }
    for path in [
        format!("/v1/connect/connections/{UNKNOWN}/test"),
        format!("/v1/connect/connections/{UNKNOWN}/syncs/items/runs"),
    ] {
        assert_error(
            &d.call("POST", &path, None).await,
            404,
            "connect_connection_not_found",
        );
    }
    assert_error(
        &d.call(
            "POST",
            "/v1/connect/packages/nope/versions/1.0.0/builds",
            None,
        )
        .await,
        404,
        "connect_package_not_found",
    );
    assert_error(
        &d.call(
            "POST",
            "/v1/connect/oauth/callback",
            Some(json!({"state": "nope", "code": "c"})),
        )
        .await,
        404,
        "connect_oauth_state_not_found",
    );
    assert_error(
        &d.call(
            "POST",
            "/v1/connect/connections",
            Some(json!({"name": "x"})),
        )
        .await,
        400,
        "missing_field",
    );

    // A connection needs a built version.
    assert_error(
        &d.call(
            "POST",
            "/v1/connect/connections",
            Some(connection_body(json!({}))),
        )
        .await,
        409,
        "connect_invalid_state",
    );

    // Build: 202 queued, then it ends.
    let (status, b) = d
        .call(
            "POST",
            "/v1/connect/packages/connector-items/versions/1.0.0/builds",
            None,
        )
        .await;
    assert_eq!(status, 202, "{b}");
    assert!(b["data"]["artifactDir"].is_null(), "host path leaked: {b}");
    let build_id = b["data"]["id"].as_str().unwrap().to_string();
    let (status, builds) = d
        .call(
            "GET",
            "/v1/connect/packages/connector-items/versions/1.0.0/builds",
            None,
        )
        .await;
    assert_eq!(status, 200, "{builds}");
    assert_eq!(builds["data"][0]["id"], build_id.as_str());
    let built = wait_build(&d, &build_id).await;
    assert_eq!(built["status"], "succeeded", "{built}");
    let (_, one) = d
        .call(
            "GET",
            "/v1/connect/packages/connector-items/versions/1.0.0",
            None,
        )
        .await;
    assert_eq!(one["data"]["buildId"], build_id.as_str(), "{one}");
    assert_eq!(one["data"]["definition"]["auth"]["type"], "apiKey", "{one}");

    // A config that fails the schema: 422 naming the field.
    let got = d
        .call(
            "POST",
            "/v1/connect/connections",
            Some(connection_body(json!({"pageSize": "many"}))),
        )
        .await;
    assert_error(&got, 422, "connect_invalid_config");
    assert!(
        got.1["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("pageSize"),
        "{}",
        got.1
    );
    // Credentials of another type: 422.
    let mut wrong = connection_body(json!({}));
    wrong["credentials"] = json!({"type": "bearer", "token": "t"});
    assert_error(
        &d.call("POST", "/v1/connect/connections", Some(wrong)).await,
        422,
        "connect_invalid_config",
    );

    // A secret under 8 bytes could be neither redacted nor screened: 400 naming the field
    // and the minimum.
    let mut short = connection_body(json!({}));
    short["credentials"] = json!({"type": "apiKey", "key": "k-12345"});
    let got = d.call("POST", "/v1/connect/connections", Some(short)).await;
    assert_error(&got, 400, "invalid_field_format");
    let message = got.1["errors"][0]["message"].as_str().unwrap();
    assert!(
        message.starts_with("credentials.key: must be at least 8 bytes long"),
        "{message}"
    );
    // An unknown field is refused by name, not ignored.
    let mut typo = connection_body(json!({}));
    typo["schedule"] = json!(3600);
    let got = d.call("POST", "/v1/connect/connections", Some(typo)).await;
    assert_error(&got, 400, "invalid_request");
    assert!(
        got.1["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("unknown field `schedule`"),
        "{}",
        got.1
    );
    let (_, none) = d.call("GET", "/v1/connect/connections", None).await;
    assert_eq!(none["data"], json!([]), "nothing was created: {none}");

    // A good one: 201, defaults applied, credentials never returned.
    let (status, created) = d
        .call(
            "POST",
            "/v1/connect/connections",
            Some(connection_body(json!({"maxPages": 2}))),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let c = &created["data"];
    assert!(!created.to_string().contains("k-secret-123"), "{created}");
    assert_eq!(c["status"], "active");
    assert_eq!(c["authKind"], "apiKey");
    assert_eq!(c["config"]["pageSize"], 100, "{c}");
    assert_eq!(c["origin"], "https://api.example.com");
    let conn = c["id"].as_str().unwrap().to_string();
    let (status, got) = d
        .call("GET", &format!("/v1/connect/connections/{conn}"), None)
        .await;
    assert_eq!(status, 200, "{got}");
    assert_eq!(got["data"], created["data"]);
    let (_, list) = d.call("GET", "/v1/connect/connections", None).await;
    assert_eq!(list["data"][0]["id"], conn.as_str());
    assert!(!list.to_string().contains("k-secret-123"), "{list}");

    // Update: schedule, a bad config, too short a schedule.
    let (status, upd) = d
        .call(
            "PATCH",
            &format!("/v1/connect/connections/{conn}"),
            Some(json!({"scheduleIntervalSeconds": 3600, "credentials": {"type": "apiKey", "key": "k-new-456"}})),
        )
        .await;
    assert_eq!(status, 200, "{upd}");
    assert_eq!(upd["data"]["scheduleIntervalSeconds"], 3600);
    assert!(!upd.to_string().contains("k-new-456"), "{upd}");
    assert_error(
        &d.call(
            "PATCH",
            &format!("/v1/connect/connections/{conn}"),
            Some(json!({"config": {"pageSize": 0}})),
        )
        .await,
        422,
        "connect_invalid_config",
    );
    assert_error(
        &d.call(
            "PATCH",
            &format!("/v1/connect/connections/{conn}"),
            Some(json!({"scheduleIntervalSeconds": 5})),
        )
        .await,
        422,
        "connect_invalid_config",
    );

    // `packageVersion` is not a field (`version` is): 400 naming it, and nothing changes.
    let got = d
        .call(
            "PATCH",
            &format!("/v1/connect/connections/{conn}"),
            Some(json!({"packageVersion": "2.0.0", "name": "renamed"})),
        )
        .await;
    assert_error(&got, 400, "invalid_request");
    let message = got.1["errors"][0]["message"].as_str().unwrap();
    assert!(
        message.contains("unknown field `packageVersion`") && message.contains("`version`"),
        "{message}"
    );
    // A credential rotation to a too short secret: 400 too, and the old key stays.
    let got = d
        .call(
            "PATCH",
            &format!("/v1/connect/connections/{conn}"),
            Some(json!({"credentials": {"type": "apiKey", "key": "short"}})),
        )
        .await;
    assert_error(&got, 400, "invalid_field_format");
    assert!(
        got.1["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("credentials.key"),
        "{}",
        got.1
    );
    let (_, same) = d
        .call("GET", &format!("/v1/connect/connections/{conn}"), None)
        .await;
    assert_eq!(same["data"]["name"], "items", "{same}");
    assert_eq!(same["data"]["version"], "1.0.0", "{same}");
    // The OAuth bodies refuse unknown fields too.
    assert_error(
        &d.call(
            "POST",
            "/v1/connect/oauth/callback",
            Some(json!({"state": "s", "code": "c", "scope": "read"})),
        )
        .await,
        400,
        "invalid_request",
    );

    // A sync that never ran: no records, no checkpoint, no runs, no logs.
    let resp = d
        .http
        .get(d.url(&format!(
            "/v1/connect/connections/{conn}/syncs/items/records"
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(
        resp.headers()["content-type"],
        "application/x-ndjson",
        "{resp:?}"
    );
    assert!(resp.headers().get("x-next-cursor").is_none());
    assert_eq!(resp.text().await.unwrap(), "");
    let (status, cp) = d
        .call(
            "GET",
            &format!("/v1/connect/connections/{conn}/syncs/items/checkpoint"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{cp}");
    assert_eq!(cp["data"], json!({"checkpoint": null}));
    let (status, runs) = d
        .call(
            "GET",
            &format!("/v1/connect/connections/{conn}/runs?limit=5"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{runs}");
    assert_eq!(runs["data"], json!([]));
    assert_eq!(runs["page"]["limit"], 5);
    let (status, logs) = d
        .call("GET", &format!("/v1/connect/connections/{conn}/logs"), None)
        .await;
    assert_eq!((status, logs["data"].clone()), (200, json!([])), "{logs}");
    assert_error(
        &d.call(
            "GET",
            &format!("/v1/connect/connections/{conn}/logs?cursor=x"),
            None,
        )
        .await,
        400,
        "invalid_request",
    );
    assert_error(
        &d.call(
            "POST",
            &format!("/v1/connect/connections/{conn}/syncs/nope/runs"),
            None,
        )
        .await,
        404,
        "connect_sync_not_found",
    );
    // Not an OAuth2 connection.
    assert_error(
        &d.call(
            "POST",
            &format!("/v1/connect/connections/{conn}/oauth/start"),
            Some(json!({"redirectUri": "https://app.example.com/cb"})),
        )
        .await,
        400,
        "invalid_request",
    );

    // Delete: 204, then 404.
    let (status, _) = d
        .call("DELETE", &format!("/v1/connect/connections/{conn}"), None)
        .await;
    assert_eq!(status, 204);
    assert_error(
        &d.call("GET", &format!("/v1/connect/connections/{conn}"), None)
            .await,
        404,
        "connect_connection_not_found",
    );
}

#[test]
#[ignore = "needs the test image and agent; run ./scripts/test"]
fn test_only_connect_options_are_refused_outside_dev_mode() {
    use common::{start_refused_in, Mode};
    let ca = tempfile::NamedTempFile::new().unwrap();
    let ca_path = ca.path().to_str().unwrap();
    for args in [
        vec!["--connect-test-port", "8443"],
        vec!["--connect-extra-ca", ca_path],
        vec!["--connect-test-port", "8443", "--connect-extra-ca", ca_path],
        vec!["--connect-test-min-schedule-secs", "5"],
    ] {
        // A signing key, so that nothing else of production mode is missing.
        let mut all = vec![
            "--signing-key",
            "signkey-test-00112233445566778899aabbccddeeff",
        ];
        all.extend(&args);
        let (code, stderr) = start_refused_in(Mode::Production, &all, Duration::from_secs(30));
        assert_ne!(code, Some(0), "{args:?}: {stderr}");
        assert!(
            stderr.contains(
                "--connect-test-port, --connect-test-min-schedule-secs and --connect-extra-ca \
                 are for testing against one's own API and are refused outside --dev"
            ),
            "{args:?}: {stderr}"
        );
    }
}
