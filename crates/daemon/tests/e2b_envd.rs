//! The real E2B SDKs driving sbxd's envd API (commands, PTYs, files, watch;
//! contract §3-§5): `tests/e2b/envd.mjs` (npm `e2b` 2.51.0, from tests/e2b's
//! lockfile) and `tests/e2b/python/envd_sync.py` / `envd_async.py` (PyPI
//! `e2b` 2.63.0, in the venv `tests/e2b/python/install.sh` makes). Each runs
//! against a fresh sbxd with a tenant key and kills the sandbox it made.

mod common;
mod e2b_common;

use e2b_common::{e2b_js_dir, script_passes};
use std::path::PathBuf;

fn e2b_python_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/e2b/python");
    assert!(
        dir.join(".venv/.sbx-stamp").exists(),
        "the e2b Python SDK is not installed in {}/.venv; run ./scripts/test (or tests/e2b/python/install.sh)",
        dir.display()
    );
    dir
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
