//! Harness for integration tests: a real sbxd on real runsc, in a private data dir.
//!
//! Needs root, runsc, the default image and the static agent, which
//! `./scripts/test` prepares and announces through `SBX_TEST_AGENT_DIR` and
//! `SBX_TEST_IMAGE_ROOTFS`.
#![allow(dead_code)]

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
}

fn env_path(name: &str) -> PathBuf {
    PathBuf::from(std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run the integration tests through ./scripts/test")
    }))
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
        let port = free_port();
        let mut d = Daemon {
            child: None,
            dir,
            port,
            base: format!("http://127.0.0.1:{port}"),
            http: reqwest::Client::new(),
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
        };
        d.spawn().await;
        d
    }

    pub fn data_dir(&self) -> &Path {
        self.dir.path()
    }

    /// (Re)starts the sbxd process on the same data dir and port.
    pub async fn spawn(&mut self) {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sbxd"));
        if !self.extra_args.iter().any(|a| a == "--signing-key") {
            cmd.arg("--dev");
        }
        cmd.arg("--listen")
            .arg(format!("127.0.0.1:{}", self.port))
            .arg("--data-dir")
            .arg(self.dir.path())
            .arg("--agent-dir")
            .arg(env_path("SBX_TEST_AGENT_DIR"))
            .arg("--image-rootfs")
            .arg(env_path("SBX_TEST_IMAGE_ROOTFS"))
            .args(&self.extra_args)
            .env(
                "SBX_LOG",
                std::env::var("SBX_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdin(Stdio::null());
        self.child = Some(cmd.spawn().expect("spawn sbxd"));
        let deadline = Instant::now() + Duration::from_secs(30);
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

    /// Creates a 1/1024 sandbox and asserts it is RUNNING.
    pub async fn create_running(&self, name: &str) -> String {
        let (status, body) = self
            .call(
                "POST",
                "/v2/sandboxes",
                Some(json!({"name": name, "vcpu": 1, "memoryMb": 1024})),
            )
            .await;
        assert_eq!(status, 201, "create: {body}");
        assert_eq!(body["data"]["status"], "RUNNING");
        body["data"]["id"].as_str().unwrap().to_string()
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

    /// Containers runsc still knows under this daemon's root.
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
    }
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
