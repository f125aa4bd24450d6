//! Harness for integration tests: a real sbxd on real runsc, in a private data dir.
//!
//! Needs root, runsc, the default image and the static agent, which
//! `./scripts/test` prepares and announces through `SBX_TEST_AGENT_DIR` and
//! `SBX_TEST_IMAGE_ROOTFS`.
#![allow(dead_code)]

pub mod cluster;
pub mod disks;
pub mod hostile;
pub mod netns;
pub mod oci;
pub mod s3;
pub mod store;
pub mod ws;

use serde_json::{json, Value};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running sbxd with its own data dir and runsc root.
pub struct Daemon {
    pub child: Option<Child>,
    pub dir: tempfile::TempDir,
    pub port: u16,
    pub base: String,
    pub http: reqwest::Client,
    extra_args: Vec<String>,
    /// The daemon's own PostgreSQL database under `SBX_TEST_STORE=postgres`
    /// (dropped after sbxd is killed); `None` on SQLite.
    database: Option<sbx_store::TestDatabase>,
    /// Raw SQL against this daemon's store, see [`Daemon::sql`].
    probe: store::StoreProbe,
}

fn env_path(name: &str) -> PathBuf {
    PathBuf::from(std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run the integration tests through ./scripts/test")
    }))
}

/// Runs `node script` in `dir` with `envs`, prints what it wrote, and
/// returns (success, stdout): how the tests drive the real SDKs' scripts.
pub fn run_node_script(dir: &Path, script: &str, envs: &[(&str, &str)]) -> (bool, String) {
    let out = Command::new("node")
        .arg(script)
        .current_dir(dir)
        .envs(envs.iter().copied())
        .output()
        .expect("node");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}{stderr}({script}: {})", out.status);
    (out.status.success(), stdout)
}

/// Runs `script` in `dir` with the Python of the venv `dir/.venv` (made by
/// `tests/e2b/python/install.sh`) and `envs`, prints what it wrote, and
/// returns (success, stdout): run_node_script for the Python SDK's scripts.
pub fn run_python_script(dir: &Path, script: &str, envs: &[(&str, &str)]) -> (bool, String) {
    let out = Command::new(dir.join(".venv/bin/python"))
        .arg(script)
        .current_dir(dir)
        // A crash prints the Python stacks of every thread.
        .env("PYTHONFAULTHANDLER", "1")
        .envs(envs.iter().copied())
        .output()
        .expect("the venv's python");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}{stderr}({script}: {})", out.status);
    (out.status.success(), stdout)
}

/// The test S3 server (`scripts/lib/s3.sh`, started by `./scripts/test`):
/// its endpoint and bucket.
pub fn test_s3() -> (String, String) {
    let var = |k: &str| {
        std::env::var(k).unwrap_or_else(|_| {
            panic!("{k} is not set: run the integration tests through ./scripts/test")
        })
    };
    (var("SBX_TEST_S3_ENDPOINT"), var("SBX_TEST_S3_BUCKET"))
}

/// sbxd flags that keep snapshots in the test S3 server under `prefix`.
pub fn s3_flags(prefix: &str) -> Vec<String> {
    let (endpoint, bucket) = test_s3();
    vec![
        "--snapshot-store".into(),
        format!("s3://{bucket}/{prefix}"),
        "--s3-endpoint".into(),
        endpoint,
    ]
}

/// The installed Connect SDK (`SBX_TEST_CONNECT_SDK_DIR`, set by `./scripts/test`),
/// else the repository's `sdk/`.
pub fn connect_sdk_dir() -> PathBuf {
    match std::env::var("SBX_TEST_CONNECT_SDK_DIR") {
        Ok(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../sdk"),
    }
}

/// The sbxd under test: `SBX_TEST_SBXD` (a copy of this tree's sbxd, for a target dir
/// that several worktrees share: their builds overwrite debug/sbxd), else the one
/// cargo built for this test.
pub fn sbxd_binary() -> std::ffi::OsString {
    std::env::var_os("SBX_TEST_SBXD")
        .unwrap_or_else(|| std::ffi::OsString::from(env!("CARGO_BIN_EXE_sbxd")))
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Daemon {
    /// Starts sbxd in dev mode and waits for /healthz.
    pub async fn start(extra_args: &[&str]) -> Daemon {
        let dir = tempfile::Builder::new()
            .prefix("sbx-it-")
            .tempdir_in("/var/tmp")
            .unwrap();
        Daemon::start_in(dir, extra_args).await
    }

    /// Like [`Daemon::start`] on a data dir the test prepared (e.g. a small tmpfs).
    ///
    /// Under `SBX_TEST_STORE=postgres` the daemon gets a fresh database of its
    /// own (`--database-url`), unless the test passes a `--database-url` itself.
    pub async fn start_in(dir: tempfile::TempDir, extra_args: &[&str]) -> Daemon {
        Daemon::start_with(dir, extra_args, None).await
    }

    /// Like [`Daemon::start`] for an sbxd that terminates TLS itself
    /// (`--tls-cert`/`--tls-key` in `extra_args`): `http` must trust its
    /// certificate, which must name `localhost`.
    pub async fn start_tls(extra_args: &[&str], http: reqwest::Client) -> Daemon {
        let dir = tempfile::Builder::new()
            .prefix("sbx-it-")
            .tempdir_in("/var/tmp")
            .unwrap();
        Daemon::start_with(dir, extra_args, Some(http)).await
    }

    async fn start_with(
        dir: tempfile::TempDir,
        extra_args: &[&str],
        tls_client: Option<reqwest::Client>,
    ) -> Daemon {
        let port = free_port();
        let mut extra_args: Vec<String> = extra_args.iter().map(|s| s.to_string()).collect();
        let database = if extra_args.iter().any(|a| a == "--database-url") {
            None
        } else {
            store::database_for_daemon()
        };
        if let Some(db) = &database {
            extra_args.extend(["--database-url".to_string(), db.url().to_string()]);
        }
        let url = extra_args
            .iter()
            .position(|a| a == "--database-url")
            .and_then(|i| extra_args.get(i + 1))
            .cloned();
        let probe = store::StoreProbe::new(dir.path(), url.as_deref());
        let mut d = Daemon {
            child: None,
            dir,
            port,
            base: match tls_client {
                Some(_) => format!("https://localhost:{port}"),
                None => format!("http://127.0.0.1:{port}"),
            },
            http: tls_client.unwrap_or_default(),
            extra_args,
            database,
            probe,
        };
        d.spawn().await;
        d
    }

    pub fn data_dir(&self) -> &Path {
        self.dir.path()
    }

    /// Adds arguments for the next [`Daemon::spawn`] (e.g. a restart on another store).
    pub fn add_args(&mut self, args: &[&str]) {
        self.extra_args.extend(args.iter().map(|s| s.to_string()));
    }

    /// Sets `flag`'s value for the next [`Daemon::spawn`] (replacing it if given).
    pub fn set_arg(&mut self, flag: &str, value: &str) {
        match self.extra_args.iter().position(|a| a == flag) {
            Some(i) if i + 1 < self.extra_args.len() => self.extra_args[i + 1] = value.to_string(),
            _ => self.add_args(&[flag, value]),
        }
    }

    /// The PostgreSQL URL this daemon's store is on (`None`: the SQLite file).
    pub fn database_url(&self) -> Option<&str> {
        self.extra_args
            .iter()
            .position(|a| a == "--database-url")
            .and_then(|i| self.extra_args.get(i + 1))
            .map(String::as_str)
    }

    /// Runs `sql` on this daemon's store, SQLite or PostgreSQL, beside the
    /// running sbxd; the result as the sqlite3 CLI prints it (see
    /// [`store::StoreProbe::query`]).
    pub fn sql(&self, sql: &str) -> String {
        self.probe.query(sql)
    }

    /// (Re)starts the sbxd process on the same data dir and port.
    pub async fn spawn(&mut self) {
        let mut cmd = Command::new(sbxd_binary());
        if !self.extra_args.iter().any(|a| a == "--signing-key") {
            cmd.arg("--dev");
        }
        cmd.arg("--listen")
            .arg(format!("127.0.0.1:{}", self.port))
            .arg("--data-dir")
            .arg(self.dir.path())
            .arg("--image-rootfs")
            .arg(env_path("SBX_TEST_IMAGE_ROOTFS"))
            .args(&self.extra_args);
        if !self.extra_args.iter().any(|a| a == "--agent-dir") {
            cmd.arg("--agent-dir").arg(env_path("SBX_TEST_AGENT_DIR"));
        }
        if !self.extra_args.iter().any(|a| a == "--connect-sdk-dir") {
            cmd.arg("--connect-sdk-dir").arg(connect_sdk_dir());
        }
        // No warm pool unless a test asks: an auto pool member in every test
        // daemon would cost CI a sandbox boot each and change what tests count.
        if !self.extra_args.iter().any(|a| a == "--warm-pool") {
            cmd.arg("--warm-pool").arg("none");
        }
        // Idle sandboxes are not frozen unless a test asks (idle_freeze.rs):
        // tests that kill a sandbox's host processes need them to take SIGKILL.
        if !self
            .extra_args
            .iter()
            .any(|a| a == "--freeze-idle-after-secs")
        {
            cmd.arg("--freeze-idle-after-secs").arg("0");
        }
        // The test S3 server's credentials (scripts/lib/s3.sh), for daemons
        // started with --snapshot-store s3://...; unused otherwise.
        for (from, to) in [
            ("SBX_TEST_S3_ACCESS_KEY", "SBX_S3_ACCESS_KEY_ID"),
            ("SBX_TEST_S3_SECRET_KEY", "SBX_S3_SECRET_ACCESS_KEY"),
        ] {
            if let Ok(v) = std::env::var(from) {
                cmd.env(to, v);
            }
        }
        cmd.env(
            "SBX_LOG",
            std::env::var("SBX_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdin(Stdio::null());
        self.child = Some(cmd.spawn().expect("spawn sbxd"));
        // Reconciliation runs before sbxd listens: after a kill -9 it may
        // destroy orphans and reattach every running sandbox first.
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Ok(r) = self.http.get(format!("{}/healthz", self.base)).send().await {
                if r.status().is_success() {
                    return;
                }
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("sbxd exited early: {status}");
            }
            assert!(Instant::now() < deadline, "sbxd did not become healthy");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGTERM to sbxd (what systemd sends on stop), then waits for it to exit.
    pub fn terminate(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: kill(2) on the pid of a child not yet waited for.
            unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGTERM) };
            let _ = c.wait();
        }
    }

    /// `kill -9` of sbxd.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// Sends a request; returns status and JSON body (Null when empty).
    pub async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut req = self
            .http
            .request(method.parse().unwrap(), self.url(path))
            .header("content-type", "application/json");
        if let Some(b) = body {
            req = req.body(b.to_string());
        }
        let resp = req.send().await.expect("request");
        let status = resp.status().as_u16();
        let bytes = resp.bytes().await.unwrap();
        let value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()))
        };
        (status, value)
    }

    /// Like [`Daemon::call`] with a raw body and extra headers (e.g. `authorization`).
    pub async fn call_with(
        &self,
        method: &str,
        path: &str,
        body: Option<Vec<u8>>,
        headers: &[(&str, &str)],
    ) -> (u16, Value) {
        let mut req = self.http.request(method.parse().unwrap(), self.url(path));
        if !headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("content-type"))
        {
            req = req.header("content-type", "application/json");
        }
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        if let Some(b) = body {
            req = req.body(b);
        }
        let resp = req.send().await.expect("request");
        let status = resp.status().as_u16();
        let bytes = resp.bytes().await.unwrap();
        let value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()))
        };
        (status, value)
    }

    /// `sbxd keys create` on this daemon's data dir; returns the new key.
    pub fn create_key(&self, workspace: &str, env: Option<&str>) -> String {
        let mut cmd = Command::new(sbxd_binary());
        cmd.args(["keys", "create", "--workspace", workspace, "--data-dir"])
            .arg(self.dir.path())
            // Quiet: sbxd logs to stderr, which a failed assertion below prints.
            .env("SBX_LOG", "warn");
        if let Some(url) = self.database_url() {
            cmd.args(["--database-url", url]);
        }
        if let Some(env) = env {
            cmd.args(["--env", env]);
        }
        let out = cmd.output().expect("sbxd keys create");
        assert!(out.status.success(), "keys create: {out:?}");
        let key = String::from_utf8(out.stdout).unwrap().trim().to_string();
        assert!(key.starts_with("signkey-"), "{key}");
        key
    }

    /// Creates a 1/1024 sandbox and asserts it is RUNNING.
    pub async fn create_running(&self, name: &str) -> String {
        let (status, body) = self
            .call(
                "POST",
                "/v2/sandboxes",
                Some(json!({"name": name, "vcpu": 1, "memoryMb": 1024})),
            )
            .await;
        // 202 STARTING when the boot outlasts the 20 s the create waits (a
        // loaded machine); then it must reach RUNNING like any other.
        assert!(status == 201 || status == 202, "create: {status} {body}");
        let id = body["data"]["id"].as_str().unwrap().to_string();
        if status == 202 {
            self.wait_status(&id, "RUNNING", Duration::from_secs(120))
                .await;
        } else {
            assert_eq!(body["data"]["status"], "RUNNING");
        }
        id
    }

    /// Runs `sh -c script` in the sandbox; returns (exitCode, stdout, stderr).
    pub async fn sh(&self, id: &str, script: &str) -> (i64, String, String) {
        self.exec(id, &["sh", "-c", script]).await
    }

    /// Destroys the sandbox through `/v2` and waits until it is TERMINATED.
    pub async fn destroy_and_wait(&self, id: &str) {
        let (status, body) = self
            .call("DELETE", &format!("/v2/sandboxes/{id}"), None)
            .await;
        assert!(status == 204 || status == 202, "{status} {body}");
        self.wait_status(id, "TERMINATED", std::time::Duration::from_secs(60))
            .await;
    }

    /// Runs argv in the sandbox; returns (exitCode, stdout, stderr).
    pub async fn exec(&self, id: &str, argv: &[&str]) -> (i64, String, String) {
        let (status, body) = self
            .call(
                "POST",
                &format!("/v2/sandboxes/{id}/exec"),
                Some(json!({"command": argv, "timeout": "30000ms"})),
            )
            .await;
        assert_eq!(status, 200, "exec {argv:?}: {body}");
        let d = &body["data"];
        (
            d["exitCode"].as_i64().unwrap(),
            b64(&d["stdout"]),
            b64(&d["stderr"]),
        )
    }

    /// Polls GET until `pred` holds for the sandbox (or panics after `timeout`).
    pub async fn wait_status(&self, id: &str, want: &str, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let (_, body) = self.call("GET", &format!("/v2/sandboxes/{id}"), None).await;
            if body["data"]["status"] == want {
                return body["data"].clone();
            }
            assert!(
                Instant::now() < deadline,
                "sandbox {id} never reached {want}: {body}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Snapshots `id` and waits (up to `timeout`) for READY; returns the snapshot's id.
    pub async fn snapshot_ready(&self, id: &str, timeout: Duration) -> String {
        let (status, snap) = self
            .call("POST", &format!("/v2/sandboxes/{id}/snapshots"), None)
            .await;
        assert!(status == 201 || status == 202, "snapshot: {status} {snap}");
        let sid = snap["data"]["id"].as_str().unwrap().to_string();
        let deadline = Instant::now() + timeout;
        loop {
            let (_, got) = self
                .call("GET", &format!("/v2/snapshots/{sid}"), None)
                .await;
            if got["data"]["status"] == "READY" {
                return sid;
            }
            assert_eq!(got["data"]["status"], "CREATING", "{got}");
            assert!(Instant::now() < deadline, "snapshot {sid} never READY");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Clones snapshot `sid` as `name` and waits (up to `timeout`) for RUNNING; returns its id.
    pub async fn clone_running(&self, sid: &str, name: &str, timeout: Duration) -> String {
        let body = serde_json::json!({"name": name, "snapshotId": sid});
        let (status, c) = self.call("POST", "/v2/sandboxes", Some(body)).await;
        assert!(status == 201 || status == 202, "clone: {status} {c}");
        let cid = c["data"]["id"].as_str().unwrap().to_string();
        self.wait_status(&cid, "RUNNING", timeout).await;
        cid
    }

    /// Containers runsc still knows under this daemon's root.
    /// Waits up to `timeout` for runsc to list no container (teardowns run
    /// in the background, and a destroy may answer 202 before they end).
    pub async fn assert_no_containers(&self, timeout: Duration, why: &str) {
        let deadline = Instant::now() + timeout;
        loop {
            let left = self.runsc_containers();
            if left.is_empty() {
                return;
            }
            assert!(Instant::now() < deadline, "{why}: {left:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    pub fn runsc_containers(&self) -> Vec<String> {
        let out = Command::new("runsc")
            .arg("--root")
            .arg(self.dir.path().join("runsc"))
            .args(["list", "-format=json"])
            .output()
            .expect("runsc list");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|c| c["id"].as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Per-sandbox directories left on disk.
    pub fn sandbox_dirs(&self) -> Vec<String> {
        std::fs::read_dir(self.dir.path().join("sandboxes"))
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill9();
        for id in self.runsc_containers() {
            let _ = Command::new("runsc")
                .arg("--root")
                .arg(self.dir.path().join("runsc"))
                .args(["delete", "-force", &id])
                .output();
        }
        // Sandbox disks are mounted under the data dir: unmount them before
        // the temp dir is removed, or their loop devices leak.
        disks::unmount_under(self.dir.path());
    }
}

/// Starts sbxd (dev mode, a fresh data dir, the test image and agent) with `args`,
/// expecting it to refuse to start within `within`: its exit code and stderr.
pub fn start_refused(args: &[&str], within: Duration) -> (Option<i32>, String) {
    start_refused_in(Mode::Dev, args, within)
}

/// Whether sbxd starts with `--dev`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `--dev`.
    Dev,
    /// Production: no `--dev`.
    Production,
}

/// [`start_refused`] in `mode`.
pub fn start_refused_in(mode: Mode, args: &[&str], within: Duration) -> (Option<i32>, String) {
    let dir = tempfile::Builder::new()
        .prefix("sbx-it-")
        .tempdir_in("/var/tmp")
        .expect("data dir");
    let dev: &[&str] = if mode == Mode::Dev { &["--dev"] } else { &[] };
    let mut child = Command::new(sbxd_binary())
        .args(dev)
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .arg("--image-rootfs")
        .arg(env_path("SBX_TEST_IMAGE_ROOTFS"))
        .arg("--agent-dir")
        .arg(env_path("SBX_TEST_AGENT_DIR"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sbxd");
    let deadline = Instant::now() + within;
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("sbxd kept running with {args:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("output");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub fn b64(v: &Value) -> String {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(v.as_str().unwrap_or(""))
        .expect("valid base64");
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Asserts an error envelope with `code` and `status`.
pub fn assert_error(got: &(u16, Value), status: u16, code: &str) {
    assert_eq!(got.0, status, "status for {}", got.1);
    assert_eq!(got.1["errors"][0]["code"], code, "body {}", got.1);
    assert!(got.1["errors"][0]["message"]
        .as_str()
        .is_some_and(|m| !m.is_empty()));
}

// ---- Helpers for the fault and escape suites (faults.rs, escapes.rs). ----

/// States a sandbox can rest in; everything else is on its way somewhere.
pub const SETTLED: [&str; 4] = ["RUNNING", "PAUSED", "FAILED", "TERMINATED"];

/// Host pids (other than ours) whose command line contains every needle.
pub fn host_pids(needles: &[&str]) -> Vec<u32> {
    let me = std::process::id();
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&raw).replace('\0', " ");
        if !cmdline.is_empty() && needles.iter().all(|n| cmdline.contains(n)) {
            pids.push(pid);
        }
    }
    pids
}

/// `kill -9` of host processes.
pub fn kill9_pids(pids: &[u32]) {
    for pid in pids {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    }
}

/// Resident memory of a host process in KiB (VmRSS), if it exists.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

impl Daemon {
    /// Host pid of the running sbxd.
    pub fn sbxd_pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// The sandbox's host processes (Sentry, gofer, relays): those that name
    /// its directory or container id under this daemon's data dir.
    pub fn sandbox_host_pids(&self, id: &str) -> Vec<u32> {
        let root = self.dir.path().join("runsc");
        let root = root.to_string_lossy();
        let mut pids = host_pids(&[&root, &format!("sandboxes/{id}/")]);
        pids.extend(host_pids(&[&root, &format!("sbx-{id}")]));
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// Every sandbox the API knows, all pages.
    pub async fn list_all(&self) -> Vec<Value> {
        let mut all = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let path = match &cursor {
                Some(c) => format!("/v2/sandboxes?limit=100&cursor={c}"),
                None => "/v2/sandboxes?limit=100".to_string(),
            };
            let (status, page) = self.call("GET", &path, None).await;
            assert_eq!(status, 200, "list: {page}");
            all.extend(page["data"].as_array().cloned().unwrap_or_default());
            if page["page"]["hasMore"] != true {
                return all;
            }
            cursor = page["page"]["cursor"].as_str().map(String::from);
        }
    }

    /// Polls until the sandbox rests in a [`SETTLED`] state; returns its view.
    pub async fn wait_settled(&self, id: &str, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let (_, body) = self.call("GET", &format!("/v2/sandboxes/{id}"), None).await;
            let status = body["data"]["status"].as_str().unwrap_or_default();
            if SETTLED.contains(&status) {
                return body["data"].clone();
            }
            assert!(
                Instant::now() < deadline,
                "sandbox {id} never settled: {body}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Asserts that what the API says about a sandbox is true: RUNNING answers
    /// exec, FAILED carries a reason, TERMINATED has ended. Returns the status.
    pub async fn assert_truthful(&self, id: &str, timeout: Duration) -> String {
        let s = self.wait_settled(id, timeout).await;
        let status = s["status"].as_str().unwrap().to_string();
        match status.as_str() {
            "RUNNING" => {
                let (code, out, _) = self
                    .exec(id, &["sh", "-c", "ls / >/dev/null && cat /proc/1/cmdline"])
                    .await;
                assert_eq!(code, 0, "RUNNING sandbox {id} cannot run cat");
                assert!(out.contains("sbx-agent"), "PID 1 is not the agent: {out:?}");
            }
            "FAILED" => assert!(
                s["error"].as_str().is_some_and(|e| !e.is_empty()),
                "FAILED without a reason: {s}"
            ),
            "TERMINATED" => assert!(s["endedAt"].is_string(), "{s}"),
            "PAUSED" => {}
            other => unreachable!("{other}"),
        }
        status
    }

    /// runsc containers under this daemon's root with their runsc status.
    pub fn runsc_states(&self) -> std::collections::BTreeMap<String, String> {
        let out = Command::new("runsc")
            .arg("--root")
            .arg(self.dir.path().join("runsc"))
            .args(["list", "-format=json"])
            .output()
            .expect("runsc list");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|c| {
                        Some((
                            c["id"].as_str()?.to_string(),
                            c["status"].as_str().unwrap_or_default().to_string(),
                        ))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The store and the host agree: exactly the RUNNING/PAUSED sandboxes have
    /// a runsc container (running/paused) and a sandbox dir; ended ones have
    /// no container, dir, cgroup or host process. Waits up to `timeout` for
    /// cleanups in flight, then asserts.
    pub async fn assert_host_matches_store(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let problems = self.host_store_mismatches().await;
            if problems.is_empty() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "store and host disagree:\n  {}",
                problems.join("\n  ")
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn host_store_mismatches(&self) -> Vec<String> {
        let sandboxes = self.list_all().await;
        let containers = self.runsc_states();
        let dirs: std::collections::BTreeSet<String> = self.sandbox_dirs().into_iter().collect();
        let mut problems = Vec::new();
        let mut known = std::collections::BTreeSet::new();
        for s in &sandboxes {
            let id = s["id"].as_str().unwrap().to_string();
            let status = s["status"].as_str().unwrap_or_default();
            let cid = format!("sbx-{id}");
            known.insert(cid.clone());
            let runsc = containers.get(&cid).map(String::as_str);
            match status {
                "RUNNING" | "PAUSED" => {
                    let want = if status == "RUNNING" {
                        "running"
                    } else {
                        "paused"
                    };
                    if runsc != Some(want) {
                        problems.push(format!("{id} is {status} but runsc says {runsc:?}"));
                    }
                    if !dirs.contains(&id) {
                        problems.push(format!("{id} is {status} but has no sandbox dir"));
                    }
                }
                "FAILED" | "TERMINATED" => {
                    if runsc.is_some() {
                        problems.push(format!("{id} is {status} but runsc has it: {runsc:?}"));
                    }
                    if dirs.contains(&id) {
                        problems.push(format!("{id} is {status} but its dir is left"));
                    }
                    for cg in [
                        format!("/sys/fs/cgroup/memory/sbx/sbx-{id}"),
                        format!("/sys/fs/cgroup/sbx/sbx-{id}"),
                    ] {
                        if Path::new(&cg).exists() {
                            problems.push(format!("{id} is {status} but {cg} is left"));
                        }
                    }
                    let pids = self.sandbox_host_pids(&id);
                    if !pids.is_empty() {
                        problems.push(format!("{id} is {status} but host pids {pids:?} live"));
                    }
                }
                other => problems.push(format!("{id} is still {other}")),
            }
        }
        for c in containers.keys() {
            if !known.contains(c) {
                problems.push(format!("runsc container {c} belongs to no sandbox"));
            }
        }
        for d in &dirs {
            if !known.contains(&format!("sbx-{d}")) {
                problems.push(format!("sandbox dir {d} belongs to no sandbox"));
            }
        }
        problems.extend(self.disk_mismatches(&sandboxes));
        problems
    }

    /// Destroys every sandbox that has not ended and waits until they have.
    pub async fn destroy_all(&self, timeout: Duration) {
        let ids: Vec<String> = self
            .list_all()
            .await
            .iter()
            .filter(|s| !matches!(s["status"].as_str(), Some("TERMINATED" | "FAILED")))
            .map(|s| s["id"].as_str().unwrap().to_string())
            .collect();
        for id in &ids {
            let (status, body) = self
                .call("DELETE", &format!("/v2/sandboxes/{id}"), None)
                .await;
            assert!(
                status == 204 || status == 202,
                "destroy {id}: {status} {body}"
            );
        }
        for id in &ids {
            let s = self.wait_settled(id, timeout).await;
            assert!(
                matches!(s["status"].as_str(), Some("TERMINATED" | "FAILED")),
                "{s}"
            );
        }
    }
}

/// Kills, when dropped, every host process that still names `dir` (a
/// daemon's data dir) and removes the sandbox cgroups they used: runsc
/// processes that runsc itself lost track of survive `Daemon`'s own cleanup.
/// Declare it right after the `Daemon` so that it runs first.
pub struct KillLeftovers(pub PathBuf);

impl KillLeftovers {
    pub fn of(d: &Daemon) -> KillLeftovers {
        KillLeftovers(d.data_dir().to_path_buf())
    }
}

impl Drop for KillLeftovers {
    fn drop(&mut self) {
        let dir = self.0.to_string_lossy().into_owned();
        let pids = host_pids(&[&dir]);
        let mut ids = Vec::new();
        for pid in &pids {
            if let Ok(raw) = std::fs::read(format!("/proc/{pid}/cmdline")) {
                let cmdline = String::from_utf8_lossy(&raw).into_owned();
                if let Some(rest) = cmdline.split("/sandboxes/").nth(1) {
                    ids.push(rest.chars().take(36).collect::<String>());
                }
            }
        }
        if !pids.is_empty() {
            eprintln!("killing leftover host processes of {dir}: {pids:?}");
            kill9_pids(&pids);
            std::thread::sleep(Duration::from_millis(300));
        }
        disks::unmount_under(&self.0);
        ids.sort();
        ids.dedup();
        for id in ids {
            for ctrl in std::fs::read_dir("/sys/fs/cgroup")
                .into_iter()
                .flatten()
                .flatten()
            {
                let _ = std::fs::remove_dir(ctrl.path().join("sbx").join(format!("sbx-{id}")));
            }
            let _ = std::fs::remove_dir(format!("/sys/fs/cgroup/sbx/sbx-{id}"));
        }
    }
}

impl Daemon {
    /// Like [`Daemon::assert_host_matches_store`], but returns what still
    /// disagrees after `timeout` (empty when all agree) instead of panicking.
    pub async fn host_store_problems_after(&self, timeout: Duration) -> Vec<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let problems = self.host_store_mismatches().await;
            if problems.is_empty() || Instant::now() >= deadline {
                return problems;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}
