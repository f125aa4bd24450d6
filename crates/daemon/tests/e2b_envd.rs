//! The real E2B SDKs driving sbxd's envd API (commands, PTYs, files, watch;
//! contract §3-§5): `tests/e2b/envd.mjs` (npm `e2b` 2.51.0, from tests/e2b's
//! lockfile) and `tests/e2b/python/envd_sync.py` / `envd_async.py` (PyPI
//! `e2b` 2.63.0, in the venv `tests/e2b/python/install.sh` makes). Each runs
//! against a fresh sbxd with a tenant key and kills the sandbox it made.

mod common;
mod e2b_common;

use common::Daemon;
use e2b_common::LEGACY_KEY;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn e2b_js_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/e2b");
    assert!(
        dir.join("node_modules/e2b/package.json").exists(),
        "e2b is not installed in {}; run ./scripts/test (npm ci there)",
        dir.display()
    );
    dir
}

fn e2b_python_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/e2b/python");
    assert!(
        dir.join(".venv/.sbx-stamp").exists(),
        "the e2b Python SDK is not installed in {}/.venv; run ./scripts/test (or tests/e2b/python/install.sh)",
        dir.display()
    );
    dir
}

type Runner = fn(&Path, &str, &[(&str, &str)]) -> (bool, String);

/// Runs `script` (from `dir`, with `run`) against a fresh sbxd and a tenant
/// key; it must pass every step and leave no sandbox behind.
async fn script_passes(run: Runner, dir: PathBuf, script: &str) {
    let d = Daemon::start(&["--signing-key", LEGACY_KEY]).await;
    let key = d.create_key("acme", None);
    let (ok, out) = run(&dir, script, &[("SBX_URL", &d.base), ("SBX_KEY", &key)]);
    assert!(
        ok && out.contains("all steps passed"),
        "{script} failed:\n{out}"
    );
    d.assert_no_containers(Duration::from_secs(60), "the SDK test kills what it made")
        .await;
}

#[tokio::test]
#[ignore = "needs root, runsc, the image, node and python; run ./scripts/test"]
async fn e2b_js_sdk_commands_pty_files_watch() {
    script_passes(common::run_node_script, e2b_js_dir(), "envd.mjs").await;
}

#[tokio::test]
#[ignore = "needs root, runsc, the image, node and python; run ./scripts/test"]
async fn e2b_python_sync_sdk_commands_pty_files_watch() {
    script_passes(common::run_python_script, e2b_python_dir(), "envd_sync.py").await;
}

#[tokio::test]
#[ignore = "needs root, runsc, the image, node and python; run ./scripts/test"]
async fn e2b_python_async_sdk_commands_pty_files_watch() {
    script_passes(common::run_python_script, e2b_python_dir(), "envd_async.py").await;
}
