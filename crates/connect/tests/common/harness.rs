//! Test harness of the service tests: a fake `JobSandboxes` whose sandboxes run a scripted
//! runner over an in-memory channel, and helpers to set up a built package.

#![allow(dead_code)]

use sbx_connect::api::{CreateConnectionRequest, RecordsQuery};
use sbx_connect::credentials::Credentials;
use sbx_connect::egress::BrokerConfig;
use sbx_connect::job::JobChannel;
use sbx_connect::limits::Limits;
use sbx_connect::model::BuildStatus;
use sbx_connect::package::make_tarball;
use sbx_connect::sandbox::{
    BuildOutput, BuildRequest, JobSandbox, JobSandboxRequest, JobSandboxes, SandboxEnd,
    SandboxError,
};
use sbx_connect::service::{ConnectService, ServiceConfig};
use serde_json::{json, Value};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::oneshot;

pub const KEY: [u8; 32] = [9u8; 32];

/// One step of a scripted runner.
#[derive(Clone)]
pub enum Act {
    Send(Value),
    /// Send a prepared line (newline added).
    Raw(Arc<str>),
    /// Read one host message and keep it.
    Recv,
    /// Drop the channel (the runner died).
    Close,
    /// Wait until the test lets the runner go on (a run held mid-way).
    Wait(Arc<tokio::sync::Notify>),
}

#[derive(Clone)]
pub struct Script {
    pub acts: Vec<Act>,
    pub end: SandboxEnd,
}

pub type Scripter = Arc<dyn Fn(&Value, u32) -> Script + Send + Sync>;

#[derive(Default)]
pub struct Seen {
    pub jobs: Vec<Value>,
    pub received: Vec<Value>,
    pub requests: Vec<JobSandboxRequest>,
    pub builds: Vec<BuildRequest>,
}

pub struct Fake {
    pub scripter: Mutex<Scripter>,
    pub seen: Arc<Mutex<Seen>>,
}

impl Fake {
    pub fn new(s: Scripter) -> Arc<Self> {
        Arc::new(Fake {
            scripter: Mutex::new(s),
            seen: Arc::default(),
        })
    }

    pub fn set(&self, s: Scripter) {
        *self.scripter.lock().expect("lock") = s;
    }

    pub fn jobs(&self) -> Vec<Value> {
        self.seen.lock().expect("lock").jobs.clone()
    }

    pub fn received(&self) -> Vec<Value> {
        self.seen.lock().expect("lock").received.clone()
    }

    pub fn starts(&self) -> usize {
        self.seen.lock().expect("lock").requests.len()
    }
}

pub struct FakeSandbox {
    channel: Option<Box<dyn JobChannel>>,
    end: oneshot::Receiver<SandboxEnd>,
}

#[async_trait::async_trait]
impl JobSandbox for FakeSandbox {
    async fn take_channel(&mut self) -> Option<Box<dyn JobChannel>> {
        self.channel.take()
    }

    async fn finish(self: Box<Self>, _grace: Duration) -> SandboxEnd {
        self.end
            .await
            .unwrap_or(SandboxEnd::Crashed("runner task vanished".into()))
    }
}

#[async_trait::async_trait]
impl JobSandboxes for Fake {
    async fn start_job(&self, req: JobSandboxRequest) -> Result<Box<dyn JobSandbox>, SandboxError> {
        let attempt = req.attempt;
        self.seen.lock().expect("lock").requests.push(req);
        let (host, runner) = tokio::io::duplex(1 << 20);
        let (tx, rx) = oneshot::channel();
        let scripter = self.scripter.lock().expect("lock").clone();
        let seen = self.seen.clone();
        tokio::spawn(async move {
            let (r, mut w) = tokio::io::split(runner);
            let mut lines = BufReader::new(r).lines();
            let _ = w.write_all(b"{\"t\":\"hello\",\"v\":1}\n").await;
            let Ok(Some(job)) = lines.next_line().await else {
                let _ = tx.send(SandboxEnd::Crashed("no job".into()));
                return;
            };
            let job: Value = serde_json::from_str(&job).unwrap_or(Value::Null);
            seen.lock().expect("lock").jobs.push(job.clone());
            let script = scripter(&job, attempt);
            let mut closed = false;
            for act in script.acts {
                match act {
                    Act::Send(v) => {
                        let _ = w.write_all(format!("{v}\n").as_bytes()).await;
                    }
                    Act::Raw(line) => {
                        let _ = w.write_all(line.as_bytes()).await;
                        let _ = w.write_all(b"\n").await;
                    }
                    Act::Recv => {
                        if let Ok(Some(l)) = lines.next_line().await {
                            seen.lock()
                                .expect("lock")
                                .received
                                .push(serde_json::from_str(&l).unwrap_or(Value::Null));
                        }
                    }
                    Act::Close => {
                        closed = true;
                        break;
                    }
                    Act::Wait(gate) => gate.notified().await,
                }
            }
            if !closed {
                // Like the real runner: stay until the host hangs up.
                while let Ok(Some(_)) = lines.next_line().await {}
            }
            drop(lines);
            drop(w);
            let _ = tx.send(script.end);
        });
        Ok(Box::new(FakeSandbox {
            channel: Some(Box::new(host)),
            end: rx,
        }))
    }

    async fn run_build(&self, req: BuildRequest) -> Result<BuildOutput, SandboxError> {
        let ok = req.package_dir.join("package-lock.json").exists();
        self.seen.lock().expect("lock").builds.push(req);
        Ok(BuildOutput {
            success: ok,
            log: "added 0 packages".into(),
        })
    }
}

pub fn definition(auth: Value, oauth_hooks: Value) -> Value {
    json!({
        "auth": auth,
        "config": {"type": "object", "additionalProperties": false,
                   "properties": {"pageSize": {"type": "integer", "default": 50, "maximum": 100}}},
        "syncs": [
            {"name": "items", "mode": "merge", "primaryKey": "id"},
            {"name": "all", "mode": "replace", "primaryKey": null},
            {"name": "events", "mode": "append"}
        ],
        "hasVerify": true,
        "oauth": oauth_hooks
    })
}

pub fn done(result: Value) -> Act {
    Act::Send(json!({"t": "done", "result": result}))
}

pub fn script(acts: Vec<Act>) -> Script {
    Script {
        acts,
        end: SandboxEnd::Exited(Some(0)),
    }
}

/// Describe answers with `def`; other jobs just finish.
pub fn basic(def: Value) -> Scripter {
    Arc::new(move |job: &Value, _| match job["kind"].as_str() {
        Some("describe") => script(vec![done(def.clone())]),
        _ => script(vec![done(Value::Null)]),
    })
}

pub fn tarball(version: &str, body: &str) -> Vec<u8> {
    let pj = json!({"name": "conn", "version": version, "type": "module", "main": "index.js"})
        .to_string();
    let lock = json!({"name": "conn", "lockfileVersion": 3, "packages": {"": {"name": "conn"}}})
        .to_string();
    make_tarball(&[
        ("package.json", pj.as_bytes()),
        ("package-lock.json", lock.as_bytes()),
        ("index.js", body.as_bytes()),
    ])
    .expect("tarball")
}

pub fn open(
    dir: &std::path::Path,
    fake: Arc<Fake>,
    server: Option<&super::TestServer>,
) -> Arc<ConnectService> {
    open_with(dir, fake, server, Limits::default())
}

/// A service with other limits (no test API).
pub fn open_with_limits(
    dir: &std::path::Path,
    fake: Arc<Fake>,
    limits: Limits,
) -> Arc<ConnectService> {
    open_with(dir, fake, None, limits)
}

/// A service as one node of a cluster on the PostgreSQL at `url` (no test API).
pub fn open_node(
    dir: &std::path::Path,
    fake: Arc<Fake>,
    url: &str,
    node: &str,
) -> Arc<ConnectService> {
    let mut config = config(dir, None, Limits::default());
    config.database_url = Some(url.to_string());
    config.node_id = Some(node.to_string());
    ConnectService::open(config, fake).expect("open")
}

fn open_with(
    dir: &std::path::Path,
    fake: Arc<Fake>,
    server: Option<&super::TestServer>,
    limits: Limits,
) -> Arc<ConnectService> {
    ConnectService::open(config(dir, server, limits), fake).expect("open")
}

fn config(
    dir: &std::path::Path,
    server: Option<&super::TestServer>,
    limits: Limits,
) -> ServiceConfig {
    let mut broker = BrokerConfig::new(Arc::new(|ip: IpAddr| ip.is_loopback()));
    if let Some(s) = server {
        broker.allowed_port = s.port;
        broker.add_roots_pem(s.ca_pem.as_bytes()).expect("ca");
    }
    ServiceConfig {
        data_dir: dir.to_path_buf(),
        limits,
        broker,
        credential_keys: sbx_secrets::KeyRing::new(sbx_secrets::Key::from_bytes(KEY)),
        database_url: None,
        node_id: None,
    }
}

pub async fn built(svc: &ConnectService) {
    svc.upload_package("ws", &tarball("1.0.0", "export default {}"))
        .expect("upload");
    let b = svc.build("ws", "conn", "1.0.0").await.expect("build");
    assert_eq!(b.status, BuildStatus::Succeeded, "{b:?}");
}

pub fn bearer_connection(origin: &str, schedule: Option<u64>) -> CreateConnectionRequest {
    CreateConnectionRequest {
        name: "c".into(),
        package: "conn".into(),
        version: "1.0.0".into(),
        config: json!({}),
        origin: origin.into(),
        credentials: Credentials::Bearer {
            token: "tok-secret".into(),
        },
        schedule_interval_seconds: schedule,
    }
}

pub fn records(svc: &ConnectService, conn: &str, sync: &str) -> Vec<Value> {
    svc.read_records("ws", conn, sync, &RecordsQuery::default())
        .expect("records")
        .items
        .into_iter()
        .map(|r| r.data)
        .collect()
}
