//! Service-level tests: a fake `JobSandboxes` whose sandboxes run a scripted runner over an
//! in-memory channel; the broker talks to a local HTTPS test API.

mod common;

use common::harness::*;
use sbx_connect::api::{
    OauthCallbackRequest, OauthStartRequest, PageQuery, RecordsQuery, UpdateConnectionRequest,
};
use sbx_connect::credentials::Credentials;
use sbx_connect::crypto::CredentialBox;
use sbx_connect::model::{ConnectionStatus, FailureCategory, RunKind, RunStatus};
use sbx_connect::package::make_tarball;
use sbx_connect::sandbox::SandboxEnd;
use sbx_connect::service::ErrorClass;
use serde_json::{json, Value};
use std::sync::Arc;

#[tokio::test]
async fn upload_is_immutable_and_rejects_install_scripts() {
    let dir = tempfile::tempdir().expect("tmp");
    let fake = Fake::new(basic(definition(json!({"type": "bearer"}), json!([]))));
    let svc = open(dir.path(), fake, None);
    let a = svc
        .upload_package("ws", &tarball("1.0.0", "a"))
        .expect("upload");
    assert!(a.created);
    assert_eq!(a.version.name, "conn");
    let again = svc
        .upload_package("ws", &tarball("1.0.0", "a"))
        .expect("same bytes");
    assert!(!again.created);
    let e = svc
        .upload_package("ws", &tarball("1.0.0", "b"))
        .expect_err("different bytes");
    assert_eq!(e.class(), ErrorClass::Conflict);
    // Another workspace has its own namespace.
    assert!(
        svc.upload_package("other", &tarball("1.0.0", "b"))
            .expect("other ws")
            .created
    );
    let pj = json!({"name": "conn", "version": "2.0.0", "type": "module"}).to_string();
    let lock = json!({"lockfileVersion": 3, "packages": {"": {}, "node_modules/sharp": {"hasInstallScript": true}}}).to_string();
    let t = make_tarball(&[
        ("package.json", pj.as_bytes()),
        ("package-lock.json", lock.as_bytes()),
        ("index.js", b""),
    ])
    .expect("tar");
    let e = svc.upload_package("ws", &t).expect_err("install script");
    assert_eq!(e.class(), ErrorClass::Invalid);
    assert!(e.to_string().contains("sharp"), "{e}");
    assert_eq!(
        svc.list_packages("ws").expect("list")[0].versions,
        vec!["1.0.0"]
    );
}

#[tokio::test]
async fn build_connection_verify_and_syncs_commit_all_or_nothing() {
    let dir = tempfile::tempdir().expect("tmp");
    let fake = Fake::new(basic(definition(json!({"type": "bearer"}), json!([]))));
    let svc = open(dir.path(), fake.clone(), None);
    built(&svc).await;
    let pv = svc
        .get_package_version("ws", "conn", "1.0.0")
        .expect("version");
    assert_eq!(pv.definition.as_ref().map(|d| d.syncs.len()), Some(3));
    let describe = &fake.jobs()[0];
    assert_eq!(describe["kind"], "describe");
    assert_eq!(describe["entry"], "/pkg/index.js");
    assert!(fake.seen.lock().expect("lock").requests[0]
        .artifact_dir
        .join("index.js")
        .exists());

    // Config is validated against the schema, with the path named; defaults are applied.
    let mut bad = bearer_connection("https://api.example.com", None);
    bad.config = json!({"pageSize": 500});
    let e = svc.create_connection("ws", bad).expect_err("bad config");
    assert_eq!(e.to_string(), "config.pageSize: must be <= 100");
    let e = svc
        .create_connection("ws", bearer_connection("http://api.example.com", None))
        .expect_err("http origin");
    assert_eq!(e.class(), ErrorClass::Invalid);
    // Names that could spoof the console or CLI are refused, naming the character.
    for spoof in ["tickets\u{202e}gpj.exe", "a\u{200b}b"] {
        let mut named = bearer_connection("https://api.example.com", None);
        named.name = spoof.to_string();
        let e = svc
            .create_connection("ws", named)
            .expect_err("spoofing name");
        assert_eq!(e.class(), ErrorClass::Invalid);
        assert!(e.to_string().contains("U+20"), "{e}");
    }
    assert!(svc.list_connections("ws").expect("list").is_empty());
    let c = svc
        .create_connection("ws", bearer_connection("https://api.example.com", None))
        .expect("create");
    assert_eq!(c.config, json!({"pageSize": 50}));
    assert_eq!(c.status, ConnectionStatus::Active);
    assert!(!serde_json::to_string(&c)
        .expect("json")
        .contains("tok-secret"));

    let run = svc.test_connection("ws", &c.id).await.expect("verify");
    assert_eq!(
        (run.kind, run.status),
        (RunKind::Verify, RunStatus::Succeeded)
    );

    // Merge sync: records and the checkpoint commit together.
    fake.set(Arc::new(|_: &Value, _| {
        script(vec![
            Act::Send(json!({"t": "log", "level": "info", "message": "page 1"})),
            Act::Send(
                json!({"t": "records", "records": [{"id": 1, "v": "a"}, {"id": 2, "v": "a"}]}),
            ),
            Act::Send(json!({"t": "checkpoint", "checkpoint": {"page": 1}})),
            Act::Send(json!({"t": "records", "records": [{"id": 2, "v": "b"}]})),
            Act::Send(json!({"t": "checkpoint", "checkpoint": {"page": 2}})),
            done(Value::Null),
        ])
    }));
    let run = svc.run_sync("ws", &c.id, "items").await.expect("sync");
    assert_eq!(
        (run.status, run.records_committed, run.attempt),
        (RunStatus::Succeeded, 3, 1),
        "{run:?}"
    );
    assert_eq!(
        records(&svc, &c.id, "items"),
        vec![json!({"id": 1, "v": "a"}), json!({"id": 2, "v": "b"})]
    );
    assert_eq!(
        svc.get_checkpoint("ws", &c.id, "items").expect("cp"),
        Some(json!({"page": 2}))
    );
    // The records filter by primary key: the one record of the key, or none.
    let by_key = |sync: &str, key: &str| {
        let q = RecordsQuery {
            key: Some(key.to_string()),
            ..RecordsQuery::default()
        };
        svc.read_records("ws", &c.id, sync, &q)
    };
    let page = by_key("items", "2").expect("key 2");
    let found: Vec<Value> = page.items.into_iter().map(|r| r.data).collect();
    assert_eq!(found, vec![json!({"id": 2, "v": "b"})]);
    assert_eq!(page.next_cursor, None);
    assert!(by_key("items", "7").expect("key 7").items.is_empty());
    // Append records have no key: filtering them is refused, not an empty answer.
    let e = by_key("events", "1").expect_err("append sync");
    assert_eq!(e.class(), ErrorClass::Invalid);
    assert!(e.to_string().contains("no primary key"), "{e}");
    let job = fake.jobs().last().cloned().expect("job");
    assert_eq!(job["config"], json!({"pageSize": 50}));
    assert!(
        !job.to_string().contains("tok-secret"),
        "credentials never reach the sandbox"
    );
    let logs = svc
        .list_logs("ws", Some(&c.id), None, &PageQuery::default())
        .expect("logs");
    assert_eq!(
        logs.items
            .iter()
            .map(|l| l.message.as_str())
            .collect::<Vec<_>>(),
        vec!["page 1"]
    );

    // A run that throws writes nothing, keeps the checkpoint, and is not retried.
    fake.set(Arc::new(|_: &Value, _| {
        script(vec![
            Act::Send(json!({"t": "records", "records": [{"id": 3}]})),
            Act::Send(json!({"t": "checkpoint", "checkpoint": {"page": 3}})),
            Act::Send(json!({"t": "fail", "category": "package", "kind": "threw"})),
        ])
    }));
    let starts = fake.starts();
    let run = svc.run_sync("ws", &c.id, "items").await.expect("sync");
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(run.failure_category, Some(FailureCategory::PackageError));
    assert_eq!(run.failure_kind.as_deref(), Some("threw"));
    assert_eq!(
        fake.starts(),
        starts + 1,
        "package failures are not retried"
    );
    assert_eq!(
        fake.jobs().last().map(|j| j["checkpoint"].clone()),
        Some(json!({"page": 2}))
    );
    assert_eq!(records(&svc, &c.id, "items").len(), 2);
    assert_eq!(
        svc.get_checkpoint("ws", &c.id, "items").expect("cp"),
        Some(json!({"page": 2}))
    );

    // Replace swaps the dataset.
    fake.set(Arc::new(|job: &Value, _| {
        let n = if job["checkpoint"].is_null() { 1 } else { 2 };
        script(vec![
            Act::Send(json!({"t": "records", "records": [{"gen": n}]})),
            Act::Send(json!({"t": "checkpoint", "checkpoint": {"gen": n}})),
            done(Value::Null),
        ])
    }));
    svc.run_sync("ws", &c.id, "all").await.expect("sync");
    svc.run_sync("ws", &c.id, "all").await.expect("sync");
    assert_eq!(records(&svc, &c.id, "all"), vec![json!({"gen": 2})]);

    // Tenancy: another workspace sees none of it.
    assert_eq!(
        svc.get_connection("other", &c.id)
            .expect_err("tenancy")
            .class(),
        ErrorClass::NotFound
    );
    let runs = svc
        .list_runs(
            "ws",
            &c.id,
            &PageQuery {
                cursor: None,
                limit: Some(2),
            },
        )
        .expect("runs");
    assert_eq!(runs.items.len(), 2);
    let rest = svc
        .list_runs(
            "ws",
            &c.id,
            &PageQuery {
                cursor: runs.next_cursor.clone(),
                limit: Some(10),
            },
        )
        .expect("runs");
    assert_eq!(rest.items.len(), 3, "5 runs in all (verify + 4 syncs)");
}

#[tokio::test]
async fn a_running_sync_reports_the_records_received_so_far() {
    let dir = tempfile::tempdir().expect("tmp");
    let fake = Fake::new(basic(definition(json!({"type": "bearer"}), json!([]))));
    let svc = open(dir.path(), fake.clone(), None);
    built(&svc).await;
    let c = svc
        .create_connection("ws", bearer_connection("https://api.example.com", None))
        .expect("create");
    // The runner sends three records, then waits for the test before it finishes.
    let gate = Arc::new(tokio::sync::Notify::new());
    let held = Arc::clone(&gate);
    fake.set(Arc::new(move |_: &Value, _| {
        script(vec![
            Act::Send(json!({"t": "records", "records": [{"x": 1}, {"x": 2}, {"x": 3}]})),
            Act::Wait(Arc::clone(&held)),
            done(Value::Null),
        ])
    }));
    let queued = svc.start_sync("ws", &c.id, "events").expect("start");
    assert_eq!(queued.records_received, None, "{queued:?}");
    // Polls the run as the console does until the spooled records show.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let running = loop {
        let run = svc.get_run("ws", &queued.id).expect("run");
        if run.records_received == Some(3) {
            break run;
        }
        assert!(std::time::Instant::now() < deadline, "no progress: {run:?}");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    };
    assert_eq!(
        (running.status, running.records_committed),
        (RunStatus::Running, 0)
    );
    let listed = svc
        .list_runs("ws", &c.id, &PageQuery::default())
        .expect("runs");
    assert_eq!(listed.items[0].records_received, Some(3));
    let wire = serde_json::to_value(&running).expect("json");
    assert_eq!(wire["recordsReceived"], 3, "{wire}");
    gate.notify_one();
    let done = loop {
        let run = svc.get_run("ws", &queued.id).expect("run");
        if run.status == RunStatus::Succeeded {
            break run;
        }
        assert!(std::time::Instant::now() < deadline, "never ended: {run:?}");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    };
    // Ended: committed, and no progress counter any more.
    assert_eq!((done.records_committed, done.records_received), (3, None));
    assert!(serde_json::to_value(&done)
        .expect("json")
        .get("recordsReceived")
        .is_none());
}

#[tokio::test]
async fn platform_failures_retry_in_a_fresh_sandbox_memory_limit_does_not() {
    let dir = tempfile::tempdir().expect("tmp");
    let fake = Fake::new(basic(definition(json!({"type": "bearer"}), json!([]))));
    let svc = open(dir.path(), fake.clone(), None);
    built(&svc).await;
    let c = svc
        .create_connection("ws", bearer_connection("https://api.example.com", None))
        .expect("create");
    fake.set(Arc::new(|_: &Value, attempt| {
        if attempt == 1 {
            Script {
                acts: vec![
                    Act::Send(json!({"t": "records", "records": [{"x": 1}]})),
                    Act::Close,
                ],
                end: SandboxEnd::Crashed("runsc died".into()),
            }
        } else {
            script(vec![
                Act::Send(json!({"t": "records", "records": [{"x": 2}]})),
                done(Value::Null),
            ])
        }
    }));
    let starts = fake.starts();
    let run = svc.run_sync("ws", &c.id, "events").await.expect("sync");
    assert_eq!((run.status, run.attempt), (RunStatus::Succeeded, 2));
    assert_eq!(fake.starts(), starts + 2);
    assert_eq!(
        records(&svc, &c.id, "events"),
        vec![json!({"x": 2})],
        "the crashed attempt wrote nothing"
    );

    fake.set(Arc::new(|_: &Value, _| Script {
        acts: vec![
            Act::Send(json!({"t": "records", "records": [{"x": 3}]})),
            Act::Close,
        ],
        end: SandboxEnd::MemoryLimit,
    }));
    let starts = fake.starts();
    let run = svc.run_sync("ws", &c.id, "events").await.expect("sync");
    assert_eq!(run.failure_category, Some(FailureCategory::MemoryLimit));
    assert_eq!(fake.starts(), starts + 1);

    // Platform failures on every attempt: 1 + 2 retries, then failed/platform.
    fake.set(Arc::new(|_: &Value, _| Script {
        acts: vec![Act::Close],
        end: SandboxEnd::Crashed("x".into()),
    }));
    let starts = fake.starts();
    let run = svc.run_sync("ws", &c.id, "events").await.expect("sync");
    assert_eq!(run.failure_category, Some(FailureCategory::Platform));
    assert_eq!(run.attempt, 3);
    assert_eq!(fake.starts(), starts + 3);
    assert_eq!(records(&svc, &c.id, "events").len(), 1);
}

#[tokio::test]
async fn scheduler_restart_and_one_run_at_a_time() {
    let dir = tempfile::tempdir().expect("tmp");
    let fake = Fake::new(basic(definition(json!({"type": "bearer"}), json!([]))));
    let svc = open(dir.path(), fake.clone(), None);
    built(&svc).await;
    let e = svc
        .create_connection("ws", bearer_connection("https://api.example.com", Some(10)))
        .expect_err("too often");
    assert_eq!(e.class(), ErrorClass::Invalid);
    let c = svc
        .create_connection(
            "ws",
            bearer_connection("https://api.example.com", Some(3600)),
        )
        .expect("create");
    let now = chrono::Utc::now();
    let mut due: Vec<String> = svc
        .due_syncs(now)
        .expect("due")
        .into_iter()
        .map(|d| d.sync)
        .collect();
    due.sort();
    assert_eq!(due, vec!["all", "events", "items"]);
    svc.run_sync("ws", &c.id, "events").await.expect("sync");
    let due: Vec<String> = svc
        .due_syncs(chrono::Utc::now())
        .expect("due")
        .into_iter()
        .map(|d| d.sync)
        .collect();
    assert!(!due.contains(&"events".to_string()));
    let later = chrono::Utc::now() + chrono::Duration::seconds(3601);
    assert_eq!(svc.due_syncs(later).expect("due").len(), 3);
    // Disabled connections are not scheduled.
    svc.update_connection(
        "ws",
        &c.id,
        UpdateConnectionRequest {
            status: Some(ConnectionStatus::Disabled),
            ..Default::default()
        },
    )
    .expect("disable");
    assert!(svc.due_syncs(later).expect("due").is_empty());
    svc.update_connection(
        "ws",
        &c.id,
        UpdateConnectionRequest {
            status: Some(ConnectionStatus::Active),
            ..Default::default()
        },
    )
    .expect("enable");

    // One run at a time per connection + sync: a second start while one is going is refused.
    // The slot is claimed synchronously in start_sync, before the spawned run gets to work
    // (this test runtime is single-threaded and nothing awaits in between).
    fake.set(basic(definition(json!({"type": "bearer"}), json!([]))));
    let first = svc.start_sync("ws", &c.id, "events").expect("start");
    assert_eq!(first.status, RunStatus::Queued);
    let e = svc.start_sync("ws", &c.id, "events").expect_err("busy");
    assert_eq!(e.class(), ErrorClass::Conflict);
    assert!(svc
        .due_syncs(later)
        .expect("due")
        .iter()
        .all(|d| d.sync != "events"));

    // Restart: a run left running fails as platform and its spool is deleted.
    let store = svc.store();
    let stuck = store
        .insert_run(
            "ws",
            &sbx_connect::store::NewRun {
                connection_id: Some(c.id.clone()),
                package: "conn".into(),
                version: "1.0.0".into(),
                kind: RunKind::Sync,
                sync: Some("items".into()),
            },
        )
        .expect("run");
    store.start_run("ws", &stuck.id, 1).expect("start");
    let spool = dir.path().join("spool").join(format!("{}.spool", stuck.id));
    std::fs::create_dir_all(spool.parent().expect("parent")).expect("mkdir");
    std::fs::write(&spool, b"R....").expect("spool");
    let fake2 = Fake::new(basic(definition(json!({"type": "bearer"}), json!([]))));
    let svc2 = open(dir.path(), fake2, None);
    let r = svc2.get_run("ws", &stuck.id).expect("run");
    assert_eq!(
        (r.status, r.failure_category),
        (RunStatus::Failed, Some(FailureCategory::Platform))
    );
    assert_eq!(r.failure_kind.as_deref(), Some("daemon_restart"));
    assert!(!spool.exists());
}

#[tokio::test]
async fn broker_fetch_oauth_sign_in_and_rejected_refresh() {
    let server = common::start().await;
    let dir = tempfile::tempdir().expect("tmp");
    let auth = json!({
        "type": "oauth2",
        "authorizeUrl": format!("{}/authorize", server.origin()),
        "tokenUrl": format!("{}/token", server.origin()),
        "scopes": ["read"]
    });
    let fake = Fake::new(basic(definition(auth, json!(["afterAuthorize"]))));
    let svc = open(dir.path(), fake.clone(), Some(&server));
    built(&svc).await;
    let mut req = bearer_connection(&server.origin(), Some(3600));
    req.credentials = Credentials::Oauth2 {
        client_id: "cid".into(),
        client_secret: Some("csecret-1".into()),
        access_token: Some("smuggled".into()),
        refresh_token: None,
        expires_at: None,
    };
    let c = svc.create_connection("ws", req).expect("create");
    assert_eq!(c.status, ConnectionStatus::ReauthorizationRequired);
    assert_eq!(
        svc.run_sync("ws", &c.id, "events")
            .await
            .expect_err("not signed in")
            .class(),
        ErrorClass::Conflict
    );

    let start = svc
        .start_oauth(
            "ws",
            &c.id,
            OauthStartRequest {
                redirect_uri: "https://sbx.test/cb".into(),
            },
        )
        .expect("start");
    let url = url::Url::parse(&start.authorize_url).expect("url");
    let q: std::collections::HashMap<_, _> = url.query_pairs().into_owned().collect();
    assert_eq!(q["state"], start.state);
    assert_eq!(q["code_challenge_method"], "S256");
    let done_cb = svc
        .finish_oauth(
            "ws",
            OauthCallbackRequest {
                state: start.state.clone(),
                code: "c0de".into(),
            },
        )
        .await
        .expect("callback");
    assert_eq!(done_cb.connection.status, ConnectionStatus::Active);
    let hook = done_cb.run.expect("afterAuthorize run");
    assert_eq!(
        (hook.kind, hook.status),
        (RunKind::Oauth, RunStatus::Succeeded)
    );
    assert_eq!(
        fake.jobs().last().map(|j| j["oauthStep"].clone()),
        Some(json!("afterAuthorize"))
    );
    let token_req = server
        .seen()
        .into_iter()
        .find(|s| s.path_and_query == "/token")
        .expect("token request");
    assert!(token_req.body.contains("code_verifier="));
    // A state works once.
    let e = svc
        .finish_oauth(
            "ws",
            OauthCallbackRequest {
                state: start.state,
                code: "c0de".into(),
            },
        )
        .await
        .expect_err("reuse");
    assert_eq!(e.class(), ErrorClass::NotFound);

    // A sync fetching through the broker: the origin sees the access token, the package does not.
    fake.set(Arc::new(|_: &Value, _| {
        script(vec![
            Act::Send(json!({"t": "fetch", "id": 1, "method": "GET", "url": "/protected", "headers": {"authorization": "Bearer fake"}, "body": null})),
            Act::Recv,
            Act::Send(json!({"t": "fetch", "id": 2, "method": "GET", "url": "https://elsewhere.example/x", "headers": {}, "body": null})),
            Act::Recv,
            Act::Send(json!({"t": "records", "records": [{"ok": true}]})),
            done(Value::Null),
        ])
    }));
    let run = svc.run_sync("ws", &c.id, "events").await.expect("sync");
    assert_eq!(run.status, RunStatus::Succeeded, "{run:?}");
    let got = fake.received();
    let ok = got.iter().find(|m| m["id"] == 1).expect("reply 1");
    assert_eq!(
        (ok["t"].as_str(), ok["status"].as_u64()),
        (Some("fetch_result"), Some(200))
    );
    let denied = got.iter().find(|m| m["id"] == 2).expect("reply 2");
    assert_eq!(denied["code"], "denied");
    let protected = server
        .seen()
        .into_iter()
        .rfind(|s| s.path_and_query == "/protected")
        .expect("protected");
    assert_eq!(
        protected.headers.get("authorization").map(String::as_str),
        Some("Bearer new-at")
    );

    // A rejected refresh token: the run fails as reauthorization_required, the connection
    // stops syncing until someone signs in again.
    let expired = Credentials::Oauth2 {
        client_id: "cid".into(),
        client_secret: None,
        access_token: Some("old".into()),
        refresh_token: Some("bad-rt".into()),
        expires_at: Some(0),
    };
    let sealed = CredentialBox::new(&KEY)
        .seal("ws", &c.id, &serde_json::to_vec(&expired).expect("json"))
        .expect("seal");
    svc.store()
        .set_connection_credentials("ws", &c.id, &sealed, None)
        .expect("creds");
    fake.set(Arc::new(|_: &Value, _| {
        script(vec![
            Act::Send(json!({"t": "fetch", "id": 1, "method": "GET", "url": "/protected", "headers": {}, "body": null})),
            Act::Recv,
            Act::Send(json!({"t": "fail", "category": "package", "kind": "threw"})),
        ])
    }));
    let run = svc.run_sync("ws", &c.id, "events").await.expect("sync");
    assert_eq!(
        run.failure_category,
        Some(FailureCategory::ReauthorizationRequired)
    );
    let last = fake.received().last().cloned().expect("reply");
    assert_eq!(
        (last["code"].as_str(), last["retryable"].as_bool()),
        (Some("reauthorization_required"), Some(false))
    );
    assert_eq!(
        svc.get_connection("ws", &c.id).expect("conn").status,
        ConnectionStatus::ReauthorizationRequired
    );
    assert!(svc
        .due_syncs(chrono::Utc::now() + chrono::Duration::days(1))
        .expect("due")
        .is_empty());
    assert_eq!(
        svc.run_sync("ws", &c.id, "events")
            .await
            .expect_err("stopped")
            .class(),
        ErrorClass::Conflict
    );
}

/// 1,000,000 small records through the whole host path (protocol lines from the runner, limits,
/// spool, one commit): prints records/s (target >= 50,000/s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark; run with --release --ignored --nocapture"]
async fn bench_sync_one_million_records_end_to_end() {
    let dir = tempfile::tempdir().expect("tmp");
    let fake = Fake::new(basic(definition(json!({"type": "bearer"}), json!([]))));
    let svc = open(dir.path(), fake.clone(), None);
    built(&svc).await;
    let c = svc
        .create_connection("ws", bearer_connection("https://api.example.com", None))
        .expect("create");
    let batches: Vec<Arc<str>> = (0..100)
        .map(|b| {
            let records: Vec<String> = (0..10_000)
                .map(|i| format!(r#"{{"id":{},"name":"item {i}","ok":true}}"#, b * 10_000 + i))
                .collect();
            Arc::from(format!(
                r#"{{"t":"records","records":[{}]}}"#,
                records.join(",")
            ))
        })
        .collect();
    let batches = Arc::new(batches);
    fake.set(Arc::new(move |_: &Value, _| {
        let mut acts: Vec<Act> = batches.iter().cloned().map(Act::Raw).collect();
        acts.push(done(Value::Null));
        script(acts)
    }));
    for sync in ["events", "items"] {
        let start = std::time::Instant::now();
        let run = svc.run_sync("ws", &c.id, sync).await.expect("sync");
        let took = start.elapsed();
        assert_eq!(run.status, RunStatus::Succeeded, "{run:?}");
        assert_eq!(run.records_committed, 1_000_000);
        let rate = 1_000_000.0 / took.as_secs_f64();
        println!("{sync}: 1,000,000 records end to end in {took:?}: {rate:.0} records/s");
        // A throughput target is a benchmark's verdict, not a test's: it is
        // asserted only when run as one (`SBX_BENCH=1`, release build), not
        // in the suite's debug build on a machine busy with other tests.
        if std::env::var_os("SBX_BENCH").is_some() {
            assert!(
                rate >= 50_000.0,
                "{sync}: {rate:.0} records/s is below 50,000/s"
            );
        }
    }
}

#[tokio::test]
async fn rebuild_cannot_change_a_versions_definition() {
    let dir = tempfile::tempdir().expect("tmp");
    let auth = |token: &str| {
        json!({
            "type": "oauth2",
            "authorizeUrl": "https://auth.example/authorize",
            "tokenUrl": token,
        })
    };
    let fake = Fake::new(basic(definition(
        auth("https://auth.example/token"),
        json!([]),
    )));
    let svc = open(dir.path(), fake.clone(), None);
    built(&svc).await;
    // Same definition: a rebuild is fine.
    let again = svc.build("ws", "conn", "1.0.0").await.expect("rebuild");
    assert_eq!(
        again.status,
        sbx_connect::model::BuildStatus::Succeeded,
        "{again:?}"
    );
    // A rebuild that describes another token endpoint fails and keeps the old definition.
    fake.set(basic(definition(
        auth("https://evil.example/token"),
        json!([]),
    )));
    let b = svc.build("ws", "conn", "1.0.0").await.expect("rebuild");
    assert_eq!(b.status, sbx_connect::model::BuildStatus::Failed, "{b:?}");
    assert!(
        format!("{b:?}").contains("immutable"),
        "clear message: {b:?}"
    );
    let pv = svc
        .get_package_version("ws", "conn", "1.0.0")
        .expect("version");
    let def = serde_json::to_value(pv.definition.expect("definition")).expect("json");
    assert_eq!(def["auth"]["tokenUrl"], "https://auth.example/token");
}

#[tokio::test]
async fn secrets_too_short_to_redact_are_refused_at_creation_and_rotation() {
    let dir = tempfile::tempdir().expect("tmp");
    let fake = Fake::new(basic(definition(json!({"type": "bearer"}), json!([]))));
    let svc = open(dir.path(), fake, None);
    built(&svc).await;
    // Seven bytes: neither redacted from answers nor screened in output, so refused.
    let mut short = bearer_connection("https://api.example.com", None);
    short.credentials = Credentials::Bearer {
        token: "7-bytes".into(),
    };
    let e = svc.create_connection("ws", short).expect_err("short token");
    assert_eq!(e.class(), ErrorClass::Invalid);
    assert!(
        e.to_string()
            .starts_with("credentials.token: must be at least 8 bytes long"),
        "{e}"
    );
    assert!(svc.list_connections("ws").expect("list").is_empty());

    let c = svc
        .create_connection("ws", bearer_connection("https://api.example.com", None))
        .expect("create");
    let rotate = UpdateConnectionRequest {
        credentials: Some(Credentials::Bearer {
            token: "short".into(),
        }),
        ..Default::default()
    };
    let e = svc
        .update_connection("ws", &c.id, rotate)
        .expect_err("short rotation");
    assert!(e.to_string().starts_with("credentials.token"), "{e}");
    // Eight bytes is enough.
    let rotate = UpdateConnectionRequest {
        credentials: Some(Credentials::Bearer {
            token: "8-bytes!".into(),
        }),
        ..Default::default()
    };
    svc.update_connection("ws", &c.id, rotate)
        .expect("rotation at the minimum");
}
