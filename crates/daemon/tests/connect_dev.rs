//! The package author's loop with the real `sbx` CLI and a real sbxd: `sbx connect
//! init` scaffolds a package, its own test passes with the image's Node.js, and
//! `sbx connect dev` on it, unedited, builds it in a sandbox and runs `verify` and
//! one sync against `examples/test-api` (in a network namespace, as in
//! tests/connect.rs), printing logs and committed records; run again unchanged it
//! reuses the build.

mod common;
mod connect_host;

use common::Daemon;
use connect_host::{ApiHost, API_KEY};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn sbx_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("SBX_TEST_SBX") {
        return PathBuf::from(path);
    }
    let path = PathBuf::from(env!("CARGO_BIN_EXE_sbxd")).with_file_name("sbx");
    assert!(
        path.exists(),
        "{} missing: run the tests with --workspace (./scripts/test)",
        path.display()
    );
    path
}

/// `sbx --url BASE ARGS...` in `cwd`, off the async runtime; prints what it wrote.
async fn sbx(d: &Daemon, cwd: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(sbx_binary());
    cmd.arg("--url").arg(&d.base).args(args).current_dir(cwd);
    let out = tokio::task::spawn_blocking(move || cmd.output().expect("run sbx"))
        .await
        .unwrap();
    println!(
        "sbx {args:?} -> {:?}\n{}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn connect_init_then_dev_passes_as_generated() {
    let api = ApiHost::start();
    let args = api.daemon_args();
    let args: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    let d = Daemon::start(&args).await;
    let tmp = tempfile::tempdir().unwrap();

    let out = sbx(&d, tmp.path(), &["connect", "init", "dev-items"]).await;
    assert!(out.status.success());
    let pkg = tmp.path().join("dev-items");
    for f in [
        "package.json",
        "package-lock.json",
        "index.mjs",
        "src/items.mjs",
        "test/items.test.mjs",
    ] {
        assert!(pkg.join(f).is_file(), "{f} was not generated");
    }

    // The package's own test (`npm test` is `node --test`), with the image's Node.js 24.
    let node =
        PathBuf::from(std::env::var("SBX_TEST_IMAGE_ROOTFS").unwrap()).join("usr/local/bin/node");
    let test = Command::new(&node)
        .arg("--test")
        .current_dir(&pkg)
        .output()
        .expect("node --test");
    let report = String::from_utf8_lossy(&test.stdout);
    assert!(
        test.status.success() && report.contains("pass 2"),
        "the scaffold's test: {report}{}",
        String::from_utf8_lossy(&test.stderr)
    );

    let origin = api.origin();
    let dev = [
        "connect",
        "dev",
        "dev-items",
        "--origin",
        origin.as_str(),
        "--auth",
        "api-key",
        "--api-key",
        API_KEY,
        "--records",
        "3",
    ];
    let out = sbx(&d, tmp.path(), &dev).await;
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        stderr.contains("uploaded") && stderr.contains(": succeeded"),
        "{stderr}"
    );
    for expected in [
        "== verify: succeeded",
        "signed in as",
        "== sync items: succeeded (250 records)",
        "read up to cursor",
        "== records of items (first 3 of 250 committed)",
    ] {
        assert!(stdout.contains(expected), "{expected:?} missing:\n{stdout}");
    }
    let records: Vec<serde_json::Value> = stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).expect("a record as JSON"))
        .collect();
    assert_eq!(records.len(), 3, "{stdout}");
    assert!(records.iter().all(|r| r.get("id").is_some()), "{stdout}");

    // Unchanged: the same dev version, its build reused; the connection starts afresh.
    let out = sbx(&d, tmp.path(), &dev).await;
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("unchanged") && stderr.contains("build: reused"),
        "{stderr}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("== sync items: succeeded (250 records)"));
    let (_, conns) = d.call("GET", "/v1/connect/connections", None).await;
    assert_eq!(conns["data"].as_array().unwrap().len(), 1, "{conns}");
}
