//! Unit tests of the lifecycle service on the fake runtime
//! (`crate::runtime::fake`): no root, no runsc, a real SQLite store in a
//! temporary directory. Waiting is always polling with a deadline
//! ([`eventually`]), never a sleep that hopes something happened.

mod agent;
mod concurrency;
mod create;
mod failover;
mod idle;
mod lifecycle;
mod nodes;
mod quotas;
mod reconcile;
mod snapshots;
mod stall;
mod two_services;
mod usage;

use super::{CreateOutcome, Service};
use crate::config::Config;
use crate::runtime::fake::FakeRuntime;
use sbx_api_types::{CreateSandboxRequest, ExecRequest, SandboxStatus};
use sbx_store::{SandboxRecord, SqliteStore, Store};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use uuid::Uuid;

/// The workspace every test sandbox lives in.
const WS: &str = "test-ws/test-env";

/// Longest wait of a test for something the service does in the background.
const PATIENCE: Duration = Duration::from_secs(10);

/// One service on the fake runtime and a fresh SQLite store.
struct Harness {
    service: Arc<Service>,
    runtime: Arc<FakeRuntime>,
    store: Arc<dyn Store>,
    _dir: tempfile::TempDir,
}

impl Harness {
    /// The test configuration of `Config::for_tests`.
    fn new() -> Harness {
        Harness::with(|_| {})
    }

    /// Like `new`, with the configuration changed by `tune` first.
    fn with(tune: impl FnOnce(&mut Config)) -> Harness {
        Harness::with_runtime(Arc::new(FakeRuntime::new()), tune)
    }

    /// Like `with`, on the given fake runtime (which other services may share).
    fn with_runtime(runtime: Arc<FakeRuntime>, tune: impl FnOnce(&mut Config)) -> Harness {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config = Config::for_tests(dir.path().to_path_buf());
        tune(&mut config);
        let store: Arc<dyn Store> =
            Arc::new(SqliteStore::open(&config.database_path()).expect("open store"));
        let secrets =
            super::SecretBox::load_or_create(&config.secret_key_path()).expect("secret key");
        let service = Service::new(config, store.clone(), runtime.clone(), secrets);
        Harness {
            service,
            runtime,
            store,
            _dir: dir,
        }
    }

    /// Creates a fresh sandbox named `name` and returns what create answered.
    async fn create(&self, name: &str) -> super::Sandbox {
        match self.service.create(WS, request(name)).await {
            Ok(CreateOutcome::Created(r)) => r,
            other => panic!("create {name}: {other:?}"),
        }
    }

    /// Creates a sandbox and insists that it answered RUNNING.
    async fn running(&self, name: &str) -> super::Sandbox {
        let r = self.create(name).await;
        assert_eq!(r.status, SandboxStatus::Running, "{r:?}");
        r
    }

    /// The stored record, read synchronously (the polling closures are not async).
    fn get(&self, id: Uuid) -> SandboxRecord {
        let row = self.service.store.blocking().get_sandbox(id).expect("read");
        row.filter(|r| r.workspace == WS).expect("sandbox exists")
    }

    /// Polls until the sandbox has `status`, and returns its record.
    async fn wait_status(&self, id: Uuid, status: SandboxStatus) -> SandboxRecord {
        eventually(&format!("{id} reaches {status:?}"), || {
            self.get(id).status == status
        })
        .await;
        self.get(id)
    }

    /// Runs `argv` in the sandbox; returns exit code and stdout.
    async fn exec(&self, id: Uuid, argv: &[&str]) -> super::Result<(i32, String)> {
        let req = ExecRequest {
            command: Some(argv.iter().map(|s| s.to_string()).collect()),
            ..ExecRequest::default()
        };
        let out = self.service.exec(WS, id, req).await?;
        Ok((
            out.exit_code,
            String::from_utf8_lossy(&out.stdout).into_owned(),
        ))
    }
}

/// A create request of the smallest shape with one environment variable.
fn request(name: &str) -> CreateSandboxRequest {
    CreateSandboxRequest {
        name: Some(name.to_string()),
        vcpu: Some(1),
        memory_mb: Some(1024),
        environment: Some(BTreeMap::from([(
            "GREETING".to_string(),
            "hello".to_string(),
        )])),
        ..CreateSandboxRequest::default()
    }
}

/// Polls `check` until it holds; panics naming `what` after [`PATIENCE`].
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
