//! `scripts/install` into a scratch root: the systemd unit it writes passes
//! `systemd-analyze verify`, its exact `ExecStart` command line (with its
//! `EnvironmentFile`) runs a production sbxd that accepts the first signing key
//! the install created, and a second install (the upgrade path) followed by the
//! restart systemd would do (`KillMode=process`: SIGTERM to sbxd alone) keeps the
//! sandbox running: the new sbxd re-adopts it and runs an exec in it.
//!
//! systemd is not PID 1 on the test machines, so the unit is not started by
//! systemd itself; what systemd would run is run as it would run it.
//!
//! Needs root, runsc, the image, the agent, `sbx` built next to sbxd and
//! systemd-analyze (`./scripts/test`).

mod common;

use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn env_path(name: &str) -> PathBuf {
    PathBuf::from(std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run the integration tests through ./scripts/test")
    }))
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs scripts/install into `root`; returns its stdout.
fn install(root: &Path, bin_dir: &Path, listen: &str) -> String {
    let out = Command::new("bash")
        .arg(repo().join("scripts/install"))
        .env("SBX_INSTALL_ROOT", root)
        .env("SBX_INSTALL_BIN_DIR", bin_dir)
        .env(
            "SBX_INSTALL_AGENT",
            env_path("SBX_TEST_AGENT_DIR").join("sbx-agent"),
        )
        .env(
            "SBX_INSTALL_IMAGE_ROOTFS",
            env_path("SBX_TEST_IMAGE_ROOTFS"),
        )
        .env("SBX_INSTALL_LISTEN", listen)
        .output()
        .expect("run scripts/install");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "scripts/install failed");
    stdout
}

/// The `[Service]` settings of a unit file (the last value of each key).
fn unit_settings(unit: &str) -> BTreeMap<String, String> {
    unit.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#') && !l.starts_with('['))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// KEY=VALUE lines of an EnvironmentFile.
fn env_file(path: &Path) -> Vec<(String, String)> {
    std::fs::read_to_string(path)
        .expect("EnvironmentFile")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Starts the unit's ExecStart as systemd would: its own session, a clean
/// environment with the EnvironmentFile's variables (and a PATH for runsc).
async fn start_unit(exec_start: &[String], env: &[(String, String)], port: u16) -> Child {
    let mut cmd = Command::new(&exec_start[0]);
    cmd.args(&exec_start[1..])
        .env_clear()
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .process_group(0);
    let mut child = cmd.spawn().expect("start the unit's ExecStart");
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Ok(r) = http
            .get(format!("http://127.0.0.1:{port}/healthz"))
            .send()
            .await
        {
            if r.status().is_success() {
                return child;
            }
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("sbxd exited early: {status}");
        }
        assert!(Instant::now() < deadline, "sbxd did not become healthy");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What `systemctl stop`/`restart` does with KillMode=process: SIGTERM to sbxd alone.
fn stop_unit(mut child: Child) {
    // SAFETY: kill(2) on the pid of a child this test spawned and has not reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().expect("wait for sbxd");
    assert!(status.success(), "sbxd after SIGTERM: {status}");
}

async fn call(port: u16, key: &str, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let auth = format!(
        "Bearer {}",
        sbx_api_types::signing_key::hashed_signing_key(key)
    );
    let mut req = reqwest::Client::new()
        .request(
            method.parse().unwrap(),
            format!("http://127.0.0.1:{port}{path}"),
        )
        .header("authorization", auth)
        .header("content-type", "application/json");
    if let Some(b) = body {
        req = req.body(b.to_string());
    }
    let resp = req.send().await.expect("request");
    let status = resp.status().as_u16();
    let bytes = resp.bytes().await.unwrap();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

async fn exec(port: u16, key: &str, id: &str, script: &str) -> String {
    let (status, body) = call(
        port,
        key,
        "POST",
        &format!("/v2/sandboxes/{id}/exec"),
        Some(json!({"command": ["sh", "-c", script], "timeout": "30000ms"})),
    )
    .await;
    assert_eq!(status, 200, "exec: {body}");
    assert_eq!(body["data"]["exitCode"], 0, "{body}");
    common::b64(&body["data"]["stdout"])
}

/// Polls the sandbox until its status is `want`.
async fn wait_status(port: u16, key: &str, id: &str, want: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (_, body) = call(port, key, "GET", &format!("/v2/sandboxes/{id}"), None).await;
        if body["data"]["status"] == want {
            return body;
        }
        assert!(Instant::now() < deadline, "not {want}: {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
#[ignore = "needs root, runsc, the image, the agent and systemd-analyze; run ./scripts/test"]
async fn the_installed_unit_runs_sbxd_and_a_reinstall_with_restart_keeps_sandboxes() {
    let root = tempfile::Builder::new()
        .prefix("sbx-it-install-")
        .tempdir_in("/var/tmp")
        .unwrap();
    // sbxd stops with SIGTERM and its sandboxes (the warm pool's too) live
    // on, as in production: kill whatever is left under the root at the end.
    let _leftovers = common::KillLeftovers(root.path().to_path_buf());
    let sbxd = PathBuf::from(common::sbxd_binary());
    let bin_dir = sbxd.parent().expect("sbxd's directory").to_path_buf();
    assert!(
        bin_dir.join("sbx").exists(),
        "no sbx next to {}: cargo build -p sbx-cli",
        sbxd.display()
    );
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let printed = install(root.path(), &bin_dir, &listen);

    let etc = root.path().join("etc");
    let key_file = etc.join("sbx/first-signing-key");
    let key = std::fs::read_to_string(&key_file)
        .expect("the first signing key")
        .trim()
        .to_string();
    assert!(key.starts_with("signkey-sbx-"), "{key}");
    assert!(printed.contains(&key), "the key is shown to the operator");
    let unit_path = etc.join("systemd/system/sbxd.service");
    let verify = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&unit_path)
        .output()
        .expect("systemd-analyze (scripts/install-deps installs it)");
    let complaints = String::from_utf8_lossy(&verify.stderr).into_owned();
    assert!(
        verify.status.success(),
        "systemd-analyze verify: {complaints}"
    );
    // verify only warns about a bad directive: the unit must draw no remark at all.
    assert!(
        !complaints.contains("sbxd.service"),
        "systemd-analyze verify: {complaints}"
    );
    let unit = std::fs::read_to_string(&unit_path).unwrap();
    let settings = unit_settings(&unit);
    assert_eq!(
        settings["KillMode"], "process",
        "sandboxes must survive a restart"
    );
    assert_eq!(settings["Restart"], "always");
    let exec_start: Vec<String> = settings["ExecStart"]
        .split_whitespace()
        .map(str::to_string)
        .collect();
    assert!(!exec_start.iter().any(|a| a == "--dev"), "production mode");
    let env = env_file(Path::new(&settings["EnvironmentFile"]));
    assert!(env.contains(&("SBX_LISTEN".to_string(), listen.clone())));

    let sbxd_v1 = start_unit(&exec_start, &env, port).await;
    let (status, _) = call(port, "signkey-sbx-not-a-key", "GET", "/v2/sandboxes", None).await;
    assert_eq!(status, 401, "production mode: keys are checked");
    let (status, created) = call(
        port,
        &key,
        "POST",
        "/v2/sandboxes",
        Some(json!({"name": "survivor", "vcpu": 1, "memoryMb": 1024})),
    )
    .await;
    assert!(status == 201 || status == 202, "{created}");
    let id = created["data"]["id"].as_str().expect("id").to_string();
    let before = wait_status(port, &key, &id, "RUNNING").await;
    exec(port, &key, &id, "echo from-before > /tmp/mark").await;

    // The upgrade path: install again over the running sbxd, then restart it.
    let installed = root.path().join("usr/local/bin/sbxd");
    let inode = std::fs::metadata(&installed).unwrap().ino();
    let env_before = std::fs::read(etc.join("sbx/sbxd.env")).unwrap();
    let again = install(root.path(), &bin_dir, "127.0.0.1:1");
    assert!(!again.contains("created the first signing key"), "{again}");
    assert_eq!(std::fs::read_to_string(&key_file).unwrap().trim(), key);
    assert_eq!(
        std::fs::read(etc.join("sbx/sbxd.env")).unwrap(),
        env_before,
        "an upgrade keeps the operator's settings"
    );
    assert_ne!(
        std::fs::metadata(&installed).unwrap().ino(),
        inode,
        "the binary is replaced by rename, not rewritten under the running sbxd"
    );
    stop_unit(sbxd_v1);
    let sbxd_v2 = start_unit(&exec_start, &env, port).await;
    let after = wait_status(port, &key, &id, "RUNNING").await;
    assert_eq!(
        after["data"]["startedAt"], before["data"]["startedAt"],
        "the same sandbox, not a new boot"
    );
    assert_eq!(
        exec(port, &key, &id, "cat /tmp/mark").await.trim(),
        "from-before"
    );

    let (status, _) = call(port, &key, "DELETE", &format!("/v2/sandboxes/{id}"), None).await;
    assert!(status < 300, "destroy: {status}");
    wait_status(port, &key, &id, "TERMINATED").await;
    stop_unit(sbxd_v2);
    common::disks::unmount_under(root.path());
}
