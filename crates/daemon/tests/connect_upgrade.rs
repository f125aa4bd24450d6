//! The author guide's example connector (`examples/connector-items`) through the `sbx` CLI on
//! real gVisor, upgraded to a second package version (issue 22, item 6): the connection keeps
//! its records and checkpoint across the upgrade, and an upgrade that changes a committed
//! sync's mode is refused naming the sync. The test API runs in a netns test host
//! (`connect_host`), as in `connect.rs`.

mod common;
mod connect_host;

use common::{assert_error, Daemon};
use connect_host::{ApiHost, API_KEY};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn sbx_binary() -> PathBuf {
    // Built by `cargo test --workspace` (or `cargo build -p sbx-cli`) next to sbxd.
    let path = PathBuf::from(env!("CARGO_BIN_EXE_sbxd")).with_file_name("sbx");
    assert!(
        path.exists(),
        "{} missing: build it with cargo build -p sbx-cli",
        path.display()
    );
    path
}

fn sbx(d: &Daemon, args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(sbx_binary())
        .arg("--url")
        .arg(&d.base)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run sbx");
    let mut input = child.stdin.take().expect("stdin");
    if let Some(s) = stdin {
        input.write_all(s.as_bytes()).expect("stdin");
    }
    drop(input);
    let out = child.wait_with_output().expect("sbx output");
    println!(
        "sbx {args:?} -> {:?}\n{}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A copy of `examples/connector-items` as version `version`, with `edit` applied to index.mjs.
fn example_version(dir: &Path, version: &str, edit: impl Fn(String) -> String) -> PathBuf {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/connector-items");
    let dst = dir.join(version);
    std::fs::create_dir_all(&dst).expect("mkdir");
    for name in ["package.json", "package-lock.json", "index.mjs"] {
        let text = std::fs::read_to_string(src.join(name)).expect("read example");
        let text = text.replace(
            "\"version\": \"1.0.0\"",
            &format!("\"version\": \"{version}\""),
        );
        let text = if name == "index.mjs" {
            edit(text)
        } else {
            text
        };
        std::fs::write(dst.join(name), text).expect("write");
    }
    dst
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn the_example_connector_upgrades_to_a_second_version_through_the_cli() {
    let api = ApiHost::start();
    let args = api.daemon_args();
    let args: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    let d = Daemon::start(&args).await;
    let dir = tempfile::tempdir().expect("tmp");
    let v1 = example_version(dir.path(), "1.0.0", |t| t);
    let v11 = example_version(dir.path(), "1.1.0", |t| t);
    let v2 = example_version(dir.path(), "2.0.0", |t| {
        t.replacen(
            "items: {\n      mode: \"append\",",
            "items: {\n      mode: \"merge\",\n      primaryKey: \"id\",",
            1,
        )
    });
    for (path, version) in [(&v1, "1.0.0"), (&v11, "1.1.0"), (&v2, "2.0.0")] {
        let out = ok(&sbx(
            &d,
            &["connect", "package", "upload", path.to_str().unwrap()],
            None,
        ));
        assert_eq!(out.trim(), format!("connector-items@{version}"));
        ok(&sbx(
            &d,
            &[
                "connect",
                "build",
                "start",
                "connector-items",
                version,
                "--wait",
            ],
            None,
        ));
    }

    let origin = api.origin();
    let conn = ok(&sbx(
        &d,
        &[
            "connect",
            "connection",
            "create",
            "--name",
            "items",
            "--package",
            "connector-items",
            "--package-version",
            "1.0.0",
            "--origin",
            &origin,
            "--config",
            r#"{"pageSize": 100, "maxPages": 2}"#,
            "--auth",
            "api-key",
            "--secret-stdin",
        ],
        Some(API_KEY),
    ))
    .trim()
    .to_string();
    ok(&sbx(&d, &["connect", "connection", "test", &conn], None));
    let run: serde_json::Value = serde_json::from_str(&ok(&sbx(
        &d,
        &["connect", "run", "items", "--connection", &conn, "--wait"],
        None,
    )))
    .expect("run json");
    assert_eq!(run["recordsCommitted"], 200, "{run}");
    let checkpoint = ok(&sbx(
        &d,
        &["connect", "checkpoint", "--connection", &conn, "items"],
        None,
    ));

    // 2.0.0 turns the committed append sync into a merge sync: refused, naming it.
    let out = sbx(
        &d,
        &[
            "connect",
            "connection",
            "update",
            &conn,
            "--package-version",
            "2.0.0",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("connect_invalid_state") && err.contains("sync \"items\""),
        "{err}"
    );

    // 1.1.0 keeps every sync as it was: records and the checkpoint stay, the next run goes on.
    let moved: serde_json::Value = serde_json::from_str(&ok(&sbx(
        &d,
        &[
            "connect",
            "connection",
            "update",
            &conn,
            "--package-version",
            "1.1.0",
        ],
        None,
    )))
    .expect("connection json");
    assert_eq!(moved["version"], "1.1.0", "{moved}");
    assert_eq!(
        ok(&sbx(
            &d,
            &["connect", "checkpoint", "--connection", &conn, "items"],
            None
        )),
        checkpoint
    );
    let run: serde_json::Value = serde_json::from_str(&ok(&sbx(
        &d,
        &["connect", "run", "items", "--connection", &conn, "--wait"],
        None,
    )))
    .expect("run json");
    assert_eq!(
        (run["recordsCommitted"].as_u64(), run["version"].as_str()),
        (Some(50), Some("1.1.0")),
        "{run}"
    );
    let records = ok(&sbx(
        &d,
        &["connect", "records", "--connection", &conn, "items"],
        None,
    ));
    assert_eq!(records.lines().count(), 250);

    // Missing things exit non-zero.
    let out = sbx(
        &d,
        &["connect", "records", "--connection", &conn, "nosuch"],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("connect_sync_not_found"));

    // Versions: 1.0.0 is no longer used and goes; 1.1.0 is the connection's and stays (409).
    let out = ok(&sbx(
        &d,
        &["connect", "package", "delete", "connector-items", "1.0.0"],
        None,
    ));
    assert!(out.is_empty(), "{out}");
    let out = sbx(
        &d,
        &["connect", "package", "delete", "connector-items", "1.1.0"],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("connect_invalid_state")
            && err.contains(&format!("used by connection {conn}")),
        "{err}"
    );
    assert_error(
        &d.call(
            "DELETE",
            "/v1/connect/packages/connector-items/versions/1.1.0",
            None,
        )
        .await,
        409,
        "connect_invalid_state",
    );
    let (status, versions) = d
        .call("GET", "/v1/connect/packages/connector-items/versions", None)
        .await;
    assert_eq!(status, 200, "{versions}");
    let mut left: Vec<&str> = versions["data"]
        .as_array()
        .expect("versions")
        .iter()
        .filter_map(|v| v["version"].as_str())
        .collect();
    left.sort_unstable();
    assert_eq!(left, vec!["1.1.0", "2.0.0"], "{versions}");
    assert_error(
        &d.call(
            "GET",
            "/v1/connect/packages/connector-items/versions/1.0.0",
            None,
        )
        .await,
        404,
        "connect_package_not_found",
    );
    // The connection still runs on the version that stayed.
    let run: serde_json::Value = serde_json::from_str(&ok(&sbx(
        &d,
        &["connect", "run", "items", "--connection", &conn, "--wait"],
        None,
    )))
    .expect("run json");
    assert_eq!(run["status"], "succeeded", "{run}");
}
